"""Token metrics for sequence models: accuracy over the real (non-padding) tokens.

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.validation import non_negative_int

from .losses import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedAccuracy(keras.metrics.Mean):
    """Share of non-padding target tokens whose argmax prediction is right.

    ``accuracy = sum_t [argmax_v y_pred[t, v] == y_t] * [y_t != pad] / sum_t [y_t != pad]`` over all the
    tokens seen since the last reset (every real token counts once, whatever the padded length of its batch).

    Args:
        pad_token_id: the target id that is not counted. (``pad_id`` is accepted as its old name.)
        name: the name in the logs (default "accuracy").

    Call: ``update_state(y_true (B, T) int, y_pred (B, T, V))``.
    """

    def __init__(self, pad_token_id=0, name="accuracy", **kwargs):
        pad_token_id = kwargs.pop("pad_id", pad_token_id)
        super().__init__(name=name, **kwargs)
        self.pad_token_id = non_negative_int(pad_token_id, "pad_token_id")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        weights = ops.cast(ops.not_equal(y_true, self.pad_token_id), "float32")
        # One value per token: keras' Mean would average each row over its length first, so that tokens of
        # batches padded to different lengths would count differently.
        return super().update_state(ops.reshape(correct, (-1,)), sample_weight=ops.reshape(weights, (-1,)))

    def get_config(self):
        return {**super().get_config(), "pad_token_id": self.pad_token_id}
