"""TokenAndPositionEmbedding: harness, NumPy reference, mask propagation, tied projection, bad input."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

import attnlayers as al
from attnlayers.embedding import TokenAndPositionEmbedding

B, T, V, D = 2, 5, 11, 8
TOKENS = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 10]], "int32")


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
def test_harness(position):
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": V, "sequence_length": 8, "embedding_dim": D, "position": position, "mask_zero": True},
        TOKENS,
        expected_output_shape=(B, T, D),
    )


def test_harness_with_segments_and_reverse():
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": V, "sequence_length": 8, "embedding_dim": D, "num_segments": 2},
        {"inputs": TOKENS, "segment_ids": np.array([[0, 0, 1, 1, 1]] * B, "int32")},
        expected_output_shape=(B, T, D),
    )
    hidden = np.random.default_rng(0).normal(size=(B, T, D)).astype("float32")
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocabulary_size": V, "sequence_length": 8, "embedding_dim": D, "output_bias": True},
        hidden,
        call_kwargs={"reverse": True},
        expected_output_shape=(B, T, V),
        run_gradients=False,  # the reversed call never touches the position table
    )


def test_numpy_reference_learned_scaled_with_segments():
    layer = TokenAndPositionEmbedding(V, 8, D, num_segments=2, scale_embeddings=True)
    segments = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], "int32")
    out = _np(layer(TOKENS, segment_ids=segments, start_index=2))
    e, p, g = (_np(w) for w in (layer.token_embedding.embeddings, layer.position_embedding.embeddings,
                                 layer.segment_embedding.embeddings))
    np.testing.assert_allclose(out, e[TOKENS] * np.sqrt(D) + p[2:7][None] + g[segments], atol=1e-5)


def test_sinusoidal_positions_follow_the_paper():
    layer = TokenAndPositionEmbedding(V, 8, D, position="sinusoidal")
    out = _np(layer(TOKENS))
    pos, i = np.arange(T)[:, None], np.arange(D)[None, :]
    angle = pos / 10000 ** (2 * (i // 2) / D)
    pe = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    np.testing.assert_allclose(out - _np(layer.token_embedding.embeddings)[TOKENS], np.broadcast_to(pe, out.shape), atol=1e-5)


def test_tied_projection_uses_the_token_matrix():
    layer = TokenAndPositionEmbedding(V, 8, D, output_bias=True)
    layer(TOKENS)
    h = np.random.default_rng(1).normal(size=(B, T, D)).astype("float32")
    logits = _np(layer(h, reverse=True))
    np.testing.assert_allclose(logits, h @ _np(layer.token_embedding.embeddings).T + _np(layer.bias), atol=1e-5)
    assert len(layer.trainable_weights) == 3  # token table, position table, output bias: nothing untied


def test_mask_propagates_into_attention():
    tokens = keras.Input((T,), dtype="int32")
    h = TokenAndPositionEmbedding(V, 8, D, mask_zero=True)(tokens)
    pooled = al.AttentionPooling()(h)
    model = keras.Model(tokens, pooled)
    a = _np(model(TOKENS))
    changed = TOKENS.copy()
    changed[0, 3:] = 0  # already padding
    np.testing.assert_allclose(_np(model(changed)), a, atol=1e-6)
    layer = TokenAndPositionEmbedding(V, 8, D, mask_zero=True)
    np.testing.assert_array_equal(np.asarray(ops.convert_to_numpy(layer.compute_mask(TOKENS))), TOKENS != 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"vocabulary_size": 0}, "vocabulary_size"),
        ({"position": "rotary"}, "`position`"),
        ({"num_segments": 0}, "num_segments"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    base = {"vocabulary_size": V, "sequence_length": 8, "embedding_dim": D}
    with pytest.raises(ValueError, match=match):
        TokenAndPositionEmbedding(**{**base, **kwargs})


def test_bad_call_arguments():
    layer = TokenAndPositionEmbedding(V, 4, D, num_segments=2)
    with pytest.raises(ValueError, match="segment_ids"):
        layer(TOKENS[:, :4])
    with pytest.raises(ValueError, match="sequence_length=4"):
        layer(TOKENS, segment_ids=np.zeros_like(TOKENS))
    with pytest.raises(ValueError, match="reverse=True"):
        TokenAndPositionEmbedding(V, 8, D)(np.zeros((B, T, D + 1), "float32"), reverse=True)


def test_missing_inputs_and_changed_feature_size():
    for built in (False, True):
        layer = TokenAndPositionEmbedding(V, 8, D)
        if built:
            layer(TOKENS)
        with pytest.raises(ValueError, match="`inputs` is required"):
            layer(None)
    layer = TokenAndPositionEmbedding(V, 8, D)
    layer(TOKENS)
    with pytest.raises(ValueError, match=rf"`inputs` must have last axis {D} \(embedding_dim, with reverse=True\)"):
        layer(np.zeros((B, T, D - 1), "float32"), reverse=True)
    with pytest.raises(ValueError, match=r"`inputs` must have shape \(batch, length\)"):
        layer(np.zeros((B, T, D), "float32"))


def test_explicit_positions_read_those_rows_of_the_learned_table():
    """positions (B, T) replaces start_index: start + arange gives start_index's output; any rows can be read; the
    sinusoidal encoding and a shape that is not the tokens' are refused."""
    layer = TokenAndPositionEmbedding(10, 8, 4)
    ids = np.array([[1, 2, 3], [4, 5, 6]], "int32")
    expected = layer(ids, start_index=2)
    np.testing.assert_allclose(layer(ids, positions=np.array([[2, 3, 4]] * 2)), expected, atol=1e-6)
    got = layer(ids, positions=np.array([[0, 0, 1], [7, 5, 6]]))
    table = layer.position_embedding.embeddings.numpy()
    np.testing.assert_allclose(got - layer.token_embedding(ids), table[[[0, 0, 1], [7, 5, 6]]], atol=1e-6)
    with pytest.raises(ValueError, match="`positions` must have the shape of `inputs`"):
        layer(ids, positions=np.array([[0, 1]] * 2))
    with pytest.raises(ValueError, match="`positions` needs position='learned'"):
        TokenAndPositionEmbedding(10, 8, 4, position="sinusoidal")(ids, positions=np.array([[0, 1, 2]] * 2))
