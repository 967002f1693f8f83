"""Multi-head attention: a drop-in for ``keras.layers.MultiHeadAttention`` (same arguments, same weights in the
same order) with any score function per head, grouped-query attention, a key/value cache for incremental
decoding, sliding windows and position hooks (rotary embeddings, additive position biases).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_N) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

Per-head tensors are (B, T, N, H), the layout of keras' layer and of ``keras.ops.dot_product_attention``;
attention weights are (B, N, T, S). The layer projects, masks and combines the heads; how attention is computed
(the exact route here, or the chunked or fused kernels) is :mod:`attnlayers.routes`' choice; the cached decoding
step is :mod:`attnlayers.kv_cache`'s; attention over other axes folds into sequences (:mod:`attnlayers.attention_axes`).
"""

import collections
import string
import warnings

import keras
from keras import ops

from attnlayers import chunked, kv_cache, masking, routes, segment_memory
from attnlayers.attention_axes import AxesFold, check_attention_axes
from attnlayers.attention_inputs import (  # noqa: F401 (CAUSAL_ALIGNMENTS: the option's values, public here)
    CAUSAL_ALIGNMENTS,
    causal_alignment_argument,
    check_attention_bias,
    check_key_value_shapes,
    check_sequences,
    keras_positive_int,
    key_value_heads_argument,
    output_shape_argument,
    warn_keras_only_overrides,
)
from attnlayers.heads import folded_logits, fused_projections, grouped_combine, grouped_logits
from attnlayers.hooks import Hooks, dot_scale
from attnlayers.routes import IMPLEMENTATIONS, AttentionRoute  # noqa: F401 (the layer's option values, its record)
from attnlayers.scoring import get_score, serialize_score
from attnlayers.validation import (
    check_rank,
    check_tensor,
    format_shape,
    positive_int,
    rate_in_unit_interval,
)

__all__ = ["AttentionOutputs", "MultiHeadAttention"]

_SEQUENCE = "(batch, length, dim)"
_length = masking.sequence_length


class AttentionOutputs(collections.namedtuple("AttentionOutputs", ["output", "scores", "cache"])):
    """The parts of a :class:`MultiHeadAttention` result by name: ``output`` (B, T, D), ``scores``
    (B, N, T, S) or None, ``cache`` (B, 2, S_max, N_kv, H) or None.

    ``AttentionOutputs.unpack(layer(...), return_attention_scores, cache is not None)`` reads any of the
    layer's return structures; ``pack()`` builds them.

    Attributes:
        output: (B, T, D).
        scores: (B, N, T, S), or None.
        cache: (B, 2, S_max, N_kv, H), or None.
    """

    __slots__ = ()

    @classmethod
    def unpack(cls, outputs, return_attention_scores=False, has_cache=False):
        """The outputs of a call, as the tuple :meth:`pack` returns, read back into fields.

        Args:
            outputs: what the layer returned: ``output``, or a tuple ``(output[, scores][, cache])``.
            return_attention_scores: the tuple holds the scores.
            has_cache: the tuple ends with the cache.

        Returns:
            An :class:`AttentionOutputs` (absent parts None).
        """
        if not (return_attention_scores or has_cache):
            return cls(outputs, None, None)
        outputs = tuple(outputs)
        scores = outputs[1] if return_attention_scores else None
        return cls(outputs[0], scores, outputs[-1] if has_cache else None)

    def pack(self, return_attention_scores=False):
        """``output``, ``(output, scores)``, ``(output, cache)`` or ``(output, scores, cache)``.

        Args:
            return_attention_scores: include ``scores`` (B, N, T, S); the cache (B, 2, S_max, N_kv, H) is included
                whenever it is not None.

        Returns:
            ``output`` (B, T, D) alone, or the tuple.
        """
        parts = (self.output,) + ((self.scores,) if return_attention_scores else ())
        parts += () if self.cache is None else (self.cache,)
        return parts[0] if len(parts) == 1 else parts


#: The methods a subclass may override to change what attention computes (keras' and attnlayers' own); a subclass
#: that overrides any of them is computed on the exact route, which calls them (and :meth:`single_step` refuses it,
#: as a subclass overriding ``_update_cache``).
_OVERRIDE_POINTS = ("_compute_attention", "_compute_logits", "_combine", "_compute_attention_mask", "_masked_softmax")


def _overridden(cls, names=_OVERRIDE_POINTS):
    """The methods of ``names`` that ``cls`` overrides (a tuple, in the order of ``names``)."""
    return tuple(name for name in names if getattr(cls, name) is not getattr(MultiHeadAttention, name))


