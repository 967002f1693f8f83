"""Score functions against NumPy written from the equations; the registry; bad input."""

import keras
import numpy as np
import pytest
from harness import np_softmax, run_layer_test
from keras import ops

import attnlayers as al
from attnlayers import scoring

B, T, S, DQ, DK = 2, 3, 4, 5, 5


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float64")


@pytest.fixture
def qk(rng):
    return rng.normal(size=(B, T, DQ)).astype("float32"), rng.normal(size=(B, S, DK)).astype("float32")


def test_worked_example_from_the_lectures():
    # q . k = 112 and 96 with d_k = 64 -> scaled 14 and 12 -> softmax 0.88 / 0.12.
    q = np.ones((1, 1, 64), "float32")
    k = np.stack([np.full(64, 112 / 64), np.full(64, 96 / 64)])[None].astype("float32")
    np.testing.assert_allclose(_np(al.DotScore()(q, k)), [[[112.0, 96.0]]], rtol=1e-6)
    logits = al.ScaledDotScore()(q, k)
    np.testing.assert_allclose(_np(logits), [[[14.0, 12.0]]], rtol=1e-6)
    weights = _np(al.masking.masked_softmax(logits))
    np.testing.assert_allclose(weights, [[[0.8808, 0.1192]]], atol=1e-4)


def test_dot_and_scaled_dot(qk):
    q, k = qk
    expected = np.einsum("btd,bsd->bts", q, k)
    np.testing.assert_allclose(_np(al.DotScore()(q, k)), expected, atol=1e-5)
    np.testing.assert_allclose(_np(al.ScaledDotScore()(q, k)), expected / np.sqrt(DK), atol=1e-5)
    np.testing.assert_allclose(_np(al.ScaledDotScore(scale=0.5)(q, k)), expected * 0.5, atol=1e-5)


def test_general(rng):
    q, k = rng.normal(size=(B, T, 3)).astype("float32"), rng.normal(size=(B, S, 6)).astype("float32")
    score = al.GeneralScore()
    logits = _np(score(q, k))
    w = _np(score.kernel)
    np.testing.assert_allclose(logits, np.einsum("btd,de,bse->bts", q, w, k), atol=1e-5)
    scaled = al.get_score("scaled_general")  # the same bilinear form / sqrt(Dk)
    scaled.build(q.shape, k.shape)
    scaled.kernel.assign(w)
    assert scaled.scaled and not score.scaled
    np.testing.assert_allclose(_np(scaled(q, k)), logits / np.sqrt(6), atol=1e-5)


def test_additive_has_real_matrices(rng):
    q, k = rng.normal(size=(B, T, 3)).astype("float32"), rng.normal(size=(B, S, 6)).astype("float32")
    score = al.AdditiveScore(units=7)
    logits = _np(score(q, k))
    wq, wk, bk, v = (_np(w) for w in (score.query_dense.kernel, score.key_dense.kernel, score.key_dense.bias, score.v))
    assert wq.shape == (3, 7) and wk.shape == (6, 7)
    hidden = np.tanh((q @ wq)[:, :, None, :] + (k @ wk + bk)[:, None, :, :])  # Bahdanau eq. 6
    np.testing.assert_allclose(logits, hidden @ v, atol=1e-5)
    assert isinstance(al.get_score("concat"), al.AdditiveScore)


def test_mlp_depth_two(rng):
    q, k = rng.normal(size=(B, T, 3)).astype("float32"), rng.normal(size=(B, S, 4)).astype("float32")
    score = al.MLPScore(units=6, depth=2, activation="relu")
    logits = _np(score(q, k))
    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    h = relu((q @ _np(score.query_dense.kernel))[:, :, None] + (k @ _np(score.key_dense.kernel) + _np(score.key_dense.bias))[:, None])
    h = relu(h @ _np(score.hidden_layers[0].kernel) + _np(score.hidden_layers[0].bias))
    np.testing.assert_allclose(logits, (h @ _np(score.output_dense.kernel))[..., 0], atol=1e-5)


