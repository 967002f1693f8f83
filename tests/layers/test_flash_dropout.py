"""The flash route (attnlayers.flash_dropout): a Pallas flash-attention kernel that draws the attention dropout inside
it from a hash of (seed, b, h, t, s). On this CPU the same kernels run in Pallas' interpreter; they are compared
with the exact softmax(Q K^T / sqrt(d) + mask) V given the same dropout mask, materialised from the same hash:
forward and dQ / dK / dV, float32 to 1e-5, bfloat16 to 2e-2. On a GPU the same tests run the kernels compiled by
Triton (and the reference in full float32). No speed is measured here (the interpreter's time says nothing about the
GPU's)."""

import keras
import numpy as np
import pytest

if keras.backend.backend() != "jax":
    pytest.skip("the flash route is a Pallas kernel for JAX (TensorFlow has none)", allow_module_level=True)

import jax
import jax.numpy as jnp

from attnlayers import flash_dropout, routes
from attnlayers.multi_head import AttentionRoute, MultiHeadAttention

B, N, N_KV, H = 2, 4, 2, 8
#: The kernels as they run here: compiled by Triton on a GPU, else in Pallas' interpreter.
KERNEL = "triton" if jax.devices()[0].platform == "gpu" else "interpret"


def _visible(t, s, query_mask=None, key_mask=None, attention_mask=None, causal=False, offset=None, window=None):
    """(B, 1, T, S) boolean written from the rule: padding, explicit mask, causal at the offset, window."""
    offset = s - t if offset is None else offset
    distance = np.arange(s)[None, :] - (np.arange(t)[:, None] + offset)
    band = np.ones((t, s), bool)
    if causal:
        band &= distance <= 0
    if window is not None:
        band &= np.abs(distance) < window
    visible = np.broadcast_to(band, (B, t, s)).copy()
    if query_mask is not None:
        visible &= query_mask[:, :, None]
    if key_mask is not None:
        visible &= key_mask[:, None, :]
    if attention_mask is not None:
        visible &= attention_mask
    return visible[:, None]


def _exact(q, k, v, visible, keep, rate):
    """Z o softmax(Q K^T / sqrt(H) + mask) / (1 - rate) V in float32, a query with no visible key giving 0."""
    q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    with jax.default_matmul_precision("float32"):  # no TF32 on a GPU
        logits = jnp.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
        weights = jax.nn.softmax(jnp.where(visible, logits, -1e30), axis=-1)
        weights = jnp.where(visible, weights, 0.0) * keep / (1.0 - rate)
        return jnp.einsum("bnts,bsnh->btnh", weights, v)


def _value_and_grads(fn, q, k, v, w):
    """fn(q, k, v) and the gradients of sum(fn(q, k, v) * w), one compiled program, as float32 NumPy arrays."""
    def loss(*x):
        out = fn(*x)
        return jnp.sum(out.astype(jnp.float32) * w), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return [np.asarray(jnp.asarray(x, jnp.float32)) for x in (out,) + grads]


# T, S, N_kv, dtype, rate, mask pieces: every case crosses several blocks of 16 and pads T and S to whole blocks.
CASES = {
    "float32, GQA, causal at offset S - T, key and query padding, a query with no key": (
        20, 36, N_KV, "float32", 0.3, {"causal": True, "key_mask": "padded", "query_mask": "padded"}),
    "bfloat16, causal T == S, key lengths": (33, 33, N, "bfloat16", 0.2, {"causal": True, "key_lengths": [33, 17]}),
    "float32, GQA, explicit mask and window, top-left offset": (
        24, 20, N_KV, "float32", 0.5, {"attention_mask": "random", "window": 5, "offset": 0}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_is_the_exact_route_with_the_same_mask(case):
    """Forward and dQ, dK, dV of the kernel against the exact computation with the dropout mask
    materialised from the same hash (float32 <= 1e-5, bfloat16 <= 2e-2), several blocks, GQA, every mask piece."""
    t, s, n_kv, dtype, rate, pieces = CASES[case]
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=shape), dtype) for shape in ((B, t, N, H), (B, s, n_kv, H),
                                                                         (B, s, n_kv, H)))
    w = jnp.asarray(rng.normal(size=(B, t, N, H)), jnp.float32)
    kwargs = dict(pieces)
    if kwargs.get("key_mask") == "padded":
        kwargs["key_mask"] = np.arange(s)[None, :] < np.array([[s], [s - 11]])
    if kwargs.get("query_mask") == "padded":
        kwargs["query_mask"] = np.arange(t)[None, :] < np.array([[t], [t - 3]])
    if kwargs.get("attention_mask") == "random":
        kwargs["attention_mask"] = rng.random((B, t, s)) < 0.7
    lengths = kwargs.get("key_lengths")
    key_mask = kwargs.get("key_mask", None if lengths is None else np.arange(s)[None, :] < np.array(lengths)[:, None])
    visible = _visible(t, s, kwargs.get("query_mask"), key_mask, kwargs.get("attention_mask"),
                       kwargs.get("causal", False), kwargs.get("offset"), kwargs.get("window"))
    seed = jnp.asarray([7, 3], "uint32")
    keep = flash_dropout.dropout_keep_mask(seed, B, N, t, s, rate)

    def flash(q, k, v):
        return flash_dropout.flash_attention(q, k, v, dropout_rate=rate, seed=seed, block_sizes=(16, 16),
                                             interpret=KERNEL == "interpret", **kwargs)

    got = _value_and_grads(flash, q, k, v, w)
    expected = _value_and_grads(lambda *x: _exact(*x, visible, keep, rate), q, k, v, w)
    tolerance = {"float32": 1e-5, "bfloat16": 2e-2}[dtype]
    for name, a, b in zip(("output", "dQ", "dK", "dV"), got, expected):
        scale = max(1.0, float(np.abs(b).max()))
        assert np.abs(a - b).max() <= tolerance * scale, (name, np.abs(a - b).max())
    if "query_mask" in kwargs:  # the padded queries and the query with no visible key: output 0
        assert not visible[1, 0, -3:].any() and np.all(got[0][1, -3:] == 0)
    assert np.isfinite(got[1]).all()


