"""MultiHeadAttention: harness, NumPy reference from the equations, keras weight compatibility, KV cache,
the causal rule on every path, GQA, position hooks, fully-masked rows, bad input."""

import math
import warnings

import keras
import numpy as np
import pytest
from harness import check_gradients, run_layer_test
from keras import ops

from attnlayers.multi_head import AttentionOutputs, MultiHeadAttention
from attnlayers.positional import ALiBi, RelativePositionBias, RotaryEmbedding
from attnlayers.scoring import DotScore, ScaledDotScore

B, T, S, D, N, H = 2, 3, 5, 8, 2, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


# ----------------------------------------------------------------------------------------------------------
# NumPy reference


def np_masked_softmax(logits, mask):
    logits = np.where(mask, logits, -np.inf)
    top = logits.max(-1, keepdims=True)
    e = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


def np_rotary(x, start):
    """RoPE, rotate-half layout, x (B, L, N, H) at positions start..start+L-1."""
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-2.0 * np.arange(half) / x.shape[-1])
    angles = (start + np.arange(x.shape[1]))[:, None, None] * theta  # (L, 1, H/2)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * np.cos(angles) - x2 * np.sin(angles), x2 * np.cos(angles) + x1 * np.sin(angles)], -1)


def np_mha(weights, query, value, key=None, *, num_heads, mask=None, causal=False, rotary=False, bias=None):
    """MultiHead(Q, K, V) = Concat(head_i) W^O, head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(w, "float64") for w in weights]
    key = value if key is None else key
    q = np.einsum("btd,dnh->btnh", query, wq) + bq
    k = np.einsum("bsd,dnh->bsnh", key, wk) + bk
    v = np.einsum("bsd,dnh->bsnh", value, wv) + bv
    t, s = q.shape[1], k.shape[1]
    if rotary:  # queries are the last t of the s positions
        q, k = np_rotary(q, s - t), np_rotary(k, 0)
    groups = num_heads // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    visible = np.ones((query.shape[0], t, s), bool)
    if mask is not None:
        visible = visible & mask
    if causal:
        visible = visible & np.tril(np.ones((t, s), bool), k=s - t)
    attention = np_masked_softmax(logits, visible[:, None])
    out = np.einsum("bnts,bsnh,nhd->btd", attention, v, wo) + bo
    return np.where(visible.any(-1)[..., None], out, 0.0), attention


def np_alibi(num_heads, t, s):
    slopes = np.array([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])
    i, j = np.arange(t)[:, None] + (s - t), np.arange(s)[None]
    return (-slopes[:, None, None] * np.abs(i - j))[None]


def _data(rng, b=B, t=T, s=S, d=D):
    return rng.normal(size=(b, t, d)).astype("float32"), rng.normal(size=(b, s, d)).astype("float32")


# ----------------------------------------------------------------------------------------------------------
# Harness


def test_mha_harness_cross_attention(rng):
    """Cross-attention with a per-head "general" score, a gate, a relative bias, dropout, value_dim and
    output_shape; masked values change nothing and a fully-masked row outputs zeros."""
    q, v = _data(rng)
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": N, "key_dim": H, "value_dim": 3, "score": "general", "dropout": 0.1, "use_gate": True,
         "output_shape": 6, "position_bias": RelativePositionBias(N, num_buckets=8, max_distance=16)},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, 6), (B, N, T, S)),
        expected_num_trainable_weights=12,
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
    )


def test_mha_harness_cached_self_attention(rng):
    """Causal self-attention with GQA, rotary and ALiBi, writing into a key/value cache (whose unwritten
    positions hold garbage that must be masked): functional model, .keras, XLA, mixed precision, gradients."""
    x, _ = _data(rng)
    cache = rng.normal(size=(B, 2, S, 2, H)).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {"num_heads": 4, "key_dim": H, "num_key_value_heads": 2, "rotary": RotaryEmbedding(),
         "position_bias": ALiBi(4)},
        {"query": x, "value": x, "cache": cache},
        call_kwargs={"cache_update_index": 1, "use_causal_mask": True, "return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, 4, T, S), (B, 2, S, 2, H)),
        expected_num_trainable_weights=8,
    )


# ----------------------------------------------------------------------------------------------------------
# Numerics against NumPy, and the position hooks


def test_matches_numpy_with_masks(rng):
    q, v = _data(rng)
    k = rng.normal(size=(B, S, 5)).astype("float32")
    layer = MultiHeadAttention(N, H, bias_initializer="random_normal")
    value_mask = rng.random((B, S)) < 0.7
    value_mask[:, 0] = True
    query_mask = np.array([[True, True, False], [True, True, True]])
    attention_mask = rng.random((B, T, S)) < 0.8
    out, scores = layer(
        q, v, k, query_mask=query_mask, value_mask=value_mask, attention_mask=attention_mask,
        return_attention_scores=True,
    )
    mask = value_mask[:, None, :] & query_mask[:, :, None] & attention_mask
    ref_out, ref_scores = np_mha(layer.get_weights(), q, v, k, num_heads=N, mask=mask)
    np.testing.assert_allclose(_np(out), ref_out, atol=1e-5)
    np.testing.assert_allclose(_np(scores), ref_scores, atol=1e-6)
    np.testing.assert_array_equal(_np(out)[0, 2], 0.0)  # padded query: zero output, not the output bias


def test_position_hooks_change_logits_as_numpy_says(rng):
    x, _ = _data(rng, t=S)
    xs = x[:, S - T :]  # T queries against S keys: the queries sit at positions S - T .. S - 1 (bottom right)
    # Rotary (queries and keys rotated at their positions) + ALiBi + GQA, causal.
    layer = MultiHeadAttention(4, H, num_key_value_heads=2, rotary=RotaryEmbedding(), position_bias=ALiBi(4),
                               causal_alignment="bottom_right")
    got = layer(xs, x, use_causal_mask=True, return_attention_scores=True)
    ref = np_mha(layer.get_weights(), xs, x, num_heads=4, causal=True, rotary=True, bias=np_alibi(4, T, S))
    cases = [("rotary_alibi_gqa", got, ref)]
    # T5 relative bias, computed for query positions S - T .. S - 1.
    bias_layer = RelativePositionBias(N, num_buckets=8, max_distance=16, embeddings_initializer="random_normal")
    layer = MultiHeadAttention(N, H, position_bias=bias_layer, causal_alignment="bottom_right")
    got = layer(xs, x, return_attention_scores=True)
    bias = _np(bias_layer(np.zeros((1, T, 1, 1)), np.zeros((1, S, 1, 1)), start_index=S - T))
    cases.append(("relative_bias", got, np_mha(layer.get_weights()[:8], xs, x, num_heads=N, bias=bias)))
    # An additive bias passed at call time.
    bias = rng.normal(size=(B, 1, T, S)).astype("float32")
    layer = MultiHeadAttention(N, H, causal_alignment="bottom_right")
    got = layer(xs, x, attention_bias=bias, use_causal_mask=True, return_attention_scores=True)
    cases.append(("attention_bias", got, np_mha(layer.get_weights(), xs, x, num_heads=N, bias=bias, causal=True)))
    for name, (out, scores), (ref_out, ref_scores) in cases:
        np.testing.assert_allclose(_np(out), ref_out, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(_np(scores), ref_scores, atol=1e-6, err_msg=name)


def test_per_head_scores(rng):
    """Any score applies per head: folded Score layers agree with the fused einsum path."""
    q, v = _data(rng)

    class SlowDot(DotScore):  # a subclass: not the fused path
        pass

    fused = MultiHeadAttention(N, H, score="dot")
    ref = fused(q, v, use_causal_mask=True, return_attention_scores=True)
    for score in (SlowDot(), "general"):
        layer = MultiHeadAttention(N, H, score=score)
        layer(q, v)
        weights = fused.get_weights()
        if score == "general":  # W_a = identity: q^T W_a k = q . k
            weights.append(np.eye(H, dtype="float32"))
        layer.set_weights(weights)
        got = layer(q, v, use_causal_mask=True, return_attention_scores=True)
        for a, b in zip(ref, got):
            np.testing.assert_allclose(_np(a), _np(b), atol=1e-5)
    # scaled_dot with an explicit scale = dot scaled by hand.
    scaled = MultiHeadAttention(N, H, score=ScaledDotScore(scale=0.5))
    scaled(q, v)
    scaled.set_weights(fused.get_weights())
    expected = np_mha(fused.get_weights(), q, v, num_heads=N)
    # np_mha scales by 1/sqrt(H) = 0.5 for H = 4.
    np.testing.assert_allclose(_np(scaled(q, v)), expected[0], atol=1e-5)


def test_gqa_equals_mha_with_repeated_heads(rng):
    q, v = _data(rng)
    gqa = MultiHeadAttention(4, H, num_key_value_heads=2, bias_initializer="random_normal")
    out, scores = gqa(q, v, return_attention_scores=True)
    mha = MultiHeadAttention(4, H)
    mha(q, v)
    wq, bq, wk, bk, wv, bv, wo, bo = gqa.get_weights()
    mha.set_weights([wq, bq, np.repeat(wk, 2, 1), np.repeat(bk, 2, 0), np.repeat(wv, 2, 1), np.repeat(bv, 2, 0), wo, bo])
    ref_out, ref_scores = mha(q, v, return_attention_scores=True)
    np.testing.assert_allclose(_np(out), _np(ref_out), atol=1e-5)
    np.testing.assert_allclose(_np(scores), _np(ref_scores), atol=1e-6)
    mqa = MultiHeadAttention(4, H, num_key_value_heads=1)
    mqa(q, v)
    assert [w.shape for w in mqa.get_weights()][2:4] == [(D, 1, H), (1, H)]


# ----------------------------------------------------------------------------------------------------------
# keras compatibility


def test_keras_weight_compatibility(rng):
    q, v = _data(rng, t=S)
    kv = rng.normal(size=(B, S, 6)).astype("float32")
    value_mask = rng.random((B, S)) < 0.7
    value_mask[:, 0] = True
    cases = [
        {},
        {"use_causal_mask": True},
        {"value_mask": value_mask},
        {"attention_mask": np.tril(np.ones((B, S, S), bool)) & value_mask[:, None], "use_causal_mask": True},
    ]
    # (keras' fused path fails on JAX when value_dim != key_dim, so value_dim is checked elsewhere.)
    for init_kwargs in ({}, {"output_shape": 5, "use_gate": True, "sliding_window": 2}):
        theirs = keras.layers.MultiHeadAttention(N, H, bias_initializer="random_normal", **init_kwargs)
        ours = MultiHeadAttention(N, H, **init_kwargs)
        theirs(q, v, kv)
        ours(q, v, kv)
        assert MultiHeadAttention.from_config(theirs.get_config()).get_config()["use_gate"] == theirs._use_gate
        assert [w.shape for w in ours.get_weights()] == [w.shape for w in theirs.get_weights()]
        assert [w.path.split("/", 1)[1] for w in ours.weights] == [w.path.split("/", 1)[1] for w in theirs.weights]
        ours.set_weights(theirs.get_weights())
        for kwargs in cases:
            for scores in (False, True):
                a = theirs(q, v, kv, return_attention_scores=scores, **kwargs)
                b = ours(q, v, kv, return_attention_scores=scores, **kwargs)
                for x, y in zip(a if scores else [a], b if scores else [b]):
                    np.testing.assert_allclose(_np(x), _np(y), atol=1e-5, err_msg=f"{init_kwargs} {kwargs}")


# ----------------------------------------------------------------------------------------------------------
# Extension points and the return convention


def test_compute_attention_override_is_used(rng):
    """A subclass overriding keras' `_compute_attention` (keras' signature) gets the projected per-head
    tensors and the assembled mask, and its result becomes the layer's output and scores."""
    q, v = _data(rng)
    seen = []

    class UniformAttention(MultiHeadAttention):
        def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                               return_attention_scores=False):
            seen.append((tuple(query.shape), tuple(key.shape), tuple(value.shape), tuple(attention_mask.shape)))
            weights = ops.where(ops.expand_dims(attention_mask, 1), 1.0, 0.0)  # (B, 1, T, S)
            weights = ops.broadcast_to(weights, (B, self.num_heads, T, S))
            weights = weights / ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)
            return ops.einsum("bnts,bsnh->btnh", weights, value), weights

    layer = UniformAttention(N, H, value_dim=3, bias_initializer="random_normal")
    value_mask = np.array([[True] * S, [True, True, False, False, False]])
    out, scores = layer(q, v, value_mask=value_mask, return_attention_scores=True)
    assert seen[-1] == ((B, T, N, H), (B, S, N, H), (B, S, N, 3), (B, 1, S))
    expected = np.broadcast_to(value_mask[:, None, None, :] / value_mask.sum(-1)[:, None, None, None], (B, N, T, S))
    np.testing.assert_allclose(_np(scores), expected, atol=1e-6)
    wq, bq, wk, bk, wv, bv, wo, bo = layer.get_weights()
    heads = np.einsum("bnts,bsnh->btnh", expected, np.einsum("bsd,dnh->bsnh", v, wv) + bv)
    np.testing.assert_allclose(_np(out), np.einsum("btnh,nhd->btd", heads, wo) + bo, atol=1e-5)


