"""Key/value caches for incremental decoding: writing a cache, and the attention of one new query over it (the
decoding step of :class:`~attnlayers.multi_head.MultiHeadAttention` and the Transformer decoders).

Layout (keras-hub's): a cache holds the projected (and rotated) keys and values of the positions written so far,

    (B, 2, S_max, N_kv, H)                 axis 1: [keys, values]; S_max: the static maximum length;
                                           N_kv: key/value heads (grouped-query attention); H: head size
    (B, layers, 2, S_max, N_kv, H)         a decoder stack's caches, one per layer on axis 1

Positions not written yet may hold anything: they are never attended.

The query at position i attends the cache positions s <= i (within the sliding window if there is one):

    Attention(q, K, V) = softmax(q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

:func:`attend_one` reads only the shortest of the static prefixes of :func:`prefix_lengths` holding 0 .. i, so a
step costs O(i) rather than O(S_max). A step's new key and value are written either before the read
(:func:`write_position`, then :func:`attend_one`) or attended beside the cache and written afterwards
(``attend_one(..., new=(key, value))``): the first where writes are in place (:func:`updates_in_place`: XLA),
the second elsewhere, where every write copies the cache, so a decoder stack writes all its layers at once.
Both compute the same attention; :func:`step` is either, given a layer's projected query, key and value.
:func:`update` writes a whole call's keys and values (prefill, the general cached path); :func:`check_cache` refuses,
by name, a cache a layer cannot use.

Example:
>>> cache = kv_cache.write_position(cache, ops.stack((k[:, 0], v[:, 0]), axis=1), i)    # (B, 2, S_max, N_kv, H)
>>> heads = kv_cache.attend_one(q, cache, i, num_heads=8, num_key_value_heads=2, scale=64**-0.5)  # (B, 1, 8, 64)
"""

import keras
from keras import ops

from attnlayers import fused, masking
from attnlayers.validation import format_shape, is_int, positive_int, same_size

__all__ = ["attend_one", "prefix_lengths", "update", "updates_in_place", "write_position"]

_BACKEND = keras.backend.backend()

# The most branches of a single-query step's switch over cache prefixes, and their least length.
_PREFIX_BRANCHES = 8
_MIN_PREFIX_BLOCK = 16


def updates_in_place(x):
    """Whether ``x`` belongs to a computation XLA compiles: a JAX tracer (``jax.jit``), or a TensorFlow graph
    under ``tf.function(jit_compile=True)``. There, writing one position of a cache (:func:`write_position`) is
    in place; elsewhere (TensorFlow graphs and eager execution, PyTorch) each write copies the whole cache.

    Args:
        x: a tensor (the cache).

    Returns:
        A Python bool, decided when tracing.
    """
    return fused.compiled_by_xla(x)


