"""Token losses for sequence models: cross-entropy over the real (non-padding) tokens, with label smoothing.

Backend-agnostic (``keras.ops`` only); computed in float32 whatever the model's dtype policy.
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.distribution import scale_for_replicas
from attnlayers.validation import non_negative_int, rate_in_unit_interval

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
