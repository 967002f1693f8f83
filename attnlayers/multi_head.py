"""Multi-head attention: a drop-in for ``keras.layers.MultiHeadAttention`` (same arguments, same weights in the
same order) with any score function per head, grouped-query attention, a key/value cache for incremental
decoding, sliding windows and position hooks (rotary embeddings, additive position biases).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_N) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

Per-head tensors are (B, T, N, H), the layout of keras' layer and of ``keras.ops.dot_product_attention``;
attention weights are (B, N, T, S).
"""

import collections
import dataclasses
import math
import string
import warnings

import keras
from keras import backend, ops

from attnlayers import chunked, fused, kv_cache, masking
from attnlayers.attention_axes import AxesFold, normalize_attention_axes
from attnlayers.scoring import DotScore, ScaledDotScore, get_score, serialize_score
from attnlayers.validation import (
    check_feature_size,
    check_rank,
    check_tensor,
    format_shape,
    is_int,
    positive_int,
    rate_in_unit_interval,
    same_size,
)

_SEQUENCE = "(batch, length, dim)"
_BACKEND = keras.backend.backend()


class AttentionOutputs(collections.namedtuple("AttentionOutputs", ["output", "scores", "cache"])):
    """The parts of a :class:`MultiHeadAttention` result by name: ``output`` (B, T, D), ``scores``
    (B, N, T, S) or None, ``cache`` (B, 2, S_max, N_kv, H) or None.

    ``AttentionOutputs.unpack(layer(...), return_attention_scores, cache is not None)`` reads any of the
    layer's return structures; ``pack()`` builds them.
    """

    __slots__ = ()

    @classmethod
    def unpack(cls, outputs, return_attention_scores=False, has_cache=False):
        if not (return_attention_scores or has_cache):
            return cls(outputs, None, None)
        outputs = tuple(outputs)
        scores = outputs[1] if return_attention_scores else None
        return cls(outputs[0], scores, outputs[-1] if has_cache else None)

    def pack(self, return_attention_scores=False):
        """``output``, ``(output, scores)``, ``(output, cache)`` or ``(output, scores, cache)``."""
        parts = (self.output,) + ((self.scores,) if return_attention_scores else ())
        parts += () if self.cache is None else (self.cache,)
        return parts[0] if len(parts) == 1 else parts


def _keras_positive_int(value, name, allow_none=False):
    """``value`` as an int > 0 (or None when ``allow_none``); else keras' ValueError for that argument."""
    if allow_none and value is None:
        return None
    if not is_int(value) or value <= 0:
        expected = "a positive integer or `None`" if allow_none else "a positive integer"
        raise ValueError(f"Received an invalid value for argument `{name}`, expected {expected}. Received: "
                         f"{name}={value!r}")
    return int(value)


#: The values of ``MultiHeadAttention(causal_alignment=...)``: where the T queries sit among S keys when no
#: ``cache_update_index`` says it. "top_left": query t at position t (keras' rule: query t sees keys 0..t);
#: "bottom_right": the queries are the last T positions, query t at S - T + t (a continuation of the keys, as in
#: decoding a chunk against a filled cache).
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def _check_key_value_shapes(value_shape, key_shape):
    """keras' rule: ``key`` and ``value`` agree on every axis but the last."""
    value_shape, key_shape = tuple(value_shape), tuple(key_shape)
    if len(value_shape) != len(key_shape) or not all(
            same_size(a, b) for a, b in zip(value_shape[1:-1], key_shape[1:-1])):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must be equal. Received: value_shape="
            f"{format_shape(value_shape)} and key_shape={format_shape(key_shape)}"
        )


#: The methods a subclass may override to change what attention computes (keras' and attnlayers' own); a subclass
#: that overrides any of them is computed on the exact route, which calls them.
_OVERRIDE_POINTS = ("_compute_attention", "_compute_logits", "_combine", "_compute_attention_mask", "_masked_softmax")

#: keras.layers.MultiHeadAttention's private methods that this layer does not call: a subclass overriding one of them
#: would change nothing, so it is told at class creation (MultiHeadAttention.__init_subclass__).
_KERAS_ONLY_METHODS = ("_build_attention", "_compute_causal_mask", "_compute_sliding_window_mask",
                       "_make_output_dense", "_get_common_kwargs_for_sublayer", "_build_from_signature")


def _length(x):
    """Static length (axis 1) when known, else the dynamic one."""
    return x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]


# Automatic choice of the memory-efficient (chunked) route, implementation="auto": taken when the query length T
# is at least MEMORY_EFFICIENT_MIN_LENGTH (T and S static), where the exact path's (B, N, T, S) logits and weights
# (4 N T S bytes per live copy) outgrow the chunked path's O(T x block); below it the exact path is the faster
# one (the measurements: benchmarks/README.md, "Long sequences").
MEMORY_EFFICIENT_MIN_LENGTH = 4096


#: The values of ``MultiHeadAttention(implementation=...)``.
IMPLEMENTATIONS = ("auto", "exact", "chunked", "fused")


