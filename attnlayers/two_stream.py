"""XLNet's two-stream self-attention (Yang et al. 2019, section 2.3), on :class:`~attnlayers.MultiHeadAttention`.

Each position keeps two representations per layer: the content stream h (the token and its context, as a
Transformer's hidden state) and the query stream g (its position and the context, never its own token). Both
streams' queries attend the content stream's keys and values, through the same projections:

    g_{z_t}^{(m)} = Attention(Q = g_{z_t}^{(m-1)}, KV = h_{z<t}^{(m-1)}; theta)     (query stream: cannot see x_{z_t})
    h_{z_t}^{(m)} = Attention(Q = h_{z_t}^{(m-1)}, KV = h_{z<=t}^{(m-1)}; theta)    (content stream)

"z<t" and "z<=t" are the masks of :func:`attnlayers.permutation.permutation_masks`. g^{(0)} is a trainable vector
w and h^{(0)} the token embeddings (the model's business); fine-tuning drops the query stream and runs the content
stream alone, a plain (bidirectional) self-attention.
"""

import keras

from attnlayers.multi_head import MultiHeadAttention
from attnlayers.validation import check_rank, check_tensor, format_shape, same_size

__all__ = ["TwoStreamAttention"]

_SEQUENCE = "(batch, length, dim)"


