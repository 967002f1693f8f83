"""Linformer attention (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"): the keys and
values are projected along the sequence axis from S positions to k << S with learned matrices E, F (k, S_max):

    head_i = softmax(Q W_i^Q (E_i K W_i^K)^T / sqrt(d_k)) F_i V W_i^V                     (eq. 7)

so the logits are (T, k) per head instead of (T, S): O(T k) time and memory.
"""

import keras
from keras import ops

from attnlayers import masking
from attnlayers.multi_head import AttentionOutputs, MultiHeadAttention, _length
from attnlayers.validation import format_shape, one_of, positive_int, reject_arguments

__all__ = ["LinformerAttention"]

# Section 4's parameter sharing within one layer. "layerwise" shares one E across the layers of a model, which
# a single layer cannot do (see the error message below).
_SHARING = ("none", "key_value")


class _SequenceProjection(keras.layers.Layer):
    """Holds one sequence-axis projection matrix: E or F (k, S_max), or one per key/value head (N_kv, k, S_max).

    A sublayer (created after the query/key/value/output projections in ``build``) so that the layer's weights
    list keras' projections first, then E, then F."""

    def __init__(self, shape, initializer, regularizer, constraint, **kwargs):
        super().__init__(**kwargs)
        self._shape = tuple(shape)
        self._initializer = initializer
        self._regularizer = regularizer
        self._constraint = constraint

    def build(self, input_shape=None):
        self.kernel = self.add_weight(
            name="kernel",
            shape=self._shape,
            initializer=self._initializer,
            regularizer=self._regularizer,
            constraint=self._constraint,
        )

    def call(self, inputs):  # pragma: no cover - the matrix is read directly, see LinformerAttention
        return inputs


