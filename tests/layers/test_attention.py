"""Attention and AttentionPooling: harness, numerics against NumPy, masks, bad input."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

import attnlayers as al
from attnlayers.scoring import LocationScore

B, T, S, D = 2, 3, 5, 4
SCORES = ["dot", "scaled_dot", "general", "additive", "cosine", "mlp", "location"]


def _score(name):
    return LocationScore(max_length=8) if name == "location" else name


@pytest.mark.parametrize("score", SCORES)
def test_attention_harness(score, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        al.Attention,
        {"score": _score(score)},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, T, S)),
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
    )


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


def test_attention_numerics_with_masks_against_numpy(rng):
    from harness import np_softmax

    q = rng.normal(size=(B, T, D)).astype("float32")
    k = rng.normal(size=(B, S, D)).astype("float32")
    v = rng.normal(size=(B, S, 6)).astype("float32")
    value_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    query_mask = np.array([[1, 1, 1], [1, 1, 0]], bool)
    context, weights = al.Attention(score="scaled_dot")(
        q, v, k, query_mask=query_mask, value_mask=value_mask, use_causal_mask=True, return_attention_scores=True
    )
    causal = np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T)
    mask = query_mask[:, :, None] & value_mask[:, None, :] & causal
    expected_w = np_softmax(np.einsum("btd,bsd->bts", q, k) / np.sqrt(D), mask)
    np.testing.assert_allclose(_np(weights), expected_w, atol=1e-5)
    np.testing.assert_allclose(_np(context), expected_w @ v, atol=1e-5)
    np.testing.assert_array_equal(_np(context)[1, 2], 0.0)  # padded query -> zero context


def test_single_decoder_step_query(rng):
    q = rng.normal(size=(B, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.Attention(score="general")
    context, weights = layer(q, v, value_mask=np.ones((B, S), bool), return_attention_scores=True)
    assert tuple(context.shape) == (B, D) and tuple(weights.shape) == (B, S)
    full = layer(q[:, None], v)
    np.testing.assert_allclose(_np(context), _np(full)[:, 0], atol=1e-6)


def test_causal_future_perturbation_changes_nothing(rng):
    x = rng.normal(size=(1, 6, D)).astype("float32")
    layer = al.Attention(score="dot", dropout=0.3)
    out = _np(layer(x, x, use_causal_mask=True))
    y = x.copy()
    y[:, 4:] += 5.0  # change the future of positions 0..3
    out2 = _np(layer(y, y, use_causal_mask=True))
    np.testing.assert_allclose(out[:, :4], out2[:, :4], atol=1e-6)


def test_dropout_returns_the_weights_actually_applied(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    context, weights = al.Attention(dropout=0.5, seed=3)(q, v, return_attention_scores=True, training=True)
    w = _np(weights)
    assert np.any(w == 0.0)  # some weights dropped
    np.testing.assert_allclose(_np(context), w @ v, atol=1e-5)


def test_implicit_keras_masks_are_used_and_propagated():
    tokens_q = np.array([[3, 4, 0], [5, 0, 0]])
    tokens_v = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0]])
    embed = keras.layers.Embedding(10, D, mask_zero=True)
    layer = al.Attention()
    q, v = embed(tokens_q), embed(tokens_v)
    implicit = layer(q, v)
    explicit = layer(ops.convert_to_tensor(_np(q), "float32"), ops.convert_to_tensor(_np(v), "float32"),
                     query_mask=tokens_q != 0, value_mask=tokens_v != 0)
    np.testing.assert_allclose(_np(implicit), _np(explicit), atol=1e-6)
    # In a functional model the query mask flows to the output.
    iq, iv = keras.Input((3,), dtype="int32"), keras.Input((5,), dtype="int32")
    emb = keras.layers.Embedding(10, D, mask_zero=True)
    out = al.Attention()(emb(iq), emb(iv))
    pooled = keras.layers.GlobalAveragePooling1D()(out)  # honours the propagated mask
    model = keras.Model([iq, iv], pooled)
    ctx_model = keras.Model([iq, iv], out)
    ctx = _np(ctx_model([tokens_q, tokens_v]))
    np.testing.assert_allclose(_np(model([tokens_q, tokens_v]))[1], ctx[1, 0], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query": np.zeros((B, T, 1, D))}, r"`query` must have shape"),
        ({"value": np.zeros((B, S))}, r"`value` must have shape"),
        ({"value": np.zeros((B + 1, S, D))}, "same batch size"),
        ({"key": np.zeros((B, S + 1, D))}, "same source length"),
        ({"value_mask": np.ones((B, S + 1), bool)}, "`value_mask` has shape"),
        ({"value_mask": np.ones((B, S), "float32")}, "`value_mask` must be a boolean"),
        ({"attention_mask": np.ones((B, S), bool)}, "`attention_mask` must have rank 3"),
        ({"query_mask": np.ones((B, T, 1), bool)}, "`query_mask` must have rank 2"),
    ],
)
def test_bad_input_errors(kwargs, match):
    args = {"query": np.zeros((B, T, D), "float32"), "value": np.zeros((B, S, D), "float32")}
    args.update({k: v.astype("float32") if v.dtype == np.float64 else v for k, v in kwargs.items()})
    with pytest.raises(ValueError, match=match):
        al.Attention()(**args)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="dropout"):
        al.Attention(dropout=1.0)
    with pytest.raises(ValueError, match="Unknown `score` 'dott'"):
        al.Attention(score="dott")


@pytest.mark.parametrize("score", ["additive", "dot"])
def test_attention_pooling_harness_and_numerics(score, rng):
    from harness import np_softmax

    x = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        al.AttentionPooling,
        {"score": score},
        x,
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, D), (B, S)),
    )
    layer = al.AttentionPooling(score="dot")
    mask = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
    pooled, weights = layer(x, mask=mask, return_attention_scores=True)
    w = np_softmax(x @ _np(layer.query), mask)
    np.testing.assert_allclose(_np(weights), w, atol=1e-5)
    np.testing.assert_allclose(_np(pooled), np.einsum("bs,bsd->bd", w, x), atol=1e-5)
    np.testing.assert_array_equal(_np(pooled)[1], 0.0)


def test_attention_pooling_uses_implicit_mask_in_a_model():
    tokens = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, al.AttentionPooling()(h))
    a = _np(model(np.array([[5, 6, 0, 0]])))
    b = _np(model(np.array([[5, 6, 9, 9]])))
    c = _np(model(np.array([[5, 6, 0, 0, 0, 0]])))
    np.testing.assert_allclose(a, c, atol=1e-6)
    assert not np.allclose(a, b)


# ------------------------------------------------------------------------------------ prepared memory, steps


@pytest.mark.parametrize("score", ["general", "additive", "dot"])
def test_attend_step_equals_call_row_by_row(score, rng):
    """prepare_memory once + attend_step per query = the full call, row by row (one body for both)."""
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer = al.Attention(score=score)
    context, weights = layer(q, v, value_mask=value_mask, return_attention_scores=True)
    memory = layer.prepare_memory(v, value_mask=value_mask)
    assert sorted(memory) == ["keys", "value", "value_mask"]
    for t in range(T):
        c, w = layer.attend_step(q[:, t], memory, index=t)
        assert tuple(c.shape) == (B, D) and tuple(w.shape) == (B, S)
        np.testing.assert_allclose(_np(c), _np(context)[:, t], atol=1e-5)
        np.testing.assert_allclose(_np(w), _np(weights)[:, t], atol=1e-5)


def test_prepare_memory_and_attend_step_errors(rng):
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.Attention(score="general")
    with pytest.raises(ValueError, match="needs a built layer"):
        layer.prepare_memory(v)
    layer(v[:, 0], v)
    memory = layer.prepare_memory(v)
    with pytest.raises(ValueError, match=r"`query` must have shape \(batch, query_dim\)"):
        layer.attend_step(v, memory)
    with pytest.raises(ValueError, match=r"`query` must have last axis 4.*\(2, 3\)"):
        layer.attend_step(v[:, 0, :3], memory)
    with pytest.raises(ValueError, match="`return_sample=True` needs an attention layer that samples"):
        layer.attend_step(v[:, 0], memory, return_sample=True)
    with pytest.raises(ValueError, match="`value` is required"):
        layer.prepare_memory(None)


def test_missing_inputs_and_feature_sizes_raise_named_errors(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.Attention(score="general")
    layer(q, v)
    with pytest.raises(ValueError, match="`query` is required"):
        layer(None, v)
    with pytest.raises(ValueError, match="`value` is required"):
        layer(q, None)
    with pytest.raises(ValueError, match=r"`query` must have last axis 4 \(the size the layer was built with\)"):
        layer(q[..., :3], v)
    with pytest.raises(ValueError, match=r"`value` must have last axis 4"):
        layer(q, v[..., :2])
    pooling = al.AttentionPooling()
    pooling(v)
    with pytest.raises(ValueError, match=r"`inputs` must have last axis 4"):
        pooling(v[..., :3])
    with pytest.raises(ValueError, match="`inputs` is required"):
        pooling(None)


def test_attention_pooling_names_its_own_mask_argument(rng):
    x = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.AttentionPooling()
    with pytest.raises(ValueError, match=r"`mask` has shape \(2, 6\)"):
        layer(x, mask=np.ones((B, S + 1), bool))
    with pytest.raises(ValueError, match="`mask` must be a boolean"):
        layer(x, mask=np.ones((B, S), "float32"))
    with pytest.raises(ValueError, match="`query_dim` must be a positive integer or None"):
        al.AttentionPooling(query_dim=0)


def test_missing_inputs_before_build(rng):
    v = rng.normal(size=(B, S, D)).astype("float32")
    with pytest.raises(ValueError, match="`query` is required"):
        al.Attention()(None, v)
    with pytest.raises(ValueError, match="`value` is required"):
        al.LocalAttention(window=1)(v, None)