def test_attention_outputs_pack_and_unpack():
    o, s, c = "output", "scores", "cache"
    for scores, cache, packed in [(False, False, o), (True, False, (o, s)), (False, True, (o, c)), (True, True, (o, s, c))]:
        parts = AttentionOutputs(o, s if scores else None, c if cache else None)
        assert parts.pack(scores) == packed
        assert AttentionOutputs.unpack(packed, scores, cache) == parts


def test_large_negative_attention_bias_under_mixed_precision(rng):
    """A -1e9 bias over a whole row is -inf in float16 (Keras casts the argument to the compute dtype):
    the weights stay finite and agree with float32 under every policy."""
    q, v = _data(rng)
    bias = np.zeros((B, 1, T, S), "float32")
    bias[:, :, 0, :] = -1e9  # query 0: every key biased away
    bias[:, :, 1, :2] = -1e9  # query 1: two keys
    reference = MultiHeadAttention(N, H, bias_initializer="random_normal")
    ref_out, ref_scores = [_np(x) for x in reference(q, v, attention_bias=bias, return_attention_scores=True)]
    for policy in ("mixed_float16", "mixed_bfloat16"):
        layer = MultiHeadAttention(N, H, dtype=policy)
        layer(q, v)
        layer.set_weights(reference.get_weights())
        out, scores = [_np(x) for x in layer(q, v, attention_bias=bias, return_attention_scores=True)]
        assert np.all(np.isfinite(scores)) and np.all(np.isfinite(out)), policy
        assert np.all(scores[:, :, 1, :2] == 0), policy
        np.testing.assert_allclose(scores, ref_scores, atol=2e-2, err_msg=policy)
        np.testing.assert_allclose(out, ref_out, atol=1e-1, err_msg=policy)


