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
from attnlayers.validation import (
    check_feature_size,
    check_rank,
    check_tensor,
    format_shape,
    positive_int,
    rate_in_unit_interval,
    same_size,
)

__all__ = ["Attention", "AttentionBase", "AttentionPooling", "KEY_LAYOUT", "QUERY_LAYOUT", "VALUE_LAYOUT",
           "check_attention_shapes"]

QUERY_LAYOUT = "(batch, target_length, query_dim), or (batch, query_dim) for one step"
VALUE_LAYOUT = "(batch, source_length, value_dim)"
KEY_LAYOUT = "(batch, source_length, key_dim)"


def check_attention_shapes(query_shape, value_shape, key_shape=None):
    """Validates ranks, batch sizes and lengths of single-head attention inputs (static shapes)."""
    key_shape = value_shape if key_shape is None else key_shape
    check_rank(query_shape, (2, 3), "query", QUERY_LAYOUT)
    _check_memory_shapes(value_shape, key_shape)
    if not same_size(query_shape[0], value_shape[0]):
        raise ValueError(
            f"`query` and `value` must have the same batch size; received query shape {format_shape(query_shape)} "
            f"and value shape {format_shape(value_shape)}."
        )


def _check_memory_shapes(value_shape, key_shape):
    check_rank(value_shape, 3, "value", VALUE_LAYOUT)
    check_rank(key_shape, 3, "key", KEY_LAYOUT)
    if not same_size(key_shape[0], value_shape[0]):
        raise ValueError(
            f"`key` and `value` must have the same batch size; received key shape {format_shape(key_shape)} and "
            f"value shape {format_shape(value_shape)}."
        )
    if not same_size(key_shape[1], value_shape[1]):
        raise ValueError(
            f"`key` and `value` must have the same source length; received key shape {format_shape(key_shape)} "
            f"and value shape {format_shape(value_shape)}."
        )


