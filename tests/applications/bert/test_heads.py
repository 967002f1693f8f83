"""BERT's fine-tuning heads: shapes and losses against NumPy, training with model.fit, the token classifier's
labels on first sub-tokens only (align_word_labels, IGNORE_LABEL out of loss and accuracy), answer decoding (best
valid span, never outside the context or reversed), BERT's optimizer in every compile helper, .keras round trip,
bad input refused by name."""

import keras
import numpy as np
import pytest
from attnlayers.applications.bert import BertBackbone, BertConfig
from attnlayers.applications.bert.heads import (
    IGNORE_LABEL,
    BertClassifier,
    BertSpanQA,
    BertTokenClassifier,
    TokenAccuracy,
    align_word_labels,
    decode_answers,
    span_context_mask,
    word_predictions,
)
from attnlayers.applications.core.training.schedules import WarmupLinearDecay
from keras import ops
from model_harness import run_model_test

CONFIG = BertConfig(vocabulary_size=100, max_sequence_length=32, num_layers=2, num_heads=2, hidden_dim=16,
                    intermediate_dim=32, dropout=0.0)
B, T = 4, 10


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _features(seed=0):
    """Sentence pairs [CLS] A [SEP] B [SEP] [PAD]...: ids 2 = [CLS], 3 = [SEP]."""
    rng = np.random.default_rng(seed)
    lengths = np.array([10, 8, 6, 9])
    ids = rng.integers(5, 100, (B, T)).astype("int32")
    padding = np.arange(T)[None] < lengths[:, None]
    sep_a = np.array([3, 3, 2, 4])
    segments = np.zeros((B, T), "int32")
    for b in range(B):
        ids[b, 0], ids[b, sep_a[b]], ids[b, lengths[b] - 1] = 2, 3, 3
        segments[b, sep_a[b] + 1: lengths[b]] = 1
    ids[~padding] = 0
    return {"token_ids": ids, "segment_ids": segments, "padding_mask": padding}


def _backbone(seed=0):
    keras.utils.set_random_seed(seed)
    return BertBackbone(CONFIG)


def _fit_losses(model, x, y, epochs=20, **compile_kwargs):
    model.compile_for_finetuning(1e-2, warmup_steps=2, total_steps=200, **compile_kwargs)
    return model.fit(x, y, epochs=epochs, batch_size=B, verbose=0).history


# ---- BertClassifier -------------------------------------------------------------------------------------------


def test_classifier_shapes_loss_and_training():
    model = BertClassifier(_backbone(), num_classes=3, dropout=0.1)
    x, y = _features(), np.array([0, 2, 1, 2], "int32")
    logits = model(x)
    assert tuple(logits.shape) == (B, 3)
    # The pair is read through segment ids: other segments, other logits.
    other = model({**x, "segment_ids": np.zeros_like(x["segment_ids"])})
    assert not np.allclose(_np(other), _np(logits))
    model.compile_for_finetuning(1e-3, warmup_steps=1, total_steps=10)
    result = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)
    expected = -np.take_along_axis(_log_softmax(_np(logits)), y[:, None], -1).mean()
    np.testing.assert_allclose(result["loss"], expected, rtol=1e-5)
    # From a random backbone every [CLS] starts out alike (pooled outputs ~1e-3 apart), so the classifier is the
    # slowest head to separate its examples.
    history = _fit_losses(BertClassifier(_backbone(), num_classes=3, dropout=0.0), x, y, epochs=25)
    assert history["loss"][-1] < 0.7 * history["loss"][0]


def test_classifier_dropout_only_in_training():
    model = BertClassifier(_backbone(), num_classes=2, dropout=0.5)
    x = _features()
    np.testing.assert_allclose(_np(model(x)), _np(model(x)), atol=1e-6)
    assert not np.allclose(_np(model(x, training=True)), _np(model(x)))


# ---- BertTokenClassifier --------------------------------------------------------------------------------------


def test_align_word_labels():
    # [CLS] the  un ##believ ##able  fox  [SEP] [PAD]
    word_ids = [None, 0, 1, 1, 1, 2, None, None]
    labels = align_word_labels([4, 0, 7], word_ids)
    np.testing.assert_array_equal(labels, [-100, 4, 0, -100, -100, 7, -100, -100])
    assert labels.dtype == np.int32
    # A batch, with -1 for special tokens (the int-array form) and a word truncated after its first piece.
    batch = align_word_labels([[1, 2], [3, 4, 5]], np.array([[-1, 0, 1, 1, -1], [-1, 0, 0, 1, 2]]))
    np.testing.assert_array_equal(batch, [[-100, 1, 2, -100, -100], [-100, 3, -100, 4, 5]])
    assert word_predictions(batch, np.array([[-1, 0, 1, 1, -1], [-1, 0, 0, 1, 2]])) == [[1, 2], [3, 4, 5]]
    probabilities = np.eye(3)[[0, 2, 1, 1, 0, 0, 0, 0]]  # (T, K) values: each word's row at its first piece
    assert word_predictions(probabilities, word_ids) == [[0, 0, 1], [0, 1, 0], [1, 0, 0]]
    with pytest.raises(ValueError, match=r"word_ids.*word 2 at token 3.*word_labels.*2 words"):
        align_word_labels([1, 2], [None, 0, 1, 2])
    with pytest.raises(ValueError, match=r"same number of sentences.*1 and 2"):
        align_word_labels([[1]], [[0], [0]])