# ----------------------------------------------------------------------------------------------------------
# KV cache


@pytest.mark.parametrize(
    "init_kwargs",
    [
        {"num_heads": 4, "key_dim": H, "num_key_value_heads": 2, "rotary": RotaryEmbedding(),
         "position_bias": RelativePositionBias(4, num_buckets=8, max_distance=16, bidirectional=False,
                                               embeddings_initializer="random_normal")},
        {"num_heads": N, "key_dim": H, "score": "general", "sliding_window": 3, "position_bias": ALiBi(N)},
    ],
    ids=["gqa_rotary_relbias", "general_window_alibi"],
)
def test_cached_decoding_equals_full_recomputation(init_kwargs, rng):
    length, prefill = S, 2
    x = rng.normal(size=(B, length, D)).astype("float32")
    # bottom right: the static-cache call below puts its query after the keys already in the cache.
    layer = MultiHeadAttention(bias_initializer="random_normal", causal_alignment="bottom_right", **init_kwargs)
    full, full_scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    full, full_scores = _np(full), _np(full_scores)
    cache = np.zeros((B, 2, length, layer.num_key_value_heads, H), "float32")
    out, scores, cache = layer(
        x[:, :prefill], x[:, :prefill], cache=cache, cache_update_index=0, use_causal_mask=True,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(_np(out), full[:, :prefill], atol=1e-5)
    np.testing.assert_allclose(_np(scores), full_scores[:, :, :prefill], atol=1e-6)
    for t in range(prefill, length):
        index = t if t % 2 else ops.convert_to_tensor(t)  # Python int or scalar tensor
        step = x[:, t : t + 1]
        out, scores, cache = layer(
            step, step, cache=cache, cache_update_index=index, use_causal_mask=True, return_attention_scores=True
        )
        np.testing.assert_allclose(_np(out), full[:, t : t + 1], atol=1e-5, err_msg=f"step {t}")
        np.testing.assert_allclose(_np(scores), full_scores[:, :, t : t + 1], atol=1e-6, err_msg=f"step {t}")
    # A static cache (no index) reuses it as is: the last step again.
    out = layer(step, step, cache=cache, use_causal_mask=True)[0]
    np.testing.assert_allclose(_np(out), full[:, -1:], atol=1e-5)
    # Without the causal rule a query still sees only the positions written so far, not the garbage past
    # them: the same as plain attention over the prefix.
    prefix = x[:, :prefill]
    garbage = rng.normal(size=cache.shape).astype("float32")
    out = layer(prefix, prefix, cache=garbage, cache_update_index=0)[0]
    np.testing.assert_allclose(_np(out), _np(layer(prefix, prefix)), atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# The causal rule on every path


def test_causal_rule_on_every_path(rng):
    """Perturbing the last token changes no earlier output, and future keys get weight 0, on every path."""
    x, _ = _data(rng, t=S)
    perturbed = x.copy()
    perturbed[:, -1] += 10.0 * rng.normal(size=(B, D)).astype("float32")
    future = ~np.tril(np.ones((S, S), bool))
    paths = {
        "fused": ({}, {"return_attention_scores": False}),
        "scores": ({}, {}),
        "dropout": ({"dropout": 0.5, "seed": 7}, {"training": True}),
        "folded_score": ({"score": "general"}, {}),
        "window": ({"sliding_window": 2}, {}),
        "cache": ({}, {"cache": np.zeros((B, 2, S, N, H), "float32"), "cache_update_index": 0}),
    }
    for path, (init, call) in paths.items():
        # Two identical layers (same seed: same dropout masks on their first call).
        layers = [MultiHeadAttention(N, H, bias_initializer="random_normal", **init) for _ in range(2)]
        layers[0](x, x)
        layers[1](x, x)
        layers[1].set_weights(layers[0].get_weights())
        kwargs = {"use_causal_mask": True, "return_attention_scores": True, **call}
        a, b = [layer(data, data, **kwargs) for layer, data in zip(layers, (x, perturbed))]
        if path == "fused":
            a, b = (a,), (b,)
        np.testing.assert_allclose(_np(a[0])[:, :-1], _np(b[0])[:, :-1], atol=1e-5, err_msg=path)
        assert np.abs(_np(a[0])[:, -1] - _np(b[0])[:, -1]).max() > 1e-3, path
        if path != "fused":
            assert np.all(_np(a[1])[:, :, future] == 0.0), path
        if path == "dropout":  # the returned weights are the applied ones: some visible entries dropped
            assert np.any((_np(a[1]) == 0) & ~future), path


# ----------------------------------------------------------------------------------------------------------
# Fully-masked rows


def test_fully_masked_rows_give_zeros(rng):
    q, v = _data(rng)
    value_mask = np.ones((B, S), bool)
    value_mask[1] = False  # batch row 1: no query sees anything
    query_mask = np.array([[True, False, True], [True, True, True]])
    inputs = {"query": q, "value": v, "value_mask": value_mask, "query_mask": query_mask}
    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        layer = MultiHeadAttention(N, H, bias_initializer="ones", dtype=policy)
        out, scores = layer(**inputs, return_attention_scores=True)
        out, scores = _np(out), _np(scores)
        assert np.all(np.isfinite(out)) and np.all(np.isfinite(scores)), policy
        assert np.all(out[1] == 0) and np.all(scores[1] == 0), policy
        assert np.all(out[0, 1] == 0) and np.all(scores[0, :, 1] == 0), policy
        assert np.all(out[0, 0] != 0), policy
        check_gradients(layer, inputs, {"return_attention_scores": True})  # finite gradients


# ----------------------------------------------------------------------------------------------------------
# Implicit Keras masks


def test_implicit_keras_masks(rng):
    tokens = np.array([[3, 5, 2, 0, 0], [4, 1, 0, 0, 0]])
    embedding = keras.layers.Embedding(10, D, mask_zero=True)
    layer = MultiHeadAttention(N, H, rotary=RotaryEmbedding(), position_bias=ALiBi(N))
    x = embedding(tokens)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        implicit = _np(layer(x, x))
    assert not [w for w in caught if "mask" in str(w.message)], "implicit masks must pass through silently"
    explicit = _np(layer(x, x, query_mask=tokens != 0, value_mask=tokens != 0))
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)
    assert np.all(implicit[0, 3:] == 0) and np.all(implicit[1, 2:] == 0)


# ----------------------------------------------------------------------------------------------------------
# Bad input


def test_errors(rng):
    q, v = _data(rng)
    for kwargs, match in [
        ({"num_heads": 0, "key_dim": 4}, "num_heads"),
        ({"num_heads": 2, "key_dim": -1}, "key_dim"),
        ({"num_heads": 2, "key_dim": 4.0}, "key_dim"),
        ({"num_heads": 4, "key_dim": 4, "num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_heads": 2, "key_dim": 4, "attention_axes": "1"}, "attention_axes"),
        ({"num_heads": 2, "key_dim": 4, "causal_alignment": "bottom"}, "causal_alignment"),
        ({"num_heads": 2, "key_dim": 4, "dropout": 1.0}, "dropout"),
        ({"num_heads": 2, "key_dim": 4, "sliding_window": 0}, "sliding_window"),
        ({"num_heads": 2, "key_dim": 4, "flash_attention": True, "memory_efficient": False}, "flash_attention"),
        ({"num_heads": 2, "key_dim": 4, "memory_efficient": "yes"}, "memory_efficient"),
        ({"num_heads": 2, "key_dim": 4, "score": "nope"}, "score"),
    ]:
        with pytest.raises(ValueError, match=match):
            MultiHeadAttention(**kwargs)
    layer = MultiHeadAttention(N, H)
    layer(q, v)
    cache = np.zeros((B, 2, 6, N, H), "float32")
    for call, match in [
        (lambda: layer(q, v[:1]), r"batch size of `query`: expected 2"),
        (lambda: layer(q, v, v[:, :4]), "`value` and `key`, except the last one, must be equal"),
        (lambda: layer(q[0], v), r"`query` must have shape \(batch, length, dim\)"),
        (lambda: layer(q, v, cache=np.zeros((B, 2, 6, N, 3), "float32"), cache_update_index=0), r"`cache` must have shape"),
        (lambda: layer(q, v, cache=cache[:1], cache_update_index=0), r"`cache` must have shape \(batch"),
        (lambda: layer(q, q, cache=cache, cache_update_index=4), r"cache_update_index`=4 writes 3"),
        (lambda: layer(q, q, cache=cache, cache_update_index=-1), "cache_update_index"),
        (lambda: layer(q, v, cache_update_index=0), "only meaningful with a `cache`"),
        (lambda: layer(q, q, cache=cache, cache_update_index=0, value_mask=np.ones((B, T), bool)), "cache positions"),
        (lambda: layer(q, v, value_mask=np.ones((B, S + 1), bool)), "value_mask"),
        (lambda: layer(q, v, attention_bias=np.zeros((N, T, S), "float32")), "attention_bias"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(ValueError, match="num_heads=3"):
        MultiHeadAttention(N, H, position_bias=ALiBi(3))(q, v)
    with pytest.raises(ValueError, match="key_dim == value_dim"):
        MultiHeadAttention(N, H, value_dim=2)(q, q, cache=cache, cache_update_index=0)


def test_missing_inputs_and_changed_feature_size(rng):
    q, v = _data(rng)
    for call, match in [
        (lambda layer: layer(None, v), "`query` is required"),
        (lambda layer: layer(q, None), "`value` is required"),
    ]:
        for built in (False, True):
            layer = MultiHeadAttention(N, H)
            if built:
                layer(q, v)
            with pytest.raises(ValueError, match=match):
                call(layer)
    layer = MultiHeadAttention(N, H)
    layer(q, v)
    for call, match in [
        (lambda: layer(q[..., :6], v), r"`query` must have last axis 8 .*received shape \(2, 3, 6\)"),
        (lambda: layer(q, v[..., :6]), r"`value` must have last axis 8"),
        (lambda: layer(q, v, v[..., :6]), r"`key` must have last axis 8"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def _output_and_gradients(layer, x, **kwargs):
    """The layer's output on (x, x) and the gradients of sum(output^2) with respect to its trainable weights."""
    variables = layer.trainable_variables
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)  # XLA, where the fused projection is taken (see _fused_self_projections)
        def step(x):
            with tf.GradientTape() as tape:
                out = layer(x, x, **kwargs)
                loss = ops.sum(ops.square(out))
            return out, tape.gradient(loss, [v.value for v in variables])

        return step(x)
    import jax

    def loss_fn(trainable):
        out, _ = layer.stateless_call(trainable, [v.value for v in layer.non_trainable_variables], x, x, **kwargs)
        return ops.sum(ops.square(out)), out

    grads, out = jax.grad(loss_fn, has_aux=True)([v.value for v in variables])
    return out, grads


@pytest.mark.parametrize("num_key_value_heads, use_bias", [(None, True), (2, False)])
def test_self_attention_fuses_the_three_projections_into_one_matmul(num_key_value_heads, use_bias):
    """Self-attention (query = key = value) projects Q, K, V with one matmul of the concatenated kernels: the
    outputs and every kernel's gradient equal the three separate projections (cross-attention's path)."""
    rng = np.random.default_rng(3)
    x = ops.convert_to_tensor(rng.normal(size=(2, 6, 16)).astype("float32"))
    layer = MultiHeadAttention(4, 8, num_key_value_heads=num_key_value_heads, use_bias=use_bias,
                               bias_initializer="random_normal")
    layer(x, x)
    original = layer._fused_self_projections
    if keras.backend.backend() == "tensorflow":  # XLA only: in a TensorFlow graph or eagerly, three matmuls
        import tensorflow as tf

        assert original(x, x, x) is None and tf.function(lambda x: original(x, x, x) is None)(x)
        assert tf.function(lambda x: original(x, x, x) is not None, jit_compile=True)(x)
        assert tf.function(lambda x: original(x, x + 0.0, x + 0.0) is None, jit_compile=True)(x)  # one tensor only
    else:
        assert original(x, x, x) is not None and original(x, x + 0.0, x + 0.0) is None  # one tensor only
    calls = []
    layer._fused_self_projections = lambda *a: calls.append(1) or original(*a)
    fused, fused_grads = _output_and_gradients(layer, x, use_causal_mask=True)
    assert calls, "the fused path was not taken"
    layer._fused_self_projections = lambda *a: None  # the three EinsumDense layers
    separate, separate_grads = _output_and_gradients(layer, x, use_causal_mask=True)
    np.testing.assert_allclose(_np(fused), _np(separate), atol=1e-6)
    assert len(fused_grads) == len(separate_grads) == (8 if use_bias else 4)
    for a, b in zip(fused_grads, separate_grads, strict=True):
        # Gradients of sum(out^2) reach ~75 here: float32 sums taken in another order (unoptimised XLA on JAX)
        # differ by a few ulps of that, 2.3e-5 measured; a wrong kernel would differ by O(1).
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-6, atol=1e-5)


def test_masked_softmax_override_is_used_and_keras_only_overrides_warn(rng):
    """keras' `_masked_softmax` override point changes the weights (on the exact route, even where "auto" would take
    another); overriding a keras method this layer never calls warns when the class is made."""
    q, v = _data(rng)

    class Uniform(MultiHeadAttention):
        def _masked_softmax(self, attention_scores, attention_mask=None):
            return ops.ones_like(attention_scores) / ops.cast(ops.shape(attention_scores)[-1], "float32")

    layer = Uniform(N, H, implementation="auto")
    _, scores = layer(q, v, return_attention_scores=True)
    np.testing.assert_allclose(_np(scores), np.full((B, N, T, S), 1.0 / S), atol=1e-7)
    with pytest.raises(ValueError, match="overrides _masked_softmax"):
        Uniform(N, H, implementation="chunked")(q, v)
    with pytest.warns(UserWarning, match="overrides _compute_causal_mask .* does not call"):
        class KerasStyle(MultiHeadAttention):  # noqa: F841
            def _compute_causal_mask(self, query, value=None):
                return None
