"""Single-head attention: global soft attention and attention pooling, and the base they share with
LocalAttention (local.py) and HardAttention (hard.py).

Every layer here maps a query (B, T, Dq) — or one decoder step (B, Dq) — and keys (B, S, Dk) / values
(B, S, Dv) to a context (B, T, Dv) and alignment weights (B, T, S). They differ only in
``compute_weights``: how score logits become weights.
"""

import keras
from keras import ops

from attnlayers import masking
from attnlayers.scoring import get_score, serialize_score


def _check_rank(shape, ranks, name, layout):
    if len(shape) not in ranks:
        raise ValueError(f"`{name}` must have shape {layout}; received shape {tuple(shape)}.")


def _check_same(a, b, what):
    if a is not None and b is not None and a != b:
        raise ValueError(what.format(a=a, b=b))


def check_attention_shapes(query_shape, value_shape, key_shape=None):
    """Validates ranks, batch sizes and lengths of single-head attention inputs (static shapes)."""
    key_shape = value_shape if key_shape is None else key_shape
    _check_rank(query_shape, (2, 3), "query", "(batch, target_length, query_dim), or (batch, query_dim) for one step")
    _check_rank(value_shape, (3,), "value", "(batch, source_length, value_dim)")
    _check_rank(key_shape, (3,), "key", "(batch, source_length, key_dim)")
    same_batch = "`{0}` and `value` must have the same batch size; received {{a}} and {{b}}."
    _check_same(query_shape[0], value_shape[0], same_batch.format("query"))
    _check_same(key_shape[0], value_shape[0], same_batch.format("key"))
    _check_same(key_shape[1], value_shape[1], "`key` and `value` must have the same source length; received {a} and {b}.")


