"""The per-head products of multi-head attention (Vaswani et al. 2017, section 3.2.2), with grouped-query sharing
(query head n reads key / value head n // G, G = N / N_kv):

    logits_n = Q_n K_{n//G}^T * scale        (B, T, N, H) x (B, S, N_kv, H) -> (B, N, T, S)     (eq. 1)
    head_n = weights_n V_{n//G}               (B, N, T, S) x (B, S, N_kv, Hv) -> (B, T, N, Hv)

and the fused self-attention projection x [W^Q | W^K | W^V], one matmul for the three.
"""

import keras
from keras import ops

from attnlayers import fused

__all__ = ["folded_logits", "fused_projections", "grouped_combine", "grouped_logits"]

_BACKEND = keras.backend.backend()


def grouped_logits(query, key, scale, num_heads):
    """(B, T, N, H) queries and (B, S, N_kv, H) keys -> (B, N, T, S) logits Q K^T * scale (eq. 1); the scale goes on
    the queries, not the logits. ``num_heads``: N."""
    n, n_kv = num_heads, key.shape[2]
    groups = n // n_kv
    query = query * ops.cast(scale, query.dtype)
    if groups == 1:
        return ops.einsum("btnh,bsnh->bnts", query, key)
    batch, length = ops.shape(query)[0], ops.shape(query)[1]
    grouped = ops.reshape(query, (batch, length, n_kv, groups, query.shape[3]))
    logits = ops.einsum("btkgh,bskh->bkgts", grouped, key)
    return ops.reshape(logits, (batch, n, length, ops.shape(key)[1]))


def grouped_combine(weights, value, num_heads):
    """(B, N, T, S) weights and (B, S, N_kv, Hv) values -> (B, T, N, Hv) heads. ``num_heads``: N."""
    n, n_kv = num_heads, value.shape[2]
    groups = n // n_kv
    if groups == 1:
        return ops.einsum("bnts,bsnh->btnh", weights, value)
    batch, length = ops.shape(weights)[0], ops.shape(weights)[2]
    grouped = ops.reshape(weights, (batch, n_kv, groups, length, ops.shape(weights)[3]))
    heads = ops.einsum("bkgts,bskh->btkgh", grouped, value)
    return ops.reshape(heads, (batch, length, n, value.shape[3]))


def folded_logits(scorer, query, key, num_heads):
    """Any score per head: (B, T, N, H) queries and (B, S, N_kv, H) keys folded into the batch, (B * N, L, H), for a
    single-head ``scorer`` (B', T, H), (B', S, H) -> (B', T, S); the (B, N, T, S) logits."""
    groups = num_heads // key.shape[2]
    if groups > 1:
        key = ops.repeat(key, groups, axis=2)
    head_size = query.shape[3]

    def fold(x):
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (-1, ops.shape(x)[2], head_size))

    logits = scorer(fold(query), fold(key))  # (B * N, T, S)
    return ops.reshape(logits, (-1, num_heads, ops.shape(query)[1], ops.shape(key)[1]))


def fused_projections(query, value, key, layers, *, num_heads, num_key_value_heads, dtype, use_bias,
                      activity_regularizer=None):
    """Self-attention (query, key and value one tensor x): Q, K and V from one matmul with the three kernels side by
    side, x [W^Q | W^K | W^V] (+ [b^Q | b^K | b^V]): (B, T, D) x (D, N + 2 N_kv, H) -> (B, T, N + 2 N_kv, H), split
    along the heads. The products of the three projections, as one larger matmul forward and backward instead of
    three.

    Args:
        query, value, key: the call's (B, T, D) inputs. layers: the query, key and value EinsumDense layers (kernels
            (D, heads, H)). num_heads, num_key_value_heads: N and N_kv. dtype: the compute dtype. use_bias: add the
            biases. activity_regularizer: the layer's (none may be set: it regularizes each projection's output).

    Returns:
        ``(query (B, T, N, H), key (B, T, N_kv, H), value (B, T, N_kv, H))``; or None (use the three layers) for
        other calls, when a projection does more than x W + b (LoRA, quantization, an activity regularizer, an
        overridden call) or its heads differ in size, and outside XLA: in a TensorFlow graph (what ``fit`` runs on a
        CPU) the concatenation and split cost more than the one larger matmul saves (docs/results/attention-speed.md,
        "The fused QKV projection, by compile mode").
    """
    if not (query is value and key is value) or not (_BACKEND == "jax" or fused.compiled_by_xla(query)):
        return None
    if activity_regularizer is not None or any(
        type(layer) is not keras.layers.EinsumDense or getattr(layer, "lora_enabled", False)
        or getattr(layer, "quantization_mode", None) is not None
        for layer in layers
    ):
        return None
    if layers[1].kernel.shape[-1] != layers[2].kernel.shape[-1]:  # key_dim != value_dim
        return None
    x = ops.cast(query, dtype)
    kernel = ops.concatenate([ops.cast(layer.kernel, dtype) for layer in layers], axis=1)
    qkv = ops.einsum("abc,cde->abde", x, kernel)  # (B, T, N + 2 N_kv, H)
    if use_bias:
        qkv = qkv + ops.concatenate([ops.cast(layer.bias, dtype) for layer in layers], axis=0)
    n, n_kv = num_heads, num_key_value_heads
    return qkv[:, :, :n], qkv[:, :, n : n + n_kv], qkv[:, :, n + n_kv :]
