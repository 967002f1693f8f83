"""LinformerAttention: harness, equality with MultiHeadAttention at k = S and E = F = I (outputs, scores and
gradients, with padding), a NumPy reference of eq. 7 for random E and F, implicit masks, refused arguments."""

import math

import keras
import numpy as np
import pytest
from harness import outputs_and_gradients, run_layer_test
from keras import ops

from attnlayers.linformer import LinformerAttention
from attnlayers.multi_head import MultiHeadAttention

B, T, S, D, N, H, K = 2, 3, 5, 8, 2, 4, 3


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def np_linformer(weights, query, value, e, f, num_heads, key_padding=None, query_mask=None):
    """Eq. 7: head_i = softmax(Q W_i^Q (E_i K W_i^K)^T / sqrt(d_k)) F_i V W_i^V, padded keys/values zeroed first;
    E, F (k, S) shared by the heads or (N, k, S) per head."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(w, "float64") for w in weights]
    q = np.einsum("btd,dnh->btnh", query, wq) + bq
    k = np.einsum("bsd,dnh->bsnh", value, wk) + bk
    v = np.einsum("bsd,dnh->bsnh", value, wv) + bv
    if key_padding is not None:
        k, v = k * key_padding[:, :, None, None], v * key_padding[:, :, None, None]
    s = value.shape[1]
    e, f = (np.broadcast_to(m[..., :s], (num_heads, m.shape[-2], s)) for m in (e, f))
    k, v = np.einsum("nks,bsnh->bknh", e, k), np.einsum("nks,bsnh->bknh", f, v)
    logits = np.einsum("btnh,bknh->bntk", q, k) / math.sqrt(q.shape[-1])
    weights_ = np.exp(logits - logits.max(-1, keepdims=True))
    weights_ /= weights_.sum(-1, keepdims=True)
    out = np.einsum("bntk,bknh,nhd->btd", weights_, v, wo) + bo
    if query_mask is not None:
        out, weights_ = out * query_mask[..., None], weights_ * query_mask[:, None, :, None]
    return out, weights_


@pytest.fixture
def data(rng):
    return rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")


# ----------------------------------------------------------------------------------------------------------
# Harness


def test_harness_headwise_self_attention(rng):
    """Shared E, F (the default), self-attention returning the (B, N, T, k) weights over projected positions;
    padded values change nothing and a row of padding gives zeros."""
    x = rng.normal(size=(B, S, D)).astype("float32")
    layer = run_layer_test(
        LinformerAttention,
        {"num_heads": N, "key_dim": H, "projected_length": K, "max_length": 7},
        {"query": x, "value": x},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, S, D), (B, N, S, K)),
        expected_num_trainable_weights=10,
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
        run_gradients=False,  # test_gradients_reach_every_weight (jitted: the eager JAX gradient is slow)
    )
    paths = [w.path.split("/", 1)[1] for w in layer.weights]
    assert paths[8:] == ["key_sequence_projection/kernel", "value_sequence_projection/kernel"]
    assert tuple(layer.weights[8].shape) == (K, 7)


def test_harness_per_head_key_value_sharing(data):
    """Per-head E_i = F_i (key-value sharing) with GQA, a gate, dropout and cross-attention."""
    q, v = data
    run_layer_test(
        LinformerAttention,
        {"num_heads": 4, "key_dim": H, "num_key_value_heads": 2, "projected_length": K, "max_length": S,
         "share_projections": "key_value", "headwise_sharing": False, "use_gate": True, "dropout": 0.1},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, 4, T, K)),
        expected_num_trainable_weights=11,
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
        run_mixed_precision=False,  # test_harness_headwise_self_attention
        run_gradients=False,  # test_gradients_reach_every_weight
    )


@pytest.mark.parametrize("headwise_sharing", [True, False])
def test_gradients_reach_every_weight(data, headwise_sharing):
    """E and F included, with key padding (padded positions still leave E, F columns of real keys trained)."""
    q, v = data
    extra = {} if headwise_sharing else {"num_key_value_heads": 1, "use_gate": True, "dropout": 0.1}
    layer = LinformerAttention(4, H, projected_length=K, max_length=7, headwise_sharing=headwise_sharing, **extra)
    layer.build(q.shape, v.shape)
    value_mask = np.array([[True, False, True, True, False], [True] * S])
    _, grads = outputs_and_gradients(layer, {"query": q, "value": v}, training=True, value_mask=value_mask)
    assert len(grads) == len(layer.trainable_weights) + 2
    for variable, grad in zip(layer.trainable_weights, grads):
        assert np.all(np.isfinite(grad)) and np.any(grad != 0), variable.path


# ----------------------------------------------------------------------------------------------------------
# Numerics


@pytest.mark.parametrize("headwise_sharing", [True, False])
def test_identity_projection_equals_multi_head_attention(data, headwise_sharing):
    """k = S and E = F = I: the layer is MultiHeadAttention with the same weights; outputs, scores and the
    gradients of every weight and input agree to 1e-5, with key padding (one row fully padded) and query
    padding."""
    q, v = data
    value_mask = np.array([[True, False, True, True, False], [False] * S])
    query_mask = np.array([[True, True, False], [True, True, True]])
    kwargs = {"value_mask": value_mask, "query_mask": query_mask}
    dense = MultiHeadAttention(N, H, bias_initializer="random_normal")
    linformer = LinformerAttention(N, H, projected_length=S, max_length=S, headwise_sharing=headwise_sharing)
    dense.build(q.shape, v.shape)
    linformer.build(q.shape, v.shape)
    eye = np.eye(S, dtype="float32") if headwise_sharing else np.broadcast_to(np.eye(S, dtype="float32"), (N, S, S))
    linformer.set_weights(dense.get_weights() + [eye, eye])
    (out, scores), grads = outputs_and_gradients(linformer, {"query": q, "value": v}, **kwargs)
    (expected, expected_scores), dense_grads = outputs_and_gradients(dense, {"query": q, "value": v}, **kwargs)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
    assert np.all(out[1] == 0) and np.all(out[0, 2] == 0)
    weight_grads = grads[:8] + grads[-2:]  # all but E, F; then the inputs
    for a, b in zip(weight_grads, dense_grads):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("headwise_sharing", [True, False])
def test_matches_numpy_eq7_with_random_projections(data, headwise_sharing):
    """Random E, F, a sequence shorter than max_length (the first S columns), key and query padding."""
    q, v = data
    rng = np.random.default_rng(1)
    value_mask = np.array([[True, False, True, True, False], [True] * S])
    query_mask = np.array([[True, True, False], [True, True, True]])
    layer = LinformerAttention(N, H, projected_length=K, max_length=8, headwise_sharing=headwise_sharing,
                               bias_initializer="random_normal")
    layer(q, v)
    shape = (K, 8) if headwise_sharing else (N, K, 8)
    e, f = rng.normal(size=shape).astype("float32"), rng.normal(size=shape).astype("float32")
    layer.set_weights(layer.get_weights()[:8] + [e, f])
    out, scores = layer(q, v, value_mask=value_mask, query_mask=query_mask, return_attention_scores=True)
    expected, expected_scores = np_linformer(layer.get_weights()[:8], q, v, e, f, N, value_mask, query_mask)
    np.testing.assert_allclose(_np(out), expected, atol=1e-5)
    np.testing.assert_allclose(_np(scores), expected_scores, atol=1e-6)


def test_implicit_mask_is_the_key_padding(rng):
    """An Embedding(mask_zero=True) before the layer masks like an explicit value_mask, in a functional model."""
    tokens = np.array([[3, 4, 5, 0, 0], [1, 2, 0, 0, 0]])
    inputs = keras.Input((S,), dtype="int32")
    embedded = keras.layers.Embedding(10, D, mask_zero=True)(inputs)
    attention = LinformerAttention(N, H, projected_length=K, max_length=S)
    model = keras.Model(inputs, attention(embedded, embedded))
    x = model.get_layer(index=1)(tokens)
    explicit = attention(x, x, value_mask=tokens != 0, query_mask=tokens != 0)
    np.testing.assert_allclose(_np(model(tokens)), _np(explicit), atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# Refused arguments


def test_refused_arguments(data):
    q, v = data
    layer = LinformerAttention(N, H, projected_length=K, max_length=S)
    layer(q, v)
    with pytest.raises(ValueError, match="causal mask.*use_causal_mask=True"):
        layer(q, v, use_causal_mask=True)
    with pytest.raises(ValueError, match=r"attention_mask.*\(2, 3, 5\)"):
        layer(q, v, attention_mask=np.ones((B, T, S), bool))
    with pytest.raises(ValueError, match="attention_bias"):
        layer(q, v, attention_bias=np.zeros((1, N, T, S), "float32"))
    with pytest.raises(ValueError, match="no key/value cache"):
        layer(q, v, cache=np.zeros((B, 2, S, N, H), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match=r"max_length`=5.*\(2, 6, 8\)"):
        layer(q, np.zeros((B, 6, D), "float32"))
    with pytest.raises(ValueError, match="max_length`=4"):
        LinformerAttention(N, H, projected_length=K, max_length=4)(q, v)
    with pytest.raises(ValueError, match="layerwise"):
        LinformerAttention(N, H, projected_length=K, max_length=S, share_projections="layerwise")
    with pytest.raises(ValueError, match="share_projections"):
        LinformerAttention(N, H, projected_length=K, max_length=S, share_projections="all")
    with pytest.raises(ValueError, match="projected_length=0"):
        LinformerAttention(N, H, projected_length=0, max_length=S)
    with pytest.raises(ValueError, match="sliding_window"):
        LinformerAttention(N, H, projected_length=K, max_length=S, sliding_window=2)
    with pytest.raises(ValueError, match="memory_efficient=True"):
        LinformerAttention(N, H, projected_length=K, max_length=S, memory_efficient=True)