@keras.saving.register_keras_serializable(package="attnlayers")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention (Vaswani et al. 2017, section 3.2.2), for self- and cross-attention.

    A drop-in for ``keras.layers.MultiHeadAttention``: the same constructor and call arguments, and the same weights
    in the same order (query, key, [gate,] value kernels (D, N, H) and biases (N, H), then the output kernel
    (N, H, D) and bias (D,)), so ``ours.set_weights(keras_layer.get_weights())`` reproduces keras' outputs. Beyond
    keras: any ``score`` of ``attnlayers.scoring`` per head; grouped-query attention (``num_key_value_heads``); a
    key/value cache for incremental decoding (keras-hub's ``CachedMultiHeadAttention`` layout); position hooks
    (``rotary``, ``position_bias``, the ``attention_bias`` argument); the returned scores are the weights actually
    applied (after dropout) on every route, and a query with no visible key gets zero weights and a zero output
    (keras gives the mean of the values).

    Query t sits at absolute position ``t`` among the S keys (keras' top-left alignment), at ``S - T + t`` with
    ``causal_alignment="bottom_right"``, or at ``cache_update_index + t`` when a cache is updated: the offset of
    the causal mask, the sliding window and the position hooks. Inputs of any rank attend over ``attention_axes``
    as keras' layer (2-D attention over (B, H, W, C) images: ``attention_axes=(1, 2)``), folded into (B', T', D)
    sequences by :mod:`attnlayers.attention_axes` with keras' output, score and attention-mask layouts.

    Override points, as in keras: ``_compute_attention(query, key, value, attention_mask, training,
    return_attention_scores, use_causal_mask)`` maps projected per-head tensors to ``(attention_output
    (B, T, N, Hv), attention_scores (B, N, T, S))``; ``_compute_attention_mask`` assembles the boolean mask;
    ``_masked_softmax(attention_scores, attention_mask)`` turns (B, N, T, S) logits into weights; ``_update_cache``
    writes a call's keys and values into the cache. A subclass overriding keras' other private methods
    (``_build_attention``, ``_compute_causal_mask``, ...), which this layer does not call, is warned.

    Args:
        num_heads: N, number of query heads.
        key_dim: H, size of each query/key head.
        value_dim: size of each value head; defaults to ``key_dim``.
        dropout: dropout rate on the attention weights (training only).
        use_bias: whether the projections have biases.
        output_shape: the output's feature shape (int or tuple); defaults to the query's feature size.
        attention_axes: None (every axis between the batch and the feature axis), an int or a tuple of ints: the
            axes attended over, as keras. Other than (B, T, D) attended over axis 1, a call takes
            ``attention_mask`` (keras' layout) but no padding masks, cache or ``attention_bias``; the causal
            rule, the window and the position hooks need a single attention axis.
        sliding_window: None or a positive int W: query t attends keys within W - 1 positions of its own
            (keras' semantics; combine with ``use_causal_mask`` for a causal sliding window).
        use_gate: gated attention as in keras (a sigmoid gate from the query multiplies the heads).
        flash_attention: keras' switch, an alias of ``implementation``: True is "fused" under JAX and "chunked"
            under TensorFlow (no fused kernel there); False is "exact"; None leaves ``implementation`` to decide
            (keras' global ``enable_flash_attention()`` is not read). As keras, True refuses ``dropout`` > 0 and
            ``return_attention_scores``; ``implementation="chunked"`` keeps the dropout.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer, activity_regularizer,
            kernel_constraint, bias_constraint: of the projections, as in keras.
        seed: seed of the dropout.
        score: the per-head score: a name ("scaled_dot", "dot", "general", "additive", "cosine", "mlp",
            "location", ...), a ``Score`` instance or its config. Default "scaled_dot" (eq. 1).
        num_key_value_heads: N_kv, dividing ``num_heads`` (1 = multi-query); query head n reads key/value head
            ``n // (N / N_kv)``. Defaults to ``num_heads``.
        rotary: a layer called as ``rotary(x, start_index=...)`` on (B, T, N, H) queries and keys at their
            absolute positions, e.g. ``RotaryEmbedding()``.
        position_bias: a layer called as ``bias(query, key, start_index=...)`` on the (B, T, N, H) queries
            and (B, S, N_kv, H) keys, returning a (1 or B, N, T, S) bias added to the logits before masking
            (``RelativePositionBias``, ``ALiBi``).
        implementation: how attention is computed, each route the same function, masks included: "exact" (the
            (B, N, T, S) weights; the only route for returned scores, caches, other scores and the override points),
            "chunked" (blocks with the online softmax, every backend), "fused" (the backend's kernel: JAX), "flash"
            (a Pallas kernel for JAX on a GPU that keeps the attention dropout: :mod:`attnlayers.flash_dropout`) or
            "auto" (default: "fused" where cuDNN takes the call, else "chunked" from T >= 4096, else "exact";
            not "flash" until its kernels have run on a GPU).
            What each needs and refuses: :mod:`attnlayers.routes` and docs/guides/attention-implementations.md;
            :meth:`attention_implementation` predicts a call's route, :attr:`last_attention` records it.
        memory_efficient: the older alias: True is "chunked", False "exact" (kept so that saved configs load).
        causal_alignment: "top_left" (default, keras') or "bottom_right": where T queries sit among S keys when
            no ``cache_update_index`` says it (see above).

    Call arguments:
        query: (B, T, D_q). value: (B, S, D_v). key: (B, S, D_k); defaults to ``value``.
        query_mask: (B, T) boolean padding mask of the queries; padded queries get a zero output.
        value_mask: (B, S) boolean padding mask of the keys/values (with a cache: (B, S_max)).
        key_mask: (B, S), combined with ``value_mask``.
            Implicit Keras masks on query / value / key fill these when they are not given.
        attention_mask: (B, T, S), (T, S), (B, 1, T, S) or per head (B, N, T, S); boolean (True = may attend),
            integer or float (nonzero = may attend, keras' cast); axes of size 1 broadcast.
        return_attention_scores: also return the attention weights.
        training: enables dropout.
        use_causal_mask: query t attends keys up to its own position only (see the alignment above).
        cache: (B, 2, S_max, N_kv, H) keys and values (``key_dim`` must equal ``value_dim``). With
            ``cache_update_index``, the keys and values of this call are projected, written into the cache
            at that index and attention runs over the whole cache (positions not yet written are masked);
            without it, the cache is used as is and ``key`` / ``value`` are ignored (static cross-attention
            cache).
        cache_update_index: int or scalar int tensor, the position of the first query / new key.
        attention_bias: (B or 1, N or 1, T, S) additive bias on the logits (e.g. a shared
            ``RelativePositionBias`` output).
        memory: (B, M, D) states of the previous segment (Transformer-XL's recurrence, Dai et al. 2019, section
            3.2; the feature size of ``value`` and ``key``): keys and values are computed over
            ``[stop_gradient(memory); value]`` (and ``key``), so S above becomes M + S (scores (B, N, T, M + S)), and
            the queries sit after the memory (query t at position M + t, or M + S - T + t with
            ``causal_alignment="bottom_right"``) for the causal rule, the window and the position hooks. No
            gradient reaches the memory. Not with a cache: write the memory into the cache first (a call on it with
            ``cache_update_index=0``) and decode from index M. ``attention_mask`` still covers the segment's keys.
        memory_mask: (B, M) boolean padding mask of the memory (its implicit Keras mask when omitted).

    Returns:
        One convention, keras-hub's ``CachedMultiHeadAttention`` order: ``output``; ``(output, scores)``
        with ``return_attention_scores``; ``(output, cache)`` with a cache; ``(output, scores, cache)`` with
        both. ``output`` is (B, T, D) (or (B, T) + ``output_shape``), ``scores`` the applied weights
        (B, N, T, S), ``cache`` the (updated) cache (B, 2, S_max, N_kv, H).
        :meth:`AttentionOutputs.unpack` names the parts of any of these.

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, num_key_value_heads=2,
    ...                                rotary=RotaryEmbedding())
    >>> y = attention(x, x, use_causal_mask=True)                   # training: (B, T, 512)
    >>> cache = ops.zeros((B, 2, max_length, 2, 64))
    >>> y, cache = attention(x_t, x_t, cache=cache, cache_update_index=t, use_causal_mask=True)
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        warn_keras_only_overrides(cls, _OVERRIDE_POINTS)

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_shape=None,
                 attention_axes=None, sliding_window=None, use_gate=False, flash_attention=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", kernel_regularizer=None,
                 bias_regularizer=None, activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 seed=None, score="scaled_dot", num_key_value_heads=None, rotary=None, position_bias=None,
                 implementation="auto", memory_efficient=None, causal_alignment="top_left", **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self._num_heads = keras_positive_int(num_heads, "num_heads")
        self._key_dim = keras_positive_int(key_dim, "key_dim")
        self._value_dim = keras_positive_int(value_dim, "value_dim", allow_none=True) or self._key_dim
        self._num_key_value_heads = key_value_heads_argument(num_key_value_heads, self._num_heads)
        self._dropout = rate_in_unit_interval(dropout, "dropout")
        self._use_bias = bool(use_bias)
        self._output_shape = output_shape_argument(output_shape)
        self._attention_axes = check_attention_axes(attention_axes)
        self._fold = None  # an AxesFold where inputs are not (B, T, D) attended over axis 1 (set by build)
        self._causal_alignment = causal_alignment_argument(causal_alignment)
        self._sliding_window = positive_int(sliding_window, "sliding_window", allow_none=True)
        self._use_gate = bool(use_gate)
        self._implementation = routes.resolve_implementation(implementation, flash_attention, memory_efficient,
                                                             self._dropout)
        self._flash_attention = flash_attention
        self._last_attention = None
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
        self._fused_scale = dot_scale(scorer, self._key_dim)  # None: a score other than dot / scaled dot
        self._hooks = Hooks(scorer, rotary, position_bias)
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

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        check_tensor(query_shape, "query", _SEQUENCE)
        check_tensor(value_shape, "value", _SEQUENCE)
        key_shape = value_shape if key_shape is None else key_shape
        check_key_value_shapes(value_shape, key_shape)
        fold = self._axes_fold(query_shape, value_shape, key_shape)
        if not fold.is_sequence:  # attention over other axes: the sublayers see the folded (B', L, D) sequences
            self._fold = fold
            query_shape, value_shape, key_shape = (fold.folded_shape(s) for s in (query_shape, value_shape, key_shape))
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            check_rank(shape, 3, name, _SEQUENCE)
        # Feature sizes the projections are built for; a later call must match them.
        self._built_sizes = (query_shape[-1], value_shape[-1], key_shape[-1])
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

        # Hooks, after the projections (see attnlayers.hooks.Hooks), tracked in this order.
        self._hooks.build(query_shape, key_shape, n, n_kv, h)
        hooks = self._hooks
        self._scorer, self._rotary, self._position_bias = hooks.scorer, hooks.rotary, hooks.position_bias

    def _axes_fold(self, query_shape, value_shape, key_shape):
        """The :class:`~attnlayers.attention_axes.AxesFold` of inputs of these shapes and ``attention_axes``."""
        return AxesFold.of_shapes(self._attention_axes, query_shape, value_shape, key_shape)

    # ------------------------------------------------------------------------------------------------
    # Checks

    def _check_inputs(self, query, value, key, cache, cache_update_index, attention_bias):
        """The call's sequences, cache and bias, checked (:mod:`attnlayers.attention_inputs`, ``kv_cache``)."""
        static_cache = cache is not None and cache_update_index is None  # it ignores key and value
        check_sequences(query, value, key, self._built_sizes, projected_keys=not static_cache)
        kv_cache.check_cache(cache, cache_update_index, batch=query.shape[0], new_length=key.shape[1],
                             num_key_value_heads=self.num_key_value_heads, key_dim=self._key_dim,
                             value_dim=self._value_dim)
        check_attention_bias(attention_bias)

    # ------------------------------------------------------------------------------------------------
    # Attention

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None, attention_mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False, cache=None, cache_update_index=None,
             attention_bias=None, memory=None, memory_mask=None):
        key = value if key is None else key
        if self._flash_attention and return_attention_scores:
            raise ValueError("Returning attention scores is not supported when flash attention is enabled. Please "
                             "disable flash attention to access attention scores.")
        inputs = (query, key)
        if self._fold is not None:  # rank > 3: the `attention_axes` folded into (B', T', D) sequences
            query, value, key, attention_mask = self._fold_inputs(
                query, value, key, attention_mask, use_causal_mask, query_mask=query_mask, value_mask=value_mask,
                key_mask=key_mask, cache=cache, cache_update_index=cache_update_index, attention_bias=attention_bias,
                memory=memory, memory_mask=memory_mask)
        memory_length = 0
        if memory is not None:  # Transformer-XL's recurrence: keys and values over [SG(memory); segment]
            memory_length = _length(memory)
            value, key, value_mask, attention_mask = self._prepend_memory(
                memory, memory_mask, value, key, value_mask, key_mask, attention_mask, cache)
            key_mask = None
        elif memory_mask is not None:
            raise ValueError("`memory_mask` masks the steps of a `memory`; received a memory_mask and no memory.")
        self._check_inputs(query, value, key, cache, cache_update_index, attention_bias)
        # Q W^Q, K W^K, V W^V for all heads, (B, L, D) -> (B, L, N, H); a cache is written and read.
        q, k, v, cache, cache_mask = self._project(query, value, key, cache, cache_update_index)
        # Query t sits at absolute position start + t: the cache index, else by `causal_alignment` among the
        # segment's keys, after the memory's M.
        start = cache_update_index if cache_update_index is not None else (
            memory_length + self._query_start(_length(q), _length(k) - memory_length))
        q = self._rotate(q, start)
        attention_mask = masking.keras_attention_mask(attention_mask)
        route = routes.choose(self._route_call(q.shape[1], k.shape[1], q.dtype, return_attention_scores,
                                               cache is not None, training, attention_mask, attention_bias))
        self._last_attention = AttentionRoute(route)  # the fused route adds its kernel
        heads = scores = None
        if route != "exact":  # the chunked, fused or flash kernel (attnlayers.routes)
            heads, mask = self._attend_blocked(route, q, k, v, (query_mask, value_mask, key_mask, attention_mask),
                                               use_causal_mask, start, training, attention_bias)
        if heads is None:  # the exact route (or the fused route's fallback where cuDNN refused the call)
            mask = self._compute_attention_mask(
                q, k, query_mask, value_mask, key_mask, attention_mask, use_causal_mask,
                start_index=start, cache_mask=cache_mask, cached=cache is not None,
            )
            bias = self._hooks.bias(q, k, start, attention_bias)
            bias_kwargs = {} if bias is None else {"attention_bias": bias}  # keras' signature when there is none
            heads, scores = self._invoke_compute_attention(q, k, v, mask, training, return_attention_scores,
                                                           **bias_kwargs)
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        output = self._output_dense(heads)  # Concat(head_1, ..., head_N) W^O
        output = masking.zero_invisible_queries(output, mask)  # a query that sees no key outputs 0
        if self._fold is not None:  # keras' layouts of the rank-r inputs
            output = self._fold.unfold_output(output, inputs[0])
            scores = self._fold.unfold_scores(scores, *inputs) if return_attention_scores else None
        return AttentionOutputs(output, scores, cache).pack(return_attention_scores)

    def _prepend_memory(self, memory, memory_mask, value, key, value_mask, key_mask, attention_mask, cache):
        """``(value, key, value_mask, attention_mask)`` over [SG(memory); segment] (Dai et al. 2019, section 3.2;
        :func:`attnlayers.segment_memory.prepend_memory`): the keys' padding as one (B, M + S) ``value_mask``."""
        if cache is not None:
            raise ValueError(
                "`memory` and `cache` cannot be combined: write the memory into the cache first (call the layer on "
                "the memory with cache_update_index=0), then decode from cache_update_index=M. Received a memory of "
                f"shape {format_shape(memory.shape)} and a cache of shape {format_shape(cache.shape)}."
            )
        check_tensor(memory, "memory", "(batch, memory_length, dim)")
        return segment_memory.prepend_memory(memory, memory_mask, value, key, value_mask, key_mask,
                                             masking.keras_attention_mask(attention_mask))

    def _fold_inputs(self, query, value, key, attention_mask, use_causal_mask, **unsupported):
        """Rank-r inputs attended over ``attention_axes`` as the (B', T', D) sequences of :class:`AxesFold`, with
        keras' attention mask folded alike (see :mod:`attnlayers.attention_axes`): ``(query, value, key, mask)``."""
        fold = self._fold
        check_key_value_shapes(value.shape, key.shape)
        fold.check_call(unsupported, {"use_causal_mask": use_causal_mask, "sliding_window": self._sliding_window,
                                      "rotary": self._hooks.rotary, "position_bias": self._hooks.position_bias})
        mask = None if attention_mask is None else fold.fold_mask(attention_mask, query, key)
        return fold.fold(query, "query"), fold.fold(value, "value"), fold.fold(key, "key"), mask

    def _project(self, query, value, key, cache, cache_update_index):
        """``(query, key, value, cache, cache_mask)``: Q W^Q, K W^K, V W^V for all heads, (B, L, D) -> (B, L, N, H),
        the keys rotated at their positions. With a cache and an index the new keys and values are written into it
        (:meth:`_update_cache`), every position read and ``cache_mask`` (1, 1, S_max) marks the written ones; a
        static cache (no index) is read as the keys and values, ``key`` and ``value`` ignored."""
        static_cache = cache is not None and cache_update_index is None
        fused = None if static_cache else self._fused_self_projections(query, value, key)
        q = self._query_dense(query) if fused is None else fused[0]
        if static_cache:  # a static cache is used as is
            cache = ops.cast(cache, self.compute_dtype)
            return q, cache[:, 0], cache[:, 1], cache, None
        k = self._key_dense(key) if fused is None else fused[1]
        k = self._rotate(k, 0 if cache is None else cache_update_index)
        v = self._value_dense(value) if fused is None else fused[2]
        if cache is None:
            return q, k, v, None, None
        k, v, cache, cache_mask = self._update_cache(cache, k, v, cache_update_index)
        return q, k, v, cache, cache_mask

    # ------------------------------------------------------------------------------------------------
    # The route: exact, chunked or fused (attnlayers.routes)

    #: (query, key) rows per block of the chunked route (see attnlayers.chunked).
    _chunk_sizes = (chunked.DEFAULT_QUERY_CHUNK, chunked.DEFAULT_KEY_CHUNK)

    @property
    def implementation(self):
        """The ``implementation`` option: "auto", "exact", "chunked", "fused" or "flash"."""
        return self._implementation

    @property
    def last_attention(self):
        """An :class:`AttentionRoute`: the route, its kernel (fused: "cudnn" or "xla"; flash: "triton" or
        "interpret") and any fallback of the layer's latest call (None before the first), recorded when the call
        runs in Python: each eager call and each trace of a compiled function, not its later runs
        (docs/guides/attention-implementations.md)."""
        return self._last_attention

    def attention_implementation(self, query_length, key_length, *, dtype=None, return_attention_scores=False,
                                 cached=False, training=False):
        """The route, "exact", "chunked", "fused" or "flash", that a call with these sizes and arguments takes.

        E.g. ``layer.attention_implementation(1024, 1024, dtype="bfloat16", training=True)``. A prediction
        (:func:`attnlayers.routes.choose`): cuDNN may refuse a call while it is traced; :attr:`last_attention` records
        what a call took.

        Args:
            query_length: T, the number of queries (None when not static).
            key_length: S, the number of keys (None when not static).
            dtype: the compute dtype of the call (default: the layer's).
            return_attention_scores: the call asks for the (B, N, T, S) scores.
            cached: a cache is passed.
            training: the call trains (dropout on the weights).

        Returns:
            An :class:`attnlayers.routes.AttentionRoute`.

        Raises:
            ValueError: ``implementation`` names a route that cannot compute this call (the message says why).
        """
        return routes.choose(self._route_call(query_length, key_length, dtype or self.compute_dtype,
                                              return_attention_scores, cached, training))

    def _route_call(self, query_length, key_length, dtype, return_attention_scores, cached, training,
                    attention_mask=None, attention_bias=None):
        """The :class:`attnlayers.routes.Call` of this layer and a call's sizes and arguments."""
        position_bias = self._hooks.position_bias
        return routes.Call(
            implementation=self._implementation, flash_attention=self._flash_attention, query_length=query_length,
            key_length=key_length, dtype=dtype, key_dim=self._key_dim, value_dim=self._value_dim,
            scale=self._fused_scale, score=self._score_identifier, layer_class=type(self).__name__,
            overridden=_overridden(type(self)),
            position_bias=None if position_bias is None else type(position_bias).__name__,
            dropout=self._dropout if (training and self._dropout_layer is not None) else 0.0,
            return_attention_scores=return_attention_scores, cached=cached,
            per_head_mask=attention_mask is not None and len(attention_mask.shape) == 4,
            attention_bias=attention_bias is not None,
        )

    def _attend_blocked(self, route, query, key, value, masks, use_causal_mask, start, training, attention_bias):
        """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) on the chunked or fused route
        (:func:`attnlayers.routes.attend`), the masks passed as their pieces (padding, explicit mask, causal rule,
        window), never as a (T, S) tensor. Records the route taken in :attr:`last_attention`.

        Returns:
            ``(heads, visible)``: (B, T, N, Hv) heads and a (B|1, T, 1) mask of the queries that see a key, or None
            when all do; ``(None, None)`` where the fused route left the call to the exact route (cuDNN refused it
            under "auto").
        """
        query_mask, key_padding, attention_mask = self._mask_pieces(query, key, *masks)
        dropout = self._dropout_layer
        problem = routes.Problem(
            query, key, value, self._hooks.bias(query, key, start, attention_bias),
            structure={"query_mask": query_mask, "key_mask": key_padding, "attention_mask": attention_mask,
                       "causal": bool(use_causal_mask), "offset": start, "window": self._sliding_window},
            scale=self._fused_scale, dropout=self._dropout if (training and dropout is not None) else 0.0,
            seed_generator=None if dropout is None else dropout.seed_generator, chunk_sizes=self._chunk_sizes,
            implementation=self._implementation, flash_attention=self._flash_attention, layer_name=self.name,
        )
        heads, visible, self._last_attention = routes.attend(route, problem)
        return heads, visible

    def _fused_self_projections(self, query, value, key):
        """Self-attention's Q, K and V from one matmul (:func:`attnlayers.heads.fused_projections`), or None."""
        return fused_projections(
            query, value, key, (self._query_dense, self._key_dense, self._value_dense), num_heads=self._num_heads,
            num_key_value_heads=self.num_key_value_heads, dtype=self.compute_dtype, use_bias=self._use_bias,
            activity_regularizer=self._activity_regularizer,
        )

    def _rotate(self, x, start_index):
        return self._hooks.rotate(x, start_index)

    # ------------------------------------------------------------------------------------------------
    # One cached query: the decoding step (attnlayers.kv_cache)

    def supports_single_step(self):
        """Whether :meth:`single_step` computes this layer's cached self-attention: a dot or scaled-dot score, no
        ``position_bias``, key_dim == value_dim (a cache), and neither an override point (``_OVERRIDE_POINTS``) nor
        ``_update_cache`` overridden.

        Returns:
            A Python bool.
        """
        return (
            self._fused_scale is not None and self._hooks.position_bias is None
            and self._key_dim == self._value_dim and not _overridden(type(self), _OVERRIDE_POINTS + ("_update_cache",))
        )

    def single_step(self, query, cache, cache_update_index, layer=None, write=True):
        """Cached self-attention of one new position i: what ``self(query, query, cache=cache,
        cache_update_index=i, use_causal_mask=True)`` computes for a (B, 1, D) query (outside training with
        dropout), at a cost that grows with i rather than with the cache length S_max
        (:func:`attnlayers.kv_cache.step`). Requires :meth:`supports_single_step`.

        Args:
            query: (B, 1, D), the step's input; its projections (rotated at position i) are the query, key and value.
            cache: (B, 2, S_max, N_kv, H), S_max static; or, with ``layer`` (an int), a decoder stack's caches
                (B, layers, 2, S_max, N_kv, H), of which ``layer`` is read (and written).
            cache_update_index: int or scalar int tensor, i.
            write: True: the new key and value are written at position i first; False: the cache is not written,
                the new key is attended beside it and returned for the caller to write (:func:`kv_cache.step`).

        Returns:
            ``(output, cache)`` with ``write``, else ``(output, entry)``: the attention output (B, 1, D) (or
            (B, 1) + ``output_shape``), the written cache (the input's shape and dtype), or the key and value of
            position i (B, 2, N_kv, H).

        Example:
        >>> cache = ops.zeros((B, 2, max_length, N_kv, H))
        >>> y, cache = attention.single_step(x_t, cache, t)              # (B, 1, D)
        """
        if not self.supports_single_step():
            raise ValueError(
                "`single_step` needs a dot or scaled-dot score, no position_bias, key_dim == value_dim and none of "
                f"the attention override points overridden; received a {type(self).__name__} with score "
                f"{self._score_identifier!r}, position_bias {type(self._hooks.position_bias).__name__}, "
                f"key_dim={self._key_dim}, value_dim={self._value_dim}."
            )
        if len(query.shape) != 3 or query.shape[1] != 1:
            raise ValueError(f"`query` of a single step must have shape (batch, 1, dim); received shape "
                             f"{format_shape(query.shape)}.")
        index = ops.cast(cache_update_index, "int32")
        q = self._rotate(self._query_dense(query), index)  # (B, 1, N, H)
        k = self._rotate(self._key_dense(query), index)  # (B, 1, N_kv, H)
        heads, written = kv_cache.step(
            q, k, self._value_dense(query), cache, index, num_heads=self._num_heads,
            num_key_value_heads=self.num_key_value_heads, scale=self._fused_scale,
            sliding_window=self._sliding_window, layer=layer, write=write,
        )
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        return self._output_dense(heads), written  # Concat(head_1, ..., head_N) W^O

    def _update_cache(self, cache, key, value, cache_update_index):
        """The override point of the general cached path: writes this call's (B, S_new, N_kv, H) keys and values
        into the (B, 2, S_max, N_kv, H) cache from ``cache_update_index`` on and returns ``(key, value, cache,
        cache_mask)``: every position's keys and values (B, S_max, N_kv, H), the updated cache and the (1, 1, S_max)
        mask of the positions written so far (:func:`attnlayers.kv_cache.update`)."""
        return kv_cache.update(cache, key, value, cache_update_index, self.compute_dtype)

    def _compute_attention_mask(self, query, value, query_mask=None, value_mask=None, key_mask=None,
                                attention_mask=None, use_causal_mask=False, start_index=None, cache_mask=None,
                                cached=False):
        """Combines every mask of a call into one, as keras' method of this name: padding of the queries
        (B, T, 1) and of the keys (B, 1, S), the explicit ``attention_mask``, the causal rule and the
        sliding window (1, T, S), and the unwritten cache positions.

        Args:
            query: (B, T, ...) and value: (B, S, ...) tensors; only their batch sizes and lengths are read.
            query_mask: (B, T). value_mask, key_mask: (B, S) (with a cache, S is the cache length; ``cached``).
            attention_mask: (B, T, S), (T, S), or per head (B, N, T, S); True (nonzero) = may attend.
            use_causal_mask: query t attends keys up to its own absolute position only.
            start_index: absolute position of query 0 (default: by ``causal_alignment``), the offset of the causal
                rule and of the window. cache_mask: (1, 1, S) positions of a cache written so far, or None.

        Returns:
            Boolean mask broadcastable to (B, T, S) (to (B, N, T, S) with a per-head ``attention_mask``), or None.
        """
        query_length, key_length = _length(query), _length(value)
        pieces = self._mask_pieces(query, value, query_mask, value_mask, key_mask, attention_mask, cached)
        start = self._query_start(query_length, key_length) if start_index is None else start_index
        return masking.combine_pieces(query_length, key_length, *pieces, use_causal_mask=use_causal_mask,
                                      offset=start, window=self._sliding_window, cache_mask=cache_mask)

    def _query_start(self, query_length, key_length):
        """The absolute position of query 0 among the keys when no cache index gives it (``causal_alignment``)."""
        return 0 if self._causal_alignment == "top_left" else key_length - query_length

    def _mask_pieces(self, query, value, query_mask, value_mask, key_mask, attention_mask, cached=False):
        """The validated mask pieces of a call: query padding (B, T), key padding (B, S) (value_mask AND
        key_mask) and the explicit attention mask (B, T, S) (axes of size 1 broadcast), each boolean or None."""
        return masking.mask_pieces(query, value, query_mask, value_mask, key_mask, attention_mask, self._num_heads,
                                   cached)

    #: The (B, S) padding of the keys, value_mask AND key_mask (:func:`attnlayers.masking.key_padding_mask`).
    _key_side_mask = staticmethod(masking.key_padding_mask)

    def _compute_attention(self, query, key, value, attention_mask=None, training=None, return_attention_scores=False,
                           use_causal_mask=False, attention_bias=None):
        """Attention over projected per-head tensors, keras' override point (keras 3.15's arguments):
        softmax(Q K^T / sqrt(d_k) + bias) V per head (Vaswani et al. 2017, eq. 1), with the layer's score.

        Args:
            query: (B, T, N, H) projected (and rotated) queries.
            key: (B, S, N_kv, H) projected keys; value: (B, S, N_kv, Hv) projected values.
            attention_mask: boolean, broadcastable to (B, T, S) or (B, N, T, S), True = may attend; or None.
            training: enables dropout on the weights.
            return_attention_scores: keras' argument; the weights are returned either way.
            use_causal_mask: also apply the causal rule (``causal_alignment``) to ``attention_mask``. ``call``
                puts the causal rule into ``attention_mask`` itself and passes neither this nor ``attention_bias``
                unless set, so an override with keras' (or keras' older) signature works.
            attention_bias: (1 or B, N or 1, T, S) additive logit bias, or None.

        Returns:
            ``(attention_output, attention_scores)``: (B, T, N, Hv) heads and the (B, N, T, S) weights
            actually applied (after dropout). A query with no visible key gets zero weights.
        """
        if use_causal_mask:
            query_length, key_length = _length(query), _length(key)
            causal = masking.causal_mask(query_length, key_length, self._query_start(query_length, key_length))
            attention_mask = causal[None] if attention_mask is None else ops.logical_and(
                ops.cast(attention_mask, "bool"), causal)
        logits = self._compute_logits(query, key)  # (B, N, T, S)
        if attention_bias is not None:
            # Added in float32: under mixed precision a large negative bias overflows float16.
            logits = ops.cast(logits, "float32") + ops.cast(attention_bias, "float32")
        if attention_mask is not None and len(attention_mask.shape) == 3:
            attention_mask = ops.expand_dims(attention_mask, 1)
        # softmax over the keys (eq. 1) in float32 under mixed precision; fully-masked rows get zero weights.
        weights = ops.cast(self._masked_softmax(logits, attention_mask), self.compute_dtype)
        if self._dropout_layer is not None:
            weights = self._dropout_layer(weights, training=training)  # the returned weights are the applied ones
        return self._combine(weights, value), weights

    def _masked_softmax(self, attention_scores, attention_mask=None):
        """keras' override point: softmax over the keys of the (B, N, T, S) logits where ``attention_mask``
        (broadcastable, True = may attend) allows, in float32 (mixed precision); a row with no visible key gets
        weights 0."""
        return masking.masked_softmax(attention_scores, attention_mask)

    def _invoke_compute_attention(self, query, key, value, attention_mask, training, return_attention_scores,
                                  **kwargs):
        """How ``call`` calls the override point: keras' MultiHeadAttention's positional arguments."""
        return self._compute_attention(query, key, value, attention_mask, training, return_attention_scores, **kwargs)

    def _compute_logits(self, query, key):
        """(B, T, N, H) queries and (B, S, N_kv, H) keys -> (B, N, T, S) logits; query head n reads key head
        n // (N / N_kv) (N_kv from the keys: N when a caller repeated them)."""
        if self._fused_scale is not None:  # Q K^T / sqrt(d_k) (eq. 1), one einsum over all heads
            return grouped_logits(query, key, self._fused_scale, self._num_heads)
        # Any other score: the heads folded into the batch for the single-head Score layer.
        return ops.cast(folded_logits(self._scorer, query, key, self._num_heads), self.compute_dtype)

    def _combine(self, weights, value):
        """(B, N, T, S) weights and (B, S, N_kv, Hv) values -> (B, T, N, Hv) heads."""
        return grouped_combine(weights, value, self._num_heads)

    # ------------------------------------------------------------------------------------------------
    # Shapes and config

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        query_shape = tuple(query_shape)
        check_key_value_shapes(value_shape, value_shape if key_shape is None else key_shape)
        if self._output_shape:
            return query_shape[:-1] + self._output_shape
        return query_shape

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
                            attention_mask=None, return_attention_scores=False, training=None, use_causal_mask=False,
                            cache=None, cache_update_index=None, attention_bias=None, memory=None, memory_mask=None):
        def spec(shape):
            return keras.KerasTensor(tuple(shape), dtype=self.compute_dtype)

        key_length = cache.shape[2] if cache is not None else value.shape[1]
        if memory is not None and cache is None:
            key_length = None if None in (key_length, memory.shape[1]) else key_length + memory.shape[1]
        scores_shape = (query.shape[0], self._num_heads, query.shape[1], key_length)
        fold = self._axes_fold(query.shape, value.shape, value.shape if key is None else key.shape)
        if not fold.is_sequence:
            scores_shape = fold.scores_shape(query.shape, value.shape, self._num_heads)
        return AttentionOutputs(
            spec(self.compute_output_shape(query.shape, value.shape, None if key is None else key.shape)),
            spec(scores_shape),
            None if cache is None else spec(cache.shape),
        ).pack(return_attention_scores)

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
            **self._hooks.get_config(),  # rotary, position_bias
            "implementation": self._implementation,
            "causal_alignment": self._causal_alignment,
        }

    @classmethod
    def from_config(cls, config):
        """A config saved with implementation="fused" loads as "auto" under a backend without a fused kernel (a
        model trained under JAX, exported under TensorFlow): every route computes the same function."""
        config = dict(config)
        if "implementation" in config:
            config["implementation"] = routes.loadable_implementation(config["implementation"])
        return super().from_config(config)


def __getattr__(name):
    """``MEMORY_EFFICIENT_MIN_LENGTH``: the deprecated name of ``attnlayers.routes.CHUNKED_MIN_LENGTH``."""
    if name == "MEMORY_EFFICIENT_MIN_LENGTH":
        warnings.warn("attnlayers.multi_head.MEMORY_EFFICIENT_MIN_LENGTH is deprecated; use "
                      "attnlayers.routes.CHUNKED_MIN_LENGTH.", DeprecationWarning, stacklevel=2)
        return routes.CHUNKED_MIN_LENGTH
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
