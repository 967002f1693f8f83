"""XLNet's permutation language modelling (Yang et al. 2019, section 2.2 - 2.3): factorisation orders, the masks
of the two attention streams, and partial prediction.

A factorisation order z is a permutation of the T positions of a sequence (B, T); ``rank_z(j)`` is where position j
comes in it (z_{rank_z(j)} = j). Permutation LM maximises E_z [sum_t log p(x_{z_t} | x_{z<t})] (eq. 3): the tokens
are not reordered, only the attention masks change.

    content stream  h_{z_t} sees x_{z<=t}:  content mask [b, i, j] = rank_z(j) <= rank_z(i)
    query stream    g_{z_t} sees x_{z<t}:   query mask   [b, i, j] = rank_z(j) <  rank_z(i)   (not itself)

Partial prediction (section 2.3): only the last tokens of each order are predicted, z_{>c} with the cutting point
c chosen so that |z| / (|z| - c) ~ K; the rest (z_{<=c}) is context.

Polarity: here, as everywhere in attnlayers, True = may attend. Hugging Face's ``XLNetModel(perm_mask=...)`` takes
the opposite (``perm_mask[b, i, j] = 1``: i may NOT attend j) and one mask for both streams (it adds the diagonal
back for the content stream itself), and its ``attention_mask`` is 1 for real tokens (``input_mask``: 1 for
padding). keras-hub's ``TwoStreamRelativeAttention`` takes keras' polarity, 1 = may attend (its
``XLNetAttentionMaskLayer`` turns the 1-means-padding masks into that). Conversions:

    perm_mask = 1.0 - ops.cast(query_mask, "float32")                      # ours -> Hugging Face
    query_mask = ops.logical_and(perm_mask == 0, padding[:, None, :] & padding[:, :, None])   # Hugging Face -> ours
    content_mask = ops.logical_or(query_mask, ops.logical_and(ops.eye(T, dtype="bool"), padding[:, :, None]))
"""

import numpy as np
from keras import ops
from keras import random as keras_random
from keras.backend import standardize_dtype

from attnlayers.validation import check_rank, format_shape, is_int, is_number

__all__ = ["factorization_rank", "num_predictions", "permutation_masks", "prediction_targets",
           "sample_factorization_order"]

_ORDER = "(batch, length)"
_PADDING = "(batch, length)"

# lowbias32 (a 32-bit integer hash with good avalanche): two xor-shift-multiply rounds.
_HASH_MULTIPLIERS = (np.uint32(0x7FEB352D), np.uint32(0x846CA68B))
_GOLDEN = np.uint32(0x9E3779B9)


def _hash32(x):
    """A bijection of uint32 tensors whose output bits each depend on every input bit (lowbias32)."""
    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))
    x = ops.multiply(x, _HASH_MULTIPLIERS[0])
    x = ops.bitwise_xor(x, ops.right_shift(x, np.uint32(15)))
    x = ops.multiply(x, _HASH_MULTIPLIERS[1])
    return ops.bitwise_xor(x, ops.right_shift(x, np.uint32(16)))


def _seed_words(seed):
    """``seed`` (an int, a (2,) integer tensor or a ``keras.random.SeedGenerator``) as a (2,) uint32 tensor."""
    if isinstance(seed, keras_random.SeedGenerator):
        seed = seed.next()
    if is_int(seed):
        seed = np.array([int(seed) & 0xFFFFFFFF, 0], dtype="uint32")
    seed = ops.convert_to_tensor(seed)
    dtype = standardize_dtype(seed.dtype)
    if tuple(seed.shape) != (2,) or "int" not in dtype:
        raise ValueError(
            f"`seed` must be an int, a (2,) integer tensor (a stateless seed) or a keras.random.SeedGenerator; "
            f"received a tensor of shape {format_shape(seed.shape)} and dtype {dtype}."
        )
    if dtype.endswith("64"):  # keep the low 32 bits (an int32 seed's negatives are reinterpreted by the cast)
        seed = ops.bitwise_and(seed, 0xFFFFFFFF)
    return ops.cast(seed, "uint32")