def test_token_classifier_ignores_non_first_sub_tokens():
    model = BertTokenClassifier(_backbone(), num_tags=5)
    x = _features()
    word_ids = [[None, 0, 0, 1, None, 2, 3, 3, 4, None],
                [None, 0, 1, None, 2, 2, 2, None, None, None],
                [None, 0, None, 1, 1, None, None, None, None, None],
                [None, 0, 1, 2, None, 3, 4, 4, None, None]]
    word_tags = [[1, 2, 3, 4, 0], [4, 3, 2], [1, 1], [0, 1, 2, 3, 4]]
    y = align_word_labels(word_tags, word_ids)
    logits = model(x)
    assert tuple(logits.shape) == (B, T, 5)
    model.compile_for_finetuning(1e-3)
    result = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)
    first = y != IGNORE_LABEL
    assert first.sum() == sum(len(t) for t in word_tags)  # one label per word
    nll = -np.take_along_axis(_log_softmax(_np(logits)), np.where(first, y, 0)[..., None], -1)[..., 0]
    np.testing.assert_allclose(result["loss"], nll[first].mean(), rtol=1e-5)  # mean over first sub-tokens only
    correct = _np(logits).argmax(-1) == y
    np.testing.assert_allclose(result["accuracy"], correct[first].mean(), rtol=1e-6)
    # Any label on the other tokens is out of the loss: the loss of (logits, y) does not see them ...
    loss_fn = model.loss
    noise = np.random.default_rng(1).normal(size=logits.shape).astype("float32") * 10
    moved = np.where(first[..., None], _np(logits), _np(logits) + noise)  # other tokens' logits changed
    np.testing.assert_allclose(_np(loss_fn(y, moved)), _np(loss_fn(y, _np(logits))), rtol=1e-6)
    # ... and training reaches 100 % on the first sub-tokens.
    history = _fit_losses(model, x, y)
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert history["accuracy"][-1] == 1.0


def test_token_accuracy():
    metric = TokenAccuracy()
    y = np.array([[1, -100, 0], [-100, -100, 2]])
    logits = np.eye(3)[[[1, 0, 2], [0, 0, 2]]]  # right, (ignored), wrong; (ignored), (ignored), right
    metric.update_state(y, logits)
    assert float(_np(metric.result())) == pytest.approx(2 / 3)
    assert TokenAccuracy.from_config(metric.get_config()).ignore_label == -100


# ---- BertSpanQA -----------------------------------------------------------------------------------------------


def test_span_qa_shapes_loss_and_training():
    model = BertSpanQA(_backbone())
    x = _features()
    out = model(x)
    assert sorted(out) == ["end", "start"]
    assert tuple(out["start"].shape) == tuple(out["end"].shape) == (B, T)
    padding = ~x["padding_mask"]
    assert np.all(_np(out["start"])[padding] < -1e30) and np.all(_np(out["end"])[padding] < -1e30)
    assert np.all(np.abs(_np(out["start"])[~padding]) < 1e3)
    context = span_context_mask(x["segment_ids"], x["padding_mask"])
    y = {"start": np.array([4, 4, 3, 0], "int32"), "end": np.array([6, 4, 4, 0], "int32")}  # last: no answer
    model.compile_for_finetuning(1e-3)
    result = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)

    def ce(logits, labels):
        return -np.take_along_axis(_log_softmax(_np(logits).astype("float64")), labels[:, None], -1).mean()

    start, end = ce(out["start"], y["start"]), ce(out["end"], y["end"])
    np.testing.assert_allclose(result["start_loss"], start, rtol=1e-5)
    np.testing.assert_allclose(result["end_loss"], end, rtol=1e-5)
    np.testing.assert_allclose(result["loss"], (start + end) / 2, rtol=1e-5)  # the mean of the two
    history = _fit_losses(model, x, y)
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    out = model(x)
    decoded = decode_answers(out["start"], out["end"], context, max_answer_length=5)
    np.testing.assert_array_equal(decoded.start[:3], y["start"][:3])
    np.testing.assert_array_equal(decoded.end[:3], y["end"][:3])
    assert decoded.null_score[3] > decoded.score[3]  # the no-answer example prefers [CLS]


