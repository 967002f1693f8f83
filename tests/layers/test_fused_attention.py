"""The fused route of MultiHeadAttention (attnlayers.fused): the same function as the exact route, forward and
gradients, for every mask the layer takes. Under JAX on this CPU the route runs jax.nn.dot_product_attention's XLA
implementation, the op whose cuDNN implementation a GPU runs; TensorFlow has no fused kernel and refuses by name.
Which kernel ran is recorded (layer.last_attention); a call cuDNN does not take warns once and says what ran instead;
an error that is not cuDNN's refusal propagates."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers import fused, routes
from attnlayers.multi_head import AttentionRoute, MultiHeadAttention
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


# No mask and no bias is the degenerate case of "attention bias" (no mask) and "gqa, rotary" (no bias).
CASES = {
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
        MultiHeadAttention(N, H, implementation="cudnn")  # a kernel's name, not a route's
    with pytest.raises(ValueError, match="disagree"):
        MultiHeadAttention(N, H, implementation="exact", memory_efficient=True)
    # A model saved with the fused route loads under a backend without one.
    config = dict(MultiHeadAttention(N, H).get_config(), implementation="fused")
    expected = "fused" if BACKEND == "jax" else "auto"
    assert MultiHeadAttention.from_config(config).implementation == expected


# Which kernel ran, the fallback warnings, and errors that are not refusals


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget the fallback warnings given so far in this process (each is given once)."""
    monkeypatch.setattr(routes, "_WARNED", set())


