"""BERT's fine-tuning heads (Devlin et al. 2019, section 4 and figure 4), each a ``keras.Model`` around a
:class:`~attnlayers.applications.bert.BertBackbone`, trained with ``model.fit`` after its ``compile_for_finetuning``
(BERT's AdamW: :func:`~attnlayers.applications.bert.pretrainer.bert_optimizer`, a small learning rate, linear
warm-up and decay).

    BertClassifier       pooled_output (B, d) -> dropout -> dense -> (B, num_classes)     single sentences and
                         sentence pairs alike (a pair is packed [CLS] A [SEP] B [SEP] with segment ids 0 / 1)
    BertTokenClassifier  sequence_output (B, T, d) -> dropout -> dense -> (B, T, num_tags)  tagging (NER):
                         labels on each word's first sub-token, IGNORE_LABEL (-100) elsewhere
    BertSpanQA           sequence_output -> dense(2) -> {"start": (B, T), "end": (B, T)}   extractive QA (SQuAD):
                         the answer span's first and last token; decode_answers picks the best valid span

Inputs of every head: the backbone's dict {"token_ids", "segment_ids", "padding_mask"} (B, T) (segment ids and
padding mask optional, as for the backbone).

Example:
>>> classifier = BertClassifier(backbone, num_classes=3)
>>> classifier.compile_for_finetuning(2e-5, warmup_steps=100, total_steps=1000)
>>> classifier.fit(dataset)             # (features, labels (B,)) batches
"""

from __future__ import annotations

import collections

import keras
import numpy as np
from keras import ops

from attnlayers.masking import large_negative
from attnlayers.validation import is_int, positive_int, rate_in_unit_interval

from .pretrainer import PACKAGE, BertTask, _initializer, bert_optimizer

__all__ = ["BertClassifier", "BertSpanQA", "BertTokenClassifier", "IGNORE_LABEL", "SpanPrediction", "TokenAccuracy",
           "align_word_labels", "decode_answers", "span_context_mask", "word_predictions"]

IGNORE_LABEL = -100  # the token classifier's "no label here" (Hugging Face's convention, PyTorch's ignore_index)


def _num_labels(value, name):
    if not is_int(value) or value < 2:
        raise ValueError(f"`{name}` must be an integer >= 2; received {name}={value!r}.")
    return int(value)


class _FineTuningTask(BertTask):
    """What the heads share: the compile helper (BERT's AdamW) and their config."""

    def _compile(self, learning_rate, warmup_steps, total_steps, weight_decay, loss, metrics, **kwargs):
        self.compile(optimizer=bert_optimizer(learning_rate, warmup_steps, total_steps, weight_decay), loss=loss,
                     metrics=metrics, **kwargs)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BertClassifier(_FineTuningTask):
    """Sequence (or sentence-pair) classification (Devlin et al. 2019, section 4.1, figure 4 a-b):
    ``logits = W dropout(pooled_output) + b``, pooled_output = tanh(W_p h_[CLS] + b_p) from the backbone.

    Args:
        backbone: a :class:`~attnlayers.applications.bert.BertBackbone` (pretrained, usually).
        num_classes: K >= 2.
        dropout: on the pooled output (BERT: 0.1).

    Call arguments:
        inputs: the backbone's dict, {"token_ids"} (B, T) and optional "segment_ids", "padding_mask".
        training: enables dropout.

    Returns:
        logits (B, K).

    Training: labels (B,) int in [0, K); :meth:`compile_for_finetuning` sets sparse cross-entropy from logits
    and "accuracy".

    Example:
    >>> model = BertClassifier(backbone, num_classes=2)
    >>> model.compile_for_finetuning(2e-5, warmup_steps=100, total_steps=1000)
    >>> model.fit({"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}, labels, batch_size=32)
    """

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        super().__init__(backbone, **kwargs)
        if getattr(self.backbone, "pooler", True) is None:
            raise ValueError(
                "BertClassifier reads the backbone's pooled_output; this backbone has none (pooler=False, as "
                "DistilBERT): give it a pooler (BertConfig(pooler=True)) or classify from sequence_output[:, 0]."
            )
        self.num_classes = _num_labels(num_classes, "num_classes")
        self.dropout_rate = rate_in_unit_interval(dropout, "dropout")
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="output_dropout", dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(self.num_classes, kernel_initializer=_initializer(), name="logits",
                                               dtype=self.dtype_policy)
        self.output_dense.build((None, self.hidden_dim))

    def call(self, inputs, training=None):
        pooled = self.backbone(self._check_inputs(inputs), training=training)["pooled_output"]
        return self.output_dense(self.dropout(pooled, training=training))

    def compile_for_finetuning(self, learning_rate=2e-5, warmup_steps=0, total_steps=None, weight_decay=0.01,
                               **kwargs):
        """``compile`` with :func:`bert_optimizer` (peak ``learning_rate``: BERT tries 5e-5, 3e-5, 2e-5; linear
        warm-up over ``warmup_steps``, linear decay to 0 at ``total_steps`` if given), sparse cross-entropy from
        logits and accuracy.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay (not on LayerNorm weights and biases).
            **kwargs: more ``compile`` arguments.
        """
        self._compile(learning_rate, warmup_steps, total_steps, weight_decay,
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      [keras.metrics.SparseCategoricalAccuracy(name="accuracy")], **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout_rate}