def test_span_context_mask():
    x = _features()
    mask = span_context_mask(x["segment_ids"], x["padding_mask"])
    # row 1: [CLS] a a [SEP] c c c [SEP] [PAD] [PAD] -> context = 4..6
    np.testing.assert_array_equal(np.flatnonzero(mask[1]), [4, 5, 6])
    assert not mask[:, 0].any()
    assert mask.sum() == sum(int(((x["segment_ids"][b] == 1) & x["padding_mask"][b]).sum()) - 1 for b in range(B))
    np.testing.assert_array_equal(span_context_mask(x["segment_ids"][1], x["padding_mask"][1]), mask[1])


def test_decode_answers_hand_made():
    context = np.array([0, 0, 0, 1, 1, 1, 1, 0], bool)  # [CLS] q [SEP] c c c c [SEP]
    start = np.array([9.0, 8.0, 0.0, 1.0, 0.0, 3.0, 0.0, 9.0])
    end = np.array([9.0, 0.0, 9.0, 0.0, 2.0, 0.0, 1.0, 9.0])
    # The best pairs overall touch [CLS], the question or [SEP]; (5, 4) is reversed. Best valid: (3, 4) = 3 or
    # (5, 6) = 4 -> (5, 6).
    result = decode_answers(start, end, context)
    assert (result.start, result.end, result.score) == (5, 6, 4.0)
    assert result.null_score == 18.0
    # max_answer_length = 1: single tokens only -> (5, 5) = 3 vs (4, 4) = 2 vs (6, 6) = 1 vs (3, 3) = 1 -> (5, 5).
    assert decode_answers(start, end, context, max_answer_length=1)[:3] == (5, 5, 3.0)
    # No context token: no span.
    none = decode_answers(start[None], end[None], np.zeros((1, 8), bool))
    assert (none.start[0], none.end[0], none.score[0]) == (-1, -1, -np.inf)


def test_decode_answers_is_the_best_valid_span():
    rng = np.random.default_rng(0)
    batch, length, limit = 16, 20, 4
    start, end = rng.normal(size=(2, batch, length)) * 3
    context = rng.random((batch, length)) < 0.6
    result = decode_answers(start, end, context, max_answer_length=limit)
    for b in range(batch):
        pairs = [(start[b, i] + end[b, j], i, j) for i in range(length) for j in range(i, min(length, i + limit))
                 if context[b, i] and context[b, j]]
        best = max(pairs)
        assert result.score[b] == pytest.approx(best[0])
        i, j = result.start[b], result.end[b]
        assert context[b, i] and context[b, j] and 0 <= j - i < limit
        assert start[b, i] + end[b, j] == pytest.approx(best[0])


def test_compile_helpers_use_bert_optimizer():
    backbone = _backbone()
    for model in (BertClassifier(backbone, 2), BertTokenClassifier(backbone, 3), BertSpanQA(backbone)):
        model.compile_for_finetuning(3e-5, warmup_steps=10, total_steps=100)
        assert isinstance(model.optimizer, keras.optimizers.AdamW)
        schedule = model.optimizer._learning_rate
        assert isinstance(schedule, WarmupLinearDecay) and schedule.peak == 3e-5 and schedule.total_steps == 100
        assert model.optimizer._exclude_from_weight_decay_pattern is not None


@pytest.mark.parametrize("make", [lambda b: BertClassifier(b, 3), lambda b: BertTokenClassifier(b, 4),
                                  lambda b: BertSpanQA(b)])
def test_passes_the_model_harness(make, tmp_path):
    """Config and .keras round trips of each head: the same outputs."""
    run_model_test(lambda: make(_backbone()), _features(), tmp_path, atol=1e-5)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda b: BertClassifier(b, num_classes=1), r"num_classes.*>= 2.*num_classes=1"),
        (lambda b: BertClassifier(b, num_classes=2.0), r"num_classes.*num_classes=2.0"),
        (lambda b: BertClassifier(b, 2, dropout=1.0), r"dropout.*dropout=1.0"),
        (lambda b: BertTokenClassifier(b, num_tags=0), r"num_tags.*num_tags=0"),
        (lambda b: BertClassifier(b, 2)({"segment_ids": np.zeros((1, 4), "int32")}),
         r"BertClassifier.*missing \['token_ids'\]"),
        (lambda b: BertSpanQA(b)({"token_ids": np.ones((1, 4), "int32"), "mask_positions": np.zeros((1, 1))}),
         r"BertSpanQA.*unknown \['mask_positions'\]"),
        (lambda b: BertClassifier("base", 2), r"backbone.*BertBackbone.*str"),
        (lambda b: decode_answers(np.zeros((2, 4)), np.zeros((2, 5)), np.ones((2, 4), bool)),
         r"start_logits.*same shape.*\(2, 4\), \(2, 5\)"),
        (lambda b: decode_answers(np.zeros(4), np.zeros(4), np.ones(4, bool), max_answer_length=0),
         r"max_answer_length.*max_answer_length=0"),
        (lambda b: span_context_mask(np.zeros((2, 4)), np.ones((2, 3))), r"segment_ids.*padding_mask.*same shape"),
    ],
)
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make(_backbone())