def _pretend_gpu(monkeypatch, cudnn=None):
    """The default JAX device claims to be a GPU, so that cuDNN's checks before the call pass for bfloat16 heads of
    8; ``cudnn(*args, **kwargs)`` replaces jax.nn.dot_product_attention(implementation="cudnn") when given, else the
    installed jax's own cuDNN call runs (and refuses: this machine has no cuDNN). Returns the implementations called.
    """
    import jax

    monkeypatch.setattr(fused, "platform", lambda: "gpu")
    original, called = jax.nn.dot_product_attention, []

    def dot_product_attention(*args, implementation=None, **kwargs):
        called.append(implementation)
        if implementation == "cudnn" and cudnn is not None:
            return cudnn(*args, **kwargs)
        return original(*args, implementation=implementation, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", dot_product_attention)
    return called


def _cudnn_warnings(call):
    """The messages of the warnings about cuDNN that ``call()`` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if "cuDNN" in str(w.message)]


@jax_only
def test_the_checks_before_the_cudnn_call(monkeypatch):
    """A GPU (Ampere or newer), float16 / bfloat16, heads of <= 128 and a multiple of 8: else no cuDNN ("auto" has
    no fused route; an explicit "fused" takes XLA's implementation), and the reason says which condition failed."""
    monkeypatch.setattr(fused, "platform", lambda: "gpu")
    monkeypatch.setattr(fused, "_compute_capability", lambda: (9, 0))
    assert fused.why_not_cudnn("bfloat16", 128) is None and fused.kernel("bfloat16", 128) == "cudnn"
    for dtype, head, words in [("float32", 8, "float16 / bfloat16"), ("bfloat16", 12, "multiple of 8"),
                               ("float16", 136, "<= 128")]:
        assert words in fused.why_not_cudnn(dtype, head)
        assert fused.kernel(dtype, head) is None and fused.kernel(dtype, head, explicit=True) == "xla"
    monkeypatch.setattr(fused, "_compute_capability", lambda: (7, 5))
    assert "7.5" in fused.why_not_cudnn("bfloat16", 8) and fused.kernel("bfloat16", 8) is None


@jax_only
@pytest.mark.parametrize("implementation", ["auto", "fused"])
@pytest.mark.parametrize("error", [TypeError("bug"), RuntimeError("bug")])
def test_an_error_inside_the_cudnn_call_propagates(monkeypatch, implementation, error):
    """An exception from the cuDNN call that is not cuDNN refusing it (here a bug: a TypeError, a RuntimeError of
    another message) reaches the caller under "auto" and "fused": no other route hides it."""

    def broken(*args, **kwargs):
        raise error

    called = _pretend_gpu(monkeypatch, cudnn=broken)
    x = np.zeros((B, T, D), "float32")
    with pytest.raises(type(error), match="bug"):
        MultiHeadAttention(N, H, implementation=implementation, dtype="bfloat16")(x, x)
    assert called == ["cudnn"]


def test_cudnn_refusals_are_told_from_errors():
    """The refusals are jax's exact types and messages; a message of another type, or another message, is an error."""
    assert fused.cudnn_refusal(RuntimeError("cuDNN is not detected.")) == "cuDNN is not detected."
    refusal = "Unsupported sequence length Q 5, KV 5."
    assert fused.cudnn_refusal(NotImplementedError(refusal)) == refusal
    for error in (TypeError("cuDNN is not detected."), ValueError(refusal), RuntimeError("bug"),
                  NotImplementedError("bug"), NotImplementedError("a bug. " + refusal)):
        assert fused.cudnn_refusal(error) is None, error


def _on_a_gpu():
    return BACKEND == "jax" and fused.platform() == "gpu"


@jax_only
@pytest.mark.skipif(_on_a_gpu(), reason="a jaxlib with cuDNN cannot refuse as one without it does")
@pytest.mark.parametrize("implementation", ["auto", "fused"])
def test_a_cudnn_refusal_takes_another_route_visibly_and_warns_once(monkeypatch, fresh_warnings, implementation):
    """cuDNN refusing a call while it is traced (the installed jax's own refusal: this machine has no cuDNN, the
    platform claims a GPU): "auto" computes the call on the exact route, "fused" with XLA's implementation; the
    record says so, not "cudnn", and one warning says why and what ran."""
    called = _pretend_gpu(monkeypatch)
    x = np.random.default_rng(3).normal(size=(B, T, D)).astype("float32")
    layer = MultiHeadAttention(N, H, implementation=implementation, dtype="bfloat16")
    assert layer.attention_implementation(T, T) == "fused"  # the prediction: cuDNN's checks before the call pass
    instead = "XLA's implementation" if implementation == "fused" else "the exact route computes it"
    messages = _cudnn_warnings(lambda: layer(x, x))
    assert len(messages) == 1 and f"implementation={implementation!r}" in messages[0], messages
    assert "cuDNN refused the call: cuDNN is not detected." in messages[0] and instead in messages[0]
    expected = ("fused", "xla") if implementation == "fused" else ("exact", None)
    assert (layer.last_attention.route, layer.last_attention.kernel) == expected
    assert "cuDNN is not detected." in layer.last_attention.fallback
    assert called == (["cudnn", "xla"] if implementation == "fused" else ["cudnn"])
    record = layer.last_attention
    assert _cudnn_warnings(lambda: layer(x, x)) == []  # once: the same fallback again is recorded, not warned
    assert layer.last_attention == record
    exact = MultiHeadAttention(N, H, implementation="exact", dtype="bfloat16")
    exact(x, x)
    exact.set_weights(layer.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(layer(x, x), "float32")),
                               ops.convert_to_numpy(ops.cast(exact(x, x), "float32")), atol=2e-2)


@pytest.mark.parametrize("option", [{"implementation": "fused"}, {"flash_attention": True}])
def test_explicit_fused_without_cudnn_warns_once_and_reports_the_kernel_that_ran(fresh_warnings, option):
    """Where cuDNN does not take the call (this CPU; float32 on a GPU), an explicit "fused" (or keras'
    flash_attention=True) under JAX runs XLA's implementation, records "xla" and warns once; under TensorFlow
    "fused" is refused by name and flash_attention=True takes the chunked route: nothing claims a fused kernel."""
    x = np.zeros((B, T, D), "float32")
    layer = MultiHeadAttention(N, H, **option)
    if BACKEND != "jax":
        if "implementation" in option:
            with pytest.raises(ValueError, match="no fused attention kernel"):
                layer(x, x)
            assert layer.last_attention is None
        else:
            assert _cudnn_warnings(lambda: layer(x, x)) == []
            assert layer.last_attention == AttentionRoute("chunked")
        return
    messages = _cudnn_warnings(lambda: layer(x, x))
    name = "implementation='fused'" if "implementation" in option else "flash_attention=True"
    assert len(messages) == 1 and name in messages[0], messages
    assert fused.why_not_cudnn("float32", H) in messages[0] and "XLA's implementation" in messages[0]
    assert layer.last_attention == AttentionRoute("fused", "xla", layer.last_attention.fallback)
    assert layer.last_attention.fallback in messages[0]
    assert _cudnn_warnings(lambda: MultiHeadAttention(N, H, **option)(x, x)) == []  # once per message


def test_auto_records_the_route_each_call_took(monkeypatch, fresh_warnings):
    """Under "auto" the record names the route that computed each call (exact; from CHUNKED_MIN_LENGTH
    exact with scores, else chunked); under JAX where cuDNN takes the call (a stand-in kernel
    here), "fused" with kernel "cudnn", silently. A compiled function records when it is traced, not when it runs."""
    x = np.zeros((1, T, D), "float32")
    layer = MultiHeadAttention(N, H)
    assert layer.last_attention is None
    layer(x, x)
    assert layer.last_attention == AttentionRoute("exact")
    monkeypatch.setattr(routes, "CHUNKED_MIN_LENGTH", T)
    layer(x, x, return_attention_scores=True)
    assert layer.last_attention == AttentionRoute("exact")
    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda x: layer(x, x))
    else:
        import jax

        compiled = jax.jit(lambda x: layer(x, x))
    compiled(x)  # traced: the route of the trace is recorded
    assert layer.last_attention == AttentionRoute("chunked")
    layer._last_attention = None
    compiled(x)  # run again without tracing: nothing recorded
    assert layer.last_attention is None
    if BACKEND == "jax":
        xla = jax.nn.dot_product_attention
        called = _pretend_gpu(monkeypatch, cudnn=lambda *a, **k: xla(*a, implementation="xla", **k))
        half = MultiHeadAttention(N, H, dtype="bfloat16")
        assert _cudnn_warnings(lambda: half(x, x)) == []
        assert half.last_attention == AttentionRoute("fused", "cudnn") and called == ["cudnn"]


