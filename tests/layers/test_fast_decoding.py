"""The single-position decoding step of MultiHeadAttention / TransformerDecoderBlock / TransformerDecoder: the same
outputs and caches as the general cached path and as full recomputation, only the step's cache position
written, both cache-write strategies, compiled (graph and XLA), gradients, and the cases that keep the general
path."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers import kv_cache
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.positional import RotaryEmbedding
from attnlayers.transformer import TransformerDecoder, TransformerDecoderBlock

B, L, D, N, F = 2, 40, 16, 4, 32  # L = 40: two cache prefixes (20, 40), so steps cross a branch boundary

GPT2_LIKE = {"normalize_first": True, "activation": "gelu"}
LLAMA_LIKE = {
    "normalize_first": True, "normalization": "rms", "activation": "swiglu", "use_bias": False,
    "attention_kwargs": {"num_key_value_heads": 2, "rotary": RotaryEmbedding()},
}
WINDOW_GATE = {"attention_kwargs": {"sliding_window": 5, "use_gate": True}}  # post-LN
CONFIGS = {"gpt2": GPT2_LIKE, "llama": LLAMA_LIKE, "window_gate": WINDOW_GATE}


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


class _Counter:
    """Counts the calls of MultiHeadAttention.single_step (the step really took the fast path)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = MultiHeadAttention.single_step

        def counted(layer, *args, **kwargs):
            self.calls += 1
            return original(layer, *args, **kwargs)

        monkeypatch.setattr(MultiHeadAttention, "single_step", counted)


def _decoder(kwargs, layers=2, cross=False):
    decoder = TransformerDecoder(layers, N, F, **kwargs)
    decoder.build((None, L, D), (None, 7, D) if cross else None)
    for weight in decoder.weights:  # non-trivial biases and norms
        weight.assign(weight + np.random.default_rng(1).normal(0, 0.05, weight.shape).astype("float32"))
    return decoder


def _kv_heads(kwargs):
    return kwargs.get("attention_kwargs", {}).get("num_key_value_heads", N)


