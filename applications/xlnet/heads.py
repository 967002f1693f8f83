"""XLNet's fine-tuning heads, each a ``keras.Model`` around an
:class:`~attnlayers.applications.xlnet.XLNetBackbone`, trained with ``model.fit`` after ``compile_for_finetuning``
(:func:`~attnlayers.applications.xlnet.pretrainer.xlnet_optimizer`). Hugging Face's module names in brackets.

    XLNetClassifier       h at the LAST real token (<cls>, at the end in XLNet's inputs) -> tanh(W_s h + b_s)
                          [sequence_summary.summary] -> dropout -> W h + b [logits_proj] -> (B, num_classes);
                          single sequences and pairs alike (A <sep> B <sep> <cls> with segment ids 0 / 1 / 2)
    XLNetTokenClassifier  the content stream (B, T, d) -> W h + b [classifier] -> (B, T, num_tags); labels
                          IGNORE_LABEL (-100) where there is none (non-first sub-tokens, special tokens, padding)

Inputs of every head: the backbone's dict {"token_ids", "segment_ids", "padding_mask"} (B, T) (segment ids and
padding mask optional, as for the backbone).

Example:
>>> classifier = XLNetClassifier(backbone, num_classes=3)
>>> classifier.compile_for_finetuning(2e-5, warmup_steps=100, total_steps=1000)
>>> classifier.fit({"token_ids": ids, "segment_ids": segments}, labels, batch_size=32)
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.validation import is_int, rate_in_unit_interval

from .backbone import _initializer
from .pretrainer import PACKAGE, XLNetTask, xlnet_optimizer

__all__ = ["IGNORE_LABEL", "TokenAccuracy", "XLNetClassifier", "XLNetTokenClassifier", "last_token_positions"]

IGNORE_LABEL = -100  # the token classifier's "no label here" (Hugging Face's convention, PyTorch's ignore_index)


def _num_labels(value, name):
    if not is_int(value) or value < 2:
        raise ValueError(f"`{name}` must be an integer >= 2; received {name}={value!r}.")
    return int(value)


def last_token_positions(padding_mask):
    """The position of each row's last real token, (B,) int32: T - 1 for XLNet's left-padded inputs (Hugging
    Face's ``summary_type="last"``), the last True of ``padding_mask`` when a row is padded on the right; 0 for a
    row without a real token."""
    mask = ops.cast(padding_mask, "int32")
    index = ops.arange(ops.shape(mask)[1], dtype="int32")[None, :]
    return ops.max(mask * index, axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class XLNetClassifier(XLNetTask):
    """Sequence and sequence-pair classification as XLNet fine-tunes (Hugging Face's
    ``XLNetForSequenceClassification``, ``summary_type="last"``): the content stream at the last real token, where
    XLNet's inputs put <cls>, through the summary projection and tanh, dropout, then the logits.

        logits = W dropout(tanh(W_s h_last + b_s)) + b

    Args:
        backbone: an :class:`~attnlayers.applications.xlnet.XLNetBackbone` (pretrained, usually).
        num_classes: K >= 2.
        dropout: after the summary (Hugging Face's ``summary_last_dropout``, 0.1).

    Call arguments:
        inputs: the backbone's dict, {"token_ids"} (B, T) and optional "segment_ids", "padding_mask".
        training: enables dropout.

    Returns:
        logits (B, K).

    Training: labels (B,) int in [0, K); :meth:`compile_for_finetuning` sets sparse cross-entropy from logits and
    "accuracy".

    Example:
    >>> model = XLNetClassifier(backbone, num_classes=2)
    >>> model.compile_for_finetuning(2e-5)
    >>> model.fit({"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 5}, labels, batch_size=32)
    """

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_classes = _num_labels(num_classes, "num_classes")
        self.dropout_rate = rate_in_unit_interval(dropout, "dropout")
        policy = self.dtype_policy
        self.summary = keras.layers.Dense(self.hidden_dim, activation="tanh", kernel_initializer=_initializer(),
                                          name="summary", dtype=policy)
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="summary_dropout", dtype=policy)
        self.logits_dense = keras.layers.Dense(self.num_classes, kernel_initializer=_initializer(), name="logits",
                                               dtype=policy)
        self.summary.build((None, self.hidden_dim))
        self.logits_dense.build((None, self.hidden_dim))

    def call(self, inputs, training=None):
        inputs = self._check_inputs(inputs)
        h = self.backbone(inputs, training=training)  # (B, T, d)
        last = last_token_positions(self._padding_mask(inputs))
        h_last = ops.take_along_axis(h, last[:, None, None], axis=1)[:, 0]  # (B, d): h at <cls>
        return self.logits_dense(self.dropout(self.summary(h_last), training=training))

    def compile_for_finetuning(self, learning_rate=2e-5, warmup_steps=0, total_steps=None, weight_decay=0.01,
                               **kwargs):
        """``compile`` with :func:`xlnet_optimizer`, sparse cross-entropy from logits and accuracy.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay.
            **kwargs: more ``compile`` arguments.
        """
        self.compile(optimizer=xlnet_optimizer(learning_rate, warmup_steps, total_steps, weight_decay),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")], **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenAccuracy(keras.metrics.Mean):
    """Share of labelled tokens whose argmax prediction is right; tokens labelled ``IGNORE_LABEL`` are not counted
    and every labelled token counts once.

    Call: ``update_state(y_true (B, T) int, y_pred (B, T, K) logits)``.
    """

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        weights = ops.cast(ops.not_equal(y_true, IGNORE_LABEL), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        return super().update_state(ops.reshape(correct, (-1,)), sample_weight=ops.reshape(weights, (-1,)))


@keras.saving.register_keras_serializable(package=PACKAGE)
class XLNetTokenClassifier(XLNetTask):
    """Token classification (tagging) as Hugging Face's ``XLNetForTokenClassification``: a dense layer on the
    content stream, ``logits_t = W h_t + b``.

    Args:
        backbone: an :class:`~attnlayers.applications.xlnet.XLNetBackbone`.
        num_tags: K >= 2.

    Call arguments:
        inputs: the backbone's dict, {"token_ids"} (B, T) and optional "segment_ids", "padding_mask".
        training: enables dropout.

    Returns:
        logits (B, T, K).

    Training: labels (B, T) int in [0, K), ``IGNORE_LABEL`` (-100) where a token has none;
    :meth:`compile_for_finetuning` sets the cross-entropy over the labelled tokens and :class:`TokenAccuracy`.

    Example:
    >>> model = XLNetTokenClassifier(backbone, num_tags=17)
    >>> model.compile_for_finetuning(5e-5)
    >>> model.fit({"token_ids": ids, "padding_mask": ids != 5}, tags, batch_size=32)
    """

    def __init__(self, backbone, num_tags, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_tags = _num_labels(num_tags, "num_tags")
        self.classifier = keras.layers.Dense(self.num_tags, kernel_initializer=_initializer(), name="classifier",
                                             dtype=self.dtype_policy)
        self.classifier.build((None, None, self.hidden_dim))

    def call(self, inputs, training=None):
        return self.classifier(self.backbone(self._check_inputs(inputs), training=training))

    def compile_for_finetuning(self, learning_rate=5e-5, warmup_steps=0, total_steps=None, weight_decay=0.01,
                               **kwargs):
        """``compile`` with :func:`xlnet_optimizer`, the cross-entropy averaged over the labelled tokens
        (``ignore_class=IGNORE_LABEL``) and :class:`TokenAccuracy`.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay.
            **kwargs: more ``compile`` arguments.
        """
        self.compile(optimizer=xlnet_optimizer(learning_rate, warmup_steps, total_steps, weight_decay),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORE_LABEL),
                     metrics=[TokenAccuracy()], **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags}