def test_location_uses_query_only_and_first_s_positions(qk):
    q, k = qk
    score = al.LocationScore(max_length=7)
    logits = _np(score(q, k))
    full = q @ _np(score.dense.kernel) + _np(score.dense.bias)  # a_t = W_a h_t (Luong eq. 8)
    np.testing.assert_allclose(logits, full[..., :S], atol=1e-5)
    np.testing.assert_allclose(_np(score(q, k * 100.0)), logits, atol=1e-5)  # keys only give S
    with pytest.raises(ValueError, match="length 8"):
        score(q, np.zeros((B, 8, DK), "float32"))
    with pytest.raises(ValueError, match="max_length"):
        al.get_score("location")


def test_cosine_with_temperature(qk):
    q, k = qk
    cos = np.einsum("btd,bsd->bts", q, k) / (
        np.linalg.norm(q, axis=-1)[:, :, None] * np.linalg.norm(k, axis=-1)[:, None, :]
    )
    np.testing.assert_allclose(_np(al.CosineScore()(q, k)), cos, atol=1e-5)
    score = al.CosineScore(temperature=0.1, trainable_temperature=True)
    np.testing.assert_allclose(_np(score(q, k)), cos / 0.1, atol=1e-4)
    assert len(score.trainable_weights) == 1
    zero = np.zeros((1, 1, DQ), "float32")
    assert np.all(np.isfinite(_np(al.CosineScore()(zero, zero))))


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "general", "scaled_general", "additive", "cosine", "mlp"])
def test_prepare_keys_then_score_equals_call(name, qk):
    q, k = qk
    score = al.get_score(name)
    score.build(q.shape, k.shape)  # a decoder builds once, then prepares the keys once per sequence
    np.testing.assert_allclose(_np(score.score(q, score.prepare_keys(k))), _np(score(q, k)), atol=1e-6)


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (al.DotScore, {}),
        (al.ScaledDotScore, {}),
        (al.GeneralScore, {}),
        (al.GeneralScore, {"scaled": True}),
        (al.AdditiveScore, {"units": 8}),
        (al.MLPScore, {"units": 8, "depth": 2}),
        (al.LocationScore, {"max_length": 6}),
        (al.CosineScore, {"trainable_temperature": True}),
    ],
)
def test_score_harness(cls, kwargs, qk):
    q, k = qk
    run_layer_test(cls, kwargs, {"query": q, "key": k}, expected_output_shape=(B, T, S))


def test_register_custom_score(qk):
    @keras.saving.register_keras_serializable(package="tests")
    class NegativeDistance(scoring.Score):
        def score(self, query, keys):
            diff = ops.expand_dims(query, 2) - ops.expand_dims(keys, 1)
            return -ops.sum(diff * diff, axis=-1)

    scoring.register_score("negative_distance", NegativeDistance)
    assert "negative_distance" in al.available_scores()
    q, k = qk
    context = al.Attention(score="negative_distance")(q, k)
    d = -((q[:, :, None] - k[:, None]) ** 2).sum(-1)
    np.testing.assert_allclose(_np(context), np_softmax(d) @ k, atol=1e-5)


@pytest.mark.parametrize(
    "identifier, match",
    [("nope", "Unknown `score` 'nope'"), (3, "`score` must be a name"), (None, "`score` must be a name")],
)
def test_unknown_score(identifier, match):
    with pytest.raises(ValueError, match=match):
        al.get_score(identifier)


def test_dot_rejects_mismatched_dims(rng):
    with pytest.raises(ValueError, match="query dim 3 and key dim 4"):
        al.DotScore()(np.zeros((1, 2, 3), "float32"), np.zeros((1, 2, 4), "float32"))


@pytest.mark.parametrize(
    "make", [lambda: al.MLPScore(depth=0), lambda: al.AdditiveScore(units=0), lambda: al.CosineScore(temperature=0)]
)
def test_bad_constructor_arguments(make):
    with pytest.raises(ValueError):
        make()