# ---- token classification ---------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenAccuracy(keras.metrics.Mean):
    """Share of labelled tokens whose argmax prediction is right: tokens labelled ``ignore_label`` (non-first
    sub-tokens, special tokens, padding) are not counted; every labelled token counts once.

    Call: ``update_state(y_true (B, T) int, y_pred (B, T, K) logits, sample_weight=None)``.
    """

    def __init__(self, ignore_label=IGNORE_LABEL, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        if not is_int(ignore_label):
            raise ValueError(f"`ignore_label` must be an integer; received ignore_label={ignore_label!r}.")
        self.ignore_label = int(ignore_label)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        weights = ops.cast(ops.not_equal(y_true, self.ignore_label), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        return super().update_state(ops.reshape(correct, (-1,)), sample_weight=ops.reshape(weights, (-1,)))

    def get_config(self):
        return {**super().get_config(), "ignore_label": self.ignore_label}


def _word_id(value):
    """A token's word index, or None for special tokens / padding (None or a negative number)."""
    if value is None:
        return None
    value = int(value)
    return None if value < 0 else value


def _is_batch(word_ids):
    if isinstance(word_ids, np.ndarray):
        return word_ids.ndim == 2
    return len(word_ids) > 0 and isinstance(word_ids[0], (list, tuple, np.ndarray))


def align_word_labels(word_labels, word_ids, ignore_label=IGNORE_LABEL):
    """Word-level tags -> WordPiece-level labels for :class:`BertTokenClassifier`: each word's first sub-token
    gets the word's tag, its other sub-tokens and the special / padding tokens get ``ignore_label`` (BERT's
    NER setup, section 5.3: "we use the representation of the first sub-token as the input to the token-level
    classifier").

    Args:
        word_labels: the tags of one sentence's words (W,), or a batch of them (a list of lists or (B, W)).
        word_ids: for each token (T,) the index of the word it comes from, None or a negative number for
            [CLS] / [SEP] / padding (Hugging Face's ``encoding.word_ids()``); or a batch (B, T).
        ignore_label: the label of tokens out of the loss (-100).

    Returns:
        int32 (T,) or (B, T) labels.

    Example:
    >>> align_word_labels([3, 0, 5], [None, 0, 0, 1, 2, 2, 2, None, None])
    array([-100, 3, -100, 0, 5, -100, -100, -100, -100], dtype=int32)
    """
    if _is_batch(word_ids):
        if len(word_labels) != len(word_ids):
            raise ValueError(
                f"`word_labels` and `word_ids` must hold the same number of sentences; received {len(word_labels)} "
                f"and {len(word_ids)}."
            )
        rows = [_align_row(labels, ids, ignore_label, f"[{i}]") for i, (labels, ids) in
                enumerate(zip(word_labels, word_ids))]
        return np.stack(rows) if rows else np.zeros((0, 0), "int32")
    return _align_row(word_labels, word_ids, ignore_label, "")


def _align_row(labels, ids, ignore_label, where):
    labels = list(labels)
    out = np.full(len(ids), ignore_label, "int32")
    previous = None
    for t, value in enumerate(ids):
        word = _word_id(value)
        if word is not None and word >= len(labels):
            raise ValueError(
                f"`word_ids{where}` names word {word} at token {t}, but `word_labels{where}` has {len(labels)} "
                "words."
            )
        if word is not None and word != previous:  # the first sub-token of a word
            out[t] = labels[word]
        previous = word
    return out


def word_predictions(token_values, word_ids):
    """The inverse of :func:`align_word_labels` for predictions: each word's value read at its first sub-token.

    Args:
        token_values: (T,) or (B, T) per-token values (e.g. ``argmax(logits, -1)``), or (T, K) / (B, T, K).
        word_ids: as for :func:`align_word_labels`, (T,) or (B, T).

    Returns:
        A list of W values (one sentence) or a list of B such lists, in word order (words whose first
        sub-token was truncated away are missing).
    """
    values = np.asarray(token_values)
    if _is_batch(word_ids):
        return [word_predictions(row, ids) for row, ids in zip(values, word_ids)]
    words, previous = {}, None
    for t, value in enumerate(word_ids):
        word = _word_id(value)
        if word is not None and word != previous and word not in words:
            words[word] = values[t].tolist() if values.ndim > 1 else values[t].item()
        previous = word
    return [words[w] for w in sorted(words)]


@keras.saving.register_keras_serializable(package=PACKAGE)
class BertTokenClassifier(_FineTuningTask):
    """Token classification, e.g. named entities (Devlin et al. 2019, section 5.3, figure 4 d): a dense layer
    over each token's final hidden state, ``logits_t = W dropout(h_t) + b``.

    Labels (B, T) int: the tag of each word on its first sub-token and :data:`IGNORE_LABEL` (-100) on every other
    token ([CLS], [SEP], padding, a word's later sub-tokens): :func:`align_word_labels` builds them from word
    tags and word ids. Those tokens are out of the loss (``SparseCategoricalCrossentropy(ignore_class=-100)``, the
    mean over labelled tokens) and of the accuracy (:class:`TokenAccuracy`).

    Args:
        backbone: a :class:`~attnlayers.applications.bert.BertBackbone`.
        num_tags: K >= 2.
        dropout: on the hidden states (0.1).

    Call arguments:
        inputs: the backbone's dict. training: enables dropout.

    Returns:
        logits (B, T, K).

    Example:
    >>> model = BertTokenClassifier(backbone, num_tags=9)                     # CoNLL-2003's BIO tags
    >>> labels = align_word_labels(word_tags, word_ids)                       # (B, T), -100 off first sub-tokens
    >>> model.compile_for_finetuning(5e-5, warmup_steps=100, total_steps=2000)
    >>> model.fit(features, labels)
    >>> tags = word_predictions(np.argmax(model.predict(features), -1), word_ids)
    """

    def __init__(self, backbone, num_tags, dropout=0.1, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_tags = _num_labels(num_tags, "num_tags")
        self.dropout_rate = rate_in_unit_interval(dropout, "dropout")
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="output_dropout", dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(self.num_tags, kernel_initializer=_initializer(), name="logits",
                                               dtype=self.dtype_policy)
        self.output_dense.build((None, None, self.hidden_dim))

    def call(self, inputs, training=None):
        sequence = self.backbone(self._check_inputs(inputs), training=training)["sequence_output"]
        return self.output_dense(self.dropout(sequence, training=training))

    def compile_for_finetuning(self, learning_rate=5e-5, warmup_steps=0, total_steps=None, weight_decay=0.01,
                               **kwargs):
        """``compile`` with :func:`bert_optimizer`, sparse cross-entropy from logits over the labelled tokens
        (``ignore_class=IGNORE_LABEL``) and :class:`TokenAccuracy`.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay (not on LayerNorm weights and biases).
            **kwargs: more ``compile`` arguments.
        """
        self._compile(learning_rate, warmup_steps, total_steps, weight_decay,
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_LABEL),
                      [TokenAccuracy()], **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags, "dropout": self.dropout_rate}


# ---- extractive question answering -------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package=PACKAGE)
class BertSpanQA(_FineTuningTask):
    """Extractive question answering (Devlin et al. 2019, section 4.2-4.3, figure 4 c): a start vector S and an
    end vector E, ``start_logits_i = S . h_i``, ``end_logits_i = E . h_i`` (one dense(2) layer over
    sequence_output). Padding positions get a large negative logit; [CLS] keeps its logit, the "no answer" of
    SQuAD 2.0 (section 4.3: the answer span starts and ends at [CLS]).

    Inputs: the backbone's dict for ``[CLS] question [SEP] context [SEP]`` (segment ids 0 for the question part,
    1 for the context part).

    Args:
        backbone: a :class:`~attnlayers.applications.bert.BertBackbone`.

    Call arguments:
        inputs: the backbone's dict. training: enables dropout (in the backbone).

    Returns:
        {"start": (B, T) logits, "end": (B, T) logits}.

    Training: labels {"start": (B,) int, "end": (B,) int}, the answer's first and last token (both 0, [CLS],
    for an unanswerable question; see ``squad.char_span_to_token_span``). :meth:`compile_for_finetuning`
    sets the loss ``(CE(start) + CE(end)) / 2`` (section 4.2: "the sum of the log-likelihoods of the correct
    start and end positions", here their mean) and the start / end accuracies.

    Example:
    >>> model = BertSpanQA(backbone)
    >>> model.compile_for_finetuning(5e-5, warmup_steps=100, total_steps=2000)
    >>> model.fit(features, {"start": starts, "end": ends})
    >>> logits = model.predict(features)
    >>> spans = decode_answers(logits["start"], logits["end"], span_context_mask(segments, mask))
    """

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        self.span_dense = keras.layers.Dense(2, kernel_initializer=_initializer(), name="span_logits",
                                             dtype=self.dtype_policy)
        self.span_dense.build((None, None, self.hidden_dim))

    def call(self, inputs, training=None):
        backbone_inputs = self._check_inputs(inputs)
        sequence = self.backbone(backbone_inputs, training=training)["sequence_output"]
        logits = self.span_dense(sequence)  # (B, T, 2): [S . h_i, E . h_i]
        padding = ops.logical_not(self._padding_mask(inputs))
        logits = ops.where(padding[..., None], large_negative(logits.dtype), logits)
        return {"start": logits[..., 0], "end": logits[..., 1]}

    def compile_for_finetuning(self, learning_rate=5e-5, warmup_steps=0, total_steps=None, weight_decay=0.01,
                               **kwargs):
        """``compile`` with :func:`bert_optimizer`, the loss (CE(start) + CE(end)) / 2 and the start / end
        accuracies.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay (not on LayerNorm weights and biases).
            **kwargs: more ``compile`` arguments.
        """
        self.compile(
            optimizer=bert_optimizer(learning_rate, warmup_steps, total_steps, weight_decay),
            loss={"start": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  "end": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
            loss_weights={"start": 0.5, "end": 0.5},
            metrics={"start": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                     "end": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]},
            **kwargs,
        )


SpanPrediction = collections.namedtuple("SpanPrediction", ["start", "end", "score", "null_score"])
SpanPrediction.__doc__ = """:func:`decode_answers`' result: ``start``, ``end`` (inclusive token indices, -1 where a
row has no valid span), ``score`` = start_logits[start] + end_logits[end] (-inf where none) and ``null_score`` =
start_logits[0] + end_logits[0], the [CLS] "no answer" score of SQuAD 2.0 (answer "" when null_score > score +
a threshold tuned on dev data, section 4.3)."""


def span_context_mask(segment_ids, padding_mask):
    """The context tokens of ``[CLS] question [SEP] context [SEP] [PAD]...``: segment 1, real tokens, without the
    final [SEP] (the last real token). NumPy, (B, T) or (T,) -> bool of the same shape.

    Args:
        segment_ids: (B, T) or (T,) NumPy segment ids (0 question, 1 context).
        padding_mask: the same shape, True for real tokens.
    """
    segment_ids, padding_mask = np.asarray(segment_ids), np.asarray(padding_mask).astype(bool)
    if segment_ids.shape != padding_mask.shape:
        raise ValueError(
            f"`segment_ids` and `padding_mask` must have the same shape; received {segment_ids.shape} and "
            f"{padding_mask.shape}."
        )
    mask = (segment_ids == 1) & padding_mask
    rows = mask.reshape(-1, mask.shape[-1]).copy()
    real = padding_mask.reshape(rows.shape)
    length = real.shape[-1]
    last = length - 1 - np.argmax(real[:, ::-1], axis=-1)  # the last real token of each row: the final [SEP]
    has_real = real.any(axis=-1)
    rows[np.arange(len(rows))[has_real], last[has_real]] = False
    return rows.reshape(mask.shape)


def decode_answers(start_logits, end_logits, context_mask, max_answer_length=30):
    """The best answer span of each example (Devlin et al. 2019, section 4.2): the (i, j) maximising
    ``start_logits[i] + end_logits[j]`` with i <= j, j - i < ``max_answer_length``, and tokens i and j both
    in the context (``context_mask``: segment B, not [CLS] / [SEP] / question / padding; see
    :func:`span_context_mask`). NumPy, O(B T max_answer_length).

    Args:
        start_logits, end_logits: (B, T) or (T,) (the model's "start" / "end").
        context_mask: bool of the same shape, True at the tokens an answer may use.
        max_answer_length: L >= 1 tokens (BERT's run_squad: 30).

    Returns:
        A :class:`SpanPrediction` of (B,) arrays (scalars for (T,) inputs).
    """
    start = np.asarray(ops.convert_to_numpy(start_logits), "float64")  # any backend's tensors, or NumPy
    end = np.asarray(ops.convert_to_numpy(end_logits), "float64")
    context = np.asarray(context_mask).astype(bool)
    max_answer_length = positive_int(max_answer_length, "max_answer_length")
    if start.ndim not in (1, 2) or start.shape != end.shape or start.shape != context.shape:
        raise ValueError(
            "`start_logits`, `end_logits` and `context_mask` must have the same shape, (batch, length) or "
            f"(length,); received {start.shape}, {end.shape} and {context.shape}."
        )
    single = start.ndim == 1
    if single:
        start, end, context = start[None], end[None], context[None]
    batch, length = start.shape
    best = np.full(batch, -np.inf)
    best_start = np.full(batch, -1, "int64")
    best_end = np.full(batch, -1, "int64")
    rows = np.arange(batch)
    for offset in range(min(max_answer_length, length)):  # j = i + offset
        scores = start[:, : length - offset] + end[:, offset:]  # (B, T - offset)
        valid = context[:, : length - offset] & context[:, offset:]
        scores = np.where(valid, scores, -np.inf)
        i = np.argmax(scores, axis=-1)
        score = scores[rows, i]
        better = score > best
        best = np.where(better, score, best)
        best_start = np.where(better, i, best_start)
        best_end = np.where(better, i + offset, best_end)
    null = start[:, 0] + end[:, 0]
    if single:
        return SpanPrediction(int(best_start[0]), int(best_end[0]), float(best[0]), float(null[0]))
    return SpanPrediction(best_start, best_end, best, null)