@keras.saving.register_keras_serializable(package="attnlayers")
class TwoStreamAttention(keras.layers.Layer):
    """XLNet's two-stream attention (Yang et al. 2019, section 2.3): one :class:`MultiHeadAttention` called twice,
    once with the content stream's queries, once with the query stream's, both over the content stream's keys and
    values (shared W^Q, W^K, W^V, W^O and position hook).

    Everything :class:`MultiHeadAttention` does applies to both calls: the ``position_bias`` hook (XLNet's
    relative attention, :class:`~attnlayers.relative_positional.TransformerXLRelativeBias`), the ``attention_bias``
    argument, every route (``implementation``), the fully-masked rule (a query that sees nothing outputs 0), and a
    Transformer-XL memory (``memory=``, see :mod:`attnlayers.segment_memory`): the masks then cover the segment's
    keys and the memory is visible to every query. The attention's weights are ``layer.attention``'s, in keras'
    order (query, key, value, attention_output).

    Args:
        num_heads: N. key_dim: H, size of each query / key head. value_dim: size of each value head (default H).
        dropout: dropout rate on the attention weights (training only), the same rate for both streams.
        use_bias: whether the projections have biases (XLNet's have none: ``use_bias=False``).
        position_bias: a position hook layer called as ``bias(query, key, start_index=...)`` (see
            :class:`MultiHeadAttention`), its config, or None.
        kernel_initializer, bias_initializer: of the projections.
        implementation: the attention route, as :class:`MultiHeadAttention` ("auto", "exact", "chunked", ...).
        seed: seed of the dropout.

    Call arguments:
        content: (B, T, D), h^{(m-1)}: the queries of the content stream and the keys / values of both.
        query_stream: optional (B, T, D), g^{(m-1)}; None runs the content stream alone (fine-tuning).
        content_attention_mask: (B, T, T) boolean (axes of size 1 broadcast), True = may attend, h's mask:
            rank_z(j) <= rank_z(i) in pretraining (:func:`~attnlayers.permutation.permutation_masks`), the keys'
            padding (B, 1, T) in fine-tuning; None: every key visible.
        query_attention_mask: (B, T, T) boolean, g's mask: rank_z(j) < rank_z(i). Needed with ``query_stream``:
            without it g would see its own token.
        memory: optional (B, M, D), the previous segment's content states (no gradient flows into them).
        memory_mask: optional (B, M) boolean padding of the memory.
        attention_bias: optional (B or 1, N or 1, T, S) additive logit bias of the content stream, and of the
            query stream unless ``query_attention_bias`` is given.
        query_attention_bias: optional (B or 1, N or 1, T, S) bias of the query stream alone (a term that reads
            the stream's own queries, e.g. XLNet's relative segment term).
        training: enables dropout.

    Returns:
        ``(content_output, query_output)``: h^{(m)} (B, T, D) and g^{(m)} (B, T, D); without ``query_stream``,
        ``content_output`` alone (a functional model holds no None). The residual connections, the normalisation
        and the feed-forward are the caller's.

    Example:
    >>> content_mask, query_mask = permutation_masks(sample_factorization_order(B, T, seed=[0, step]))
    >>> attention = TwoStreamAttention(num_heads=4, key_dim=16, use_bias=False,
    ...                                position_bias=TransformerXLRelativeBias(num_heads=4))
    >>> h, g = attention(h, g, content_attention_mask=content_mask, query_attention_mask=query_mask)
    >>> h = attention(h, content_attention_mask=padding[:, None, :])           # fine-tuning: content only
    """

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, position_bias=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", implementation="auto", seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        # One attention layer for both streams: the shared parameters theta of the equations above.
        self.attention = MultiHeadAttention(
            num_heads=num_heads, key_dim=key_dim, value_dim=value_dim, dropout=dropout, use_bias=use_bias,
            position_bias=position_bias, kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            implementation=implementation, seed=seed, dtype=self.dtype_policy, name="attention",
        )

    def build(self, content_shape):
        check_tensor(content_shape, "content", _SEQUENCE)
        check_rank(content_shape, 3, "content", _SEQUENCE)
        self.attention.build(content_shape, content_shape)

    def call(self, content, query_stream=None, content_attention_mask=None, query_attention_mask=None, memory=None,
             memory_mask=None, attention_bias=None, query_attention_bias=None, training=None):
        if query_stream is not None:
            self._check_query_stream(content, query_stream, query_attention_mask)
        shared = {"memory": memory, "memory_mask": memory_mask, "attention_bias": attention_bias, "training": training}
        # h^{(m)}: Q = h, KV = h_{z<=t} (and the memory).
        content_output = self.attention(content, content, attention_mask=content_attention_mask, **shared)
        if query_stream is None:
            return content_output
        # g^{(m)}: Q = g, KV = h_{z<t}, the same projections.
        if query_attention_bias is not None:
            shared["attention_bias"] = query_attention_bias
        query_output = self.attention(query_stream, content, attention_mask=query_attention_mask, **shared)
        return content_output, query_output

    def _check_query_stream(self, content, query_stream, query_attention_mask):
        if len(query_stream.shape) != 3 or not all(
            same_size(a, b) for a, b in zip(query_stream.shape, content.shape)
        ):
            raise ValueError(
                f"`query_stream` must have the shape of `content`, {format_shape(content.shape)} (one query-stream "
                f"vector per position); received shape {format_shape(query_stream.shape)}."
            )
        if query_attention_mask is None:
            raise ValueError(
                "`query_attention_mask` is required with `query_stream`: without it the query stream at z_t would "
                "see its own token x_{z_t}. Build it with attnlayers.permutation.permutation_masks."
            )

    def compute_output_shape(self, content_shape, query_stream_shape=None):
        if query_stream_shape is None:
            return tuple(content_shape)
        return tuple(content_shape), tuple(query_stream_shape)

    def compute_output_spec(self, content, query_stream=None, content_attention_mask=None, query_attention_mask=None,
                            memory=None, memory_mask=None, attention_bias=None, query_attention_bias=None,
                            training=None):
        shapes = self.compute_output_shape(content.shape, None if query_stream is None else query_stream.shape)
        if query_stream is None:
            return keras.KerasTensor(shapes, dtype=self.compute_dtype)
        return tuple(keras.KerasTensor(shape, dtype=self.compute_dtype) for shape in shapes)

    def get_config(self):
        attention = self.attention.get_config()
        return {
            **super().get_config(),
            **{name: attention[name] for name in (
                "num_heads", "key_dim", "value_dim", "dropout", "use_bias", "position_bias", "kernel_initializer",
                "bias_initializer", "implementation", "seed")},
        }
