"""MaskedCrossEntropy and MaskedAccuracy against NumPy written from their equations; any pad id; configs and
the names of files saved before they moved to applications.core."""

import keras
import numpy as np
import pytest

from attnlayers.applications.core import MaskedAccuracy, MaskedCrossEntropy


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("pad", [0, 5])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_masked_cross_entropy_is_label_smoothed_mean_over_real_tokens(pad, eps):
    rng = np.random.default_rng(0)
    vocabulary = 7
    logits = rng.normal(size=(2, 4, vocabulary)).astype("float32")
    y = np.array([[4, 1, 3, pad], [6, 3, pad, pad]])
    q = (1 - eps) * np.eye(vocabulary)[y] + eps / vocabulary  # smoothed targets (Szegedy et al. 2016)
    per_token = -(q * _log_softmax(logits)).sum(-1)
    expected = per_token[y != pad].mean()
    loss = MaskedCrossEntropy(label_smoothing=eps, pad_token_id=pad)
    np.testing.assert_allclose(float(loss(y, logits)), expected, rtol=1e-5)
    changed = logits.copy()
    changed[y == pad] += 100.0  # padding positions' logits do not matter
    np.testing.assert_allclose(float(loss(y, changed)), expected, rtol=1e-5)


def test_masked_cross_entropy_float16_logits_and_all_padding():
    logits = np.zeros((1, 3, 4), "float16")
    assert float(MaskedCrossEntropy()(np.array([[1, 2, 0]]), logits)) == pytest.approx(np.log(4), rel=1e-3)
    assert float(MaskedCrossEntropy()(np.zeros((1, 3), "int32"), logits)) == 0.0  # nothing to score: 0, not NaN


def test_masked_accuracy_counts_only_real_tokens():
    y = np.array([[4, 5, 0, 0], [2, 0, 0, 0]])
    logits = np.zeros((2, 4, 6), "float32")
    logits[0, 0, 4] = logits[0, 1, 1] = logits[1, 0, 2] = 1.0  # right, wrong, right; padding anything
    metric = MaskedAccuracy()
    metric.update_state(y, logits)
    assert float(metric.result()) == pytest.approx(2 / 3)
    # Accumulates token by token (3 of 5), whatever the padded length of each batch.
    metric.update_state(np.array([[3, 3]]), np.eye(6, dtype="float32")[None, [3, 1]])
    assert float(metric.result()) == pytest.approx(3 / 5)
    custom = MaskedAccuracy(pad_token_id=4)
    custom.update_state(y, logits)  # now 4 is padding and 0 a token (predicted right by the zero logits)
    assert float(custom.result()) == pytest.approx(6 / 7)


def test_configs_round_trip_and_old_names_still_load():
    loss = MaskedCrossEntropy(0.2, pad_token_id=3)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert clone.get_config() == loss.get_config() and clone.pad_token_id == 3
    assert MaskedCrossEntropy(pad_id=2).pad_token_id == 2  # the old argument name
    metric = MaskedAccuracy.from_config(MaskedAccuracy(pad_token_id=1).get_config())
    assert metric.pad_token_id == 1 and metric.name == "accuracy"
    assert keras.saving.get_registered_name(MaskedCrossEntropy) == "attnlayers.applications>MaskedCrossEntropy"
    import attnlayers.applications.nmt  # noqa: F401  registers the names used before the move

    for old in ("MaskedCrossEntropy", "MaskedAccuracy", "TransformerSchedule"):
        assert keras.saving.get_registered_object(f"attnlayers.nmt>{old}").__module__.startswith(
            "attnlayers.applications.core")
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedCrossEntropy(label_smoothing=1.0)
    with pytest.raises(ValueError, match="pad_token_id"):
        MaskedAccuracy(pad_token_id=-1)


def test_corpus_bleu_is_sacrebleu_13a():
    from attnlayers.applications.core import corpus_bleu

    assert corpus_bleu(["the cat sat on the mat."], ["the cat sat on the mat."]) == pytest.approx(100)
    # 13a splits the final period off: "mat." and "mat ." score the same.
    assert corpus_bleu(["the cat sat on the mat."], ["the cat sat on the mat ."]) == pytest.approx(100)
    assert corpus_bleu(["completely different words here"], ["the cat sat on the mat ."]) < 10
    with pytest.raises(ValueError, match="one reference per hypothesis"):
        corpus_bleu(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="strings"):
        corpus_bleu([["a"]], ["a"])


def test_perplexity_is_token_weighted_over_all_batches_not_a_mean_of_batch_perplexities():
    from attnlayers.applications.core.training.metrics import Perplexity

    rng = np.random.default_rng(1)
    metric = Perplexity()
    nll_sum = tokens = 0.0
    batch_perplexities = []
    for real in (2, 9):  # batches of very different numbers of real tokens
        logits = rng.normal(size=(2, 5, 6)).astype("float32") * 3
        y = rng.integers(0, 6, size=(2, 5))
        weights = np.zeros((2, 5), "float32")
        weights.reshape(-1)[:real] = 1.0
        nll = -np.take_along_axis(_log_softmax(logits), y[..., None], -1)[..., 0]
        nll_sum, tokens = nll_sum + (nll * weights).sum(), tokens + weights.sum()
        batch_perplexities.append(np.exp((nll * weights).sum() / weights.sum()))
        logits[weights == 0] = np.nan  # padded positions are never counted, whatever their logits
        metric.update_state(y, logits, sample_weight=weights)
    assert float(metric.result()) == pytest.approx(np.exp(nll_sum / tokens), rel=1e-5)
    assert abs(float(metric.result()) - np.mean(batch_perplexities)) > 1e-3  # not the mean of batch perplexities
    metric.reset_state()
    assert float(metric.result()) == 1.0  # no token yet
    clone = Perplexity.from_config(metric.get_config())
    assert clone.name == "perplexity"