def _resolve_implementation(implementation, flash_attention=None, memory_efficient=None):
    """``implementation`` with its aliases applied: keras' ``flash_attention`` (True: "fused" where the backend has
    a fused kernel, JAX; "chunked", FlashAttention's algorithm in keras ops, elsewhere; False: "exact") and the
    older ``memory_efficient`` (True: "chunked", False: "exact"). Conflicting settings raise."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"`implementation` must be one of {IMPLEMENTATIONS}; received implementation={implementation!r}.")
    if flash_attention not in (None, True, False) or memory_efficient not in (None, True, False):
        raise ValueError(
            f"`flash_attention` and `memory_efficient` must be None, True or False; received "
            f"flash_attention={flash_attention!r}, memory_efficient={memory_efficient!r}."
        )
    flash = "fused" if keras.backend.backend() == "jax" and fused.platform() != "tpu" else "chunked"
    settings = [("implementation", implementation)] if implementation != "auto" else []
    if flash_attention is not None:
        settings.append(("flash_attention", flash if flash_attention else "exact"))
    if memory_efficient is not None:
        settings.append(("memory_efficient", "chunked" if memory_efficient else "exact"))
    if len({route for _, route in settings}) > 1:
        received = ", ".join(f"{name} selects {route!r}" for name, route in settings)
        raise ValueError(f"`flash_attention`, `memory_efficient` and `implementation` disagree: {received}; "
                         "pass `implementation` alone.")
    return settings[0][1] if settings else "auto"


@dataclasses.dataclass(frozen=True)
class AttentionRoute:
    """What computed a :class:`MultiHeadAttention` call (:attr:`MultiHeadAttention.last_attention`).

    Attributes:
        route: "exact", "chunked" or "fused": the route that computed the call.
        kernel: on the fused route, the implementation of ``jax.nn.dot_product_attention`` that took the call:
            "cudnn" (cuDNN's flash attention accepted it: its custom call is in the traced program) or "xla";
            None on the other routes.
        fallback: None, or why the kernel the ``implementation`` option asks for did not compute the call and what
            did instead (the text of the warning it gave).
    """

    route: str
    kernel: str | None = None
    fallback: str | None = None


#: The fallback warnings already given: each is given once per process (see MultiHeadAttention._fall_back).
_WARNED = set()


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

    Query t is taken to sit at absolute position ``t`` among the S keys (keras' top-left alignment), at
    ``S - T + t`` with ``causal_alignment="bottom_right"`` (the queries are the last T positions), or at
    ``cache_update_index + t`` when a cache is updated. This is the offset of the causal mask, the sliding
    window and the position hooks.

    Inputs of any rank attend over ``attention_axes`` as keras' layer (2-D attention over (B, H, W, C) images:
    ``attention_axes=(1, 2)``): :mod:`attnlayers.attention_axes` folds them into (B', T', D) sequences, with keras'
    output and score layouts and keras' attention-mask alignment.

    Override points, as in keras: ``_compute_attention(query, key, value, attention_mask, training,
    return_attention_scores, use_causal_mask)`` maps projected per-head tensors to ``(attention_output
    (B, T, N, Hv), attention_scores (B, N, T, S))``;
    ``_compute_attention_mask`` assembles the boolean mask; ``_masked_softmax(attention_scores, attention_mask)``
    turns (B, N, T, S) logits into weights; ``_update_cache`` writes a call's keys and values into the cache. A
    subclass that overrides keras' other private methods (``_build_attention``, ``_compute_causal_mask``, ...), which
    this layer does not call, gets a warning when the class is created.

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
        flash_attention: keras' switch, an alias of ``implementation``: True is "fused" under JAX (GPU, CPU) and
            "chunked" under TensorFlow (no fused kernel there; the same algorithm in keras ops); False is
            "exact"; None leaves ``implementation`` to decide. keras' global ``enable_flash_attention()`` is
            not read. As keras, True refuses ``dropout`` > 0 and ``return_attention_scores`` (ValueErrors with
            keras' words); ``implementation="chunked"`` keeps the dropout.
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
        implementation: how attention is computed (every route computes the same function, masks included, and
            gives a query that sees no key an output of 0):
            - "exact": the (B, N, T, S) logits and weights, softmax in float32 under mixed precision; the only
              route for returned scores, caches, other scores and the override points.
            - "chunked": queries and keys in blocks with the online softmax
              (:func:`attnlayers.chunked.chunked_attention`, FlashAttention's algorithm in keras ops, every
              backend): memory O(T * chunk) forward and backward; a sliding window costs O(T * W). Needs a dot /
              scaled-dot score and no ``position_bias`` hook; its dropout draws a different (equally distributed)
              mask than the exact path's Dropout layer.
            - "fused": the backend's attention kernel (:mod:`attnlayers.fused`): under JAX
              ``jax.nn.dot_product_attention``, cuDNN's flash attention on a GPU for float16 / bfloat16 heads of
              <= 128 (a multiple of 8), its XLA implementation elsewhere; causal and padding masks (any pattern),
              explicit masks, windows, biases, GQA and cross-attention. No attention dropout in training.
              TensorFlow has no such kernel (a ValueError says so).
            - "auto" (default): "fused" where cuDNN takes the call (JAX, GPU, half precision, no active dropout),
              else "chunked" from T >= ``MEMORY_EFFICIENT_MIN_LENGTH`` (4096, static lengths), else "exact".
            :meth:`attention_implementation` tells which route a call takes. A route named explicitly that
            cannot compute a call raises a ValueError saying why. Where cuDNN does not take a call (its checks,
            or its refusal while the call is traced), "fused" runs XLA's implementation and "auto" the exact
            route, each with a warning (once per message); :attr:`last_attention` records the route and kernel
            each call took. A call with a ``cache`` (decoding) always attends over its cache exactly, whatever
            the route.
        memory_efficient: the older alias: True is "chunked", False "exact" (kept so that saved configs load).
        causal_alignment: "top_left" (default, keras') or "bottom_right": where T queries sit among S keys when
            no ``cache_update_index`` says it (see above).

    Call arguments:
        query: (B, T, D_q).
        value: (B, S, D_v).
        key: (B, S, D_k); defaults to ``value``.
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
        ignored = [name for name in _KERAS_ONLY_METHODS if name in vars(cls)]
        if ignored:
            warnings.warn(
                f"{cls.__name__} overrides {', '.join(ignored)} of keras.layers.MultiHeadAttention, which "
                f"attnlayers.MultiHeadAttention does not call; override one of {', '.join(_OVERRIDE_POINTS)} instead.",
                stacklevel=2,
            )

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
        implementation="auto",
        memory_efficient=None,
        causal_alignment="top_left",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True
        self._num_heads = _keras_positive_int(num_heads, "num_heads")
        self._key_dim = _keras_positive_int(key_dim, "key_dim")
        self._value_dim = _keras_positive_int(value_dim, "value_dim", allow_none=True) or self._key_dim
        self._num_key_value_heads = positive_int(num_key_value_heads, "num_key_value_heads", allow_none=True)
        kv_heads = self._num_key_value_heads or self._num_heads
        if self._num_heads % kv_heads:
            raise ValueError(
                f"`num_heads` must be a multiple of `num_key_value_heads`; received num_heads={num_heads}, "
                f"num_key_value_heads={num_key_value_heads}."
            )
        self._dropout = rate_in_unit_interval(dropout, "dropout")
        self._use_bias = bool(use_bias)
        if output_shape is not None and output_shape != ():
            if is_int(output_shape):
                output_shape = (output_shape,)
            if not isinstance(output_shape, (tuple, list)) or not all(
                is_int(d) and d > 0 for d in output_shape
            ):
                raise ValueError(
                    f"Invalid `output_shape`: {output_shape!r}. It must be None, a positive int or a tuple of positive "
                    "ints."
                )
            output_shape = tuple(int(d) for d in output_shape)
        else:
            output_shape = None
        self._output_shape = output_shape
        if attention_axes is not None:
            axes = (attention_axes,) if is_int(attention_axes) else attention_axes
            if not isinstance(axes, (tuple, list)) or not axes or not all(is_int(axis) for axis in axes):
                raise ValueError(
                    f"`attention_axes` must be None, an int, or a list or tuple of ints; received attention_axes="
                    f"{attention_axes!r}."
                )
            attention_axes = tuple(int(axis) for axis in axes)
        self._attention_axes = attention_axes
        self._fold = None  # an AxesFold where inputs are not (B, T, D) attended over axis 1 (set by build)
        if causal_alignment not in CAUSAL_ALIGNMENTS:
            raise ValueError(f"`causal_alignment` must be one of {CAUSAL_ALIGNMENTS}; received "
                             f"causal_alignment={causal_alignment!r}.")
        self._causal_alignment = causal_alignment
        self._sliding_window = positive_int(sliding_window, "sliding_window", allow_none=True)
        self._use_gate = bool(use_gate)
        self._implementation = _resolve_implementation(implementation, flash_attention, memory_efficient)
        self._flash_attention = flash_attention
        if flash_attention and self._dropout > 0:
            # keras' refusal, word for word; implementation="chunked" keeps the dropout.
            raise ValueError("Dropout is not supported when flash attention is enabled. Please set dropout to 0.0 to "
                             "use flash attention (or implementation='chunked', which applies it).")
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

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        check_tensor(query_shape, "query", _SEQUENCE)
        check_tensor(value_shape, "value", _SEQUENCE)
        key_shape = value_shape if key_shape is None else key_shape
        _check_key_value_shapes(value_shape, key_shape)
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

        # Hooks, after the projections (see _Hooks).
        head_query = (query_shape[0], query_shape[1], n, h)
        head_key = (key_shape[0], key_shape[1], n_kv, h)
        self._scorer = self._hooks.scorer
        # Built even where the fused dot / scaled-dot path never calls it (weightless): an unbuilt sublayer makes
        # Keras trace the whole model again before every train_on_batch / test_on_batch / predict_on_batch.
        if not self._scorer.built:
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

    def _axes_fold(self, query_shape, value_shape, key_shape):
        """The :class:`~attnlayers.attention_axes.AxesFold` of inputs of these shapes and ``attention_axes``."""
        rank = len(query_shape)
        if rank < 3:
            raise ValueError(f"`query` must have shape (batch, ..., dim) with at least one axis to attend over; "
                             f"received shape {format_shape(query_shape)}.")
        for name, shape in (("value", value_shape), ("key", key_shape)):
            if len(shape) != rank:
                raise ValueError(f"`{name}` must have the rank of `query` ({rank}); received shapes query "
                                 f"{format_shape(query_shape)}, {name} {format_shape(shape)}.")
        return AxesFold(rank, normalize_attention_axes(self._attention_axes, rank))

    # ------------------------------------------------------------------------------------------------
    # Checks

    def _check_inputs(self, query, value, key, cache, cache_update_index, attention_bias):
        check_tensor(query, "query", _SEQUENCE)
        check_tensor(value, "value", _SEQUENCE)
        _check_key_value_shapes(value.shape, key.shape)
        for name, x in (("query", query), ("value", value), ("key", key)):
            check_rank(x.shape, 3, name, _SEQUENCE)
        projected = (("query", query),)
        if cache is None or cache_update_index is not None:  # a static cache ignores key and value
            projected += (("value", value), ("key", key))
        for (name, x), size in zip(projected, self._built_sizes):
            check_feature_size(x.shape, size, name)
        batch = query.shape[0]
        for name, x in (("value", value), ("key", key)):
            if not same_size(batch, x.shape[0]):
                raise ValueError(
                    f"`{name}` must have the batch size of `query`: expected {batch}; received shape "
                    f"{format_shape(x.shape)}."
                )
        if cache is None:
            if cache_update_index is not None:
                raise ValueError(
                    "`cache_update_index` is only meaningful with a `cache`; received "
                    f"cache_update_index={cache_update_index!r} and cache=None."
                )
        else:
            self._check_cache(cache, cache_update_index, batch, key.shape[1])
        if attention_bias is not None and len(attention_bias.shape) != 4:
            raise ValueError(
                "`attention_bias` must have shape (batch or 1, num_heads or 1, query_length, key_length); "
                f"received shape {format_shape(attention_bias.shape)}."
            )

    def _check_cache(self, cache, cache_update_index, batch, new_length):
        expected = (batch, 2, None, self.num_key_value_heads, self._key_dim)
        shape = tuple(cache.shape)
        if self._value_dim != self._key_dim:
            raise ValueError(
                f"A `cache` stacks keys and values, so it needs key_dim == value_dim; this layer has "
                f"key_dim={self._key_dim} and value_dim={self._value_dim}."
            )
        if len(shape) != 5 or not all(same_size(a, b) for a, b in zip(shape, expected)):
            raise ValueError(
                f"`cache` must have shape (batch, 2, max_length, num_key_value_heads, key_dim) = "
                f"{format_shape(expected)}; received shape {format_shape(shape)}."
            )
        if is_int(cache_update_index):
            max_length = shape[2]
            if cache_update_index < 0 or (
                new_length is not None and max_length is not None and cache_update_index + new_length > max_length
            ):
                raise ValueError(
                    f"`cache_update_index`={cache_update_index} writes {new_length} new key(s) beyond a cache "
                    f"of max_length {max_length}: expected 0 <= cache_update_index <= {max_length} - "
                    f"{new_length}."
                )
        elif cache_update_index is not None and len(getattr(cache_update_index, "shape", (0,))) != 0:
            raise ValueError(
                "`cache_update_index` must be a Python int or a scalar integer tensor; received "
                f"{cache_update_index!r}."
            )

    # ------------------------------------------------------------------------------------------------
    # Attention

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
        if self._flash_attention and return_attention_scores:
            raise ValueError("Returning attention scores is not supported when flash attention is enabled. Please "
                             "disable flash attention to access attention scores.")
        arguments = dict(query_mask=query_mask, value_mask=value_mask, key_mask=key_mask,
                         attention_mask=attention_mask, return_attention_scores=return_attention_scores,
                         training=training, use_causal_mask=use_causal_mask, cache=cache,
                         cache_update_index=cache_update_index, attention_bias=attention_bias)
        if self._fold is not None:
            return self._call_over_axes(query, value, key, **arguments)
        return self._call_sequences(query, value, key, **arguments)

    def _call_over_axes(self, query, value, key, attention_mask, return_attention_scores, use_causal_mask,
                        training, **unsupported):
        """Attention over ``attention_axes`` of rank-r inputs: the sequences of :class:`AxesFold` attended as
        (B', T', D) and unfolded into keras' layouts (see :mod:`attnlayers.attention_axes`)."""
        fold = self._fold
        _check_key_value_shapes(value.shape, key.shape)
        given = [name for name, argument in unsupported.items() if argument is not None]
        if given:
            raise ValueError(
                f"Attention over attention_axes={fold.axes} of rank-{fold.rank} inputs takes `attention_mask` (keras' "
                f"layout) but not {', '.join(f'`{name}`' for name in given)}: those are defined for (batch, length, "
                "dim) sequences."
            )
        single_axis = len(fold.axes) == 1
        ordered = [name for name, used in (("use_causal_mask", use_causal_mask),
                                           ("sliding_window", self._sliding_window),
                                           ("rotary", self._hooks.rotary),
                                           ("position_bias", self._hooks.position_bias)) if used]
        if ordered and not single_axis:
            raise ValueError(
                f"{', '.join(f'`{name}`' for name in ordered)} order the positions along one axis; this layer attends "
                f"over {len(fold.axes)} axes {fold.axes} at once. Attend over one axis, or pass an `attention_mask`."
            )
        mask = None if attention_mask is None else fold.fold_mask(attention_mask, query, key)
        outputs = AttentionOutputs.unpack(self._call_sequences(
            fold.fold(query, "query"), fold.fold(value, "value"), fold.fold(key, "key"), attention_mask=mask,
            return_attention_scores=return_attention_scores, training=training, use_causal_mask=use_causal_mask,
        ), return_attention_scores)
        scores = None if outputs.scores is None else fold.unfold_scores(outputs.scores, query, key)
        return AttentionOutputs(fold.unfold_output(outputs.output, query), scores, None).pack(
            return_attention_scores)

    def _call_sequences(self, query, value, key, query_mask=None, value_mask=None, key_mask=None,
                        attention_mask=None, return_attention_scores=False, training=None, use_causal_mask=False,
                        cache=None, cache_update_index=None, attention_bias=None):
        """The call on (B, T, D) queries and (B, S, D) keys and values."""
        self._check_inputs(query, value, key, cache, cache_update_index, attention_bias)
        # Projections Q W^Q, K W^K, V W^V for all heads: (B, L, D) -> (B, L, N, H).
        static_cache = cache is not None and cache_update_index is None
        fused = None if static_cache else self._fused_self_projections(query, value, key)
        q = self._query_dense(query) if fused is None else fused[0]
        cache_mask = None
        if static_cache:  # a static cache is used as is
            cache = ops.cast(cache, self.compute_dtype)
            k, v = cache[:, 0], cache[:, 1]
        else:
            k = self._key_dense(key) if fused is None else fused[1]
            k = self._rotate(k, 0 if cache is None else cache_update_index)
            v = self._value_dense(value) if fused is None else fused[2]
            if cache is not None:
                k, v, cache, cache_mask = self._update_cache(cache, k, v, cache_update_index)
        # Query t sits at absolute position start + t: the cache index, else by `causal_alignment`.
        start = cache_update_index if cache_update_index is not None else self._query_start(_length(q), _length(k))
        q = self._rotate(q, start)
        attention_mask = self._keras_attention_mask(attention_mask)
        per_head_mask = attention_mask is not None and len(attention_mask.shape) == 4
        route = self._route(q, k, return_attention_scores, cache, training, per_head_mask)
        self._last_attention = AttentionRoute(route)  # the fused route adds its kernel
        masks = (query_mask, value_mask, key_mask, attention_mask)
        heads = None
        if route == "fused":
            heads, mask = self._fused_attention(q, k, v, masks, use_causal_mask, start, attention_bias)
        elif route == "chunked":
            heads, mask = self._memory_efficient_attention(q, k, v, masks, use_causal_mask, start, training,
                                                           attention_bias)
        scores = None
        if heads is None:  # the exact path (or the fused route's fallback where cuDNN refused the call)
            mask = self._compute_attention_mask(
                q, k, query_mask, value_mask, key_mask, attention_mask, use_causal_mask,
                start_index=start, cache_mask=cache_mask, cached=cache is not None,
            )
            bias = self._compute_attention_bias(q, k, start, attention_bias)
            bias_kwargs = {} if bias is None else {"attention_bias": bias}  # keras' signature when there is none
            heads, scores = self._invoke_compute_attention(q, k, v, mask, training, return_attention_scores,
                                                           **bias_kwargs)
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        output = self._output_dense(heads)  # Concat(head_1, ..., head_N) W^O
        output = self._zero_invisible_queries(output, mask)
        return AttentionOutputs(output, scores, cache).pack(return_attention_scores)

    # ------------------------------------------------------------------------------------------------
    # The route: exact, chunked (memory-efficient) or fused

    #: (query, key) rows per block of the memory-efficient path (see attnlayers.chunked).
    _chunk_sizes = (chunked.DEFAULT_QUERY_CHUNK, chunked.DEFAULT_KEY_CHUNK)

    @property
    def implementation(self):
        """The ``implementation`` option: "auto", "exact", "chunked" or "fused"."""
        return self._implementation

    @property
    def last_attention(self):
        """An :class:`AttentionRoute`: the route, the fused route's kernel ("cudnn" or "xla") and any fallback of
        the layer's latest call (None before the first). Recorded when the call runs in Python: each eager call,
        and each trace of a compiled function (``jax.jit``, ``tf.function``, ``fit``), which then holds for every
        run of what was traced; running a compiled function again does not record anything (a functional model's
        symbolic build computes shapes only). A cuDNN refusal happens while tracing, so it is recorded."""
        return self._last_attention

    def attention_implementation(self, query_length, key_length, *, dtype=None, return_attention_scores=False,
                                 cached=False, training=False):
        """The route a call takes: "exact", "chunked" or "fused" (see ``implementation``), e.g.
        ``layer.attention_implementation(1024, 1024, dtype="bfloat16", training=True)``.

        Args:
            query_length, key_length: T and S (None when not static).
            dtype: the compute dtype of the call (default: the layer's).
            return_attention_scores, cached, training: as the call's arguments (``cached``: a cache is passed).

        Returns:
            The route's name. Raises a ValueError where ``implementation`` names a route that cannot compute such
            a call (the message says why). This is a prediction: "fused" is ``jax.nn.dot_product_attention``
            with either kernel (:func:`attnlayers.fused.kernel` tells which it will try), and cuDNN may refuse a
            call while it is traced ("auto" then computes it on the exact route). :attr:`last_attention` records
            what a call took.
        """
        return self._choose_route(query_length, key_length, dtype or self.compute_dtype, return_attention_scores,
                                  cached, training)

    def _route(self, query, key, return_attention_scores, cache, training, per_head_mask=False):
        return self._choose_route(query.shape[1], key.shape[1], query.dtype, return_attention_scores,
                                  cache is not None, training, per_head_mask)

    def _choose_route(self, query_length, key_length, dtype, return_attention_scores, cached, training,
                      per_head_mask=False):
        if self._implementation == "exact" or cached:  # a cached call (decoding) attends over its cache exactly
            return "exact"
        blocked = self._route_refusal(return_attention_scores, per_head_mask)
        refusals = {
            "chunked": blocked or self._chunked_refusal(),
            "fused": blocked or self._fused_refusal(dtype, training, explicit=self._implementation == "fused"),
        }
        if self._implementation != "auto":
            refusal = refusals[self._implementation]
            if refusal is not None:
                option = (f"flash_attention={self._flash_attention}" if self._flash_attention
                          else f"implementation={self._implementation!r}")
                raise ValueError(f"`{option}`: the {self._implementation} route cannot compute this call: {refusal}.")
            return self._implementation
        if refusals["fused"] is None:  # auto: only where the backend's kernel is the fast one (cuDNN)
            return "fused"
        if refusals["chunked"] is None and query_length is not None and key_length is not None \
                and query_length >= MEMORY_EFFICIENT_MIN_LENGTH:
            return "chunked"
        return "exact"

    def _route_refusal(self, return_attention_scores, per_head_mask=False):
        """Why neither the chunked nor the fused route can compute a call (a sentence), or None."""
        base = MultiHeadAttention
        overridden = [
            name for name in _OVERRIDE_POINTS
            if getattr(type(self), name) is not getattr(base, name)
        ]
        if self._fused_scale is None:
            return f"it needs a dot or scaled-dot score; this layer's score is {self._score_identifier!r}"
        if return_attention_scores:
            return "it never forms the attention weights; received return_attention_scores=True"
        if overridden:
            return f"{type(self).__name__} overrides {', '.join(overridden)}"
        if per_head_mask:
            return "it takes one attention mask for all heads; received a per-head (batch, num_heads, T, S) mask"
        return None

    def _chunked_refusal(self):
        if self._hooks.position_bias is not None:
            return (f"it does not compute the position_bias hook ({type(self._hooks.position_bias).__name__}); "
                    "pass the bias as `attention_bias` instead")
        return None

    def _fused_refusal(self, dtype, training, explicit):
        if self._dropout_layer is not None and training:
            return f"the fused kernel has no attention dropout; this layer has dropout={self._dropout} in training"
        found = fused.kernel(dtype, self._key_dim, self._value_dim, explicit=explicit)
        if found is None:
            backend_name = keras.backend.backend()
            if self._value_dim != self._key_dim:
                return f"the fused kernel needs value_dim == key_dim; received {self._value_dim} and {self._key_dim}"
            if explicit:
                return (f"the {backend_name} backend has no fused attention kernel here (keras.ops."
                        "dot_product_attention(flash_attention=True) has none either); implementation='chunked' "
                        "computes the same function in blocks")
            return f"no cuDNN kernel for {backend.standardize_dtype(dtype)} heads of {self._key_dim} here"
        return None

    def _fused_attention(self, query, key, value, masks, use_causal_mask, start, attention_bias):
        """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) through the backend's kernel (:mod:`attnlayers.fused`).

        Records the kernel in :attr:`last_attention`. Where cuDNN does not take the call (its checks here, or its
        refusal while traced, :func:`attnlayers.fused.cudnn_refusal`), an explicit "fused" runs XLA's implementation
        and "auto" the exact route, each with a warning (:meth:`_fall_back`); any other error propagates.

        Returns:
            ``(heads, visible)`` as :meth:`_memory_efficient_attention`; ``(None, None)`` when "auto" chose cuDNN
            and cuDNN refused the call while it was traced (the exact path then computes it).
        """
        query_mask, key_padding, attention_mask = self._mask_pieces(query, key, *masks)
        bias = self._compute_attention_bias(query, key, start, attention_bias)
        structure = dict(query_mask=query_mask, key_mask=key_padding, attention_mask=attention_mask,
                         causal=bool(use_causal_mask), offset=start, window=self._sliding_window)
        explicit = self._implementation == "fused"
        kernel = fused.kernel(query.dtype, self._key_dim, self._value_dim, explicit=explicit)
        reason = fused.why_not_cudnn(query.dtype, self._key_dim) if kernel == "xla" else None
        if kernel == "cudnn":
            try:
                heads = fused.fused_attention(query, key, value, bias, scale=self._fused_scale,
                                              implementation="cudnn", **structure)
            except (RuntimeError, NotImplementedError) as error:
                refusal = fused.cudnn_refusal(error)
                if refusal is None:  # not cuDNN declining the call: an error
                    raise
                reason, kernel = f"cuDNN refused the call: {refusal}", "xla" if explicit else None
        fallback = None if reason is None else self._fall_back(reason, "fused" if kernel else "exact")
        self._last_attention = AttentionRoute("fused" if kernel else "exact", kernel, fallback)
        if kernel is None:
            return None, None
        if kernel == "xla":
            heads = fused.fused_attention(query, key, value, bias, scale=self._fused_scale, implementation="xla",
                                          **structure)
        visible = chunked.visible_queries(_length(query), _length(key), **structure)
        return heads, None if visible is None else ops.expand_dims(visible, -1)

    def _fall_back(self, reason, route):
        """Warns, once per process for each message, that cuDNN does not take a call and what computes it instead
        (XLA's implementation on the fused route, or the exact route); returns the message."""
        option = "flash_attention=True" if self._flash_attention else f"implementation={self._implementation!r}"
        instead = ("XLA's implementation of jax.nn.dot_product_attention computes it (the same function; it forms "
                   "the (B, N, T, S) logits)" if route == "fused" else "the exact route computes it")
        message = f"MultiHeadAttention({option}): cuDNN's flash attention does not take this call ({reason}); " \
                  f"{instead}."
        if message not in _WARNED:
            _WARNED.add(message)
            warnings.warn(f"{message} Layer {self.name!r}; `layer.last_attention` records each call's kernel.",
                          stacklevel=2)
        return message

    def _memory_efficient_attention(self, query, key, value, masks, use_causal_mask, start, training,
                                    attention_bias):
        """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) in blocks (:func:`attnlayers.chunked.chunked_attention`),
        the masks passed as their pieces (padding, explicit mask, causal rule, window), never as a (T, S) tensor.

        Returns:
            ``(heads, visible)``: (B, T, N, Hv) heads and a (B|1, T, 1) mask of the queries that see a key (for
            :meth:`_zero_invisible_queries`), or None when all do.
        """
        query_mask, key_padding, attention_mask = self._mask_pieces(query, key, *masks)
        bias = self._compute_attention_bias(query, key, start, attention_bias)
        rate = self._dropout if (training and self._dropout_layer is not None) else 0.0
        seed = self._dropout_layer.seed_generator.next() if rate > 0 else None
        structure = dict(query_mask=query_mask, key_mask=key_padding, attention_mask=attention_mask,
                         causal=bool(use_causal_mask), offset=start, window=self._sliding_window)
        heads = chunked.chunked_attention(
            query, key, value, bias, scale=self._fused_scale, dropout_rate=rate, seed=seed,
            query_chunk_size=self._chunk_sizes[0], key_chunk_size=self._chunk_sizes[1], **structure,
        )
        visible = chunked.visible_queries(_length(query), _length(key), **structure)
        return heads, None if visible is None else ops.expand_dims(visible, -1)

    def _fused_self_projections(self, query, value, key):
        """Self-attention (query, key and value one tensor x): Q, K and V from one matmul with the three kernels
        side by side, x [W^Q | W^K | W^V] (+ [b^Q | b^K | b^V]): (B, T, D) x (D, N + 2 N_kv, H) ->
        (B, T, N + 2 N_kv, H), split along the heads. The products of the three projections, as one larger
        matmul forward and backward instead of three. None (use the three layers) for other calls, or when a
        projection does more than x W + b (LoRA, quantization, an activity regularizer, an overridden call), and
        outside XLA: in a TensorFlow graph (what ``fit`` runs on a CPU) the concatenation and split cost more than
        the one larger matmul saves (benchmarks/README.md, "The fused QKV projection, by compile mode")."""
        layers = (self._query_dense, self._key_dense, self._value_dense)
        if not (query is value and key is value) or self._key_dim != self._value_dim or not (
                _BACKEND == "jax" or fused.compiled_by_xla(query)):
            return None
        if self._activity_regularizer is not None or any(
            type(layer) is not keras.layers.EinsumDense or getattr(layer, "lora_enabled", False)
            or getattr(layer, "quantization_mode", None) is not None
            for layer in layers
        ):
            return None
        x = ops.cast(query, self.compute_dtype)
        kernel = ops.concatenate([ops.cast(layer.kernel, self.compute_dtype) for layer in layers], axis=1)
        qkv = ops.einsum("abc,cde->abde", x, kernel)  # (B, T, N + 2 N_kv, H)
        if self._use_bias:
            qkv = qkv + ops.concatenate([ops.cast(layer.bias, self.compute_dtype) for layer in layers], axis=0)
        n, n_kv = self._num_heads, self.num_key_value_heads
        return qkv[:, :, :n], qkv[:, :, n : n + n_kv], qkv[:, :, n + n_kv :]

    def _rotate(self, x, start_index):
        if self._rotary is None:
            return x
        return ops.cast(self._rotary(x, start_index=start_index), x.dtype)

    # ------------------------------------------------------------------------------------------------
    # One cached query: the decoding step

    def supports_single_step(self):
        """Whether :meth:`single_step` computes this layer's cached self-attention: a dot or scaled-dot score
        (the fused path), no ``position_bias``, key_dim == value_dim (a cache), and none of the override points
        (``_compute_attention``, ``_compute_logits``, ``_combine``, ``_compute_attention_mask``, ``_update_cache``)
        overridden.

        Returns:
            A Python bool.
        """
        base = MultiHeadAttention
        overridden = any(
            getattr(type(self), name) is not getattr(base, name)
            for name in _OVERRIDE_POINTS + ("_update_cache",)
        )
        return (
            self._fused_scale is not None and self._hooks.position_bias is None
            and self._key_dim == self._value_dim and not overridden
        )

    def single_step(self, query, cache, cache_update_index, layer=None, write=True):
        """Cached self-attention of one new position: what ``self(query, query, cache=cache,
        cache_update_index=i, use_causal_mask=True)`` computes for a (B, 1, D) query (outside training with
        dropout), at a cost that grows with i rather than with the cache length S_max.

        The query, key and value are projections of ``query`` (rotated at position i); the query attends the
        cache positions s <= i (eq. 1) through :func:`attnlayers.kv_cache.attend_one`, which reads only the
        shortest static cache prefix holding them. Requires :meth:`supports_single_step`.

        Args:
            query: (B, 1, D), the step's input.
            cache: (B, 2, S_max, N_kv, H), S_max static; or, with ``layer``, the caches of a decoder stack
                (B, layers, 2, S_max, N_kv, H), of which ``layer`` is read (and written). Positions > i may hold
                anything.
            cache_update_index: int or scalar int tensor, i.
            layer: None, or the layer (int) of a stacked ``cache``.
            write: True: the new key and value are written at position i first
                (:func:`attnlayers.kv_cache.write_position`) and read back with the prefix: best where the backend
                updates in place (XLA, :func:`attnlayers.kv_cache.updates_in_place`). False: the cache is not
                written; the new key is attended beside the positions s < i and returned for the caller to write
                (one write for every layer of a stack, where each write copies the cache).

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
        v = self._value_dense(query)
        entry = ops.stack((k[:, 0], v[:, 0]), axis=1)  # (B, 2, N_kv, H)
        heads_of = dict(num_heads=self._num_heads, num_key_value_heads=self.num_key_value_heads,
                        scale=self._fused_scale, sliding_window=self._sliding_window, layer=layer)
        if write:
            cache = kv_cache.write_position(cache, entry, index, layer)
            heads = kv_cache.attend_one(q, cache, index, **heads_of)
        else:
            heads = kv_cache.attend_one(q, cache, index, new=(k, v), **heads_of)
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        output = self._output_dense(heads)  # Concat(head_1, ..., head_N) W^O
        return output, (cache if write else entry)

    def _update_cache(self, cache, key, value, cache_update_index):
        """Writes this call's keys and values into the cache at ``cache_update_index``
        (:func:`attnlayers.kv_cache.update`); the override point of the general cached path.

        Args:
            cache: (B, 2, S_max, N_kv, H) keys and values.
            key, value: (B, S_new, N_kv, H) projected (and rotated) keys and values of this call.
            cache_update_index: int or scalar int tensor, the cache position of the first new key.

        Returns:
            ``(key, value, cache, cache_mask)``: the keys and values (B, S_max, N_kv, H) of every cache
            position, the updated cache (B, 2, S_max, N_kv, H), and a (1, 1, S_max) mask of the positions
            written so far (the later ones hold no key yet).
        """
        return kv_cache.update(cache, key, value, cache_update_index, self.compute_dtype)

    def _compute_attention_mask(
        self,
        query,
        value,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        start_index=None,
        cache_mask=None,
        cached=False,
    ):
        """Combines every mask of a call into one, as keras' method of this name: padding of the queries
        (B, T, 1) and of the keys (B, 1, S), the explicit ``attention_mask``, the causal rule and the
        sliding window (1, T, S), and the unwritten cache positions.

        Args:
            query: (B, T, ...) and value: (B, S, ...) tensors; only their batch sizes and lengths are read.
            query_mask: (B, T). value_mask, key_mask: (B, S) (with a cache, S is the cache length).
            attention_mask: (B, T, S), (T, S), or per head (B, N, T, S); True (nonzero) = may attend; axes of
                size 1 broadcast.
            use_causal_mask: query t attends keys up to its own absolute position only.
            start_index: absolute position of query 0 (default: 0, or S - T with
                ``causal_alignment="bottom_right"``), the offset of the causal rule and of the window.
            cache_mask: (1, 1, S) positions of a cache written so far, or None.
            cached: whether S counts cache positions (for the error message of a misplaced key mask).

        Returns:
            Boolean mask broadcastable to (B, T, S) (to (B, N, T, S) with a per-head ``attention_mask``), or None
            when nothing is masked.
        """
        query_length, key_length = _length(query), _length(value)
        query_mask, key_padding, attention_mask = self._mask_pieces(
            query, value, query_mask, value_mask, key_mask, attention_mask, cached
        )
        per_head = attention_mask if attention_mask is not None and len(attention_mask.shape) == 4 else None
        start = self._query_start(query_length, key_length) if start_index is None else start_index
        mask = masking.compute_attention_mask(
            query_length, key_length, query_mask, key_padding, None if per_head is not None else attention_mask,
            use_causal_mask, offset=start,
        )
        if self._sliding_window is not None:
            mask = masking.combine_masks(mask, self._window_mask(query_length, key_length, start)[None])
        mask = masking.combine_masks(mask, cache_mask)
        if per_head is None:
            return mask
        return per_head if mask is None else ops.logical_and(ops.expand_dims(mask, 1), per_head)  # (B, N, T, S)

    def _query_start(self, query_length, key_length):
        """The absolute position of query 0 among the keys when no cache index gives it (``causal_alignment``)."""
        return 0 if self._causal_alignment == "top_left" else key_length - query_length

    def _mask_pieces(self, query, value, query_mask, value_mask, key_mask, attention_mask, cached=False):
        """The validated mask pieces of a call: query padding (B, T), key padding (B, S) (value_mask AND
        key_mask) and the explicit attention mask (B, T, S) (axes of size 1 broadcast), each boolean or None."""
        # ops.shape: under tf.function with None axes, the sizes only known at run time are checked then.
        (batch, query_length), key_length = ops.shape(query)[:2], ops.shape(value)[1]
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, query_length))
        key_padding = self._key_side_mask(value_mask, key_mask, batch, key_length, cached)
        attention_mask = self._keras_attention_mask(attention_mask)
        expected = (batch, query_length, key_length)
        if attention_mask is not None and len(attention_mask.shape) == 4:
            expected = (batch, self._num_heads, query_length, key_length)
        attention_mask = masking.check_mask(attention_mask, "attention_mask", expected)
        return query_mask, key_padding, attention_mask

    @staticmethod
    def _keras_attention_mask(mask):
        """keras' attention-mask shapes as this layer's: (T, S) -> (1, T, S); (B|1, 1, T, S) -> (B|1, T, S); a
        per-head (B|1, N, T, S) kept; a float mask as keras' cast to bool (nonzero = may attend: an additive 0 / -inf
        mask goes to `attention_bias` instead)."""
        if mask is None:
            return None
        mask = ops.convert_to_tensor(mask)
        if "float" in backend.standardize_dtype(mask.dtype):
            mask = ops.not_equal(mask, 0)
        if len(mask.shape) == 2:
            return mask[None]
        if len(mask.shape) == 4 and mask.shape[1] == 1:
            return mask[:, 0]
        return mask

    def _key_side_mask(self, value_mask, key_mask, batch, key_length, cached):
        masks = []
        for name, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
            if mask is None:
                continue
            static = masking.static_sizes((batch, key_length))
            if cached and len(mask.shape) == 2 and not same_size(mask.shape[1], static[1]):
                raise ValueError(
                    f"With a `cache`, `{name}` masks the cache positions: expected shape "
                    f"{format_shape(static)}; received shape {format_shape(mask.shape)}. (An "
                    f"implicit Keras mask of the new tokens cannot be placed in the cache: pass an "
                    f"`attention_mask` instead.)"
                )
            masks.append(masking.check_mask(mask, name, (batch, key_length)))
        return masking.combine_masks(*masks)

    def _window_mask(self, query_length, key_length, start):
        """keras' band: |i - j| < sliding_window, i the absolute query position."""
        return masking.keras_window_mask(query_length, key_length, self._sliding_window, offset=start)

    def _compute_attention_bias(self, query, key, start_index, attention_bias=None):
        """The additive logit bias of a call: the ``position_bias`` hook at ``start_index`` plus the
        ``attention_bias`` argument, (1 or B, N or 1, T, S) float32, or None when there is neither.

        Under mixed_float16 Keras casts the ``attention_bias`` argument to float16, where -1e9 is -inf (and
        a row of -inf softmaxes to NaN): infinite entries are clamped to a finite large negative.
        """
        biases = []
        if self._position_bias is not None:
            biases.append(self._position_bias(query, key, start_index=start_index))
        if attention_bias is not None:
            biases.append(attention_bias)
        if not biases:
            return None
        total = ops.cast(biases[0], "float32")
        for bias in biases[1:]:
            total = total + ops.cast(bias, "float32")
        return ops.maximum(total, masking.large_negative("float32"))

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
        n, n_kv = self._num_heads, key.shape[2]
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
        n, n_kv = self._num_heads, value.shape[2]
        groups = n // n_kv
        if groups == 1:
            return ops.einsum("bnts,bsnh->btnh", weights, value)
        batch, length = ops.shape(weights)[0], ops.shape(weights)[2]
        grouped = ops.reshape(weights, (batch, n_kv, groups, length, ops.shape(weights)[3]))
        heads = ops.einsum("bkgts,bskh->btkgh", grouped, value)
        return ops.reshape(heads, (batch, length, n, self._value_dim))

    @staticmethod
    def _zero_invisible_queries(output, mask):
        """A query with nothing visible (in any head) outputs 0 (not the output bias)."""
        if mask is None:
            return output
        visible = ops.any(mask, axis=-1)
        if len(mask.shape) == 4:  # a per-head mask (B, N, T, S)
            visible = ops.any(visible, axis=1)
        visible = ops.reshape(visible, ops.shape(visible) + (1,) * (len(output.shape) - 2))
        return ops.where(visible, output, ops.zeros_like(output))

    # ------------------------------------------------------------------------------------------------
    # Shapes and config

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        query_shape = tuple(query_shape)
        _check_key_value_shapes(value_shape, value_shape if key_shape is None else key_shape)
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
        def spec(shape):
            return keras.KerasTensor(tuple(shape), dtype=self.compute_dtype)

        key_length = cache.shape[2] if cache is not None else value.shape[1]
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
            "rotary": _serialize_layer(self._hooks.rotary),
            "position_bias": _serialize_layer(self._hooks.position_bias),
            "implementation": self._implementation,
            "causal_alignment": self._causal_alignment,
        }

    @classmethod
    def from_config(cls, config):
        """A config saved with implementation="fused" loads as "auto" under a backend without a fused kernel (a
        model trained under JAX, exported under TensorFlow): every route computes the same function."""
        config = dict(config)
        if config.get("implementation") == "fused" and fused.kernel("bfloat16", 8, explicit=True) is None:
            config["implementation"] = "auto"
        return super().from_config(config)
