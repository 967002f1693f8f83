"""Normalization layers beyond keras' LayerNormalization: RMSNorm (Zhang & Sennrich 2019), the norm of LLaMA,
T5 and most recent decoder-only models.

    RMSNorm(x) = x / RMS(x) * g,   RMS(x) = sqrt(mean_i(x_i^2) + eps)        (Zhang & Sennrich 2019, eq. 4)

Unlike LayerNorm it neither subtracts the mean nor adds a bias: re-scaling invariance alone, at a lower cost.
"""

import keras
from keras import ops

from attnlayers.validation import check_feature_size, check_tensor, positive_number


__all__ = ["RMSNorm", "rms_normalize"]


def rms_normalize(x, epsilon):
    """x / sqrt(mean(x^2) + eps) over the last axis (eq. 4 without the gain), in float32 under mixed precision.

    Args:
        x: (..., d). epsilon: eps > 0.

    Returns:
        (..., d) float32 (or float64 for float64 inputs).
    """
    dtype = "float64" if keras.backend.standardize_dtype(x.dtype) == "float64" else "float32"
    x = ops.cast(x, dtype)
    mean_square = ops.mean(ops.square(x), axis=-1, keepdims=True)  # mean_i(x_i^2)
    return x * ops.rsqrt(mean_square + epsilon)


@keras.saving.register_keras_serializable(package="attnlayers")
class RMSNorm(keras.layers.Layer):
    """Root mean square layer normalization, RMSNorm (Zhang & Sennrich 2019, eq. 4), over the last axis.

    ``y = x / sqrt(mean(x^2) + eps) * g`` with a learned gain g (d,), initialised to ones. The statistic is
    computed in float32 under mixed precision and the normalized features are cast back to the compute dtype
    before the gain multiplies them (as LLaMA's ``LlamaRMSNorm`` does).

    Args:
        epsilon: eps > 0, added to the mean square (1e-6 in LLaMA; ``rms_norm_eps`` of Hugging Face's config).
        gamma_initializer, gamma_regularizer, gamma_constraint: of the gain g.

    Call arguments:
        inputs: (..., d).

    Returns:
        (..., d), the compute dtype. An implicit Keras mask passes through (the layer is position-wise).

    Example:
    >>> norm = RMSNorm(epsilon=1e-6)
    >>> y = norm(x)                      # (B, T, 512) -> (B, T, 512), y / g has RMS 1 over the features
    """

    def __init__(self, epsilon=1e-6, gamma_initializer="ones", gamma_regularizer=None, gamma_constraint=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.epsilon = positive_number(epsilon, "epsilon")
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self.gamma_regularizer = keras.regularizers.get(gamma_regularizer)
        self.gamma_constraint = keras.constraints.get(gamma_constraint)
        self.supports_masking = True

    def build(self, inputs_shape=None):
        check_tensor(inputs_shape, "inputs", "(..., dim)")
        dim = inputs_shape[-1]
        if dim is None:
            raise ValueError(f"RMSNorm needs a known last axis; received inputs shape {tuple(inputs_shape)}.")
        self.gamma = self.add_weight(
            name="gamma", shape=(dim,), initializer=self.gamma_initializer, regularizer=self.gamma_regularizer,
            constraint=self.gamma_constraint, trainable=True,
        )
        self._dim = dim

    def call(self, inputs):
        check_tensor(inputs, "inputs", "(..., dim)")
        check_feature_size(inputs.shape, self._dim, "inputs")
        normalized = ops.cast(rms_normalize(inputs, self.epsilon), self.compute_dtype)
        return normalized * ops.cast(self.gamma, self.compute_dtype)  # x / RMS(x) * g (eq. 4)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "epsilon": self.epsilon,
            "gamma_initializer": keras.initializers.serialize(self.gamma_initializer),
            "gamma_regularizer": keras.regularizers.serialize(self.gamma_regularizer),
            "gamma_constraint": keras.constraints.serialize(self.gamma_constraint),
        }
