"""Transformer-XL (Dai et al. 2019): relative positional attention (section 3.3, TransformerXLRelativeBias) against
NumPy written from the paper's A^rel, and segment-level recurrence (section 3.2, the ``memory`` argument): a block
with a memory equals the block on [memory; segment], no gradient reaches the memory, padded memory steps get zero
weight, and cached decoding after the memory is written into the cache equals the memory call."""

import numpy as np
import pytest
from harness import BACKEND, run_layer_test
from keras import ops

from attnlayers import (
    MultiHeadAttention,
    RotaryEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    TransformerXLRelativeBias,
    update_memory,
)

B, T, M, D, N, H = 2, 3, 2, 8, 2, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


def np_relative_terms(q, k, kernel, u, v, start, clamp=None):
    """(b) + (c) + (d) of A^rel_{i,j} (Dai et al. 2019, section 3.3), over sqrt(H), one entry at a time: query t at
    i = start + t, key s at j = s, R_{i-j} = [sin((i-j) f); cos((i-j) f)], f_k = 1 / 10000^(2k / d_R)."""
    batch, queries, heads, head_dim = q.shape
    keys, key_heads = k.shape[1], k.shape[2]
    position_dim = kernel.shape[0]
    frequencies = 1.0 / 10000.0 ** (np.arange(0, position_dim, 2) / position_dim)
    out = np.zeros((batch, heads, queries, keys))
    for t in range(queries):
        for s in range(keys):
            distance = start + t - s
            if clamp is not None:
                distance = np.clip(distance, -clamp, clamp)
            r = np.concatenate([np.sin(distance * frequencies), np.cos(distance * frequencies)])
            for n in range(heads):
                position_key = r @ kernel[:, n]  # W_{k,R} R_{i-j}
                key = k[:, s, n // (heads // key_heads)]
                out[:, n, t, s] = (q[:, t, n] @ position_key + key @ u[n] + v[n] @ position_key) / np.sqrt(head_dim)
    return out


def _hook(num_heads=N, **kwargs):
    return TransformerXLRelativeBias(num_heads, bias_initializer="random_normal", **kwargs)


def _grad_to(fn, x):
    """d sum(fn(x)) / dx, zeros where no gradient flows (TensorFlow's None)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ops.sum(fn(x))
        return _np(tape.gradient(y, x, unconnected_gradients="zero"))
    import jax

    return _np(jax.jit(jax.grad(lambda x: ops.sum(fn(x))))(ops.convert_to_tensor(x)))  # one compilation


def test_relative_bias_harness_and_equation(rng):
    """The harness on grouped-query keys; the terms equal the NumPy equation at a start index, clamped or not."""
    queries, keys, heads, key_heads = 3, 5, 4, 2
    q = rng.normal(size=(B, queries, heads, H)).astype("float32")
    k = rng.normal(size=(B, keys, key_heads, H)).astype("float32")
    run_layer_test(TransformerXLRelativeBias, {"num_heads": heads, "bias_initializer": "random_normal"},
                   {"query": q, "key": k}, expected_output_shape=(B, heads, queries, keys),
                   expected_num_trainable_weights=3)
    for clamp, start in ((None, 0), (None, ops.convert_to_tensor(4)), (2, 3)):
        hook = _hook(heads, clamp_length=clamp, position_dim=6)
        out = _np(hook(q, k, start_index=start))
        kernel, u, v = (_np(w) for w in (hook.kernel, hook.u, hook.v))
        expected = np_relative_terms(q, k, kernel, u, v, int(_np(start)), clamp)
        np.testing.assert_allclose(out, expected, atol=1e-5, err_msg=f"clamp={clamp}, start={start}")


def test_attention_with_memory_matches_paper(rng):
    """MHA + the hook + a memory: the weights are softmax(A^rel / sqrt(H)) over [memory; segment] with queries at
    M + t, causal, a padded memory step at zero weight (NumPy from sections 3.2 and 3.3)."""
    layer = MultiHeadAttention(N, H, position_bias=_hook(), bias_initializer="random_normal")
    x = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, M, D)).astype("float32")
    memory_mask = np.ones((B, M), bool)
    memory_mask[1, 0] = False
    _, scores = layer(x, x, memory=memory, memory_mask=memory_mask, use_causal_mask=True,
                      return_attention_scores=True)
    states = np.concatenate([memory, x], axis=1)  # h~ = [SG(m) o h]

    def project(dense, h):
        return np.einsum("bld,dnh->blnh", h, _np(dense.kernel)) + _np(dense.bias)

    q, k = project(layer.query_dense, x), project(layer.key_dense, states)
    hook = layer.position_bias
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H)  # term (a)
    logits += np_relative_terms(q, k, _np(hook.kernel), _np(hook.u), _np(hook.v), start=M)  # (b) + (c) + (d)
    visible = np.arange(M + T)[None, :] <= M + np.arange(T)[:, None]  # key j <= query i = M + t
    visible = visible[None, None] & np.concatenate([memory_mask, np.ones((B, T), bool)], 1)[:, None, None]
    logits = np.where(visible, logits, -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(_np(scores), expected, atol=1e-5)
    assert np.all(_np(scores)[1, :, :, 0] == 0)
    # Every route takes a memory (M more keys): the blocked ones equal the exact one (rotary positions from M on).
    kwargs = {"memory": memory, "memory_mask": memory_mask, "use_causal_mask": True}
    exact = MultiHeadAttention(N, H, rotary=RotaryEmbedding(), implementation="exact")
    expected = _np(exact(x, x, **kwargs))
    for route in ("chunked", "fused") if BACKEND == "jax" else ("chunked",):
        blocked = MultiHeadAttention(N, H, rotary=RotaryEmbedding(), implementation=route)
        blocked(x, x, **kwargs)
        blocked.set_weights(exact.get_weights())
        blocked._chunk_sizes = (2, 2)
        np.testing.assert_allclose(_np(blocked(x, x, **kwargs)), expected, atol=1e-5, err_msg=route)
        assert blocked.last_attention.route == route


@pytest.mark.parametrize("block_class, normalize_first", [(TransformerDecoderBlock, True),
                                                          (TransformerEncoderBlock, False)],
                         ids=["decoder_pre_ln", "encoder_post_ln"])
def test_block_with_memory_equals_block_on_concatenation(block_class, normalize_first, rng):
    block = block_class(N, 16, normalize_first=normalize_first, attention_kwargs={"position_bias": _hook()})
    x = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, M, D)).astype("float32")
    memory_mask = np.array([[True, True], [False, True]])
    padding = np.concatenate([memory_mask, np.ones((B, T), bool)], axis=1)
    padding_name = "decoder_padding_mask" if block_class is TransformerDecoderBlock else "padding_mask"
    full = _np(block(np.concatenate([memory, x], 1), **{padding_name: padding}))[:, M:]
    out, scores = block(x, memory=memory, memory_mask=memory_mask, return_attention_scores=True)
    np.testing.assert_allclose(_np(out), full, atol=1e-5)
    scores = _np(scores["self_attention"] if isinstance(scores, dict) else scores)
    assert scores.shape == (B, N, T, M + T) and np.all(scores[1, :, :, 0] == 0)  # the padded memory step
    # SG(m): no gradient reaches the memory; the segment gets one.
    assert np.all(_grad_to(lambda m: block(x, memory=m), memory) == 0)
    assert np.any(_grad_to(lambda h: block(h, memory=memory), x) != 0)


def test_cached_decoding_after_the_memory_equals_the_memory_call(rng):
    """The memory written into the cache (the block called on it at index 0), then one step at a time from index M:
    the outputs of the memory call, with the relative positions M + t."""
    block = TransformerDecoderBlock(N, 16, normalize_first=True, attention_kwargs={"position_bias": _hook()})
    x = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, M, D)).astype("float32")
    expected = _np(block(x, memory=memory))
    cache = np.zeros((B, 2, M + T, N, H), "float32")
    _, cache = block(memory, self_attention_cache=cache, self_attention_cache_update_index=0)
    for t in range(T):
        out, cache = block(x[:, t : t + 1], self_attention_cache=cache, self_attention_cache_update_index=M + t)
        np.testing.assert_allclose(_np(out), expected[:, t : t + 1], atol=1e-5, err_msg=f"step {t}")


def test_update_memory_and_errors(rng):
    x = rng.normal(size=(B, T, D)).astype("float32")
    memory = rng.normal(size=(B, M, D)).astype("float32")
    np.testing.assert_allclose(_np(update_memory(memory, x, 4)), np.concatenate([memory, x], 1)[:, -4:])
    np.testing.assert_allclose(_np(update_memory(None, x, 2)), x[:, -2:])
    assert update_memory(memory, x, 0) is None
    assert np.all(_grad_to(lambda h: update_memory(memory, h, 4), x) == 0)
    layer = MultiHeadAttention(N, H)
    cache = np.zeros((B, 2, 6, N, H), "float32")
    for call, match in [
        (lambda: layer(x, x, memory=memory, cache=cache, cache_update_index=0), "`memory` and `cache`"),
        (lambda: layer(x, x, memory_mask=np.ones((B, M), bool)), "no memory"),
        (lambda: layer(x, x, memory=memory[..., :4]), "feature sizes"),
        (lambda: layer(x, x, memory=memory, attention_mask=np.ones((B, T, M + T), bool)), "segment's 3 keys"),
        (lambda: TransformerDecoderBlock(N, 16)(x, memory=memory, self_attention_cache=cache,
                                                 self_attention_cache_update_index=0), "self_attention_cache"),
        (lambda: TransformerXLRelativeBias(N, position_dim=5), "even"),
        (lambda: TransformerXLRelativeBias(3)(np.zeros((B, T, N, H)), np.zeros((B, T, N, H))), "num_heads=3"),
        (lambda: TransformerXLRelativeBias(4)(np.zeros((B, T, 4, H)), np.zeros((B, T, 3, H))), "dividing"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
