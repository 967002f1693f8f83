"""Token losses for sequence models: cross-entropy over the real (non-padding) tokens, with label smoothing; the
chunked cross-entropy of a language model's output layer that never forms its float32 (B, T, V) logits.

Backend-agnostic (``keras.ops`` only); computed in float32 whatever the model's dtype policy.
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.chunked_cross_entropy import DEFAULT_CHUNK_SIZE, chunked_cross_entropy
from attnlayers.distribution import scale_for_replicas
from attnlayers.validation import non_negative_int, positive_int, rate_in_unit_interval

__all__ = ["ChunkedCrossEntropy", "MaskedCrossEntropy", "PACKAGE"]

PACKAGE = "attnlayers.applications"


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedCrossEntropy(keras.losses.Loss):
    """Token cross-entropy over non-padding targets, with label smoothing (Szegedy et al. 2016, section 7).

    ``q = (1 - eps) * onehot(y) + eps / V``; loss = the sum over real tokens of ``-sum_v q_v log p_v``, divided
    by the number of real tokens in the batch (targets equal to ``pad_token_id`` contribute nothing); under a
    ``tf.distribute`` strategy also by the number of replicas (``attnlayers.distribution.scale_for_replicas``,
    as Keras does for its own losses; with ``reduction="sum"`` Keras would not).

    Args:
        label_smoothing: eps in [0, 1).
        pad_token_id: the target id that is ignored. (``pad_id`` is accepted as its old name.)

    Call: ``loss(y_true (B, T) int, y_pred (B, T, V) logits)`` -> scalar.
    """

    def __init__(self, label_smoothing=0.0, pad_token_id=0, name="masked_cross_entropy", **kwargs):
        pad_token_id = kwargs.pop("pad_id", pad_token_id)
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = rate_in_unit_interval(label_smoothing, "label_smoothing")
        self.pad_token_id = non_negative_int(pad_token_id, "pad_token_id")

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        log_p = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)  # (B, T, V)
        nll = -ops.squeeze(ops.take_along_axis(log_p, y_true[..., None], axis=-1), -1)  # (B, T)
        eps = self.label_smoothing
        if eps:  # -sum_v q_v log p_v = (1 - eps) * nll - eps * mean_v log p_v
            nll = (1.0 - eps) * nll - eps * ops.mean(log_p, axis=-1)
        weights = ops.cast(ops.not_equal(y_true, self.pad_token_id), "float32")
        return scale_for_replicas(nll * weights / ops.maximum(ops.sum(weights), 1.0))

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "pad_token_id": self.pad_token_id}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ChunkedCrossEntropy(keras.losses.Loss):
    """The next-token cross-entropy averaged over the real labels (``sum_t w_t NLL_t / sum_t w_t``, the sample weight
    ``w`` the padding mask: Keras' "mean_with_sample_weight"), computed in training from the model's final hidden
    states and output matrix ``chunk_size`` tokens at a time (:func:`attnlayers.chunked_cross_entropy`): the float32
    (B, T, V) logits and their softmax are never formed, nor held for the backward.

    A model that supports it (:class:`~attnlayers.applications.gpt.GPT`) returns its hidden states from
    ``call(..., training=True)`` when compiled with this loss and computes it in its ``compute_loss`` with
    :meth:`from_hidden_states` (updating its :class:`~.metrics.Perplexity` metrics from the same NLL). Given logits
    (evaluation, ``predict``, any other model) it is the plain loss: ``call(y_true (B, T), y_pred (B, T, V))``,
    in float32.

    Args:
        chunk_size: tokens (rows of B T) per chunk: each chunk's (chunk_size, V) float32 logits are what the loss
            holds at a time.
        name: the loss' name.
    """

    def __init__(self, chunk_size=DEFAULT_CHUNK_SIZE, name="causal_lm_loss", **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="mean_with_sample_weight", **kwargs)
        self.chunk_size = positive_int(chunk_size, "chunk_size")

    def call(self, y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    def from_hidden_states(self, y_true, hidden, output_matrix, sample_weight=None, vocabulary_size=None):
        """The loss from hidden states (B, T, d) and the output matrix (V_pad, d) (V real columns).

        Returns:
            ``(loss, nll_sum, tokens)``: the differentiable mean (scaled for the replicas of a ``tf.distribute``
            strategy, as Keras scales its losses), and ``sum_t w_t NLL_t`` and ``sum_t w_t`` without gradient
            (what a perplexity metric accumulates).
        """
        weights = ops.ones_like(y_true, "float32") if sample_weight is None else ops.cast(sample_weight, "float32")
        weights = ops.reshape(weights, ops.shape(y_true))
        total = chunked_cross_entropy(hidden, output_matrix, y_true, weights, vocabulary_size=vocabulary_size,
                                      chunk_size=self.chunk_size)
        tokens = ops.sum(weights)
        loss = scale_for_replicas(ops.divide_no_nan(total, tokens))
        return loss, ops.stop_gradient(total), tokens

    def get_config(self):
        return {"name": self.name, "chunk_size": self.chunk_size}
