"""XLNet's relative segment encodings (Yang et al. 2019, section 2.5 and appendix A.2), the one term of XLNet's
attention score that Transformer-XL's relative attention (``attnlayers.relative_positional``) does not have.

Positions i and j are encoded only by whether they lie in the same segment: s_ij = s_+ if they do, s_- if not
(two learned vectors per head), and the score of query i for key j gains

    a_ij = (q_i + b) . s_ij                                                                (section 2.5)

with b a learned per-head bias, scaled by 1 / sqrt(H) as the other terms. Segment ids are compared, never looked
up, so any number of segments (XLNet's <cls> has its own) and any id values work.
"""

import math

import keras
from keras import ops

from attnlayers.validation import check_rank, format_shape, positive_int


__all__ = ["RelativeSegmentBias"]


@keras.saving.register_keras_serializable(package="attnlayers.xlnet")
class RelativeSegmentBias(keras.layers.Layer):
    """The relative segment term of XLNet's attention logits, as an ``attention_bias`` of
    :class:`~attnlayers.MultiHeadAttention`:

        bias[b, n, t, s] = (q_t + b_n) . s_n^{[seg_t != seg_s]} / sqrt(H)              (a_ij, section 2.5)

    It reads the queries q of the attention it serves (the (B, T, N, H) projections of the stream that queries it:
    each stream of two-stream attention has its own) and the segment comparison.

    Weights: ``bias`` b (N, H) (Hugging Face's ``r_s_bias``, keras-hub's ``segment_attention_bias``; zeros by
    default, as keras-hub's) and ``encodings`` (2, N, H): [s_+, s_-], same segment first (``seg_embed``,
    ``segment_encoding``).

    Args:
        num_heads: N. head_dim: H.
        bias_initializer: of b. encodings_initializer: of s_+ and s_-.

    Call arguments:
        query: (B, T, N, H) projected queries.
        different_segment: (B, T, S) boolean, True where query t and key s lie in different segments.

    Returns:
        (B, N, T, S) bias for the attention logits, in the compute dtype.

    Example:
    >>> segment_bias = RelativeSegmentBias(num_heads=4, head_dim=16)
    >>> different = segment_ids[:, :, None] != segment_ids[:, None, :]
    >>> y = attention(x, x, attention_bias=segment_bias(attention.query_dense(x), different))
    """

    def __init__(self, num_heads, head_dim, bias_initializer="zeros", encodings_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.head_dim = positive_int(head_dim, "head_dim")
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.encodings_initializer = keras.initializers.get(encodings_initializer)

    def build(self, query_shape=None, different_segment_shape=None):
        n, h = self.num_heads, self.head_dim
        self.bias = self.add_weight(name="bias", shape=(n, h), initializer=self.bias_initializer)  # b
        self.encodings = self.add_weight(name="encodings", shape=(2, n, h),
                                         initializer=self.encodings_initializer)  # [s_+, s_-]

    def _check(self, query, different_segment):
        check_rank(query.shape, 4, "query", "(batch, query_length, num_heads, head_dim)")
        if tuple(query.shape[2:]) != (self.num_heads, self.head_dim):
            raise ValueError(f"`query` must have {self.num_heads} heads of size {self.head_dim} on axes 2 and 3; "
                             f"received shape {format_shape(query.shape)}.")
        check_rank(different_segment.shape, 3, "different_segment", "(batch, query_length, key_length)")
        if None not in (query.shape[1], different_segment.shape[1]) and query.shape[1] != different_segment.shape[1]:
            raise ValueError(f"`different_segment` must have the query length {query.shape[1]} on axis 1; received "
                             f"shape {format_shape(different_segment.shape)}.")

    def call(self, query, different_segment):
        self._check(query, different_segment)
        dtype = self.compute_dtype
        # (q_t + b) . s for both encodings: (B, N, T, 2), then s_- where the segments differ, s_+ where they agree.
        scores = ops.einsum("btnh,enh->bnte", ops.cast(query, dtype) + ops.cast(self.bias, dtype),
                            ops.cast(self.encodings, dtype))
        different = ops.expand_dims(ops.cast(different_segment, "bool"), 1)  # (B, 1, T, S)
        bias = ops.where(different, scores[..., 1:], scores[..., :1])
        return bias / ops.cast(math.sqrt(self.head_dim), dtype)

    def compute_output_shape(self, query_shape, different_segment_shape):
        return (query_shape[0], self.num_heads, query_shape[1], different_segment_shape[2])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "encodings_initializer": keras.initializers.serialize(self.encodings_initializer),
        }