@pytest.mark.skipif(not _on_a_gpu(), reason="needs a GPU with cuDNN under JAX")
def test_cudnn_runs_on_a_gpu_and_its_refusal_is_recorded(fresh_warnings):
    """On a GPU, "auto" runs bfloat16 heads of 8 through cuDNN (recorded as "cudnn", silently, equal to the exact
    route); the gradient through a bias with an odd length is a call cuDNN refuses while it is traced ("Unsupported
    sequence length"): that trace takes the exact route, recorded and warned."""
    odd = 5
    x = np.random.default_rng(4).normal(size=(B, odd, D)).astype("float32")
    layer = MultiHeadAttention(N, H, dtype="bfloat16")
    exact = MultiHeadAttention(N, H, implementation="exact", dtype="bfloat16")
    assert _cudnn_warnings(lambda: layer(x, x)) == []
    assert layer.last_attention == AttentionRoute("fused", "cudnn")
    exact(x, x)
    exact.set_weights(layer.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(layer(x, x), "float32")),
                               ops.convert_to_numpy(ops.cast(exact(x, x), "float32")), atol=2e-2)
    bias = {"attention_bias": np.zeros((1, 1, odd, odd), "float32")}
    messages = _cudnn_warnings(lambda: _outputs_and_gradients(layer, (x, x), bias))
    assert len(messages) == 1 and "Unsupported sequence length Q 5, KV 5" in messages[0], messages
    assert (layer.last_attention.route, layer.last_attention.kernel) == ("exact", None)