@keras.saving.register_keras_serializable(package="attnlayers")
class LinformerAttention(MultiHeadAttention):
    """Linformer attention (Wang et al. 2020): multi-head attention whose keys and values are projected along
    the sequence axis to ``projected_length`` (k) positions before attending (eq. 7), so the cost is linear in
    the sequence length.

    The keys K W_i^K and values V W_i^V (B, S, N_kv, H) are mixed into k positions by E_i and F_i, whose first
    S columns are used for a sequence of length S <= ``max_length`` (the paper pads every sequence to n =
    ``max_length``; zero padding contributes nothing, so this is the same computation). Every query then
    attends the k projected keys.

    Parameter sharing (paper, section 4): ``headwise_sharing=True`` (the default, as in the paper's released
    implementation, where the projection is applied before the heads are split) uses one E and one F for all
    heads; ``False`` learns E_i, F_i per key/value head, eq. 7 as written. ``share_projections="key_value"``
    ties F = E ("key-value sharing"). "Layerwise" sharing across the layers of a model is not a property of
    one layer and is refused.

    Masks. A padded key or value (``value_mask`` / ``key_mask`` / implicit Keras masks) is zeroed before the
    projection, so it contributes nothing to any projected position; a projected position that mixes no
    unpadded key (E row 0 on all of them) is masked, so a batch row whose keys are all padding gives zero
    outputs, and with k = S, E = F = I the layer is exactly :class:`MultiHeadAttention` with that key padding.
    Padded queries get zero outputs. Masks over (query, key) pairs are not meaningful here: each projected
    position mixes all positions, so ``use_causal_mask=True``, an explicit ``attention_mask``, an
    ``attention_bias`` and a ``position_bias`` hook raise a ValueError, as does a ``cache`` (Linformer is
    not a decoder: a key cache would have to be re-projected at every step).

    Weights: keras' query, key, [gate,] value and output projections (in that order, as in
    :class:`MultiHeadAttention`), then E, then F (F absent with key-value sharing).

    Args:
        num_heads: N, as :class:`MultiHeadAttention`.
        key_dim: H, as :class:`MultiHeadAttention`.
        **kwargs: every other argument of :class:`MultiHeadAttention` (value_dim, dropout, use_bias,
            output_shape, use_gate, score, num_key_value_heads, rotary, initializers, ...), except
            ``sliding_window`` and ``position_bias`` (masks over (query, key) pairs).
        projected_length: k, the number of projected key/value positions.
        max_length: S_max, the longest key/value sequence; E and F are (k, S_max). Longer sequences raise.
        share_projections: "none" (separate E and F) or "key_value" (F = E).
        headwise_sharing: one E (and F) for all heads (default), or one per key/value head.
        projection_initializer, projection_regularizer, projection_constraint: of E and F.

    Call arguments:
        query: (B, T, D_q).
        value: (B, S, D_v), S <= ``max_length``.
        key: (B, S, D_k); defaults to ``value``.
        query_mask: (B, T) boolean padding mask of the queries; padded queries get a zero output.
        value_mask, key_mask: (B, S) boolean padding masks of the values / keys (combined); padded positions
            are zeroed before the sequence projection.
        return_attention_scores: also return the attention weights over the projected positions.
        training: enables dropout on the weights.
        attention_mask, use_causal_mask, cache, cache_update_index, attention_bias: accepted for the
            signature of :class:`MultiHeadAttention`; anything but their defaults raises a ValueError.

    Returns:
        ``output`` (B, T, D) (or (B, T) + ``output_shape``); with ``return_attention_scores``,
        ``(output, scores)`` where ``scores`` are the applied weights (B, N, T, k) over the k projected
        positions (not over the S keys).

    Example:
    >>> attention = LinformerAttention(num_heads=8, key_dim=64, projected_length=256, max_length=4096)
    >>> y = attention(x, x, value_mask=padding)                    # x (B, 4096, 512) -> y (B, 4096, 512)
    >>> y, scores = attention(x, x, return_attention_scores=True)  # scores (B, 8, 4096, 256)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        *,
        projected_length,
        max_length,
        share_projections="none",
        headwise_sharing=True,
        projection_initializer="glorot_uniform",
        projection_regularizer=None,
        projection_constraint=None,
        **kwargs,
    ):
        reject_arguments("LinformerAttention", kwargs, ("sliding_window", "position_bias"),
                         "it acts on (query, key) pairs, but each projected key mixes every key position")
        reject_arguments("LinformerAttention", kwargs, ("flash_attention", "memory_efficient"),
                         "MultiHeadAttention's dense memory-efficient path is not used, its attention over the k "
                         "projected positions is already O(T k)", flags=True)
        if kwargs.get("implementation", "auto") not in ("auto", "exact"):
            raise ValueError(f"LinformerAttention computes its own attention: `implementation` must be 'auto' or 'exact'; "
                             f"received implementation={kwargs['implementation']!r}.")
        super().__init__(num_heads, key_dim, **kwargs)
        self._projected_length = positive_int(projected_length, "projected_length")
        self._max_length = positive_int(max_length, "max_length")
        if share_projections == "layerwise":
            raise ValueError(
                "`share_projections`='layerwise' shares one projection across the layers of a model, which a "
                "single layer cannot express (pass one LinformerAttention's E to several layers yourself); "
                f"expected one of {list(_SHARING)}."
            )
        self._share_projections = one_of(share_projections, "share_projections", _SHARING)
        if headwise_sharing not in (True, False):
            raise ValueError(f"`headwise_sharing` must be True or False; received headwise_sharing={headwise_sharing!r}.")
        self._headwise_sharing = bool(headwise_sharing)
        self._projection_initializer = keras.initializers.get(projection_initializer)
        self._projection_regularizer = keras.regularizers.get(projection_regularizer)
        self._projection_constraint = keras.constraints.get(projection_constraint)

    projected_length = property(lambda self: self._projected_length)
    max_length = property(lambda self: self._max_length)

    def _check_length(self, key_shape):
        length = key_shape[1]
        if length is not None and length > self._max_length:
            raise ValueError(
                f"LinformerAttention projects at most `max_length`={self._max_length} key/value positions; "
                f"received key/value shape {format_shape(key_shape)} (length {length}). Build the layer with a "
                f"larger max_length."
            )

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self._check_length(value_shape)
        k, s_max = self._projected_length, self._max_length
        shape = (k, s_max) if self._headwise_sharing else (self.num_key_value_heads, k, s_max)

        def projection(name):
            layer = _SequenceProjection(
                shape,
                self._projection_initializer.__class__.from_config(self._projection_initializer.get_config()),
                self._projection_regularizer,
                self._projection_constraint,
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build()
            return layer

        # After the projections of super().build(): E, F come last in the weights list.
        self._key_projection = projection("key_sequence_projection")  # E
        self._value_projection = (
            self._key_projection if self._share_projections == "key_value" else projection("value_sequence_projection")
        )  # F

    def _check_unsupported(self, attention_mask, use_causal_mask, cache, cache_update_index, attention_bias):
        why = "each projected key/value position mixes every position of the sequence"
        if use_causal_mask:
            raise ValueError(
                f"LinformerAttention cannot apply a causal mask: {why}, so a query would see the future "
                f"through any projected position. Received use_causal_mask=True; expected False."
            )
        if attention_mask is not None:
            raise ValueError(
                f"LinformerAttention cannot apply an `attention_mask` over (query, key) pairs: {why}. Received "
                f"attention_mask of shape {format_shape(attention_mask.shape)}; expected None (mask padded "
                f"keys with `value_mask` / `key_mask` and padded queries with `query_mask`)."
            )
        if attention_bias is not None:
            raise ValueError(
                f"LinformerAttention cannot add an `attention_bias` over (query, key) pairs: {why}. Received "
                f"attention_bias of shape {format_shape(attention_bias.shape)}; expected None."
            )
        if cache is not None or cache_update_index is not None:
            raise ValueError(
                "LinformerAttention has no key/value cache: the keys and values are projected along the whole "
                f"sequence, so incremental decoding does not apply. Received cache="
                f"{'a tensor' if cache is not None else None}, cache_update_index={cache_update_index!r}; expected "
                f"None for both."
            )

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
        self._check_unsupported(attention_mask, use_causal_mask, cache, cache_update_index, attention_bias)
        key = value if key is None else key
        self._check_inputs(query, value, key, None, None, None)
        self._check_length(value.shape)
        # Q W^Q, K W^K, V W^V for all heads: (B, L, D) -> (B, L, N, H).
        fused = self._fused_self_projections(query, value, key)
        q = self._query_dense(query) if fused is None else fused[0]
        k = self._key_dense(key) if fused is None else fused[1]
        v = self._value_dense(value) if fused is None else fused[2]
        length = _length(k)
        k = self._rotate(k, 0)
        q = self._rotate(q, length - _length(q))

        batch = query.shape[0]
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, query.shape[1]))
        key_padding = self._key_side_mask(value_mask, key_mask, batch, value.shape[1], False)  # (B, S)
        if key_padding is not None:
            # Padded keys and values are zeroed before the sequence projection: they add nothing to E K, F V.
            keep = ops.expand_dims(ops.expand_dims(key_padding, -1), -1)
            k = ops.where(keep, k, ops.zeros_like(k))
            v = ops.where(keep, v, ops.zeros_like(v))

        e = ops.cast(self._key_projection.kernel[..., :length], self.compute_dtype)  # first S columns of E
        f = ops.cast(self._value_projection.kernel[..., :length], self.compute_dtype)
        k, v = self._project(e, k), self._project(f, v)  # E_i K W_i^K, F_i V W_i^V: (B, k, N_kv, H)

        mask = self._projected_mask(query_mask, key_padding, e)
        heads, scores = self._compute_attention(q, k, v, mask, training)  # eq. 7 over the k positions
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        output = self._output_dense(heads)  # Concat(head_1, ..., head_N) W^O
        # A query with nothing visible (padded, or every key padded) outputs 0, not the output bias.
        visible = masking.combine_masks(
            query_mask, None if key_padding is None else ops.any(key_padding, axis=-1, keepdims=True)
        )
        if visible is not None:
            visible = ops.reshape(visible, ops.shape(visible) + (1,) * (len(output.shape) - 2))
            output = ops.where(visible, output, ops.zeros_like(output))
        return AttentionOutputs(output, scores, None).pack(return_attention_scores)

    def _project(self, matrix, x):
        """Sequence-axis projection: (k, S) or (N_kv, k, S) with (B, S, N_kv, H) -> (B, k, N_kv, H)."""
        if self._headwise_sharing:
            return ops.einsum("ks,bsnh->bknh", matrix, x)
        return ops.einsum("nks,bsnh->bknh", matrix, x)

    def _projected_mask(self, query_mask, key_padding, e):
        """The mask of the logits over the projected positions: padded queries, and projected keys that mix no
        unpadded key (a row of E that is 0 on every unpadded position; every row when all keys are padding).

        Returns None, a (B, T, k) mask (headwise sharing) or a (B, N, T, k) one (a projection per head)."""
        projected = None
        if key_padding is not None:
            real = ops.cast(key_padding, "float32")
            weight = ops.abs(ops.cast(e, "float32"))
            if self._headwise_sharing:
                projected = ops.einsum("bs,ks->bk", real, weight)[:, None, :] > 0  # (B, 1, k)
            else:
                projected = ops.einsum("bs,nks->bnk", real, weight) > 0  # (B, N_kv, k)
                groups = self._num_heads // self.num_key_value_heads
                projected = ops.repeat(projected, groups, axis=1)[:, :, None, :]  # (B, N, 1, k)
        queries = None
        if query_mask is not None:
            queries = query_mask[:, :, None] if self._headwise_sharing else query_mask[:, None, :, None]
        return masking.combine_masks(queries, projected)

    def _compute_attention(self, query, key, value, attention_mask=None, training=None, return_attention_scores=False,
                           use_causal_mask=False, attention_bias=None):
        """softmax(Q W^Q (E K W^K)^T / sqrt(d_k)) F V W^V (eq. 7), given the projected keys and values: the dense
        attention of :class:`MultiHeadAttention` over the k projected positions (S = k below).

        Args:
            query: (B, T, N, H); key: (B, k, N_kv, H) = E K W^K; value: (B, k, N_kv, Hv) = F V W^V.
            attention_mask: None, (B, T, k) or (B, N, T, k).

        Returns:
            ``(attention_output (B, T, N, Hv), attention_scores (B, N, T, k))``.
        """
        return super()._compute_attention(query, key, value, attention_mask, training, return_attention_scores,
                                          use_causal_mask, attention_bias=attention_bias)

    def compute_output_spec(self, query, value, key=None, return_attention_scores=False, **kwargs):
        def spec(shape):
            return keras.KerasTensor(tuple(shape), dtype=self.compute_dtype)

        return AttentionOutputs(
            spec(self.compute_output_shape(query.shape, value.shape)),
            spec((query.shape[0], self._num_heads, query.shape[1], self._projected_length)),
            None,
        ).pack(return_attention_scores)

    def get_config(self):
        config = super().get_config()
        for name in ("sliding_window", "position_bias"):  # always None here
            config.pop(name)
        return {
            **config,
            "projected_length": self._projected_length,
            "max_length": self._max_length,
            "share_projections": self._share_projections,
            "headwise_sharing": self._headwise_sharing,
            "projection_initializer": keras.initializers.serialize(self._projection_initializer),
            "projection_regularizer": keras.regularizers.serialize(self._projection_regularizer),
            "projection_constraint": keras.constraints.serialize(self._projection_constraint),
        }
