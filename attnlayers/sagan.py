"""The self-attention block of SAGAN (Zhang, Goodfellow, Metaxas & Odena 2019, "Self-Attention Generative
Adversarial Networks", section 3): every position of a (B, H, W, C) feature map attends every other position,
so a convolutional network can relate distant regions in one layer.

With the N = H * W positions flattened and 1x1 projections f, g (C -> C_bar = C // 8) and h:

    s_ij = f(x_i)^T g(x_j)                                                 (section 3)
    beta_{j,i} = exp(s_ij) / sum_{i=1..N} exp(s_ij)                        (eq. 1)
    o_j = v( sum_{i=1..N} beta_{j,i} h(x_i) )                              (eq. 2)
    y_i = gamma * o_i + x_i,   gamma initialised to 0                      (eq. 3)

The 1x1 convolutions are Dense layers on the channel axis (the same map at every position).
"""

import keras
from keras import ops

from attnlayers.validation import check_feature_size, check_rank, check_tensor, format_shape, positive_int

__all__ = ["SelfAttention2D"]

_INPUTS_LAYOUT = "(batch, height, width, channels)"


@keras.saving.register_keras_serializable(package="attnlayers")
class SelfAttention2D(keras.layers.Layer):
    """SAGAN self-attention over a channels-last feature map (Zhang et al. 2019, section 3).

    With x_i the C channels at position i of the N = H * W positions:

        f(x) = W_f x,  g(x) = W_g x   (1x1 projections to C_bar = C // reduction)
        h(x) = W_h x                  (to C, or to ``value_dim`` = K)
        s_ij = f(x_i)^T g(x_j),  beta_{j,i} = softmax over i of s_ij   (for each output position j)
        o_j = sum_i beta_{j,i} h(x_i)          (value_dim None: the "C/8, C/8, C" form)
        o_j = v(sum_i beta_{j,i} h(x_i))       (value_dim K: v is a 1x1 projection K -> C, the paper's eq. 2)
        y = gamma * o + x

    gamma is a learned scalar initialised to 0, so a fresh block is the identity and the network first relies
    on local (convolutional) cues, then learns to weigh in the non-local evidence. The logits are not scaled.
    Under mixed precision the logits s (a product over only C_bar channels) and the softmax are computed in
    float32, so large activations cannot overflow float16; the weights are cast back to the compute dtype for the
    weighted sum over h, and both outputs have the compute dtype.

    f has no bias even with ``use_bias=True``: a bias b_f adds b_f^T g(x_j) to every s_ij of output position j,
    a constant over the softmax axis i, so it would change nothing and never receive a gradient.

    Args:
        reduction: positive int; f and g project to C_bar = C // reduction channels (8 in the paper), which must
            be at least 1.
        value_dim: None (h projects to C, no v), or a positive int K: h projects to K and a fourth projection v
            maps the attended values back to C.
        use_bias: biases in g, h and v (f never has one, see above).
        kernel_initializer: of the f, g, h (and v) kernels.
        gamma_initializer: of the scalar gamma (default "zeros": the block starts as the identity).
        **kwargs: standard layer arguments (name, dtype, trainable, ...).

    Call arguments:
        inputs: (B, H, W, C) feature map. H and W may be unknown when the layer is built.
        return_attention_scores: also return the weights beta.
        training: unused (no dropout); accepted so the block drops into any model.

    Returns:
        y (B, H, W, C), and with ``return_attention_scores=True`` also beta (B, H * W, H * W): row j is an
        output position, column i an attended position (row-major over (H, W)); each row sums to 1.

    Example:
    >>> model = keras.Sequential([
    ...     keras.Input((32, 32, 3)),
    ...     keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    ...     SelfAttention2D(),                       # (B, 32, 32, 64) -> (B, 32, 32, 64)
    ...     keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
    ...     keras.layers.GlobalAveragePooling2D(),
    ...     keras.layers.Dense(10),
    ... ])
    >>> y, beta = SelfAttention2D(value_dim=32)(features, return_attention_scores=True)  # beta (B, N, N)
    """

    def __init__(self, reduction=8, value_dim=None, use_bias=True, kernel_initializer="glorot_uniform",
                 gamma_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.reduction = positive_int(reduction, "reduction")
        self.value_dim = positive_int(value_dim, "value_dim", allow_none=True)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self._channels = None

    def _check_inputs_shape(self, inputs_shape):
        check_rank(inputs_shape, 4, "inputs", _INPUTS_LAYOUT)
        if inputs_shape[-1] is None:
            raise ValueError(
                f"`inputs` must have a known number of channels, {_INPUTS_LAYOUT}; received inputs shape "
                f"{format_shape(inputs_shape)}."
            )

    def _projection(self, units, name, use_bias, input_dim):
        dense = keras.layers.Dense(
            units, use_bias=use_bias, kernel_initializer=keras.initializers.get(
                keras.initializers.serialize(self.kernel_initializer)  # a fresh initializer object per kernel
            ), name=name, dtype=self.dtype_policy,
        )
        dense.build((None, None, None, input_dim))
        return dense

    def build(self, inputs_shape):
        self._check_inputs_shape(inputs_shape)
        channels = int(inputs_shape[-1])
        key_dim = channels // self.reduction
        if key_dim < 1:
            raise ValueError(
                f"`reduction` must be at most the number of channels so that C // reduction >= 1; received "
                f"channels C={channels} (inputs shape {format_shape(inputs_shape)}) and reduction={self.reduction}."
            )
        self._channels = channels
        self._key_dim = key_dim
        self.gamma = self.add_weight(name="gamma", shape=(), initializer=self.gamma_initializer, trainable=True)
        value_dim = self.value_dim or channels
        self.f_projection = self._projection(key_dim, "f", False, channels)  # f(x) = W_f x (keys)
        self.g_projection = self._projection(key_dim, "g", self.use_bias, channels)  # g(x) = W_g x (queries)
        self.h_projection = self._projection(value_dim, "h", self.use_bias, channels)  # h(x) = W_h x (values)
        self.v_projection = None
        if self.value_dim is not None:
            self.v_projection = self._projection(channels, "v", self.use_bias, value_dim)  # v: K -> C

    def call(self, inputs, return_attention_scores=False, training=None):
        inputs = ops.convert_to_tensor(check_tensor(inputs, "inputs", _INPUTS_LAYOUT))
        self._check_inputs_shape(inputs.shape)
        check_feature_size(inputs.shape, self._channels, "inputs")
        shape = ops.shape(inputs)
        batch, height, width = shape[0], shape[1], shape[2]

        def flatten(x):  # (B, H, W, D) -> (B, N, D), N = H * W in row-major order
            return ops.reshape(x, (batch, -1, x.shape[-1]))

        keys = flatten(self.f_projection(inputs))  # f(x_i)   (B, N, C_bar)
        queries = flatten(self.g_projection(inputs))  # g(x_j)   (B, N, C_bar)
        values = flatten(self.h_projection(inputs))  # h(x_i)   (B, N, K)
        # s_ij = f(x_i)^T g(x_j), laid out as logits[b, j, i], and beta_{j,i} = softmax over i (eq. 1): both in
        # float32 at least (C_bar = C / 8 makes this the cheap product; float16 logits overflow at |s| > 65504).
        logit_dtype = "float64" if keras.backend.standardize_dtype(queries.dtype) == "float64" else "float32"
        logits = ops.einsum("bjc,bic->bji", ops.cast(queries, logit_dtype), ops.cast(keys, logit_dtype))
        beta = ops.cast(ops.softmax(logits, axis=-1), values.dtype)  # back to the compute dtype
        attended = ops.matmul(beta, values)  # sum_i beta_{j,i} h(x_i)   (B, N, K)
        attended = ops.reshape(attended, (batch, height, width, attended.shape[-1]))
        if self.v_projection is not None:
            attended = self.v_projection(attended)  # o_j = v(sum_i beta_{j,i} h(x_i)) (eq. 2)
        outputs = ops.cast(self.gamma, attended.dtype) * attended + inputs  # y = gamma * o + x (eq. 3)
        if return_attention_scores:
            return outputs, beta
        return outputs

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, return_attention_scores=False, **kwargs):
        outputs = keras.KerasTensor(tuple(inputs.shape), dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, height, width = tuple(inputs.shape)[:3]
        positions = None if height is None or width is None else height * width
        return outputs, keras.KerasTensor((batch, positions, positions), dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "reduction": self.reduction,
            "value_dim": self.value_dim,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "gamma_initializer": keras.initializers.serialize(self.gamma_initializer),
        }