def _padding(padding_mask, shape):
    """The (B, T) boolean padding mask (True = a real token), or None."""
    if padding_mask is None:
        return None
    padding_mask = ops.convert_to_tensor(padding_mask)
    check_rank(padding_mask.shape, 2, "padding_mask", _PADDING)
    if any(a is not None and b is not None and a != b for a, b in zip(padding_mask.shape, shape)):
        raise ValueError(f"`padding_mask` must have the shape of `order`, {format_shape(shape)}; received shape "
                         f"{format_shape(padding_mask.shape)}.")
    return ops.cast(padding_mask, "bool")


def _order(order):
    order = ops.convert_to_tensor(order)
    check_rank(order.shape, 2, "order", _ORDER)
    if "int" not in standardize_dtype(order.dtype):
        raise ValueError(f"`order` must be an integer tensor {_ORDER} of positions; received dtype "
                         f"{standardize_dtype(order.dtype)}.")
    return ops.cast(order, "int32")


def factorization_rank(order):
    """rank_z(j), the place of position j in the order z: the inverse permutation of ``order``.

    Args:
        order: (B, T) integer tensor, each row a permutation of 0 .. T-1 (z_1 .. z_T).

    Returns:
        (B, T) int32: ``rank[b, order[b, t]] = t``.
    """
    return ops.cast(ops.argsort(_order(order), axis=-1), "int32")


def sample_factorization_order(batch, length, seed, padding_mask=None):
    """Uniform random factorisation orders z ~ Z_T (section 2.2), one per row, from a stateless seed.

    The same seed gives the same orders; pass a different seed per step (e.g. ``[seed, step]``) or a
    ``keras.random.SeedGenerator`` (its state advances; a model's generator is threaded through ``fit`` and
    ``jit_compile``). Pure ``keras.ops`` (a counter-based integer hash of (seed, b, t), argsorted), so it runs in a
    jitted train step under every backend and in a ``tf.data`` map under the TensorFlow backend.

    Args:
        batch: B, an int or a scalar int tensor.
        length: T, an int or a scalar int tensor.
        seed: an int, a (2,) integer tensor (a stateless seed, as ``tf.random.stateless_*`` / a JAX key) or a
            ``keras.random.SeedGenerator``.
        padding_mask: optional (B, T) boolean, True = a real token. Padded positions are placed last in every order
            (in position order), so the real tokens form a uniform permutation of their own.

    Returns:
        (B, T) int32 orders: row b is z_1 .. z_T, a permutation of 0 .. T-1.

    Example:
    >>> order = sample_factorization_order(8, 128, seed=[0, step], padding_mask=tokens != 0)
    >>> content_mask, query_mask = permutation_masks(order, padding_mask=tokens != 0)
    """
    words = _seed_words(seed)
    # One 32-bit key per (b, t) from the counter b * T + t and the seed: hash(counter ^ hash(s0 ^ hash(s1 + phi))).
    counter = ops.reshape(ops.arange(batch * length, dtype="int32"), (batch, length))
    seed_key = _hash32(ops.bitwise_xor(words[0], _hash32(ops.add(words[1], _GOLDEN))))
    keys = _hash32(ops.bitwise_xor(ops.cast(counter, "uint32"), seed_key))
    keys = ops.cast(ops.right_shift(keys, np.uint32(2)), "int32")  # 30 random bits, sortable as int32
    padding = _padding(padding_mask, (None if not is_int(batch) else batch, None if not is_int(length) else length))
    if padding is not None:  # padded keys sort after every real key, in position order
        keys = ops.where(padding, keys, (1 << 30) + counter)
    return ops.cast(ops.argsort(keys, axis=-1), "int32")


