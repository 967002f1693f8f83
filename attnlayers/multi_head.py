"""Multi-head attention: a drop-in for ``keras.layers.MultiHeadAttention`` (same arguments, same weights in the
same order) with any score function per head, grouped-query attention, a key/value cache for incremental
decoding, sliding windows and position hooks (rotary embeddings, additive position biases).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_N) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

Per-head tensors are (B, T, N, H), the layout of keras' layer and of ``keras.ops.dot_product_attention``;
attention weights are (B, N, T, S).
"""

import math
import string

import keras
import numpy as np
from keras import ops

from attnlayers import masking
from attnlayers.scoring import DotScore, ScaledDotScore, get_score, serialize_score


def _positive_int(value, name, allow_none=False):
    if allow_none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        expected = "a positive integer or None" if allow_none else "a positive integer"
        raise ValueError(f"`{name}` must be {expected}; received {name}={value!r}.")
    return int(value)


def _fmt(shape):
    return "(" + ", ".join("None" if s is None else str(s) for s in shape) + ")"


def _same(a, b):
    return a is None or b is None or a == b


def _is_python_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _deserialize_layer(layer, name):
    if layer is None or isinstance(layer, keras.layers.Layer):
        return layer
    if isinstance(layer, dict):
        return keras.saving.deserialize_keras_object(layer)
    raise ValueError(f"`{name}` must be a Keras layer, its serialized config or None; received {layer!r}.")


def _serialize_layer(layer):
    return None if layer is None else keras.saving.serialize_keras_object(layer)


class _Hooks:
    """Holds the hook layers until ``build``. Keras does not track a plain object's attributes, so the
    hooks' weights are created (and listed) after the projections: ``get_weights()`` starts with exactly
    keras' weights, in keras' order."""

    def __init__(self, scorer, rotary, position_bias):
        self.scorer = scorer
        self.rotary = rotary
        self.position_bias = position_bias


