"""The fused route of MultiHeadAttention (attnlayers.fused): the same function as the exact route, forward and
gradients, for every mask the layer takes. Under JAX on this CPU the route runs jax.nn.dot_product_attention's XLA
implementation, the op whose cuDNN implementation a GPU runs; TensorFlow has no fused kernel and refuses by name."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers import fused
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.positional import ALiBi, RotaryEmbedding
from attnlayers.transformer import TransformerDecoderBlock

BACKEND = keras.backend.backend()
jax_only = pytest.mark.skipif(BACKEND != "jax", reason="the fused route is jax.nn.dot_product_attention (JAX only)")
B, T, D, N, H = 2, 6, 16, 4, 8
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


def _padding(left=False):
    mask = np.ones((B, T), bool)
    mask[0, 4:] = False  # right padding
    if left:
        mask[1, :3] = False
    mask[1, 5:] = not left
    return mask


def _pair(dtype="float32", **kwargs):
    """Exact and fused layers with equal weights."""
    exact = MultiHeadAttention(N, H, implementation="exact", dtype=dtype, **kwargs)
    fast = MultiHeadAttention(N, H, implementation="fused", dtype=dtype, **kwargs)
    return exact, fast


def _outputs_and_gradients(layer, tensors, kwargs):
    """Output and the gradients of sum(output * w) (w fixed, random) with respect to every trainable weight and
    the query / value inputs, jitted, as float32 NumPy arrays."""
    import jax

    non_trainable = [v.value for v in layer.non_trainable_variables]

    def loss_fn(trainable, inputs):
        out, _ = layer.stateless_call(trainable, non_trainable, *inputs, **kwargs)
        weights = ops.cast(ops.sin(ops.arange(out.size, dtype="float32")), "float32")
        return ops.sum(ops.cast(out, "float32") * ops.reshape(weights, out.shape)), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True))(
        [v.value for v in layer.trainable_variables], tensors)
    flat = [out] + list(grads[0]) + list(grads[1])
    return [np.asarray(ops.convert_to_numpy(ops.cast(x, "float32"))) for x in flat]


CASES = {
    "none": ({}, {}),
    "right and left padding, causal": ({}, {"query_mask": _padding(True), "value_mask": _padding(True),
                                            "use_causal_mask": True}),
    "a fully masked row": ({}, {"value_mask": np.array([[False] * T, [True] * T])}),
    "explicit mask": ({}, {"attention_mask": np.tril(np.ones((B, T, T), bool), 1)}),
    "gqa, rotary": ({"num_key_value_heads": 2, "rotary": RotaryEmbedding()}, {"use_causal_mask": True}),
    "sliding window": ({"sliding_window": 2}, {"value_mask": _padding()}),
    "causal sliding window": ({"sliding_window": 3}, {"use_causal_mask": True}),
    "alibi bias": ({"position_bias": ALiBi(N)}, {"use_causal_mask": True}),
    "attention bias": ({}, {"attention_bias": np.linspace(-2, 2, T * T, dtype="float32").reshape(1, 1, T, T)}),
    # An additive mask of -1e9 on top of a padding mask and a fully masked row: never -inf, never NaN.
    "additive mask and padding": ({}, {"attention_bias": np.triu(np.full((1, 1, T, T), -1e9, "float32"), 1),
                                       "value_mask": np.array([[False] * T, [True] * 4 + [False] * 2])}),
}


# bfloat16 on the cases where rounding meets masking (padding, GQA + rotary, a large negative bias).
HALF_CASES = ("right and left padding, causal", "gqa, rotary", "additive mask and padding")


@jax_only
@pytest.mark.parametrize("case, dtype", [(case, "float32") for case in sorted(CASES)]
                         + [(case, "bfloat16") for case in HALF_CASES])
def test_fused_route_equals_the_exact_route(case, dtype):
    layer_kwargs, call_kwargs = CASES[case]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, T, D)).astype("float32")
    exact, fast = _pair(dtype, **layer_kwargs)
    exact(x, x)
    fast(x, x)
    fast.set_weights(exact.get_weights())
    assert fast.attention_implementation(T, T, dtype=dtype, training=True) == "fused"
    got = _outputs_and_gradients(fast, (x, x), call_kwargs)
    want = _outputs_and_gradients(exact, (x, x), call_kwargs)
    for name, a, b in zip(["output"] + [f"gradient {i}" for i in range(len(got) - 1)], got, want):
        scale = max(1.0, float(np.abs(b).max()))  # relative to the size of the values
        assert np.abs(a - b).max() <= TOLERANCE[dtype] * scale, (case, dtype, name, np.abs(a - b).max())
    if case in ("a fully masked row", "additive mask and padding"):
        assert np.all(got[0][0] == 0) and np.all(np.isfinite(np.concatenate([g.ravel() for g in got])))


@jax_only
def test_fused_cross_attention_with_padding_and_a_causal_offset():
    """T != S: the causal rule at offset S - T (the queries are the last T positions) is applied as a mask."""
    rng = np.random.default_rng(1)
    q, v = rng.normal(size=(B, 3, D)).astype("float32"), rng.normal(size=(B, T, 12)).astype("float32")
    exact, fast = _pair()
    exact(q, v)
    fast(q, v)
    fast.set_weights(exact.get_weights())
    kwargs = {"value_mask": _padding(True), "use_causal_mask": True}
    got, want = _outputs_and_gradients(fast, (q, v), kwargs), _outputs_and_gradients(exact, (q, v), kwargs)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=1e-5)


@jax_only
def test_fused_block_trains_under_fit():
    """A decoder block with implementation="fused" inside a model trained by fit (jit) equals the exact one."""
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(4, T, D)).astype("float32"), rng.normal(size=(4, T, D)).astype("float32")
    losses = []
    for implementation in ("exact", "fused"):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((T, D))
        model = keras.Model(inputs, TransformerDecoderBlock(N, 32, implementation=implementation)(inputs))
        model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
        losses.append(model.fit(x, y, batch_size=2, epochs=2, verbose=0).history["loss"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_routes_refuse_by_name():
    x = np.zeros((B, T, D), "float32")
    if BACKEND != "jax":
        assert fused.kernel("bfloat16", H, explicit=True) is None
        with pytest.raises(ValueError, match="no fused attention kernel.*implementation='chunked'"):
            MultiHeadAttention(N, H, implementation="fused")(x, x)
    else:
        assert fused.kernel("float32", H, explicit=True) == "xla"
        assert fused.kernel("float32", H) is None  # "auto" takes only cuDNN
        layer = MultiHeadAttention(N, H, implementation="fused", dropout=0.1)
        with pytest.raises(ValueError, match="no attention dropout"):
            layer(x, x, training=True)
        assert layer.attention_implementation(T, T, training=False) == "fused"
        with pytest.raises(ValueError, match="return_attention_scores"):
            MultiHeadAttention(N, H, implementation="fused")(x, x, return_attention_scores=True)
    # "auto" chooses the fused route only where cuDNN takes the call (a GPU under JAX), else the exact one at short T.
    cudnn = fused.kernel("bfloat16", H) == "cudnn"
    assert MultiHeadAttention(N, H).attention_implementation(T, T, dtype="bfloat16") == ("fused" if cudnn else "exact")
    with pytest.raises(ValueError, match="implementation"):
        MultiHeadAttention(N, H, implementation="flash")
    with pytest.raises(ValueError, match="disagree"):
        MultiHeadAttention(N, H, implementation="exact", memory_efficient=True)
    # A model saved with the fused route loads under a backend without one.
    config = dict(MultiHeadAttention(N, H).get_config(), implementation="fused")
    expected = "fused" if BACKEND == "jax" else "auto"
    assert MultiHeadAttention.from_config(config).implementation == expected
