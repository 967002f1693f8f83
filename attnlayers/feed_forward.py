"""The position-wise feed-forward sublayer of a Transformer block (Vaswani et al. 2017, section 3.3), plain or
gated (Shazeer 2020): :class:`FeedForward`.
"""

import keras

from attnlayers.validation import check_feature_size, check_tensor, positive_int, rate_in_unit_interval

__all__ = ["FeedForward"]

_GATED = {"swiglu": "silu", "geglu": "gelu"}


@keras.saving.register_keras_serializable(package="attnlayers")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network.

    ``FFN(x) = act(x W_1 + b_1) W_2 + b_2`` (Vaswani et al. eq. 2, with ReLU; GELU in BERT / GPT), or the gated
    variant ``FFN(x) = (act(x W_1) * (x V)) W_2`` (Shazeer 2020, eq. 5-6) with ``activation="swiglu"``
    (act = Swish_1 = SiLU, as in LLaMA: W_1 = ``intermediate_dense`` (gate_proj), V = ``gate_dense`` (up_proj),
    W_2 = ``output_dense`` (down_proj)) or ``"geglu"`` (act = GELU).

    Args:
        intermediate_dim: d_ff.
        activation: "relu", "gelu", any Keras activation, or "swiglu" / "geglu" for the gated variant.
        output_dim: defaults to the input size (d_model).
        dropout: dropout on the hidden activations.
        use_bias: biases in the dense layers.
        kernel_initializer, bias_initializer: of the dense layers.

    Call arguments:
        inputs: (B, T, d_model).
        training: enables dropout.

    Returns:
        (B, T, output_dim).

    Example:
    >>> ffn = FeedForward(2048, activation="relu")   # the paper's d_ff
    >>> y = ffn(x)                                    # (B, T, 512) -> (B, T, 512)
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        output_dim=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = positive_int(intermediate_dim, "intermediate_dim")
        self.output_dim = positive_int(output_dim, "output_dim", allow_none=True)
        self.dropout = rate_in_unit_interval(dropout, "dropout")
        self.activation = activation
        self.gated = activation in _GATED
        self._activation = keras.activations.get(_GATED.get(activation, activation))
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _dense(self, units, name):
        return keras.layers.Dense(
            units, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer, name=name, dtype=self.dtype_policy,
        )

    def build(self, inputs_shape=None):
        check_tensor(inputs_shape, "inputs", "(..., d_model)")
        self._input_dim = inputs_shape[-1]
        hidden_shape = tuple(inputs_shape[:-1]) + (self.intermediate_dim,)
        self.intermediate_dense = self._dense(self.intermediate_dim, "intermediate_dense")
        self.intermediate_dense.build(inputs_shape)
        if self.gated:
            self.gate_dense = self._dense(self.intermediate_dim, "gate_dense")
            self.gate_dense.build(inputs_shape)
        self.output_dense = self._dense(self.output_dim or inputs_shape[-1], "output_dense")
        self.output_dense.build(hidden_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        check_tensor(inputs, "inputs", "(..., d_model)")
        check_feature_size(inputs.shape, self._input_dim, "inputs")
        hidden = self._activation(self.intermediate_dense(inputs))  # act(x W_1 + b_1)
        if self.gated:
            hidden = hidden * self.gate_dense(inputs)  # SwiGLU: Swish(x W_1) * (x V) (Shazeer 2020, eq. 6)
        return self.output_dense(self.dropout_layer(hidden, training=training))

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.output_dim or inputs_shape[-1],)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_dim": self.intermediate_dim,
            "activation": self.activation if isinstance(self.activation, str) else keras.activations.serialize(self._activation),
            "output_dim": self.output_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