def prefix_lengths(max_length):
    """The static cache prefix lengths a single-query step chooses from: up to 8 nearly equal steps ending at
    ``max_length``, each at least 16 positions (one length for short caches).

    A step at cache position i reads the shortest prefix holding the positions it attends (0 .. i), so its cost
    grows with i rather than with ``max_length`` (at most ``max_length / 8`` positions are read in vain).

    Args:
        max_length: S_max, a positive Python int (the cache's static length).

    Returns:
        A sorted tuple of ints, the last one ``max_length``; e.g. ``prefix_lengths(40) == (20, 40)``.
    """
    max_length = positive_int(max_length, "max_length", what="the static length S_max of a cache")
    count = max(1, min(_PREFIX_BRANCHES, max_length // _MIN_PREFIX_BLOCK))
    return tuple(sorted({-(-max_length * (k + 1) // count) for k in range(count)}))


def write_position(cache, entries, index, layer=None):
    """Writes one position of a key/value cache: ``cache[..., index, :, :] = entries``.

    A scatter of the B x ... x 2 new vectors, O(1) in the cache length where the backend updates in place
    (XLA inside a loop, JAX), and differentiable on TensorFlow and JAX (TensorFlow has no gradient for
    ``slice_update``'s dynamic update slice).

    Args:
        cache: (..., S_max, N_kv, H): a cache (B, 2, S_max, N_kv, H) or a decoder stack's
            (B, layers, 2, S_max, N_kv, H).
        entries: (..., N_kv, H), the keys and values of position ``index`` (the cache's shape without S_max);
            with ``layer``, (B, 2, N_kv, H).
        index: int or scalar int tensor, the position written.
        layer: None, or the one layer (int) of a stacked cache to write.

    Returns:
        The updated cache (same shape and dtype).
    """
    leading = ops.shape(cache)[:-3]
    ranges = [ops.arange(size, dtype="int32") for size in leading]
    if layer is not None:  # one layer of a stacked cache (B, layers, 2, ...): entries (B, 2, N_kv, H)
        ranges[1] = ops.convert_to_tensor([layer], "int32")
    grids = ops.meshgrid(*ranges, indexing="ij")
    rows = ops.reshape(ops.stack(grids, axis=-1), (-1, len(leading)))  # every (b, [layer,] k/v) row
    position = ops.full((ops.shape(rows)[0], 1), ops.cast(index, "int32"), dtype="int32")
    updates = ops.reshape(ops.cast(entries, cache.dtype), (-1,) + tuple(ops.shape(cache)[-2:]))
    return ops.scatter_update(cache, ops.concatenate([rows, position], axis=1), updates)


def update(cache, key, value, index, dtype=None):
    """Writes a call's keys and values into the cache from position ``index`` on, and reads every position.

    Cache position s takes new entry s - index when 0 <= s - index < S_new. A gather and a select rather than
    ``slice_update``: the same O(S_max) cost as the stack of the result, and differentiable on every backend
    (TensorFlow has no gradient for XLA's dynamic update slice).

    Args:
        cache: (B, 2, S_max, N_kv, H) keys and values.
        key, value: (B, S_new, N_kv, H) projected (and rotated) keys and values.
        index: int or scalar int tensor, the cache position of the first new key.
        dtype: the dtype of the results, the cache's and the new entries' cast to it (a layer's compute dtype);
            defaults to ``key``'s.

    Returns:
        ``(key, value, cache, cache_mask)``: the keys and values (B, S_max, N_kv, H) of every cache position,
        the updated cache (B, 2, S_max, N_kv, H) in ``dtype``, and a (1, 1, S_max) mask of the positions
        written so far (s < index + S_new; the later ones hold no key yet).
    """
    dtype = dtype or key.dtype
    cache, key, value = ops.cast(cache, dtype), ops.cast(key, dtype), ops.cast(value, dtype)
    new_length = key.shape[1] if key.shape[1] is not None else ops.shape(key)[1]
    relative = ops.arange(ops.shape(cache)[2], dtype="int32") - ops.cast(index, "int32")
    is_new = ops.reshape(ops.logical_and(relative >= 0, relative < new_length), (1, -1, 1, 1))
    source = ops.clip(relative, 0, new_length - 1)
    key = ops.where(is_new, ops.take(key, source, axis=1), cache[:, 0])
    value = ops.where(is_new, ops.take(value, source, axis=1), cache[:, 1])
    return key, value, ops.stack((key, value), axis=1), ops.reshape(relative < new_length, (1, 1, -1))


def attend_one(query, cache, index, *, num_heads, num_key_value_heads, scale, sliding_window=None, layer=None,
               new=None):
    """softmax(q K^T * scale) V (eq. 1) of one query at position ``index`` over the cache positions it sees:
    s <= index, and index - s < ``sliding_window`` if given.

    Only the shortest of the static prefixes of :func:`prefix_lengths` holding the positions read is read (a
    switch over them when there are several), with elementwise products reduced over the head size and the
    positions (one query: no transpose of the cache for a batched matmul). Query head n reads key / value head
    n // G, G = N / N_kv (grouped-query attention).

    Args:
        query: (B, 1, N, H), projected (and rotated).
        cache: (B, 2, S_max, N_kv, H); or, with ``layer``, a stack's (B, layers, 2, S_max, N_kv, H). S_max must be
            static. Read in ``query``'s dtype.
        index: int or scalar int tensor, the query's position i.
        num_heads: N. num_key_value_heads: N_kv, dividing N.
        scale: the logits' factor, 1 / sqrt(d_k) for the scaled dot product.
        sliding_window: None or W: positions s with i - s < W only (keras' band).
        layer: None, or the layer (int) of a stacked ``cache`` to read.
        new: None: the cache holds position i (read with the positions < i, see :func:`write_position`); or
            the ``(key, value)`` of position i, (B, 1, N_kv, H) each, attended beside the cache positions < i
            (the cache is not read at i).

    Returns:
        The heads (B, 1, N, H).
    """
    if num_heads % num_key_value_heads:
        raise ValueError(f"`num_heads` must be a multiple of `num_key_value_heads`; received num_heads={num_heads}, "
                         f"num_key_value_heads={num_key_value_heads}.")
    rank = 5 if layer is None else 6
    if len(cache.shape) != rank or cache.shape[-3] is None:
        layout = "(batch, 2, max_length, heads, head_dim)" if layer is None else (
            "(batch, layers, 2, max_length, heads, head_dim) with `layer`")
        raise ValueError(f"`cache` must have shape {layout}, max_length static; received shape "
                         f"{format_shape(cache.shape)}.")
    query, cache, index = ops.convert_to_tensor(query), ops.convert_to_tensor(cache), ops.cast(index, "int32")
    n, n_kv = num_heads, num_key_value_heads
    batch, h = ops.shape(query)[0], query.shape[-1] if query.shape[-1] is not None else ops.shape(query)[-1]
    # Query head n reads key / value head n // G: queries (B, 1, N_kv, G, H).
    q = ops.reshape(query * ops.cast(scale, query.dtype), (batch, 1, n_kv, n // n_kv, h))

    def logits_of(keys):  # (B, S, N_kv, H) -> (B, S, N_kv, G): q k_s * scale
        return ops.sum(q * ops.expand_dims(keys, 3), axis=-1)

    def weighted_sum(weights, values):  # (B, S, N_kv, G), (B, S, N_kv, H) -> (B, 1, N_kv, G, H)
        return ops.sum(ops.expand_dims(weights, -1) * ops.expand_dims(values, 3), axis=1, keepdims=True)

    def attend(length):
        def branch():
            keys, values = _prefix(cache, layer, length, query.dtype)  # (B, length, N_kv, H)
            logits = logits_of(keys)
            visible = _visible_positions(length, index, new is None, sliding_window)
            if new is not None:
                logits = ops.concatenate([logits, logits_of(new[0])], axis=1)
                visible = ops.concatenate([visible, ops.ones((1,), "bool")], axis=0)
            visible = ops.reshape(visible, (1, -1, 1, 1))
            weights = ops.cast(masking.masked_softmax(logits, visible, axis=1), query.dtype)
            heads = weighted_sum(weights[:, :length], values)
            if new is not None:
                heads = heads + weighted_sum(weights[:, length:], new[1])
            return ops.reshape(heads, (batch, 1, n, h))

        return branch

    # The shortest prefix holding every position read: 0 .. index (or index - 1 beside a new key).
    lengths = prefix_lengths(cache.shape[-3])
    read = index + 1 if new is None else index
    if len(lengths) == 1:
        return attend(lengths[0])()
    branch = ops.sum(ops.cast(read > ops.convert_to_tensor(lengths[:-1], "int32"), "int32"))
    return ops.switch(branch, [attend(length) for length in lengths])


def check_cache(cache, index, *, batch, new_length, num_key_value_heads, key_dim, value_dim):
    """Refuses, by name, a cache a layer cannot use: a (B, 2, S_max, N_kv, H) layout of other sizes, a layer whose
    key_dim and value_dim differ (a cache stacks keys and values), an ``index`` that is not an int or a scalar
    tensor, or an int ``index`` writing ``new_length`` keys beyond S_max; and an ``index`` without a cache."""
    if cache is None:
        if index is not None:
            raise ValueError(
                "`cache_update_index` is only meaningful with a `cache`; received "
                f"cache_update_index={index!r} and cache=None."
            )
        return
    expected = (batch, 2, None, num_key_value_heads, key_dim)
    shape = tuple(cache.shape)
    if value_dim != key_dim:
        raise ValueError(
            f"A `cache` stacks keys and values, so it needs key_dim == value_dim; this layer has "
            f"key_dim={key_dim} and value_dim={value_dim}."
        )
    if len(shape) != 5 or not all(same_size(a, b) for a, b in zip(shape, expected)):
        raise ValueError(
            f"`cache` must have shape (batch, 2, max_length, num_key_value_heads, key_dim) = "
            f"{format_shape(expected)}; received shape {format_shape(shape)}."
        )
    if is_int(index):
        max_length = shape[2]
        if index < 0 or (new_length is not None and max_length is not None and index + new_length > max_length):
            raise ValueError(
                f"`cache_update_index`={index} writes {new_length} new key(s) beyond a cache "
                f"of max_length {max_length}: expected 0 <= cache_update_index <= {max_length} - "
                f"{new_length}."
            )
    elif index is not None and len(getattr(index, "shape", (0,))) != 0:
        raise ValueError(
            "`cache_update_index` must be a Python int or a scalar integer tensor; received "
            f"{index!r}."
        )


def step(query, key, value, cache, index, *, num_heads, num_key_value_heads, scale, sliding_window=None, layer=None,
         write=True):
    """The attention of one new position i over a cache, given its projected (and rotated) query, key and value:
    the cached self-attention step of a decoder (eq. 1 over the positions s <= i).

    Args:
        query: (B, 1, N, H); key, value: (B, 1, N_kv, H), position i's.
        cache, index, num_heads, num_key_value_heads, scale, sliding_window, layer: as :func:`attend_one`.
        write: True: the key and value are written at position i first (:func:`write_position`) and read back with
            the prefix, best where the backend updates in place (:func:`updates_in_place`); False: the cache is not
            written, the new key is attended beside the positions s < i and returned for the caller to write (one
            write for every layer of a stack, where each write copies the cache).

    Returns:
        ``(heads, cache)`` with ``write``, else ``(heads, entry)``: the heads (B, 1, N, H) and the written cache, or
        position i's key and value (B, 2, N_kv, H).
    """
    entry = ops.stack((key[:, 0], value[:, 0]), axis=1)  # (B, 2, N_kv, H)
    heads_of = {"num_heads": num_heads, "num_key_value_heads": num_key_value_heads, "scale": scale,
                "sliding_window": sliding_window, "layer": layer}
    if write:
        cache = write_position(cache, entry, index, layer)
        return attend_one(query, cache, index, **heads_of), cache
    return attend_one(query, cache, index, new=(key, value), **heads_of), entry


def _prefix(cache, layer, length, dtype):
    """The keys and values of cache positions [0, length), (B, length, N_kv, H) each, in ``dtype``."""
    if layer is None:
        keys, values = cache[:, 0, :length], cache[:, 1, :length]
    else:
        keys, values = cache[:, layer, 0, :length], cache[:, layer, 1, :length]
    return ops.cast(keys, dtype), ops.cast(values, dtype)


def _visible_positions(length, index, inclusive, sliding_window):
    """(length,) booleans: the cache positions 0 .. length - 1 the query at ``index`` sees: those up to its own
    (``inclusive``) or before it, within the sliding window if there is one."""
    position = ops.arange(length, dtype="int32")
    visible = position <= index if inclusive else position < index
    if sliding_window is not None:  # keras' band: |i - j| < sliding_window
        visible = ops.logical_and(visible, position > index - sliding_window)
    return visible