def permutation_masks(order, padding_mask=None):
    """The attention masks of XLNet's two streams for the factorisation orders ``order`` (section 2.3).

        content_mask[b, i, j] = rank_z(j) <= rank_z(i)    h_{z_t} attends x_{z<=t}  (eq. 2.3, content stream)
        query_mask[b, i, j]   = rank_z(j) <  rank_z(i)    g_{z_t} attends x_{z<t}   (query stream: not itself)

    For the identity order these are the causal mask and the strictly causal one. With ``padding_mask``, a padded
    position is never visible (its column is False) and a padded query sees nothing (its row is False: the
    attention gives it a zero output). With a memory (Transformer-XL's recurrence, ``memory=`` of the attention),
    these masks cover the segment's keys and the memory stays visible to every query, as in XLNet.

    True = may attend. Hugging Face's ``perm_mask`` is ``1 - query_mask`` (1 = may not attend; see the module's
    docstring for the other direction and keras-hub's polarity).

    Args:
        order: (B, T) integer tensor, each row a permutation z of 0 .. T-1
            (:func:`sample_factorization_order`; ``ops.arange(T)`` is left-to-right).
        padding_mask: optional (B, T) boolean, True = a real token.

    Returns:
        ``(content_mask, query_mask)``, two (B, T, T) boolean tensors (queries on axis 1, keys on axis 2), the
        ``content_attention_mask`` and ``query_attention_mask`` of :class:`~attnlayers.TwoStreamAttention`.

    Example:
    >>> content_mask, query_mask = permutation_masks(ops.arange(4)[None])
    >>> content_mask[0]        # causal: lower triangle with the diagonal; query_mask[0]: without it
    """
    order = _order(order)
    rank = factorization_rank(order)
    key_rank, query_rank = rank[:, None, :], rank[:, :, None]
    content_mask = ops.less_equal(key_rank, query_rank)
    query_mask = ops.less(key_rank, query_rank)
    padding = _padding(padding_mask, order.shape)
    if padding is not None:  # padding is never visible, and sees nothing
        visible = ops.logical_and(padding[:, None, :], padding[:, :, None])
        content_mask = ops.logical_and(content_mask, visible)
        query_mask = ops.logical_and(query_mask, visible)
    return content_mask, query_mask


def num_predictions(length, K):
    """|z| - c, the number of predicted tokens of a sequence of ``length`` real tokens under partial prediction:
    ``round(length / K)``, at least 1 for a non-empty sequence (|z| / (|z| - c) ~ K, section 2.3).

    Args:
        length: int or integer tensor of real lengths. K: a number >= 1.

    Returns:
        Same type as ``length`` (int32 for tensors).
    """
    K = _check_K(K)
    if is_int(length):
        return max(1, int(length / K + 0.5)) if length > 0 else 0
    length = ops.cast(length, "int32")
    count = ops.cast(ops.floor(ops.cast(length, "float32") / K + 0.5), "int32")  # <= length since K >= 1
    return ops.where(length > 0, ops.maximum(count, 1), 0)


def _check_K(K):
    if not is_number(K) or not K >= 1:
        raise ValueError(f"`K` (|z| / (|z| - c), the inverse share of predicted tokens) must be a number >= 1; "
                         f"received K={K!r}.")
    return float(K)


def prediction_targets(order, K=6, padding_mask=None):
    """Partial prediction (section 2.3, "Partial Prediction"): the positions whose token is predicted, the last
    ``round(n / K)`` real tokens of each order (n real tokens per row, at least one when n > 0), i.e. z_{>c}
    with |z| / (|z| - c) ~ K (the paper uses K = 6 for XLNet-Large, 7 for Base).

    The loss reads the query stream at these positions; the others (z_{<=c}) are context only. Padded positions are
    never predicted, wherever the order puts them.

    Args:
        order: (B, T) integer tensor, each row a permutation of 0 .. T-1.
        K: a number >= 1; 1 predicts every real token.
        padding_mask: optional (B, T) boolean, True = a real token.

    Returns:
        (B, T) boolean, True = predict the token at this position.

    Example:
    >>> targets = prediction_targets(order, K=6, padding_mask=tokens != 0)
    >>> loss = masked_mean(cross_entropy(tokens, logits_from_query_stream), targets)
    """
    K = _check_K(K)
    order = _order(order)
    rank = factorization_rank(order)
    padding = _padding(padding_mask, order.shape)
    if padding is None:
        padding = ops.ones_like(order, dtype="bool")
    # real_rank[j]: how many real tokens come before j in the order (the rank among the real tokens).
    real_in_order = ops.take_along_axis(ops.cast(padding, "int32"), order, axis=-1)  # 1 where z_t is real
    before = ops.cumsum(real_in_order, axis=-1) - real_in_order
    real_rank = ops.take_along_axis(before, rank, axis=-1)
    length = ops.sum(ops.cast(padding, "int32"), axis=-1, keepdims=True)  # n
    cut = length - num_predictions(length, K)  # c
    return ops.logical_and(padding, real_rank >= cut)
