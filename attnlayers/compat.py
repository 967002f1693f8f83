"""keras-compatible spellings of attnlayers' layers: the constructor, call convention and weights of a keras attention
layer, computed by attnlayers' own layers. Each passes keras' own test file for its counterpart
(tests/layers/test_keras_conformance.py).

- :class:`GroupedQueryAttention`: ``keras.layers.GroupedQueryAttention(head_dim, num_query_heads,
  num_key_value_heads, ...)`` on :class:`~attnlayers.multi_head.MultiHeadAttention` with ``num_key_value_heads``
  (Ainslie et al. 2023): query head n reads key / value head n // (N_q / N_kv).
- :class:`Attention`, :class:`AdditiveAttention`: ``keras.layers.Attention`` (Luong et al. 2015's dot score, or
  keras' "concat") and ``keras.layers.AdditiveAttention`` (Bahdanau et al. 2015's score without projections):
  list inputs ``[query, value(, key)]``, ``mask=[query_mask, value_mask]``, ``compute_mask``, keras' weights
  (``scale``, ``concat_score_weight``) and override points (``_calculate_scores``, ``_calculate_score_mask``,
  ``_apply_scores``); the dot score is :class:`~attnlayers.scoring.DotScore`, the masks and softmax
  :mod:`attnlayers.masking`'s.

(``attnlayers.MultiHeadAttention`` itself takes keras' ``MultiHeadAttention`` arguments.)
"""

import keras
from keras import ops

from attnlayers import masking
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.scoring import DotScore
from attnlayers.validation import rate_in_unit_interval

__all__ = ["AdditiveAttention", "Attention", "GroupQueryAttention", "GroupedQueryAttention", "SCORE_MODES"]

SCORE_MODES = ("dot", "concat")