class AttentionBase(keras.layers.Layer):
    """Shared machinery: input and mask validation, the score, masking, dropout and the weighted sum.

    Subclasses override :meth:`compute_weights`. Not meant to be used directly.

    Args:
        score: a score name (see ``attnlayers.scoring.available_scores()``), a ``Score`` instance, or a
            serialized score config.
        dropout: dropout rate on the attention weights (training only).
        seed: seed of the dropout.
    """

    def __init__(self, score="dot", dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); received {dropout!r}.")
        self._score_identifier = score
        if isinstance(score, str):
            self.scorer = get_score(score, dtype=self.dtype_policy)
        else:
            self.scorer = get_score(score)
        self.dropout = dropout
        self.seed = seed
        self.dropout_layer = keras.layers.Dropout(dropout, seed=seed) if dropout > 0 else None
        self.supports_masking = True

    def _build_score(self, query_shape, key_shape):
        query_shape = tuple(query_shape)
        if len(query_shape) not in (2, 3):
            raise ValueError(f"`query` must have rank 2 or 3; received shape {query_shape}.")
        if len(query_shape) == 2:
            query_shape = (query_shape[0], 1, query_shape[1])
        if not self.scorer.built:
            self.scorer.build(query_shape, tuple(key_shape))

    def compute_weights(self, logits, mask, *, query, value_mask, training):
        """Turns logits (B, T, S) and a boolean mask (broadcastable) into weights (B, T, S)."""
        raise NotImplementedError

    def _attend(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        **weight_kwargs,
    ):
        key = value if key is None else key
        check_attention_shapes(query.shape, value.shape, key.shape)
        single_step = len(query.shape) == 2
        if single_step:  # one decoder step: (B, D) -> (B, 1, D)
            query = ops.expand_dims(query, 1)
            if query_mask is not None and len(query_mask.shape) == 1:
                query_mask = ops.expand_dims(query_mask, 1)
            if attention_mask is not None and len(attention_mask.shape) == 2:
                attention_mask = ops.expand_dims(attention_mask, 1)
        batch, t, s = query.shape[0], query.shape[1], key.shape[1]
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, t))
        value_mask = masking.check_mask(value_mask, "value_mask", (batch, s))
        attention_mask = masking.check_mask(attention_mask, "attention_mask", (batch, t, s))
        mask = masking.compute_attention_mask(
            ops.shape(query)[1], ops.shape(key)[1], query_mask, value_mask, attention_mask, use_causal_mask
        )
        # A Score instance passed in keeps its own dtype policy; weights follow this layer's.
        logits = ops.cast(self.scorer(query, key), self.compute_dtype)
        weights = self.compute_weights(
            logits, mask, query=query, value_mask=value_mask, training=training, **weight_kwargs
        )
        if self.dropout_layer is not None:
            # The returned weights are the ones applied, dropout included.
            weights = self.dropout_layer(weights, training=training)
        context = ops.matmul(weights, ops.cast(value, weights.dtype))
        if single_step:
            context, weights = ops.squeeze(context, 1), ops.squeeze(weights, 1)
        if return_attention_scores:
            return context, weights
        return context

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def _output_spec(self, query_shape, value_shape, return_attention_scores):
        context = keras.KerasTensor(tuple(query_shape[:-1]) + (value_shape[-1],), dtype=self.compute_dtype)
        if not return_attention_scores:
            return context
        weights = keras.KerasTensor(tuple(query_shape[:-1]) + (value_shape[1],), dtype=self.compute_dtype)
        return context, weights

    def get_config(self):
        return {
            **super().get_config(),
            "score": serialize_score(self._score_identifier),
            "dropout": self.dropout,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class Attention(AttentionBase):
    """Global soft attention (Bahdanau et al. 2015; Luong et al. 2015), for cross- and self-attention.

    ``a_t = softmax(score(h_t, h_s))`` over the source positions s (Luong eq. 7), and the context
    ``c_t = sum_s a_t(s) v_s``. Keys default to the values (the encoder's annotation vectors).

    Args:
        score: "dot", "scaled_dot", "general" ("bilinear"), "additive" ("concat"), "location", "cosine",
            "mlp", a registered name, or a ``Score`` instance (e.g. ``AdditiveScore(units=128)``).
        dropout: dropout on the attention weights during training.
        seed: dropout seed.

    Call arguments:
        query: (B, T, Dq) decoder states, or (B, Dq) for a single decoder step.
        value: (B, S, Dv) encoder states.
        key: (B, S, Dk); defaults to ``value``.
        query_mask: (B, T) padding mask of the queries; padded queries get a zero context.
        value_mask: (B, S) padding mask of the keys/values.
        attention_mask: (B, T, S) boolean, True = may attend (axes of size 1 broadcast).
        use_causal_mask: query t sees keys s <= t + (S - T) only.
        return_attention_scores: also return the weights.
        training: enables dropout.
        Implicit Keras masks on ``query`` / ``value`` are used when the explicit masks are not given.

    Returns:
        context (B, T, Dv) — or (B, Dv) for a (B, Dq) query — and, if requested, the weights (B, T, S) —
        or (B, S). The returned weights are exactly the ones applied (after dropout). A query that sees no
        key gets zero weights and a zero context.

    Example:
    >>> attention = Attention(score="general")
    >>> context, weights = attention(decoder_states, encoder_states, return_attention_scores=True)
    """

    def build(self, query_shape, value_shape, key_shape=None):
        check_attention_shapes(query_shape, value_shape, key_shape)
        self._build_score(query_shape, key_shape or value_shape)

    def compute_weights(self, logits, mask, *, query, value_mask, training):
        return masking.masked_softmax(logits, mask)  # Luong eq. 7

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        return self._attend(
            query, value, key, query_mask, value_mask, attention_mask, use_causal_mask,
            return_attention_scores, training,
        )

    def compute_output_spec(self, query, value, key=None, return_attention_scores=False, **kwargs):
        return self._output_spec(query.shape, value.shape, return_attention_scores)


@keras.saving.register_keras_serializable(package="attnlayers")
class AttentionPooling(AttentionBase):
    """Attention pooling for sequence classification: a trainable query u attends over the states.

    ``a = softmax(score(u, h_s))``, ``pooled = sum_s a(s) h_s`` (keys = values = states), as in attention
    over RNN states for document classification (Yang et al. 2016, eq. 8-10 with ``score="additive"``).

    Args:
        score: any score (default "additive").
        query_dim: size of the learned query; defaults to the state size.
        dropout, seed: dropout on the weights.

    Call arguments:
        inputs: (B, S, D) states.
        mask: (B, S) padding mask (the implicit Keras mask is used when omitted).
        return_attention_scores: also return the weights.

    Returns:
        pooled (B, D), and, if requested, the weights (B, S). A fully padded sequence pools to zeros.

    Example:
    >>> x = keras.layers.Embedding(1000, 64, mask_zero=True)(tokens)
    >>> h = keras.layers.Bidirectional(keras.layers.GRU(32, return_sequences=True))(x)
    >>> logits = keras.layers.Dense(3)(AttentionPooling()(h))
    """

    def __init__(self, score="additive", query_dim=None, dropout=0.0, seed=None, **kwargs):
        super().__init__(score=score, dropout=dropout, seed=seed, **kwargs)
        self.query_dim = query_dim

    def build(self, inputs_shape):
        _check_rank(inputs_shape, (3,), "inputs", "(batch, length, dim)")
        dim = self.query_dim or inputs_shape[-1]
        self.query = self.add_weight(name="query", shape=(dim,), initializer="glorot_uniform")
        self._build_score((inputs_shape[0], dim), inputs_shape)

    def compute_weights(self, logits, mask, *, query, value_mask, training):
        return masking.masked_softmax(logits, mask)

    def call(self, inputs, mask=None, return_attention_scores=False, training=None):
        batch = ops.shape(inputs)[0]
        query = ops.broadcast_to(ops.cast(self.query, inputs.dtype), (batch, self.query.shape[0]))
        return self._attend(
            query, inputs, value_mask=mask, return_attention_scores=return_attention_scores,
            training=training,
        )

    def compute_mask(self, inputs, previous_mask=None):
        return None  # the sequence axis is pooled away

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0], inputs_shape[-1])

    def compute_output_spec(self, inputs, return_attention_scores=False, **kwargs):
        return self._output_spec((inputs.shape[0], inputs.shape[-1]), inputs.shape, return_attention_scores)

    def get_config(self):
        return {**super().get_config(), "query_dim": self.query_dim}
