"""Transformer-XL's relative positional attention (Dai et al. 2019, section 3.3) as a position hook of
:class:`~attnlayers.MultiHeadAttention`.

The paper splits the score of query i and key j into four terms:

    A^rel_{i,j} = q_i . k_j               (a) content-content: MHA's own score
                + q_i . W_{k,R} R_{i-j}   (b) content-position
                + u . k_j                 (c) global content bias
                + v . W_{k,R} R_{i-j}     (d) global position bias

with q_i = W_q E_{x_i}, k_j = W_{k,E} E_{x_j} (MHA's projections), R the sinusoid of the relative distance i - j
(not learned) and u, v learned per head. MHA's scaled-dot score gives (a) / sqrt(H); this layer returns
((b) + (c) + (d)) / sqrt(H), so the logits are A^rel / sqrt(H) as in the paper's code.
"""

import math

import keras
import numpy as np
from keras import ops

from attnlayers.positional import _PositionBias
from attnlayers.validation import check_rank, format_shape, positive_int, same_size

__all__ = ["TransformerXLRelativeBias", "relative_sinusoid"]

_HEADS = "(batch, {}_length, num_heads, head_dim)"


def relative_sinusoid(distances, dim):
    """R of Transformer-XL / XLNet for float32 ``distances`` (L,): ``concat([sin(d * inv_freq), cos(d * inv_freq)])``
    with ``inv_freq = 1 / 10000^(arange(0, dim, 2) / dim)``, the sines first (not interleaved); (L, dim) float32
    (``dim`` even)."""
    inverse_frequency = 1.0 / np.power(10000.0, np.arange(0, dim, 2, dtype="float64") / dim)
    angles = ops.expand_dims(distances, -1) * inverse_frequency.astype("float32")  # (L, dim / 2)
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="attnlayers")
class TransformerXLRelativeBias(_PositionBias):
    """Relative positional attention of Transformer-XL (Dai et al. 2019, section 3.3), terms (b), (c) and (d).

    Called as ``bias(query, key, start_index=...)`` on the projected per-head queries and keys, it returns

        bias[b, n, t, s] = ((q_t + v_n) . W_{k,R}[n] R_{i-j}  +  u_n . k_s) / sqrt(H)       (eq. A^rel, b + c + d)

    with query t at absolute position i = start_index + t and key s at j = s. Added to MHA's scaled-dot logits
    q . k / sqrt(H) (term a) it gives the paper's score A^rel_{i,j} / sqrt(H). R is the sinusoid of i - j (XLNet's
    layout, :func:`relative_sinusoid`); distances may be negative (keys after the query: bidirectional, XLNet), and
    ``clamp_length`` clips them to [-clamp_length, clamp_length] as XLNet's ``clamp_len``. Grouped-query keys: query
    head n reads key head ``n // (N / N_kv)`` in term (c), as in the attention itself.

    R is computed for the T + S - 1 distances that occur, projected by W_{k,R} once, and the (T, S) matrix gathered
    from the (B, N, T, T + S - 1) products (no O(T S d_R) tensor).

    Weights: ``kernel`` W_{k,R} (d_R, N, H) (no bias, XLNet's ``r`` projection), ``u`` and ``v`` (N, H) (XLNet's
    ``r_w_bias`` and ``r_r_bias``), zeros by default as keras-hub's XLNet (the original code draws them from
    N(0, 0.02)).

    Args:
        num_heads: N, the attention's query heads.
        position_dim: d_R, the size of R (even); defaults to N * H (XLNet's d_model).
        clamp_length: None, or the largest |i - j| (XLNet's clamp_len).
        kernel_initializer: of W_{k,R}. bias_initializer: of u and v.

    Call arguments:
        query: (B, T, N, H) per-head queries (MHA's, after any rotary embedding).
        key: (B, S, N_kv, H) per-head keys, N_kv dividing N.
        start_index: absolute position of query 0 (int or scalar tensor): with a cache its update index; with a
            memory of M steps (Transformer-XL's recurrence), M.

    Returns:
        (B, N, T, S) bias for the attention logits, in the compute dtype.

    Example:
    >>> bias = TransformerXLRelativeBias(num_heads=8)
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, position_bias=bias)
    >>> y = attention(x, x, use_causal_mask=True, memory=previous_states)
    """

    def __init__(self, num_heads, position_dim=None, clamp_length=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs):
        super().__init__(num_heads, **kwargs)
        self.position_dim = positive_int(position_dim, "position_dim", allow_none=True)
        if self.position_dim is not None and self.position_dim % 2:
            raise ValueError(f"`position_dim` must be even (sines and cosines of d_R / 2 frequencies); received "
                             f"{position_dim}.")
        self.clamp_length = positive_int(clamp_length, "clamp_length", allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _check_heads(self, query_shape, key_shape):
        """(B, T, N, H) queries and (B, S, N_kv, H) keys of this layer's N, with N_kv dividing N."""
        for name, shape in (("query", query_shape), ("key", key_shape)):
            check_rank(shape, 4, name, _HEADS.format(name))
        if query_shape[2] != self.num_heads:
            raise ValueError(f"`query` must have num_heads={self.num_heads} heads on axis 2; received shape "
                             f"{format_shape(query_shape)}.")
        head_dim, key_heads = query_shape[-1], key_shape[2]
        if not same_size(key_shape[-1], head_dim) or key_heads is None or self.num_heads % key_heads:
            raise ValueError(
                f"`key` must have shape (batch, key_length, num_key_value_heads, {head_dim}) with "
                f"num_key_value_heads dividing num_heads={self.num_heads}; received shape {format_shape(key_shape)}."
            )

    def build(self, query_shape=None, key_shape=None):
        self._check_heads(query_shape, key_shape)
        n, h = self.num_heads, query_shape[-1]
        dim = self.position_dim or n * h
        if dim % 2:
            raise ValueError(f"R needs an even size: num_heads * head_dim = {dim} is odd; pass an even `position_dim`.")
        self.kernel = self.add_weight(name="kernel", shape=(dim, n, h), initializer=self.kernel_initializer)  # W_{k,R}
        self.u = self.add_weight(name="u", shape=(n, h), initializer=self.bias_initializer)
        self.v = self.add_weight(name="v", shape=(n, h), initializer=self.bias_initializer)

    def call(self, query, key, start_index=0):
        self._check_inputs(query, key, start_index)
        self._check_heads(query.shape, key.shape)
        dtype = self.compute_dtype
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        head_dim, key_heads = query.shape[-1], key.shape[2]
        # The T + S - 1 distances i - j = start + t - s, from start - (S - 1) (r = 0) to start + T - 1.
        distances = ops.arange(1 - key_length, query_length, dtype="float32") + ops.cast(start_index, "float32")
        if self.clamp_length is not None:
            distances = ops.clip(distances, -float(self.clamp_length), float(self.clamp_length))
        kernel = ops.cast(self.kernel, dtype)
        sinusoid = ops.cast(relative_sinusoid(distances, kernel.shape[0]), dtype)  # R (T+S-1, d_R)
        position_keys = ops.einsum("rd,dnh->rnh", sinusoid, kernel)  # W_{k,R} R_{i-j}
        # Terms (b) + (d): (q_i + v) . W_{k,R} R_{i-j} for every distance, then the (T, S) entries, r = t - s + S - 1.
        per_distance = ops.einsum("btnh,rnh->bntr", query + ops.cast(self.v, dtype), position_keys)
        index = ops.arange(query_length, dtype="int32")[:, None] - ops.arange(key_length, dtype="int32")[None, :]
        index = ops.broadcast_to(index + (key_length - 1), ops.shape(per_distance)[:3] + (key_length,))
        position_terms = ops.take_along_axis(per_distance, index, axis=-1)  # (B, N, T, S)
        # Term (c): u . k_j, query head n reading key head n // (N / N_kv).
        u = ops.reshape(ops.cast(self.u, dtype), (key_heads, self.num_heads // key_heads, head_dim))
        content_bias = ops.einsum("bskh,kgh->bkgs", key, u)
        content_bias = ops.reshape(content_bias, (ops.shape(key)[0], self.num_heads, 1, key_length))
        return (position_terms + content_bias) / ops.cast(math.sqrt(head_dim), dtype)

    def compute_output_shape(self, query_shape, key_shape):
        return (query_shape[0], self.num_heads, query_shape[1], key_shape[1])

    def get_config(self):
        return {
            **super().get_config(),
            "position_dim": self.position_dim,
            "clamp_length": self.clamp_length,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