@keras.saving.register_keras_serializable(package="attnlayers")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2), for self- and cross-attention.

    A drop-in for ``keras.layers.MultiHeadAttention``: the same constructor and call arguments, and the
    same weights in the same order (query, key, [gate,] value kernels (D, N, H) and biases (N, H), then the
    output kernel (N, H, D) and bias (D,)), so ``ours.set_weights(keras_layer.get_weights())`` reproduces
    keras' outputs. Beyond keras:

    - ``score``: any score of ``attnlayers.scoring`` applied per head (dot and scaled dot use a fused
      einsum path; other scores fold the heads into the batch and reuse the single-head Score layers);
    - ``num_key_value_heads``: grouped-query attention (1 = multi-query), query head n using key/value
      head ``n // (N / N_kv)``;
    - a key/value cache for incremental decoding (keras-hub's ``CachedMultiHeadAttention`` layout);
    - position hooks: ``rotary`` (a :class:`~attnlayers.positional.RotaryEmbedding`, applied to queries and
      keys at their absolute positions) and ``position_bias`` (a layer such as
      :class:`~attnlayers.positional.RelativePositionBias` or :class:`~attnlayers.positional.ALiBi`), plus
      an ``attention_bias`` call argument;
    - the returned scores are the weights actually applied (after dropout) on every path, and a query with
      no visible key gets zero weights and a zero output (keras gives the mean of the values).

    Query t is taken to sit at absolute position ``S - T + t`` among the S keys (the queries are the last
    T positions), or at ``cache_update_index + t`` when a cache is updated. This is the offset of the
    causal mask, the sliding window and the position hooks. (keras aligns its causal mask at the top left
    instead; the two agree whenever T == S.)

    Args:
        num_heads: N, number of query heads.
        key_dim: H, size of each query/key head.
        value_dim: size of each value head; defaults to ``key_dim``.
        dropout: dropout rate on the attention weights (training only).
        use_bias: whether the projections have biases.
        output_shape: the output's feature shape (int or tuple); defaults to the query's feature size.
        attention_axes: only None (or the sequence axis, 1 / -2) is supported: inputs are (B, T, D).
        sliding_window: None or a positive int W: query t attends keys within W - 1 positions of its own
            (keras' semantics; combine with ``use_causal_mask`` for a causal sliding window).
        use_gate: gated attention as in keras (a sigmoid gate from the query multiplies the heads).
        flash_attention: accepted for keras compatibility; only None/False (no fused kernel is used).
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer, activity_regularizer,
            kernel_constraint, bias_constraint: of the projections, as in keras.
        seed: seed of the dropout.
        score: the per-head score: a name ("scaled_dot", "dot", "general", "additive", "cosine", "mlp",
            "location", ...), a ``Score`` instance or its config. Default "scaled_dot" (eq. 1).
        num_key_value_heads: N_kv, dividing ``num_heads``; defaults to ``num_heads``.
        rotary: a layer called as ``rotary(x, start_index=...)`` on (B, T, N, H) queries and keys, e.g.
            ``RotaryEmbedding()``.
        position_bias: a layer called as ``bias(query, key, start_index=...)`` on the (B, T, N, H) queries
            and (B, S, N_kv, H) keys, returning a (1 or B, N, T, S) bias added to the logits before masking.

    Call arguments:
        query: (B, T, D_q).
        value: (B, S, D_v).
        key: (B, S, D_k); defaults to ``value``.
        query_mask: (B, T) boolean padding mask of the queries; padded queries get a zero output.
        value_mask: (B, S) boolean padding mask of the keys/values (with a cache: (B, S_max)).
        key_mask: (B, S), combined with ``value_mask``.
            Implicit Keras masks on query / value / key fill these when they are not given.
        attention_mask: (B, T, S) boolean (True = may attend); axes of size 1 broadcast.
        return_attention_scores: also return the attention weights.
        training: enables dropout.
        use_causal_mask: query t attends keys up to its own position only (see the offset above).
        cache: (B, 2, S_max, N_kv, H) keys and values (``key_dim`` must equal ``value_dim``). With
            ``cache_update_index``, the keys and values of this call are projected, written into the cache
            at that index and attention runs over the whole cache (positions not yet written are masked);
            without it, the cache is used as is and ``key`` / ``value`` are ignored (static cross-attention
            cache).
        cache_update_index: int or scalar int tensor, the position of the first query / new key.
        attention_bias: (B or 1, N or 1, T, S) additive bias on the logits (e.g. a shared
            ``RelativePositionBias`` output).

    Returns:
        output: (B, T, D) (or (B, T) + ``output_shape``); then, if requested, the scores (B, N, T, S); then,
        if a cache was given, the (updated) cache (B, 2, S_max, N_kv, H). Order as in keras-hub:
        ``output``, ``(output, scores)``, ``(output, cache)`` or ``(output, scores, cache)``.

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, num_key_value_heads=2,
    ...                                rotary=RotaryEmbedding())
    >>> y = attention(x, x, use_causal_mask=True)                   # training: (B, T, 512)
    >>> cache = ops.zeros((B, 2, max_length, 2, 64))
    >>> y, cache = attention(x_t, x_t, cache=cache, cache_update_index=t, use_causal_mask=True)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        use_gate=False,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        score="scaled_dot",
        num_key_value_heads=None,
        rotary=None,
        position_bias=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True
        self._num_heads = _positive_int(num_heads, "num_heads")
        self._key_dim = _positive_int(key_dim, "key_dim")
        self._value_dim = _positive_int(value_dim, "value_dim", allow_none=True) or self._key_dim
        self._num_key_value_heads = _positive_int(num_key_value_heads, "num_key_value_heads", allow_none=True)
        kv_heads = self._num_key_value_heads or self._num_heads
        if self._num_heads % kv_heads:
            raise ValueError(
                f"`num_heads` must be a multiple of `num_key_value_heads`; received num_heads={num_heads}, "
                f"num_key_value_heads={num_key_value_heads}."
            )
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be a float in [0, 1); received dropout={dropout!r}.")
        self._dropout = dropout
        self._use_bias = bool(use_bias)
        if output_shape is not None and output_shape != ():
            if isinstance(output_shape, (int, np.integer)):
                output_shape = (output_shape,)
            if not isinstance(output_shape, (tuple, list)) or not all(
                _is_python_int(d) and d > 0 for d in output_shape
            ):
                raise ValueError(
                    f"`output_shape` must be None, a positive int or a tuple of positive ints; received "
                    f"output_shape={output_shape!r}."
                )
            output_shape = tuple(int(d) for d in output_shape)
        else:
            output_shape = None
        self._output_shape = output_shape
        if attention_axes is not None:
            axes = (attention_axes,) if _is_python_int(attention_axes) else attention_axes
            if not isinstance(axes, (tuple, list)) or tuple(axes) not in ((1,), (-2,)):
                raise ValueError(
                    "attnlayers.MultiHeadAttention attends over the sequence axis of (batch, length, dim) "
                    f"inputs only: `attention_axes` must be None, 1 or -2; received attention_axes="
                    f"{attention_axes!r}."
                )
            attention_axes = tuple(axes)
        self._attention_axes = attention_axes
        self._sliding_window = _positive_int(sliding_window, "sliding_window", allow_none=True)
        self._use_gate = bool(use_gate)
        if flash_attention:
            raise ValueError(
                "`flash_attention=True` is not supported: attnlayers.MultiHeadAttention has no fused kernel "
                f"(it returns scores and zeroes fully-masked rows on every path); received "
                f"flash_attention={flash_attention!r}, expected None or False."
            )
        self._kernel_initializer = keras.initializers.get(kernel_initializer)
        self._bias_initializer = keras.initializers.get(bias_initializer)
        self._kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self._bias_regularizer = keras.regularizers.get(bias_regularizer)
        self._activity_regularizer = keras.regularizers.get(activity_regularizer)
        self._kernel_constraint = keras.constraints.get(kernel_constraint)
        self._bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed

        self._score_identifier = score
        scorer = get_score(score, dtype=self.dtype_policy) if isinstance(score, str) else get_score(score)
        # Dot and scaled dot run as one einsum over all heads (eq. 1); exact types only, since a subclass
        # may override `score`.
        if type(scorer) is DotScore:
            self._fused_scale = 1.0
        elif type(scorer) is ScaledDotScore:
            self._fused_scale = scorer.scale if scorer.scale is not None else 1.0 / math.sqrt(self._key_dim)
        else:
            self._fused_scale = None
        self._hooks = _Hooks(
            scorer, _deserialize_layer(rotary, "rotary"), _deserialize_layer(position_bias, "position_bias")
        )
        self._dropout_layer = (
            keras.layers.Dropout(dropout, seed=seed, dtype=self.dtype_policy) if dropout > 0 else None
        )

    # keras-compatible read-only properties.
    num_heads = property(lambda self: self._num_heads)
    key_dim = property(lambda self: self._key_dim)
    value_dim = property(lambda self: self._value_dim)
    dropout = property(lambda self: self._dropout)
    use_bias = property(lambda self: self._use_bias)
    attention_axes = property(lambda self: self._attention_axes)
    num_key_value_heads = property(lambda self: self._num_key_value_heads or self._num_heads)
    query_dense = property(lambda self: self._query_dense)
    key_dense = property(lambda self: self._key_dense)
    value_dense = property(lambda self: self._value_dense)
    output_dense = property(lambda self: self._output_dense)
    scorer = property(lambda self: self._hooks.scorer)
    rotary = property(lambda self: self._hooks.rotary)
    position_bias = property(lambda self: self._hooks.position_bias)

    def _sublayer_kwargs(self):
        def clone(initializer):  # a fresh instance per sublayer, so they do not share init values
            return initializer.__class__.from_config(initializer.get_config())

        return dict(
            kernel_initializer=clone(self._kernel_initializer),
            bias_initializer=clone(self._bias_initializer),
            kernel_regularizer=self._kernel_regularizer,
            bias_regularizer=self._bias_regularizer,
            activity_regularizer=self._activity_regularizer,
            kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint,
            dtype=self.dtype_policy,
        )

    def _projection(self, name, heads, dim, activation=None):
        # x W_i for all heads at once: (B, T, D) x (D, N, H) -> (B, T, N, H).
        layer = keras.layers.EinsumDense(
            "abc,cde->abde",
            output_shape=(None, heads, dim),
            bias_axes="de" if self._use_bias else None,
            activation=activation,
            name=name,
            **self._sublayer_kwargs(),
        )
        # Implicit masks on the inputs are read by this layer; let the projections pass them along
        # silently instead of warning (keras strips them from the caller's tensors instead).
        layer.supports_masking = True
        return layer

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) != 3:
                raise ValueError(
                    f"`{name}` must have shape (batch, length, dim); received shape {_fmt(shape)}."
                )
        if not _same(key_shape[1], value_shape[1]):
            raise ValueError(
                f"`key` and `value` must have the same length; received key shape {_fmt(key_shape)} and "
                f"value shape {_fmt(value_shape)}."
            )
        n, n_kv, h, hv = self._num_heads, self.num_key_value_heads, self._key_dim, self._value_dim
        # Same sublayers, names and creation order as keras.layers.MultiHeadAttention.
        self._query_dense = self._projection("query", n, h)
        self._query_dense.build(query_shape)
        self._key_dense = self._projection("key", n_kv, h)
        self._key_dense.build(key_shape)
        if self._use_gate:
            self._gate_dense = self._projection("gate", n, hv, activation="sigmoid")
            self._gate_dense.build(query_shape)
        self._value_dense = self._projection("value", n_kv, hv)
        self._value_dense.build(value_shape)
        # Concat(head_1, ..., head_N) W^O: (B, T, N, Hv) x (N, Hv, *out) -> (B, T, *out).
        out = self._output_shape or (query_shape[-1],)
        letters = string.ascii_lowercase[4 : 4 + len(out)]
        self._output_dense = keras.layers.EinsumDense(
            f"abcd,cd{letters}->ab{letters}",
            output_shape=(None,) + tuple(out),
            bias_axes=letters if self._use_bias else None,
            name="attention_output",
            **self._sublayer_kwargs(),
        )
        self._output_dense.build((query_shape[0], query_shape[1], n, hv))

        # Hooks, after the projections (see _Hooks).
        head_query = (query_shape[0], query_shape[1], n, h)
        head_key = (key_shape[0], key_shape[1], n_kv, h)
        self._scorer = self._hooks.scorer
        if self._fused_scale is None and not self._scorer.built:
            self._scorer.build((None, query_shape[1], h), (None, key_shape[1], h))
        self._rotary = self._hooks.rotary
        if self._rotary is not None and not self._rotary.built:
            self._rotary.build(head_query)
        self._position_bias = self._hooks.position_bias
        if self._position_bias is not None:
            bias_heads = getattr(self._position_bias, "num_heads", n)
            if bias_heads != n:
                raise ValueError(
                    f"`position_bias` must produce one bias per query head: expected num_heads={n}; "
                    f"received a layer with num_heads={bias_heads}."
                )
            if not self._position_bias.built:
                self._position_bias.build(head_query, head_key)

    # ------------------------------------------------------------------------------------------------
    # Checks

    def _check_inputs(self, query, value, key, cache, cache_update_index, attention_bias):
        for name, x in (("query", query), ("value", value), ("key", key)):
            if len(x.shape) != 3:
                raise ValueError(f"`{name}` must have shape (batch, length, dim); received shape {_fmt(x.shape)}.")
        batch = query.shape[0]
        for name, x in (("value", value), ("key", key)):
            if not _same(batch, x.shape[0]):
                raise ValueError(
                    f"`{name}` must have the batch size of `query`: expected {batch}; received shape "
                    f"{_fmt(x.shape)}."
                )
        if not _same(key.shape[1], value.shape[1]):
            raise ValueError(
                f"`key` and `value` must have the same length; received key shape {_fmt(key.shape)} and "
                f"value shape {_fmt(value.shape)}."
            )
        if cache is None:
            if cache_update_index is not None:
                raise ValueError(
                    "`cache_update_index` is only meaningful with a `cache`; received "
                    f"cache_update_index={cache_update_index!r} and cache=None."
                )
        else:
            expected = (batch, 2, None, self.num_key_value_heads, self._key_dim)
            shape = tuple(cache.shape)
            if self._value_dim != self._key_dim:
                raise ValueError(
                    f"A `cache` stacks keys and values, so it needs key_dim == value_dim; this layer has "
                    f"key_dim={self._key_dim} and value_dim={self._value_dim}."
                )
            if len(shape) != 5 or not all(_same(a, b) for a, b in zip(shape, expected)):
                raise ValueError(
                    f"`cache` must have shape (batch, 2, max_length, num_key_value_heads, key_dim) = "
                    f"{_fmt(expected)}; received shape {_fmt(shape)}."
                )
            if _is_python_int(cache_update_index):
                new, max_length = key.shape[1], shape[2]
                if cache_update_index < 0 or (
                    new is not None and max_length is not None and cache_update_index + new > max_length
                ):
                    raise ValueError(
                        f"`cache_update_index`={cache_update_index} writes {new} new key(s) beyond a cache of "
                        f"max_length {max_length}: expected 0 <= cache_update_index <= {max_length} - {new}."
                    )
            elif cache_update_index is not None and len(getattr(cache_update_index, "shape", (0,))) != 0:
                raise ValueError(
                    "`cache_update_index` must be a Python int or a scalar integer tensor; received "
                    f"{cache_update_index!r}."
                )
        if attention_bias is not None and len(attention_bias.shape) != 4:
            raise ValueError(
                "`attention_bias` must have shape (batch or 1, num_heads or 1, query_length, key_length); "
                f"received shape {_fmt(attention_bias.shape)}."
            )

    # ------------------------------------------------------------------------------------------------
    # Attention

    def _logits(self, query, key):
        """(B, T, N, H) queries and (B, S, N_kv, H) keys -> (B, N, T, S) logits."""
        n, n_kv = self._num_heads, self.num_key_value_heads
        groups = n // n_kv
        if self._fused_scale is not None:
            # Q K^T / sqrt(d_k) (eq. 1); the scale goes on the (B, T, N, H) queries, not the logits.
            query = query * ops.cast(self._fused_scale, query.dtype)
            if groups == 1:
                return ops.einsum("btnh,bsnh->bnts", query, key)
            batch, length = ops.shape(query)[0], ops.shape(query)[1]
            grouped = ops.reshape(query, (batch, length, n_kv, groups, self._key_dim))
            logits = ops.einsum("btkgh,bskh->bkgts", grouped, key)
            return ops.reshape(logits, (batch, n, length, ops.shape(key)[1]))
        # Any other score: fold the heads into the batch, (B, L, N, H) -> (B * N, L, H).
        if groups > 1:
            key = ops.repeat(key, groups, axis=2)

        def fold(x):
            x = ops.transpose(x, (0, 2, 1, 3))
            return ops.reshape(x, (-1, ops.shape(x)[2], self._key_dim))

        logits = self._scorer(fold(query), fold(key))  # (B * N, T, S)
        shape = (-1, n, ops.shape(query)[1], ops.shape(key)[1])
        return ops.cast(ops.reshape(logits, shape), self.compute_dtype)

    def _combine(self, weights, value):
        """(B, N, T, S) weights and (B, S, N_kv, Hv) values -> (B, T, N, Hv) heads."""
        n, n_kv = self._num_heads, self.num_key_value_heads
        groups = n // n_kv
        if groups == 1:
            return ops.einsum("bnts,bsnh->btnh", weights, value)
        batch, length = ops.shape(weights)[0], ops.shape(weights)[2]
        grouped = ops.reshape(weights, (batch, n_kv, groups, length, ops.shape(weights)[3]))
        heads = ops.einsum("bkgts,bskh->btkgh", grouped, value)
        return ops.reshape(heads, (batch, length, n, self._value_dim))

    def _rotate(self, x, start_index):
        return ops.cast(self._rotary(x, start_index=start_index), x.dtype)

    def _key_side_mask(self, value_mask, key_mask, batch, key_length, cached):
        masks = []
        for name, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
            if mask is None:
                continue
            if cached and len(mask.shape) == 2 and not _same(mask.shape[1], key_length):
                raise ValueError(
                    f"With a `cache`, `{name}` masks the cache positions: expected shape "
                    f"{_fmt((batch, key_length))}; received shape {_fmt(mask.shape)}. (An implicit Keras mask "
                    f"of the new tokens cannot be placed in the cache: pass an `attention_mask` instead.)"
                )
            masks.append(masking.check_mask(mask, name, (batch, key_length)))
        return masking.combine_masks(*masks)

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        attention_bias=None,
    ):
        key = value if key is None else key
        self._check_inputs(query, value, key, cache, cache_update_index, attention_bias)
        batch = query.shape[0]

        # Projections: Q W^Q, K W^K, V W^V for all heads, (B, L, D) -> (B, L, N, H).
        q = self._query_dense(query)
        gate = self._gate_dense(query) if self._use_gate else None
        written = None
        if cache is not None and cache_update_index is None:  # static cache: use as is
            cache = ops.cast(cache, self.compute_dtype)
            k, v = cache[:, 0], cache[:, 1]
            start = None
        else:
            k, v = self._key_dense(key), self._value_dense(value)
            if cache is not None:
                # Write the new keys (rotated at their absolute positions) and values into the cache.
                if self._rotary is not None:
                    k = self._rotate(k, cache_update_index)
                cache = ops.cast(cache, self.compute_dtype)
                new_length = key.shape[1] if key.shape[1] is not None else ops.shape(key)[1]
                # Cache position s takes new entry s - index when 0 <= s - index < new_length. A gather and a
                # select rather than slice_update: same O(cache) cost as the stack below, and differentiable
                # on every backend (TensorFlow has no gradient for XLA's dynamic update slice).
                relative = ops.arange(ops.shape(cache)[2], dtype="int32") - ops.cast(cache_update_index, "int32")
                is_new = ops.reshape(ops.logical_and(relative >= 0, relative < new_length), (1, -1, 1, 1))
                source = ops.clip(relative, 0, new_length - 1)
                k = ops.where(is_new, ops.take(k, source, axis=1), cache[:, 0])
                v = ops.where(is_new, ops.take(v, source, axis=1), cache[:, 1])
                cache = ops.stack((k, v), axis=1)
                # Cache positions not written yet hold no key.
                written = ops.reshape(relative < new_length, (1, 1, -1))
                start = cache_update_index
            else:
                start = None
                if self._rotary is not None:
                    k = self._rotate(k, 0)

        query_length = q.shape[1] if q.shape[1] is not None else ops.shape(q)[1]
        key_length = k.shape[1] if k.shape[1] is not None else ops.shape(k)[1]
        if start is None:  # queries are the last T of the S positions
            start = key_length - query_length
        if self._rotary is not None:
            q = self._rotate(q, start)

        # Masks: padding, explicit, causal, window, unwritten cache positions; broadcastable to (B, T, S).
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, q.shape[1]))
        key_padding = self._key_side_mask(value_mask, key_mask, batch, k.shape[1], cache is not None)
        attention_mask = masking.check_mask(attention_mask, "attention_mask", (batch, q.shape[1], k.shape[1]))
        mask = masking.compute_attention_mask(
            query_length, key_length, query_mask, key_padding, attention_mask, use_causal_mask, offset=start
        )
        if self._sliding_window is not None:
            mask = masking.combine_masks(mask, self._window_mask(query_length, key_length, start)[None])
        mask = masking.combine_masks(mask, written)

        logits = self._logits(q, k)  # (B, N, T, S)
        if self._position_bias is not None:
            logits = logits + ops.cast(self._position_bias(q, k, start_index=start), logits.dtype)
        if attention_bias is not None:
            logits = logits + ops.cast(attention_bias, logits.dtype)
        # softmax over the keys (eq. 1); fully-masked rows get all-zero weights; float32 under mixed precision.
        weights = masking.masked_softmax(logits, None if mask is None else ops.expand_dims(mask, 1))
        if self._dropout_layer is not None:
            weights = self._dropout_layer(weights, training=training)  # the returned weights are the applied ones
        heads = self._combine(weights, v)  # (B, T, N, Hv)
        if gate is not None:
            heads = heads * gate
        output = self._output_dense(heads)  # Concat(head_1..head_N) W^O
        if mask is not None:
            # A query with nothing visible outputs 0 (not the output bias).
            visible = ops.any(mask, axis=-1)
            visible = ops.reshape(visible, ops.shape(visible) + (1,) * (len(output.shape) - 2))
            output = ops.where(visible, output, ops.zeros_like(output))

        outputs = (output,)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _window_mask(self, query_length, key_length, start):
        """keras' band: |i - j| < sliding_window, i the absolute query position."""
        if self._sliding_window > 1:
            return masking.sliding_window_mask(query_length, key_length, self._sliding_window - 1, offset=start)
        # Window 1: each query sees its own position only (j <= i and not j <= i - 1).
        return ops.logical_and(
            masking.causal_mask(query_length, key_length, start),
            ops.logical_not(masking.causal_mask(query_length, key_length, start - 1)),
        )

    # ------------------------------------------------------------------------------------------------
    # Shapes and config

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        query_shape = tuple(query_shape)
        if self._output_shape:
            return query_shape[:-1] + self._output_shape
        return query_shape

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        attention_bias=None,
    ):
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape), dtype=self.compute_dtype
        )
        outputs = (output,)
        if return_attention_scores:
            key_length = cache.shape[2] if cache is not None else value.shape[1]
            outputs += (
                keras.KerasTensor(
                    (query.shape[0], self._num_heads, query.shape[1], key_length), dtype=self.compute_dtype
                ),
            )
        if cache is not None:
            outputs += (keras.KerasTensor(cache.shape, dtype=self.compute_dtype),)
        return outputs[0] if len(outputs) == 1 else outputs

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self._num_heads,
            "key_dim": self._key_dim,
            "value_dim": self._value_dim,
            "dropout": self._dropout,
            "use_bias": self._use_bias,
            "use_gate": self._use_gate,
            "output_shape": self._output_shape,
            "attention_axes": self._attention_axes,
            "sliding_window": self._sliding_window,
            "kernel_initializer": keras.initializers.serialize(self._kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self._bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self._kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self._bias_regularizer),
            "activity_regularizer": keras.regularizers.serialize(self._activity_regularizer),
            "kernel_constraint": keras.constraints.serialize(self._kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self._bias_constraint),
            "seed": self.seed,
            "score": serialize_score(self._score_identifier),
            "num_key_value_heads": self._num_key_value_heads,
            "rotary": _serialize_layer(self._hooks.rotary),
            "position_bias": _serialize_layer(self._hooks.position_bias),
        }