class AttentionBase(keras.layers.Layer):
    """Shared machinery: input and mask validation, the score, masking, dropout and the weighted sum.

    Subclasses override :meth:`compute_weights`. Not meant to be used directly.

    Two public entry points share one body (score, :meth:`compute_weights`, dropout, weighted sum):
    the layer's ``call`` for whole query sequences, and :meth:`prepare_memory` + :meth:`attend_step` for a
    decoder that attends over the same memory at every step (the key-side work is done once per source).

    Args:
        score: a score name (see ``attnlayers.scoring.available_scores()``), a ``Score`` instance, or a
            serialized score config.
        dropout: dropout rate on the attention weights (training only).
        seed: seed of the dropout.
    """

    #: True for layers whose weights are sampled (``HardAttention``): their ``attend_step`` and ``call`` can
    #: also return the sample's log-probability and the distribution's entropy (``return_sample=True``).
    stochastic = False

    def __init__(self, score="dot", dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        dropout = rate_in_unit_interval(dropout, "dropout")
        self._score_identifier = score
        if isinstance(score, str):
            self.scorer = get_score(score, dtype=self.dtype_policy)
        else:
            self.scorer = get_score(score)
        self.dropout = dropout
        self.seed = seed
        self.dropout_layer = keras.layers.Dropout(dropout, seed=seed) if dropout > 0 else None
        self.supports_masking = True
        self._query_dim = self._key_dim = None

    def _build_score(self, query_shape, key_shape):
        query_shape = tuple(query_shape)
        check_rank(query_shape, (2, 3), "query", QUERY_LAYOUT)
        if len(query_shape) == 2:
            query_shape = (query_shape[0], 1, query_shape[1])
        self._query_dim, self._key_dim = query_shape[-1], tuple(key_shape)[-1]
        if not self.scorer.built:
            self.scorer.build(query_shape, tuple(key_shape))

    def _check_built(self, what):
        if not self.built:
            raise ValueError(
                f"{type(self).__name__}.{what} needs a built layer: call it on a query and value first, or call "
                f"build(query_shape, value_shape)."
            )

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        """Turns logits into weights: the one method subclasses implement.

        Args:
            logits: (B, T, S) scores.
            mask: boolean, broadcastable to (B, T, S) (True = may attend), or None.
            query: (B, T, Dq) the queries (local-p predicts p_t from them).
            value_mask: (B, S) boolean padding mask of the memory, or None.
            training: whether the layer is training.
            index: position of query 0 in the target sequence (int or scalar tensor; None = 0). Local-m
                attention centres its window there (p_t = index + t); the other layers ignore it.

        Returns:
            Weights (B, T, S).
        """
        raise NotImplementedError

    def _weights_and_sample(self, logits, mask, *, query, value_mask, training, index=None):
        """Weights (B, T, S) and, for a stochastic layer, the sample statistics ``{"log_prob": (B, T),
        "entropy": (B, T)}`` as explicit values (None for a deterministic layer)."""
        weights = self.compute_weights(logits, mask, query=query, value_mask=value_mask, training=training,
                                       index=index)
        return weights, None

    # ------------------------------------------------------------------------------------------------------
    # The prepared-memory path: one body for call and attend_step

    def prepare_memory(self, value, key=None, value_mask=None):
        """The key-side work of attention over one memory, done once per source sequence.

        Args:
            value: (B, S, Dv) values (annotation vectors / encoder states).
            key: (B, S, Dk) keys; defaults to ``value``.
            value_mask: (B, S) boolean / 0-1 padding mask of the memory (True = real), or None.

        Returns:
            A dict of tensors, each with the batch on axis 0 (so beam search can repeat them):
            ``"value"`` (B, S, Dv) in the layer's compute dtype; ``"keys"``: the score's
            ``prepare_keys(key)`` (e.g. W_a h_s for "general", U_a h_j for "additive"), often (B, S, units);
            ``"value_mask"``: (B, S) boolean, or None when no mask was given.
        """
        self._check_built("prepare_memory")
        value = ops.convert_to_tensor(check_tensor(value, "value", VALUE_LAYOUT))
        key = value if key is None else ops.convert_to_tensor(key)
        _check_memory_shapes(value.shape, key.shape)
        check_feature_size(key.shape, self._key_dim, "key" if key is not value else "value")
        # ops.shape: a size only known at run time (tf.function with None axes) is checked when the graph runs.
        value_mask = masking.check_mask(value_mask, "value_mask", tuple(ops.shape(value)[:2]))
        keys = self.scorer.prepare_keys(ops.cast(key, self.scorer.compute_dtype))
        return {"value": ops.cast(value, self.compute_dtype), "keys": keys, "value_mask": value_mask}

    def attend_step(self, query, memory, index=None, training=None, return_sample=False):
        """Attention of one query per sequence (a decoder step) over a prepared memory.

        Args:
            query: (B, Dq) the decoder state.
            memory: the dict from :meth:`prepare_memory` (or those entries repeated for beam search).
            index: the step's position t in the target sequence (int or scalar tensor); local-m attention
                uses it as p_t = t, the other layers ignore it.
            training: enables dropout (and sampling for ``HardAttention``).
            return_sample: (stochastic layers only) also return ``{"log_prob": (B,), "entropy": (B,)}``:
                log p(s_t) of the sampled position(s) and the entropy H(alpha_t) of the distribution.

        Returns:
            ``(context, weights)``: context (B, Dv) = sum_s a_t(s) v_s and the weights a_t (B, S) actually
            applied (after dropout); with ``return_sample`` also the sample dict.
        """
        self._check_built("attend_step")
        query = ops.convert_to_tensor(check_tensor(query, "query", "(batch, query_dim)"))
        check_rank(query.shape, 2, "query", "(batch, query_dim)")
        check_feature_size(query.shape, self._query_dim, "query")
        self._check_return_sample(return_sample)
        value_mask = memory["value_mask"]
        mask = None if value_mask is None else ops.expand_dims(value_mask, 1)  # (B, 1, S)
        # Always the side-effect-free path: a loop body (scan / while) can neither add losses nor record values.
        context, weights, sample = self._attend_prepared(ops.expand_dims(query, 1), memory, mask, index, training,
                                                         explicit=True)
        outputs = (ops.squeeze(context, 1), ops.squeeze(weights, 1))
        if return_sample:
            outputs += ({k: ops.squeeze(v, 1) for k, v in sample.items()},)
        return outputs

    def _check_return_sample(self, return_sample):
        if return_sample and not self.stochastic:
            raise ValueError(
                f"`return_sample=True` needs an attention layer that samples (HardAttention); received "
                f"{type(self).__name__}, whose weights are deterministic."
            )

    def _attend_prepared(self, query, memory, mask, index, training, explicit):
        """query (B, T, Dq), a prepared memory, a mask broadcastable to (B, T, S) -> context (B, T, Dv),
        weights (B, T, S), sample statistics (a dict of (B, T) for a stochastic layer when ``explicit``, else
        None). ``explicit``: weights from :meth:`_weights_and_sample`, which has no side effects; otherwise
        from :meth:`compute_weights`."""
        scorer_query = ops.cast(query, self.scorer.compute_dtype)
        # A Score instance passed in keeps its own dtype policy; weights follow this layer's.
        logits = ops.cast(self.scorer.score(scorer_query, memory["keys"]), self.compute_dtype)
        kwargs = {"query": query, "value_mask": memory["value_mask"], "training": training, "index": index}
        if explicit:
            weights, sample = self._weights_and_sample(logits, mask, **kwargs)
        else:
            weights, sample = self.compute_weights(logits, mask, **kwargs), None
        if self.dropout_layer is not None:
            # The returned weights are the ones applied, dropout included.
            weights = self.dropout_layer(weights, training=training)
        context = ops.matmul(weights, ops.cast(memory["value"], weights.dtype))  # c_t = sum_s a_t(s) v_s
        return context, weights, sample

    def _call_inputs(self, query, value, key, query_mask, attention_mask):
        """Validates a call's inputs and brings one decoder step (B, Dq) to a sequence of one (B, 1, Dq).

        Returns:
            ``(query (B, T, Dq), value, key, query_mask (B, T) or None, attention_mask (B, T, S) or None,
            single_step)``, the masks boolean.
        """
        query = ops.convert_to_tensor(check_tensor(query, "query", QUERY_LAYOUT))
        value = ops.convert_to_tensor(check_tensor(value, "value", VALUE_LAYOUT))
        key = value if key is None else ops.convert_to_tensor(key)
        check_attention_shapes(query.shape, value.shape, key.shape)
        check_feature_size(query.shape, self._query_dim, "query")
        single_step = len(query.shape) == 2
        if single_step:  # one decoder step: (B, D) -> (B, 1, D)
            query = ops.expand_dims(query, 1)
            if query_mask is not None and len(query_mask.shape) == 1:
                query_mask = ops.expand_dims(query_mask, 1)
            if attention_mask is not None and len(attention_mask.shape) == 2:
                attention_mask = ops.expand_dims(attention_mask, 1)
        (batch, t), s = ops.shape(query)[:2], ops.shape(key)[1]  # sizes known only at run time: checked then
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, t))
        attention_mask = masking.check_mask(attention_mask, "attention_mask", (batch, t, s))
        return query, value, key, query_mask, attention_mask, single_step

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
        index=None,
        return_sample=False,
    ):
        self._check_return_sample(return_sample)
        query, value, key, query_mask, attention_mask, single_step = self._call_inputs(
            query, value, key, query_mask, attention_mask
        )
        memory = self.prepare_memory(value, key, value_mask)
        mask = masking.compute_attention_mask(
            ops.shape(query)[1], ops.shape(key)[1], query_mask, memory["value_mask"], attention_mask, use_causal_mask
        )
        context, weights, sample = self._attend_prepared(query, memory, mask, index, training, explicit=return_sample)
        if single_step:
            context, weights = ops.squeeze(context, 1), ops.squeeze(weights, 1)
            if sample is not None:
                sample = {k: ops.squeeze(v, 1) for k, v in sample.items()}
        outputs = (context,)
        if return_attention_scores:
            outputs += (weights,)
        if return_sample:
            outputs += (sample,)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def _output_spec(self, query_shape, value_shape, return_attention_scores, return_sample=False):
        outputs = (keras.KerasTensor(tuple(query_shape[:-1]) + (value_shape[-1],), dtype=self.compute_dtype),)
        if return_attention_scores:
            outputs += (keras.KerasTensor(tuple(query_shape[:-1]) + (value_shape[1],), dtype=self.compute_dtype),)
        if return_sample:
            per_query = tuple(query_shape[:-1])
            outputs += ({k: keras.KerasTensor(per_query, dtype="float32") for k in ("log_prob", "entropy")},)
        return outputs[0] if len(outputs) == 1 else outputs

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

    Decoding step by step, the key-side work once per source (see :meth:`AttentionBase.attend_step`)::

        memory = attention.prepare_memory(encoder_states, value_mask=source_mask)
        context, weights = attention.attend_step(state, memory)              # (B, Dv), (B, S)

    Example:
    >>> attention = Attention(score="general")
    >>> context, weights = attention(decoder_states, encoder_states, return_attention_scores=True)
    """

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        check_tensor(query_shape, "query", QUERY_LAYOUT)
        check_tensor(value_shape, "value", VALUE_LAYOUT)
        check_attention_shapes(query_shape, value_shape, key_shape)
        self._build_score(query_shape, key_shape or value_shape)

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        return masking.masked_softmax(logits, mask)  # a_t = softmax(score(h_t, h_s)), Luong eq. 7

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


_INPUTS_LAYOUT = "(batch, length, dim)"


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
        training: enables dropout.

    Returns:
        pooled (B, D), and, if requested, the weights (B, S). A fully padded sequence pools to zeros.

    Example:
    >>> x = keras.layers.Embedding(1000, 64, mask_zero=True)(tokens)
    >>> h = keras.layers.Bidirectional(keras.layers.GRU(32, return_sequences=True))(x)
    >>> logits = keras.layers.Dense(3)(AttentionPooling()(h))
    """

    def __init__(self, score="additive", query_dim=None, dropout=0.0, seed=None, **kwargs):
        super().__init__(score=score, dropout=dropout, seed=seed, **kwargs)
        self.query_dim = positive_int(query_dim, "query_dim", allow_none=True)

    def build(self, inputs_shape):
        check_rank(inputs_shape, 3, "inputs", _INPUTS_LAYOUT)
        dim = self.query_dim or inputs_shape[-1]
        self.query = self.add_weight(name="query", shape=(dim,), initializer="glorot_uniform")
        self._build_score((inputs_shape[0], dim), inputs_shape)

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        return masking.masked_softmax(logits, mask)  # a = softmax(score(u, h_s)), Yang et al. eq. 9

    def call(self, inputs, mask=None, return_attention_scores=False, training=None):
        inputs = ops.convert_to_tensor(check_tensor(inputs, "inputs", _INPUTS_LAYOUT))
        check_rank(inputs.shape, 3, "inputs", _INPUTS_LAYOUT)
        check_feature_size(inputs.shape, self._key_dim, "inputs")
        # Checked here so that an error names this layer's argument, `mask`.
        mask = masking.check_mask(mask, "mask", tuple(ops.shape(inputs)[:2]))
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