@pytest.mark.parametrize("in_place", [True, False], ids=["write_each_layer", "write_once"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_decoder_steps_equal_full_recomputation(config, in_place, rng, monkeypatch):
    """Every step from a prefilled cache (garbage beyond the written positions) matches the full forward pass,
    and writes only its own position, with either write strategy."""
    kwargs = CONFIGS[config]
    decoder = _decoder(kwargs)
    x = rng.normal(size=(B, L, D)).astype("float32")
    full = _np(decoder(x))
    # Every step from 3 to L - 1 under TensorFlow. JAX compiles each eager op anew for each index (about 1 s a
    # step here): it checks the steps 17 .. 22, across the boundary of the prefixes (20, 40).
    prefill, end = (3, L) if keras.backend.backend() == "tensorflow" else (17, 23)
    cache = rng.normal(size=(B, 2, 2, L, _kv_heads(kwargs), D // N)).astype("float32")  # garbage
    cache = decoder(x[:, :prefill], self_attention_cache=cache, self_attention_cache_update_index=0)[
        "self_attention_cache"]
    monkeypatch.setattr(kv_cache, "updates_in_place", lambda cache: in_place)
    counter = _Counter(monkeypatch)
    for t in range(prefill, end):
        index = t if t % 2 else ops.convert_to_tensor(t)  # Python int or scalar tensor
        out = decoder(x[:, t : t + 1], self_attention_cache=cache, self_attention_cache_update_index=index)
        np.testing.assert_allclose(_np(out["sequence_output"])[:, 0], full[:, t], atol=2e-5, err_msg=f"step {t}")
        before, after = _np(cache), _np(out["self_attention_cache"])
        untouched = np.arange(L) != t
        np.testing.assert_array_equal(after[:, :, :, untouched], before[:, :, :, untouched], err_msg=f"step {t}")
        cache = out["self_attention_cache"]
    assert counter.calls == 2 * (end - prefill)


def test_decoder_step_cache_equals_the_general_path(rng, monkeypatch):
    """The written keys and values are those the general path writes (same projections and rotation)."""
    decoder = _decoder(LLAMA_LIKE)
    cache = ops.convert_to_tensor(rng.normal(size=(B, 2, 2, L, 2, D // N)).astype("float32"))
    step = rng.normal(size=(B, 1, D)).astype("float32")
    fast = decoder(step, self_attention_cache=cache, self_attention_cache_update_index=25)
    monkeypatch.setattr(TransformerDecoderBlock, "supports_single_step", lambda *args, **kwargs: False)
    slow = decoder(step, self_attention_cache=cache, self_attention_cache_update_index=25)
    np.testing.assert_allclose(_np(fast["self_attention_cache"]), _np(slow["self_attention_cache"]), atol=1e-6)
    np.testing.assert_allclose(_np(fast["sequence_output"]), _np(slow["sequence_output"]), atol=1e-5)


def test_block_step_equals_the_general_path(rng, monkeypatch):
    """A block called on its own (B, 2, S_max, N_kv, H) cache, with cross-attention over a static cache."""
    block = TransformerDecoderBlock(N, F, normalize_first=True, attention_kwargs={"num_key_value_heads": 2})
    memory = rng.normal(size=(B, 7, D)).astype("float32")
    block(rng.normal(size=(B, L, D)).astype("float32"), memory)
    cache = ops.convert_to_tensor(rng.normal(size=(B, 2, L, 2, D // N)).astype("float32"))
    cross = ops.convert_to_tensor(rng.normal(size=(B, 2, 7, 2, D // N)).astype("float32"))  # 2 K/V heads
    step = rng.normal(size=(B, 1, D)).astype("float32")
    call = {"self_attention_cache": cache, "self_attention_cache_update_index": 30, "cross_attention_cache": cross}
    counter = _Counter(monkeypatch)
    fast = block(step, **call)
    assert counter.calls == 1
    monkeypatch.setattr(TransformerDecoderBlock, "supports_single_step", lambda *args, **kwargs: False)
    slow = block(step, **call)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(_np(a), _np(b), atol=1e-5)


def test_cross_attention_decoder_steps(rng, monkeypatch):
    """An encoder-decoder stack: the cross cache filled at the first step, then used as is."""
    decoder = _decoder(GPT2_LIKE, cross=True)
    x, memory = rng.normal(size=(B, L, D)).astype("float32"), rng.normal(size=(B, 7, D)).astype("float32")
    full = _np(decoder(x, memory))
    self_cache, cross_cache = ops.zeros((B, 2, 2, L, N, D // N)), ops.zeros((B, 2, 2, 7, N, D // N))
    counter = _Counter(monkeypatch)
    for t in range(0, L, 3):  # every third step only, for speed: earlier positions stay zero
        step = x[:, t : t + 1]
        out = decoder(step, memory, self_attention_cache=self_cache, self_attention_cache_update_index=t,
                      cross_attention_cache=cross_cache, cross_attention_cache_update_index=0 if t == 0 else None)
        self_cache, cross_cache = out["self_attention_cache"], out["cross_attention_cache"]
        if t == 0:
            np.testing.assert_allclose(_np(out["sequence_output"])[:, 0], full[:, 0], atol=1e-5)
    assert counter.calls == 2 * len(range(0, L, 3))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function graph and XLA modes")
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_compiled_steps_match_eager(jit_compile, rng):
    """Inside a compiled loop (as in generation): the switch over prefixes, the in-place writes under XLA."""
    import tensorflow as tf

    decoder = _decoder(GPT2_LIKE)
    x = rng.normal(size=(B, L, D)).astype("float32")
    full = _np(decoder(x))
    seen = []

    def run(x, cache):
        seen.append(kv_cache.updates_in_place(cache))

        def body(t, cache, outputs):
            out = decoder(x[:, t][:, None], self_attention_cache=cache, self_attention_cache_update_index=t)
            row = tf.reshape(out["sequence_output"], (1, B, D))
            return t + 1, out["self_attention_cache"], tf.tensor_scatter_nd_update(outputs, [[t]], row)

        start = (tf.constant(0), cache, tf.zeros((L, B, D)))
        return tf.while_loop(lambda t, *_: t < L, body, start)[2]

    outputs = tf.function(run, jit_compile=jit_compile)(x, tf.zeros((B, 2, 2, L, N, D // N)))
    assert seen == [jit_compile]
    np.testing.assert_allclose(np.transpose(_np(outputs), (1, 0, 2)), full, atol=2e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.GradientTape")
def test_gradients_equal_the_general_path(rng, monkeypatch):
    """The step is differentiable (the cache write is a scatter), with the general path's gradients for the
    weights and the incoming cache."""
    import tensorflow as tf

    decoder = _decoder(LLAMA_LIKE)
    cache = tf.constant(rng.normal(size=(B, 2, 2, L, 2, D // N)).astype("float32"))
    step = tf.constant(rng.normal(size=(B, 1, D)).astype("float32"))
    weights = rng.normal(size=(B, 1, D)).astype("float32"), rng.normal(size=cache.shape).astype("float32")

    def gradients():
        with tf.GradientTape() as tape:
            tape.watch(cache)
            out = decoder(step, self_attention_cache=cache, self_attention_cache_update_index=tf.constant(21))
            loss = tf.reduce_sum(out["sequence_output"] * weights[0]) + tf.reduce_sum(
                out["self_attention_cache"] * weights[1])
        return tape.gradient(loss, [cache] + decoder.trainable_weights)

    for in_place in (False, True):
        monkeypatch.setattr(kv_cache, "updates_in_place", lambda cache, in_place=in_place: in_place)
        fast = gradients()
        with monkeypatch.context() as patch:
            patch.setattr(TransformerDecoderBlock, "supports_single_step", lambda *args, **kwargs: False)
            slow = gradients()
        for a, b in zip(fast, slow):
            assert a is not None
            np.testing.assert_allclose(_np(a), _np(b), atol=1e-5)


def test_general_path_where_the_step_does_not_apply(rng, monkeypatch):
    """Masks, returned scores, training with dropout, a non-dot score and a position bias keep the general
    path (and its results)."""
    counter = _Counter(monkeypatch)
    decoder = _decoder(GPT2_LIKE)
    cache = ops.zeros((B, 2, 2, L, N, D // N))
    step = rng.normal(size=(B, 1, D)).astype("float32")
    call = {"self_attention_cache": cache, "self_attention_cache_update_index": 4}
    decoder(step, decoder_padding_mask=np.ones((B, 1), bool), **call)
    decoder(step, return_attention_scores=True, **call)
    decoder(step, decoder_attention_mask=np.ones((B, 1, L), bool), **call)
    decoder(rng.normal(size=(B, 2, D)).astype("float32"), **call)  # two positions
    dropout = TransformerDecoder(2, N, F, dropout=0.5, normalize_first=True)
    dropout(step, self_attention_cache=cache, self_attention_cache_update_index=4, training=True)
    assert counter.calls == 0
    dropout(step, self_attention_cache=cache, self_attention_cache_update_index=4, training=False)
    assert counter.calls == 2
    general = MultiHeadAttention(N, D // N, score="general")
    general.build((None, 1, D), (None, 1, D))
    assert not general.supports_single_step()
    with pytest.raises(ValueError, match="dot or scaled-dot score"):
        general.single_step(step, ops.zeros((B, 2, L, N, D // N)), 3)
    attention = MultiHeadAttention(N, D // N)
    attention.build((None, 1, D), (None, 1, D))
    with pytest.raises(ValueError, match=r"shape \(batch, 1, dim\)"):
        attention.single_step(np.zeros((B, 2, D), "float32"), ops.zeros((B, 2, L, N, D // N)), 3)


def test_mixed_precision_step(rng, monkeypatch):
    decoder = TransformerDecoder(2, N, F, normalize_first=True, dtype="mixed_float16")
    decoder.build((None, L, D))
    x = rng.normal(size=(B, L, D)).astype("float32")
    cache = decoder(x[:, :30], self_attention_cache=ops.zeros((B, 2, 2, L, N, D // N), "float16"),
                    self_attention_cache_update_index=0)["self_attention_cache"]
    step = x[:, 30:31]
    fast = decoder(step, self_attention_cache=cache, self_attention_cache_update_index=30)
    assert fast["self_attention_cache"].dtype == cache.dtype
    monkeypatch.setattr(TransformerDecoderBlock, "supports_single_step", lambda *args, **kwargs: False)
    slow = decoder(step, self_attention_cache=cache, self_attention_cache_update_index=30)
    np.testing.assert_allclose(_np(fast["sequence_output"]), _np(slow["sequence_output"]), atol=2e-2)
    np.testing.assert_allclose(_np(fast["self_attention_cache"]), _np(slow["self_attention_cache"]), atol=2e-3)


def test_block_single_step_both_writes(rng):
    """The public block step: write=False returns the position's key and value, which write=True writes; the
    same outputs either way; attention dropout in training is refused."""
    block = TransformerDecoderBlock(N, F, dropout=0.1, attention_kwargs={"num_key_value_heads": 2})
    block.build((None, L, D))
    cache = ops.convert_to_tensor(rng.normal(size=(B, 2, L, 2, D // N)).astype("float32"))
    step = rng.normal(size=(B, 1, D)).astype("float32")
    written = block.single_step(step, cache, 12)
    beside = block.single_step(step, cache, 12, write=False)
    np.testing.assert_allclose(_np(written.outputs), _np(beside.outputs), atol=1e-5)
    expected = _np(cache)
    expected[:, :, 12] = _np(beside.self_attention_cache)
    np.testing.assert_allclose(_np(written.self_attention_cache), expected, atol=1e-6)
    general = block(step, self_attention_cache=cache, self_attention_cache_update_index=12)
    np.testing.assert_allclose(_np(written.outputs), _np(general[0]), atol=1e-5)
    with pytest.raises(ValueError, match="attention dropout"):
        block.single_step(step, cache, 12, training=True)
    with pytest.raises(ValueError, match=r"`decoder_sequence` of a single step"):
        block.single_step(np.zeros((B, 2, D), "float32"), cache, 12)
