"""Token metrics for sequence models: accuracy over the real (non-padding) tokens, and a token-weighted
perplexity.

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.validation import non_negative_int

from .losses import PACKAGE


__all__ = ["MaskedAccuracy", "Perplexity"]


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
        """Adds a batch's non-padding tokens to the running accuracy.

        Args:
            y_true: (B, T) int target ids.
            y_pred: (B, T, V) logits or probabilities.
            sample_weight: ignored (the weights are the padding mask).
        """
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true), "float32")
        weights = ops.cast(ops.not_equal(y_true, self.pad_token_id), "float32")
        # One value per token: keras' Mean would average each row over its length first, so that tokens of
        # batches padded to different lengths would count differently.
        return super().update_state(ops.reshape(correct, (-1,)), sample_weight=ops.reshape(weights, (-1,)))

    def get_config(self):
        return {**super().get_config(), "pad_token_id": self.pad_token_id}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Perplexity(keras.metrics.Metric):
    """Token-weighted perplexity of a language model: the exponential of the mean negative log-likelihood per
    real token, exact over everything seen since the last reset (not a mean of batch perplexities).

    ``perplexity = exp(sum_t w_t * NLL_t / sum_t w_t)`` with ``NLL_t = -log softmax(y_pred[t])[y_t]`` and
    ``w_t`` the sample weight (the padding mask: 1 at real targets, 0 at padding; all 1 when None). The two sums
    are the metric's state, so a batch of many real tokens counts as much as its tokens, whatever its padding.
    Before any token, the result is 1 (an empty sum).

    Masking goes by the sample weight, never by a token id: GPT-2's padding id is its end-of-text id, which is a
    real target at the end of every document.

    Args:
        name: the name in the logs (default "perplexity").

    Call: ``update_state(y_true (B, T) int, y_pred (B, T, V) logits, sample_weight (B, T) or None)``.
    """

    def __init__(self, name="perplexity", **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(name=name, **kwargs)
        self.total_nll = self.add_variable(shape=(), initializer="zeros", name="total_nll")
        self.tokens = self.add_variable(shape=(), initializer="zeros", name="tokens")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        log_p = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)  # (B, T, V)
        nll = -ops.squeeze(ops.take_along_axis(log_p, y_true[..., None], axis=-1), -1)  # (B, T)
        if sample_weight is None:
            weights = ops.ones_like(nll)
        else:
            weights = ops.reshape(ops.cast(sample_weight, "float32"), ops.shape(nll))
        nll = ops.where(weights > 0, nll, 0.0)  # a padded position's (perhaps infinite) NLL is not counted
        self.total_nll.assign_add(ops.sum(nll * weights))
        self.tokens.assign_add(ops.sum(weights))

    def result(self):
        return ops.exp(ops.divide_no_nan(self.total_nll, self.tokens))

    def reset_state(self):
        self.total_nll.assign(0.0)
        self.tokens.assign(0.0)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}