def test_rate_zero_is_attention_without_dropout():
    """dropout_rate=0: the plain attention (no seed needed), equal to the exact route with no mask."""
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(B, 10, n, H)), "float32") for n in (N, N_KV, N_KV))
    got = flash_dropout.flash_attention(q, k, v, interpret=KERNEL == "interpret")
    expected = _exact(q, k, v, np.ones((B, 1, 10, 10), bool), 1.0, 0.0)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)


def test_the_kernels_lower_to_triton_for_a_gpu():
    """Forward and both backward kernels lower to Triton (every operation has a Triton rule, the blocks are powers
    of two), checked here without a GPU: each dtype, GQA, heads of 8 padded to 16, every mask piece, dropout."""
    def loss(q, k, v):
        out = flash_dropout.flash_attention(q, k, v, query_mask=np.ones((B, 5), bool), key_lengths=np.array([7, 3]),
                                            attention_mask=np.ones((B, 5, 7), bool), causal=True, window=4,
                                            dropout_rate=0.1, seed=3)
        return jnp.sum(out.astype(jnp.float32))

    for dtype in ("float32", "float16", "bfloat16"):
        q, k = jnp.zeros((B, 5, N, H), dtype), jnp.zeros((B, 7, N_KV, H), dtype)
        lowered = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, k, k).lower(lowering_platforms=("cuda",))
        assert lowered.as_text().count("__gpu$xla.gpu.triton") == 3


def test_the_mask_statistics():
    """Kept with probability 1 - rate (the mean preserved by 1 / (1 - rate)), neighbours independent, the same
    seed the same mask, another seed (the next step's) another mask, every head and batch row its own."""
    t = s = 256
    for rate in (0.1, 0.5):
        keep = np.asarray(flash_dropout.dropout_keep_mask(jnp.asarray([5, 0], "uint32"), 2, 2, t, s, rate))
        assert abs(keep.mean() - (1 - rate)) < 0.005
        assert abs((keep / (1 - rate)).mean() - 1.0) < 0.01  # inverted dropout keeps the mean
        pairs = (keep[..., 1:] & keep[..., :-1]).mean(), (keep[..., 1:, :] & keep[..., :-1, :]).mean()
        assert all(abs(p - (1 - rate) ** 2) < 0.005 for p in pairs)  # adjacent keys / queries independent
        assert 0.4 < (keep[0, 0] == keep[0, 1]).mean() < 1 - 2 * rate * (1 - rate) + 0.01  # heads differ
        assert (keep[0, 0] != keep[1, 0]).any()
    same = flash_dropout.dropout_keep_mask(jnp.asarray([5, 0], "uint32"), 2, 2, t, s, 0.5)
    np.testing.assert_array_equal(np.asarray(same), keep)
    following = np.asarray(flash_dropout.dropout_keep_mask(jnp.asarray([5, 1], "uint32"), 2, 2, t, s, 0.5))
    assert abs((following == keep).mean() - 0.5) < 0.01  # a fresh, unrelated mask


def test_the_layer_takes_the_flash_route_when_asked(monkeypatch):
    """implementation="flash" in training: the kernel runs (without a GPU interpreted, with the environment
    variable) and says so in last_attention; its output is the exact attention with the hash's mask of the layer's
    seed, and the next step draws a fresh mask. Without the variable a CPU refuses it by name; "auto" takes it where
    Triton compiles it (a GPU), the interpreter never."""
    x = np.random.default_rng(2).normal(size=(B, 9, 16)).astype("float32")
    padding = np.arange(9)[None, :] < np.array([[9], [6]])
    layer = MultiHeadAttention(N, H, num_key_value_heads=N_KV, dropout=0.25, implementation="flash", seed=4)
    auto = MultiHeadAttention(N, H, dropout=0.25)
    expected_auto = "flash" if KERNEL == "triton" else "exact"  # attention dropout: cuDNN's kernel has none
    assert auto.attention_implementation(9, 9, training=True) == expected_auto
    if KERNEL == "interpret":
        with pytest.raises(ValueError, match=f"flash route cannot compute.*{routes.FLASH_INTERPRET}=1"):
            layer(x, x, value_mask=padding, use_causal_mask=True, training=True)
        monkeypatch.setenv(routes.FLASH_INTERPRET, "1")
        assert auto.attention_implementation(9, 9, training=True) == "exact"  # never the interpreter
    seed = jnp.asarray(layer._dropout_layer.seed_generator.state.value)
    with jax.default_matmul_precision("float32"):  # the projections without TF32 on a GPU
        got = layer(x, x, value_mask=padding, use_causal_mask=True, training=True)
        assert layer.last_attention == AttentionRoute("flash", KERNEL)
        q, k, v = layer._query_dense(x), layer._key_dense(x), layer._value_dense(x)
        visible = _visible(9, 9, key_mask=padding, causal=True, offset=0)
        heads = _exact(q, k, v, visible, flash_dropout.dropout_keep_mask(seed, B, N, 9, 9, 0.25), 0.25)
        expected = layer._output_dense(heads)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)
    again = layer(x, x, value_mask=padding, use_causal_mask=True, training=True)
    assert np.abs(np.asarray(again) - np.asarray(got)).max() > 1e-3  # the next step's mask