@keras.saving.register_keras_serializable(package="attnlayers.compat")
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention with keras' ``GroupedQueryAttention`` interface (Ainslie et al. 2023):

        head_n = softmax(Q_n K_g^T / sqrt(head_dim)) V_g,  g = n // (num_query_heads / num_key_value_heads)

    The weights are keras' (query (D, N_q, H), key and value (D, N_kv, H), [gate (D, N_q, H),] output (N_q, H, D),
    in keras' order), so ``set_weights(keras_layer.get_weights())`` reproduces keras' layer. As keras', the key and
    value heads are repeated to N_q before the ``_compute_attention(query, key, value, attention_mask, training,
    use_causal_mask)`` override point, and ``_return_attention_scores`` holds the call's flag.

    Args:
        head_dim: H, the size of every head.
        num_query_heads: N_q.
        num_key_value_heads: N_kv, dividing N_q.
        dropout, use_bias, sliding_window, flash_attention, use_gate, kernel_initializer, bias_initializer,
            kernel_regularizer, bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint, seed:
            as :class:`~attnlayers.multi_head.MultiHeadAttention` (and keras).

    Call arguments and returns: as :class:`~attnlayers.multi_head.MultiHeadAttention` (query (B, T, D), value
    (B, S, D), key, masks, ``use_causal_mask``, ``return_attention_scores``); scores are (B, N_q, T, S).
    """

    def __init__(self, head_dim, num_query_heads, num_key_value_heads, dropout=0.0, use_bias=True,
                 sliding_window=None, flash_attention=None, use_gate=False, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, seed=None, **kwargs):
        if isinstance(num_query_heads, int) and isinstance(num_key_value_heads, int) and num_key_value_heads > 0 \
                and num_query_heads % num_key_value_heads:
            raise ValueError("`num_query_heads` must be divisible by `num_key_value_heads`; received "
                             f"num_query_heads={num_query_heads}, num_key_value_heads={num_key_value_heads}.")
        super().__init__(
            num_heads=num_query_heads, key_dim=head_dim, num_key_value_heads=num_key_value_heads, dropout=dropout,
            use_bias=use_bias, sliding_window=sliding_window, flash_attention=flash_attention, use_gate=use_gate,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint, seed=seed, **kwargs,
        )
        self._return_attention_scores = False

    # keras' attribute names.
    head_dim = property(lambda self: self._key_dim)
    num_query_heads = property(lambda self: self._num_heads)
    num_repeats = property(lambda self: self._num_heads // self.num_key_value_heads)
    sliding_window = property(lambda self: self._sliding_window)
    use_gate = property(lambda self: self._use_gate)

    def _invoke_compute_attention(self, query, key, value, attention_mask, training, return_attention_scores,
                                  **kwargs):
        """keras' GroupedQueryAttention convention: (B, S, N_kv, H) keys and values repeated to N_q heads, the
        scores flag in ``_return_attention_scores``, five positional arguments."""
        self._return_attention_scores = return_attention_scores
        key = ops.repeat(key, self.num_repeats, axis=2)
        value = ops.repeat(value, self.num_repeats, axis=2)
        return self._compute_attention(query, key, value, attention_mask, training, **kwargs)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        """keras' GroupedQueryAttention also requires the query and value feature sizes to agree."""
        if query_shape[-1] != value_shape[-1]:
            raise ValueError(
                f"The last dimension of `query_shape` and `value_shape` must be equal, but are {query_shape[-1]}, "
                f"{value_shape[-1]}. Received: query_shape={query_shape}, value_shape={value_shape}"
            )
        return super().compute_output_shape(query_shape, value_shape, key_shape)

    def get_config(self):
        base = keras.layers.Layer.get_config(self)
        config = super().get_config()
        keys = ("use_bias", "use_gate", "sliding_window", "dropout", "kernel_initializer", "bias_initializer",
                "kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                "bias_constraint", "seed")
        return {**base, "head_dim": self.head_dim, "num_query_heads": self.num_query_heads,
                "num_key_value_heads": self.num_key_value_heads, **{key: config[key] for key in keys}}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _fold_batch(x):
    """(..., L, D) -> (B', L, D): keras' Attention treats every leading axis as a batch axis."""
    return ops.reshape(x, (-1,) + tuple(ops.shape(x)[-2:]))


@keras.saving.register_keras_serializable(package="attnlayers.compat")
class Attention(keras.layers.Layer):
    """Single-head attention with ``keras.layers.Attention``'s interface, on inputs (..., T, D) and (..., S, D):

        dot:    e_ts = scale * (q_t . k_s)                                      (Luong et al. 2015, eq. 8 "dot")
        concat: e_ts = concat_score_weight * sum_d tanh(scale * (q_t + k_s)_d)  (keras' "concat")
        a_t = softmax_s(e_ts) over the visible keys;  c_t = sum_s a_ts v_s

    ``scale`` is a learned scalar (initial 1) with ``use_scale``, else 1.

    Args:
        use_scale: learn ``scale``.
        score_mode: "dot" or "concat".
        dropout: dropout rate on the attention weights in training.
        seed: seed of the dropout.

    Call arguments:
        inputs: ``[query (..., T, D), value (..., S, Dv)]`` or ``[query, value, key (..., S, D)]``.
        mask: ``[query_mask (..., T), value_mask (..., S)]`` or None: padded queries output 0, padded keys get
            weight 0.
        return_attention_scores: also return the weights (..., T, S) (after dropout).
        training: enables dropout.
        use_causal_mask: query t sees keys 0..t.

    Returns:
        ``output`` (..., T, Dv), or ``(output, weights)``.
    """

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if score_mode not in SCORE_MODES:
            raise ValueError("Invalid value for argument score_mode. Expected one of {'dot', 'concat'}. "
                             f"Received: score_mode={score_mode}")
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        self.dropout = rate_in_unit_interval(dropout, "dropout")
        self.seed = seed
        self.supports_masking = True
        self._dot = DotScore(dtype=self.dtype_policy)
        self._dropout_layer = (keras.layers.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy)
                               if self.dropout > 0 else None)

    def build(self, input_shape):
        self._validate_inputs(input_shape)
        query_shape, value_shape = input_shape[0], input_shape[1]
        key_shape = input_shape[2] if len(input_shape) > 2 else value_shape
        self._dot.build((None, query_shape[-2], query_shape[-1]), (None, key_shape[-2], key_shape[-1]))
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones") if self.use_scale else None
        self.concat_score_weight = None
        if self.score_mode == "concat":
            self.concat_score_weight = self.add_weight(name="concat_score_weight", shape=(), initializer="ones")

    def _calculate_scores(self, query, key):
        """(..., T, D) queries and (..., S, D) keys -> (..., T, S) scores."""
        if self.score_mode == "dot":
            scores = ops.reshape(self._dot(_fold_batch(query), _fold_batch(key)),
                                 tuple(ops.shape(query)[:-1]) + (ops.shape(key)[-2],))
            return scores if self.scale is None else scores * ops.cast(self.scale, scores.dtype)
        pairs = ops.expand_dims(query, -2) + ops.expand_dims(key, -3)  # (..., T, S, D)
        if self.scale is not None:
            pairs = pairs * ops.cast(self.scale, pairs.dtype)
        return ops.cast(self.concat_score_weight, query.dtype) * ops.sum(ops.tanh(pairs), axis=-1)

    def _calculate_score_mask(self, scores, v_mask, use_causal_mask):
        """The keys each query may see: ``v_mask`` (..., S) as (..., 1, S), and with ``use_causal_mask`` the
        causal rule (1, T, S); None when nothing is masked."""
        padding = None if v_mask is None else ops.expand_dims(ops.cast(v_mask, "bool"), -2)
        if not use_causal_mask:
            return None if v_mask is None else ops.cast(v_mask, "bool")
        causal = masking.causal_mask(ops.shape(scores)[-2], ops.shape(scores)[-1], 0)[None]
        return masking.combine_masks(padding, causal)

    def _apply_scores(self, scores, value, scores_mask=None, training=False):
        """softmax over the visible keys, dropout, and the weighted sum of the values:
        ``(output (..., T, Dv), weights (..., T, S))``. A query that sees no key gets weights 0."""
        if scores_mask is not None and len(scores_mask.shape) == len(scores.shape) - 1:
            scores_mask = ops.expand_dims(scores_mask, -2)
        weights = ops.cast(masking.masked_softmax(scores, scores_mask), scores.dtype)
        if self._dropout_layer is not None:
            weights = self._dropout_layer(weights, training=training)
        return ops.matmul(weights, value), weights

    def call(self, inputs, mask=None, training=False, return_attention_scores=False, use_causal_mask=False):
        self._validate_inputs(inputs, mask)
        query, value = (ops.cast(x, self.compute_dtype) for x in inputs[:2])
        key = ops.cast(inputs[2], self.compute_dtype) if len(inputs) > 2 else value
        query_mask, value_mask = (mask[0], mask[1]) if mask else (None, None)
        scores = self._calculate_scores(query, key)
        output, weights = self._apply_scores(scores, value, self._calculate_score_mask(scores, value_mask,
                                                                                     use_causal_mask), training)
        if query_mask is not None:  # padded queries output 0
            output = ops.where(ops.expand_dims(ops.cast(query_mask, "bool"), -1), output, 0)
        return (output, weights) if return_attention_scores else output

    def compute_mask(self, inputs, mask=None):
        self._validate_inputs(inputs, mask)
        return None if mask is None or mask[0] is None else ops.convert_to_tensor(mask[0])

    def compute_output_shape(self, input_shape):
        return (*input_shape[0][:-1], input_shape[1][-1])

    def compute_output_spec(self, inputs, mask=None, return_attention_scores=False, training=None,
                            use_causal_mask=False):
        self._validate_inputs(inputs, mask)
        query, value = inputs[0], inputs[1]
        key = inputs[2] if len(inputs) > 2 else value
        output = keras.KerasTensor(self.compute_output_shape([query.shape, value.shape]), dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        return output, keras.KerasTensor((*query.shape[:-1], key.shape[-2]), dtype=self.compute_dtype)

    def _validate_inputs(self, inputs, mask=None):
        name = type(self).__name__
        if not isinstance(inputs, list):  # keras' rule: a list (build receives a list of shapes)
            raise ValueError(f"{name} layer must be called on a list of inputs, namely [query, value] or "
                             f"[query, value, key]. Received: inputs={inputs}.")
        if not 2 <= len(inputs) <= 3:
            raise ValueError(f"{name} layer accepts inputs list of length 2 or 3, namely [query, value] or "
                             f"[query, value, key]. Received length: {len(inputs)}.")
        if mask is not None:
            if not isinstance(mask, list):
                raise ValueError(f"{name} layer mask must be a list, namely [query_mask, value_mask]. Received: "
                                 f"mask={mask}.")
            if not 2 <= len(mask) <= 3:
                raise ValueError(f"{name} layer accepts mask list of length 2 or 3. Received: inputs={inputs}, "
                                 f"mask={mask}.")

    def get_config(self):
        return {**super().get_config(), "use_scale": self.use_scale, "score_mode": self.score_mode,
                "dropout": self.dropout, "seed": self.seed}


@keras.saving.register_keras_serializable(package="attnlayers.compat")
class AdditiveAttention(Attention):
    """``keras.layers.AdditiveAttention``: Bahdanau et al. 2015's score (eq. A.1.2) without the projections,
    W_q = W_k = I:

        e_ts = sum_d scale_d * tanh(q_t + k_s)_d,  a_t = softmax_s(e_ts),  c_t = sum_s a_ts v_s

    with a learned ``scale`` (D,) (glorot-uniform) when ``use_scale``, else 1. Arguments, call and returns as
    :class:`Attention` (no ``score_mode``). ``attnlayers.scoring.AdditiveScore`` is the score with W_q and W_k.
    """

    def __init__(self, use_scale=True, dropout=0.0, **kwargs):
        super().__init__(use_scale=use_scale, dropout=dropout, **kwargs)

    def build(self, input_shape):
        self._validate_inputs(input_shape)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(name="scale", shape=(input_shape[0][-1],), initializer="glorot_uniform")

    def _calculate_scores(self, query, key):
        pairs = ops.tanh(ops.expand_dims(query, -2) + ops.expand_dims(key, -3))  # (..., T, S, D)
        scale = 1.0 if self.scale is None else ops.cast(self.scale, pairs.dtype)
        return ops.sum(scale * pairs, axis=-1)

    def get_config(self):
        config = super().get_config()
        del config["score_mode"]
        return config


#: keras' public name of the class (``keras.layers.GroupQueryAttention``).
GroupQueryAttention = GroupedQueryAttention
