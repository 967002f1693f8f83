"""Memory-efficient exact attention: softmax(Q K^T * scale + bias) V computed block by block with the online
softmax, never holding the (B, N, T, S) logits (Milakov & Gimelshein 2018; Rabe & Staats 2021; Dao et al. 2022,
FlashAttention; the backward pass of Dao 2023, FlashAttention-2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

The queries are cut into blocks of Cq rows and the keys into blocks of Ck; for query block i the key blocks j
are visited in order, keeping per row a running maximum m, a running sum l and an accumulator A:

    S_ij = scale * Q_i K_j^T + bias_ij, masked entries excluded
    m_j = max(m_{j-1}, rowmax(S_ij))                     P~_ij = exp(S_ij - m_j)
    l_j = exp(m_{j-1} - m_j) l_{j-1} + rowsum(P~_ij)
    A_j = exp(m_{j-1} - m_j) A_{j-1} + dropout(P~_ij) V_j
    O_i = A_last / l_last,          L_i = m_last + log(l_last)   (the log-sum-exp, saved for the backward pass)

The backward pass recomputes P_ij = exp(S_ij - L_i) block by block (nothing of size T x S is saved):

    D_i = rowsum(dO_i * O_i),  dP_ij = dropout(dO_i V_j^T),  dS_ij = P_ij * (dP_ij - D_i)
    dQ_i = scale * sum_j dS_ij K_j,  dK_j = scale * sum_i dS_ij^T Q_i,  dV_j = sum_i dropout(P_ij)^T dO_i,
    dbias_ij = dS_ij (summed over the bias' broadcast axes)

Memory is O(T * chunk) beside the inputs: one (B, N, Cq, Ck) block of logits per loop iteration. The loops are
``tf.while_loop`` with ``parallel_iterations=1`` on TensorFlow (so a graph does not run several blocks at once)
and ``lax.while_loop`` / ``lax.map`` on JAX; the gradient is a ``keras.ops.custom_gradient``, so no loop is
differentiated by the backend. Blocks that the causal rule or the sliding window mask entirely are not visited:
a window of W costs O(T * W) time.

Per-head tensors use the layout of ``keras.layers.MultiHeadAttention`` and ``keras.ops.dot_product_attention``:
(B, T, N, H) queries, (B, S, N_kv, H) keys, (B, S, N_kv, Hv) values; query head n reads key / value head
``n // (N / N_kv)`` (grouped-query attention).
"""

import warnings

import keras
from keras import backend, ops

from attnlayers import masking
from attnlayers.validation import format_shape, is_int, positive_int, rate_in_unit_interval

__all__ = ["DEFAULT_KEY_CHUNK", "DEFAULT_QUERY_CHUNK", "chunked_attention", "dropout_keep_mask", "seed_tensor",
           "visible_queries"]

_BACKEND = keras.backend.backend()

#: Default block sizes: a (B, N, 512, 512) float32 block is 1 MiB per batch row and head.
DEFAULT_QUERY_CHUNK = 512
DEFAULT_KEY_CHUNK = 512

_NEG = masking.large_negative("float32")


# ---------------------------------------------------------------------------------------------------------------
# Backend switch: sequential loops and stateless random numbers


def _while_loop(cond, body, loop_vars):
    """``ops.while_loop`` whose iterations run one at a time: TensorFlow's default lets a graph start up to 10
    iterations in parallel (each with its block of logits alive)."""
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.while_loop(cond, body, loop_vars, parallel_iterations=1)
    return ops.while_loop(cond, body, loop_vars)


def _map(fn, count, specs):
    """``[stack(fn(i)[k] for i in range(count))]``, one block at a time (``tf.map_fn`` would run 10).

    Args:
        fn: ``fn(i) -> tuple of tensors``, i a scalar int32 tensor.
        count: number of blocks (int, or scalar tensor on TensorFlow).
        specs: ``[(shape, dtype)]`` of ``fn``'s outputs (None for an unknown axis).

    Returns:
        A list of (count, ...) tensors.
    """
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        arrays = [tf.TensorArray(dtype, size=count, element_shape=shape) for shape, dtype in specs]

        def body(i, arrays):
            return i + 1, [array.write(i, y) for array, y in zip(arrays, fn(i))]

        _, arrays = tf.while_loop(lambda i, _: i < count, body, (tf.constant(0), arrays), parallel_iterations=1)
        return [array.stack() for array in arrays]
    import jax

    return list(jax.lax.map(lambda i: tuple(fn(i)), jax.numpy.arange(count, dtype="int32")))


def _uniform(shape, seed, i, j):
    """Stateless U[0, 1) float32 numbers of ``shape`` for block (i, j) of an int32 (2,) ``seed``: the seed with
    i and then j folded in (TensorFlow's ``stateless_fold_in``, JAX's ``fold_in``), then Philox / threefry. The
    same (seed, i, j) gives the same numbers, in the forward and the backward pass; other blocks, and the next
    seed of a ``SeedGenerator`` (which adds 1 to the seed's second entry), give unrelated ones (adding (i, j) to
    the seed would make block (i, j + 1) of one step block (i, j) of the next)."""
    if _BACKEND == "tensorflow":
        import tensorflow as tf

        fold = tf.random.experimental.stateless_fold_in
        block_seed = fold(fold(seed, ops.cast(i, "int32")), ops.cast(j, "int32"))
        return tf.random.stateless_uniform(shape, seed=block_seed, dtype="float32")
    import jax

    key = jax.lax.convert_element_type(seed, "uint32")
    key = jax.random.fold_in(jax.random.fold_in(key, i), j)
    return jax.random.uniform(key, shape, "float32")


def seed_tensor(seed):
    """An int32 (2,) seed tensor from an int, a (2,) seed tensor of any integer dtype (a ``SeedGenerator``
    state, e.g. ``SeedGenerator.next()``), or a ``SeedGenerator``."""
    if isinstance(seed, keras.random.SeedGenerator):
        seed = seed.next()
    if is_int(seed):
        return ops.convert_to_tensor([int(seed) % (2**31 - 1), 0], "int32")
    seed = ops.convert_to_tensor(seed)
    if tuple(seed.shape) != (2,) or "int" not in backend.standardize_dtype(seed.dtype):
        raise ValueError(
            f"`seed` must be an int, a SeedGenerator or an integer tensor of shape (2,); received shape "
            f"{format_shape(seed.shape)} and dtype {backend.standardize_dtype(seed.dtype)}."
        )
    if _BACKEND == "tensorflow" and backend.standardize_dtype(seed.dtype) != "int32":
        seed = ops.mod(seed, 2**31 - 1)  # TensorFlow's int64 seed state -> int32, as keras' _cast_seed
    return ops.cast(seed, "int32")


def dropout_keep_mask(seed, i, j, shape, rate):
    """The dropout mask of block (i, j): Bernoulli(1 - rate) keep decisions, True = kept.

    The draw is ``U[0, 1) >= rate`` with U the stateless uniform numbers of ``seed`` with (i, j) folded in, one per
    entry of the (B, N, Cq, Ck) block (padding positions included). Kept weights are scaled by 1 / (1 - rate)
    (inverted dropout, as ``keras.layers.Dropout``). The mask depends on the seed and the block sizes, not on
    the backend's Dropout layer: it cannot reproduce that layer's mask, only its distribution.
    """
    return _uniform(shape, seed, i, j) >= rate


# ---------------------------------------------------------------------------------------------------------------
# Blocks


def _ceil_div(a, b):
    return -(-a // b) if is_int(a) else (a + b - 1) // b


def _blocked(x, axis, size, count):
    """Pads ``axis`` of ``x`` to ``count * size`` and splits it into (count, size)."""
    shape = ops.shape(x)
    pad = count * size - shape[axis]
    if not (is_int(pad) and pad == 0):
        widths = [[0, 0]] * len(x.shape)
        widths[axis] = [0, pad]
        x = ops.pad(x, widths)
    new_shape = tuple(shape[:axis]) + (count, size) + tuple(shape[axis + 1 :])
    return ops.reshape(x, new_shape)


def _full(x, axis):
    """Whether ``x`` has more than one entry along ``axis`` (a broadcast axis has static size 1)."""
    return x.shape[axis] != 1


class _Problem:
    """The tensors of one attention problem, cut into blocks, and the rules to read block (i, j).

    Holds Q (B, nq, Cq, N, H), K (B, nk, Ck, N_kv, H), V (B, nk, Ck, N_kv, Hv), the structural masks and the bias
    in blocked form, and the visibility band: key s is visible to the query at absolute position p iff
    ``d_lo <= s - p <= d_hi`` (causal: d_hi = 0; window W: -(W - 1) <= s - p, and s - p <= W - 1 without causal).
    """

    def __init__(self, query, key, value, bias, query_mask, key_mask, attention_mask, causal, offset, window,
                 scale, rate, seed, chunks):
        self.dtype = backend.standardize_dtype(query.dtype)
        self.batch, self.t, self.n, self.h = (query.shape[a] if query.shape[a] is not None else ops.shape(query)[a]
                                              for a in range(4))
        self.s, self.n_kv = (key.shape[a] if key.shape[a] is not None else ops.shape(key)[a] for a in (1, 2))
        self.hv = value.shape[-1]
        self.groups = self.n // self.n_kv
        self.cq, self.ck = chunks
        self.nq, self.nk = _ceil_div(self.t, self.cq), _ceil_div(self.s, self.ck)
        self.scale, self.rate, self.seed = scale, rate, seed
        self.offset = ops.cast(self.s - self.t if offset is None else offset, "int32")
        self.d_lo = None if window is None else -(window - 1)
        self.d_hi = 0 if causal else (None if window is None else window - 1)
        self.q = _blocked(query, 1, self.cq, self.nq)
        self.k = _blocked(key, 1, self.ck, self.nk)
        self.v = _blocked(value, 1, self.ck, self.nk)
        self.query_mask = None if query_mask is None else _blocked(query_mask, 1, self.cq, self.nq)
        self.key_mask = None if key_mask is None else _blocked(key_mask, 1, self.ck, self.nk)
        self.attention_mask = None if attention_mask is None else self._blocked_pair(attention_mask)
        self.bias = None if bias is None else self._blocked_pair(bias)
        self.bias_shape = None if bias is None else bias.shape

    def _blocked_pair(self, x):
        """(B|1, N|1, T|1, S|1) -> a :class:`_Pair`, rows and columns cut into blocks where not broadcast."""
        cols = _full(x, 3)
        rows = _full(x, 2)
        if cols:
            x = _blocked(x, 3, self.ck, self.nk)  # (., ., T|1, nk, Ck)
        if rows:
            x = _blocked(x, 2, self.cq, self.nq)  # (., ., nq, Cq, ...)
        return _Pair(x, rows, cols)

    # Block ranges ---------------------------------------------------------------------------------------------

    def key_range(self, i):
        """Key blocks [lo, hi) holding a key visible (by the band) to some query of block i."""
        first = self.offset + i * self.cq  # absolute position of the block's first query
        lo, hi = ops.convert_to_tensor(0, "int32"), ops.cast(self.nk, "int32")
        if self.d_lo is not None:
            lo = ops.maximum(lo, ops.floor_divide(first + self.d_lo, self.ck))
        if self.d_hi is not None:
            hi = ops.minimum(hi, ops.floor_divide(first + self.cq - 1 + self.d_hi, self.ck) + 1)
        return lo, hi

    def query_range(self, j):
        """Query blocks [lo, hi) holding a query that sees (by the band) some key of block j."""
        first = j * self.ck - self.offset  # query index of absolute position j * Ck
        lo, hi = ops.convert_to_tensor(0, "int32"), ops.cast(self.nq, "int32")
        if self.d_hi is not None:
            lo = ops.maximum(lo, ops.floor_divide(first - self.d_hi, self.cq))
        if self.d_lo is not None:
            hi = ops.minimum(hi, ops.floor_divide(first + self.ck - 1 - self.d_lo, self.cq) + 1)
        return lo, hi

    def visited(self, i, j):
        lo, hi = self.key_range(i)
        return ops.logical_and(j >= lo, j < hi)


def _take(x, index, axis):
    return ops.take(x, index, axis=axis)


class _Pair:
    """A (B|1, N|1, T|1, S|1) tensor (attention mask or bias) cut into blocks along its full axes."""

    def __init__(self, x, rows, cols):
        self.x, self.rows, self.cols = x, rows, cols

    def rows_of(self, i):
        """Row block i: (B|1, N|1, Cq|1, [nk, Ck] | 1)."""
        return _take(self.x, i, 2) if self.rows else self.x

    def block(self, rows, j):
        """Column block j of ``rows_of``' result: (B|1, N|1, Cq|1, Ck|1)."""
        return _take(rows, j, 3) if self.cols else rows


class _BlockReader:
    """Reads block rows of ``_Problem`` tensors; separated so the loops stay short."""

    def __init__(self, problem):
        self.p = problem

    def query(self, i):  # (B, Cq, N, H) float32
        return ops.cast(_take(self.p.q, i, 1), "float32")

    def key(self, j):  # (B, Ck, N_kv, H)
        return ops.cast(_take(self.p.k, j, 1), "float32")

    def value(self, j):  # (B, Ck, N_kv, Hv)
        return ops.cast(_take(self.p.v, j, 1), "float32")

    def rows(self, i):
        """Row block i of the attention mask and of the bias (None where there is none)."""
        p = self.p
        return (None if p.attention_mask is None else p.attention_mask.rows_of(i),
                None if p.bias is None else p.bias.rows_of(i))

    def mask(self, i, j, mask_rows):
        """(B|1, N|1, Cq, Ck) boolean: the keys of block j each query of block i may attend."""
        p = self.p
        positions = p.offset + i * p.cq + ops.arange(p.cq, dtype="int32")  # absolute query positions
        keys = j * p.ck + ops.arange(p.ck, dtype="int32")
        mask = ops.broadcast_to((keys < p.s)[None, :], (p.cq, p.ck))  # padded keys are never visible
        distance = keys[None, :] - positions[:, None]  # s - p
        if p.d_hi is not None:
            mask = ops.logical_and(mask, distance <= p.d_hi)
        if p.d_lo is not None:
            mask = ops.logical_and(mask, distance >= p.d_lo)
        mask = mask[None, None]
        if p.query_mask is not None:
            mask = ops.logical_and(mask, _take(p.query_mask, i, 1)[:, None, :, None])
        if p.key_mask is not None:
            mask = ops.logical_and(mask, _take(p.key_mask, j, 1)[:, None, None, :])
        if mask_rows is not None:
            mask = ops.logical_and(mask, p.attention_mask.block(mask_rows, j))
        return mask

    def logits(self, q, k, bias_rows, j):
        """S_ij = scale * Q_i K_j^T (+ bias): (B, Cq, N, H) and (B, Ck, N_kv, H) -> (B, N, Cq, Ck) float32."""
        p = self.p
        grouped = ops.reshape(q, (ops.shape(q)[0], p.cq, p.n_kv, p.groups, p.h))
        s = ops.einsum("bqkgh,bckh->bkgqc", grouped, k)
        s = ops.reshape(s, (ops.shape(q)[0], p.n, p.cq, p.ck)) * p.scale
        if bias_rows is not None:
            s = s + ops.cast(p.bias.block(bias_rows, j), "float32")
        return s

    def keep(self, i, j, shape):
        """The dropout multiplier of block (i, j): Z / (1 - rate), Z the kept entries."""
        p = self.p
        kept = dropout_keep_mask(p.seed, i, j, shape, p.rate)
        return ops.where(kept, 1.0 / (1.0 - p.rate), 0.0)


def _grouped(x, p):
    """(B, N, Cq, C) -> (B, N_kv, G, Cq, C)."""
    return ops.reshape(x, (ops.shape(x)[0], p.n_kv, p.groups) + tuple(x.shape[2:]))


def _weighted_values(weights, v, p):
    """(B, N, Cq, Ck) weights, (B, Ck, N_kv, Hv) values -> (B, N, Cq, Hv)."""
    heads = ops.einsum("bkgqc,bckh->bkgqh", _grouped(weights, p), v)
    return ops.reshape(heads, (ops.shape(weights)[0], p.n, p.cq, p.hv))


# ---------------------------------------------------------------------------------------------------------------
# Forward


def _forward_block_row(p, reader, i):
    """O_i (B, Cq, N, Hv) float32 and L_i (B, N, Cq) of query block i, by the online softmax over key blocks."""
    q = reader.query(i)
    batch = ops.shape(q)[0]
    mask_rows, bias_rows = reader.rows(i)
    lo, hi = p.key_range(i)

    def body(j, m, l, acc):
        s = reader.logits(q, reader.key(j), bias_rows, j)
        mask = reader.mask(i, j, mask_rows)
        s = ops.where(mask, s, _NEG)
        m_new = ops.maximum(m, ops.max(s, axis=-1))  # m_j = max(m_{j-1}, rowmax(S_ij))
        p_tilde = ops.where(mask, ops.exp(s - m_new[..., None]), 0.0)  # P~_ij = exp(S_ij - m_j)
        alpha = ops.exp(m - m_new)
        l = alpha * l + ops.sum(p_tilde, axis=-1)  # l_j = e^{m_{j-1} - m_j} l_{j-1} + rowsum(P~_ij)
        if p.rate > 0:
            p_tilde = p_tilde * reader.keep(i, j, ops.shape(p_tilde))
        acc = alpha[..., None] * acc + _weighted_values(p_tilde, reader.value(j), p)  # A_j
        return j + 1, m_new, l, acc

    m = ops.full((batch, p.n, p.cq), _NEG, "float32")
    l = ops.zeros((batch, p.n, p.cq), "float32")
    acc = ops.zeros((batch, p.n, p.cq, p.hv), "float32")
    _, m, l, acc = _while_loop(lambda j, *_: j < hi, body, (lo, m, l, acc))
    seen = l > 0  # a row with no visible key has l = 0: output 0, L = 0 (its P is masked to 0 anyway)
    safe_l = ops.where(seen, l, 1.0)
    out = ops.where(seen[..., None], acc / safe_l[..., None], 0.0)  # O_i = A / l
    lse = ops.where(seen, m + ops.log(safe_l), 0.0)  # L_i = m + log(l)
    return ops.transpose(out, (0, 2, 1, 3)), lse


def _unblock_rows(stacked, length):
    """(nq, B, Cq, ...) -> (B, nq * Cq, ...)[:, :length]."""
    x = ops.moveaxis(stacked, 0, 1)
    shape = ops.shape(x)
    x = ops.reshape(x, (shape[0], shape[1] * shape[2]) + tuple(shape[3:]))
    return x[:, :length]


def _forward(p):
    reader = _BlockReader(p)
    batch = p.q.shape[0]
    out, lse = _map(
        lambda i: _forward_block_row(p, reader, i),
        p.nq,
        [((batch, p.cq, p.n, p.hv), "float32"), ((batch, p.n, p.cq), "float32")],
    )
    return _unblock_rows(out, p.t), lse  # (B, T, N, Hv), (nq, B, N, Cq)


# ---------------------------------------------------------------------------------------------------------------
# Backward


class _Saved:
    """What the backward pass reads per query block: L_i, D_i (B, N, Cq) and dO_i (B, N, Cq, Hv)."""

    def __init__(self, p, lse, out, d_out):
        d_out = ops.cast(d_out, "float32")
        delta = ops.sum(d_out * out, axis=-1)  # D_i = rowsum(dO_i * O_i), (B, T, N)
        self.lse = lse  # (nq, B, N, Cq)
        self.delta = _blocked(ops.transpose(delta, (0, 2, 1)), 2, p.cq, p.nq)  # (B, N, nq, Cq)
        self.d_out = _blocked(d_out, 1, p.cq, p.nq)  # (B, nq, Cq, N, Hv)

    def block(self, i):
        d_out = ops.transpose(_take(self.d_out, i, 1), (0, 2, 1, 3))  # (B, N, Cq, Hv)
        return _take(self.lse, i, 0), _take(self.delta, i, 2), d_out


def _scores_gradient(p, reader, saved, i, j, q, k, v, mask_rows, bias_rows):
    """Recomputes block (i, j): P_ij, the applied weights dropout(P_ij) and dS_ij, (B, N, Cq, Ck) each."""
    lse, delta, d_out = saved.block(i)
    s = reader.logits(q, k, bias_rows, j)
    mask = reader.mask(i, j, mask_rows)
    probs = ops.where(mask, ops.exp(ops.where(mask, s, _NEG) - lse[..., None]), 0.0)  # P_ij = exp(S_ij - L_i)
    grouped = ops.reshape(d_out, (ops.shape(d_out)[0], p.n_kv, p.groups, p.cq, p.hv))
    d_probs = ops.reshape(ops.einsum("bkgqh,bckh->bkgqc", grouped, v), ops.shape(probs))  # dO_i V_j^T
    applied = probs
    if p.rate > 0:
        keep = reader.keep(i, j, ops.shape(probs))
        applied, d_probs = probs * keep, d_probs * keep  # dP = Z * dP~ / (1 - rate)
    d_scores = probs * (d_probs - delta[..., None])  # dS_ij = P_ij * (dP_ij - D_i)
    return applied, d_scores, d_out


def _query_gradients(p, saved):
    """dQ (B, T, N, H): per query block, dQ_i = scale * sum_j dS_ij K_j."""
    reader = _BlockReader(p)

    def row(i):
        q = reader.query(i)
        mask_rows, bias_rows = reader.rows(i)
        lo, hi = p.key_range(i)

        def body(j, dq):
            k, v = reader.key(j), reader.value(j)
            _, d_scores, _ = _scores_gradient(p, reader, saved, i, j, q, k, v, mask_rows, bias_rows)
            dq_grouped = ops.einsum("bkgqc,bckh->bqkgh", _grouped(d_scores, p), k)
            return j + 1, dq + ops.reshape(dq_grouped, ops.shape(dq)) * p.scale

        _, dq = _while_loop(lambda j, _: j < hi, body, (lo, ops.zeros_like(q)))
        return (dq,)

    (dq,) = _map(row, p.nq, [((p.q.shape[0], p.cq, p.n, p.h), "float32")])
    return _unblock_rows(dq, p.t)


def _key_value_gradients(p, saved):
    """dK (B, S, N_kv, H), dV (B, S, N_kv, Hv): per key block, dK_j = scale * sum_i dS_ij^T Q_i and
    dV_j = sum_i dropout(P_ij)^T dO_i."""
    reader = _BlockReader(p)

    def column(j):
        k, v = reader.key(j), reader.value(j)
        lo, hi = p.query_range(j)

        def body(i, dk, dv):
            q = reader.query(i)
            mask_rows, bias_rows = reader.rows(i)
            applied, d_scores, d_out = _scores_gradient(p, reader, saved, i, j, q, k, v, mask_rows, bias_rows)
            grouped_out = ops.reshape(d_out, (ops.shape(d_out)[0], p.n_kv, p.groups, p.cq, p.hv))
            dv = dv + ops.einsum("bkgqc,bkgqh->bckh", _grouped(applied, p), grouped_out)
            grouped_q = ops.reshape(q, (ops.shape(q)[0], p.cq, p.n_kv, p.groups, p.h))
            dk = dk + ops.einsum("bkgqc,bqkgh->bckh", _grouped(d_scores, p), grouped_q) * p.scale
            return i + 1, dk, dv

        _, dk, dv = _while_loop(lambda i, *_: i < hi, body, (lo, ops.zeros_like(k), ops.zeros_like(v)))
        return dk, dv

    batch = p.k.shape[0]
    dk, dv = _map(column, p.nk, [((batch, p.ck, p.n_kv, p.h), "float32"), ((batch, p.ck, p.n_kv, p.hv), "float32")])
    return _unblock_rows(dk, p.s), _unblock_rows(dv, p.s)


def _bias_gradient(p, saved):
    """d bias = dS, summed over the bias' broadcast axes: (B|1, N|1, T|1, S|1) float32. Computed block by block
    (blocks outside the band are zero), written into a tensor of the bias' own size."""
    reader = _BlockReader(p)
    b_full, n_full = _full_axes(p.bias_shape)[:2]
    rows_full, cols_full = _full_axes(p.bias_shape)[2:]

    def reduce(d_scores):
        axes = [a for a, full in enumerate((b_full, n_full, rows_full, cols_full)) if not full]
        return ops.sum(d_scores, axis=axes, keepdims=True) if axes else d_scores

    def row(i):
        q = reader.query(i)
        mask_rows, bias_rows = reader.rows(i)

        def column(j):
            def compute():
                k, v = reader.key(j), reader.value(j)
                _, d_scores, _ = _scores_gradient(p, reader, saved, i, j, q, k, v, mask_rows, bias_rows)
                return reduce(d_scores)

            return (ops.cond(p.visited(i, j), compute, lambda: ops.zeros(block_shape, "float32")),)

        (blocks,) = _map(column, p.nk, [(block_shape, "float32")])  # (nk, B|1, N|1, Cq|1, Ck|1)
        if cols_full:
            blocks = ops.moveaxis(blocks, 0, 3)  # (B|1, N|1, Cq|1, nk, Ck)
            shape = ops.shape(blocks)
            return (ops.reshape(blocks, tuple(shape[:3]) + (shape[3] * shape[4],)),)
        return (ops.sum(blocks, axis=0),)

    batch = p.q.shape[0] if b_full else 1
    block_shape = (batch if b_full else 1, p.n if n_full else 1, p.cq if rows_full else 1, p.ck if cols_full else 1)
    if b_full and batch is None:
        block_shape = (ops.shape(p.q)[0],) + block_shape[1:]
    static_block = tuple(d if is_int(d) else None for d in block_shape)
    row_shape = static_block[:3] + ((None if not is_int(p.nk) else p.nk * p.ck) if cols_full else 1,)
    (rows,) = _map(row, p.nq, [(row_shape, "float32")])  # (nq, B|1, N|1, Cq|1, Sp|1)
    if rows_full:
        rows = ops.moveaxis(rows, 0, 2)  # (B|1, N|1, nq, Cq, Sp|1)
        shape = ops.shape(rows)
        rows = ops.reshape(rows, (shape[0], shape[1], shape[2] * shape[3], shape[4]))[:, :, : p.t]
    else:
        rows = ops.sum(rows, axis=0)
    return rows[..., : p.s] if cols_full else rows


def _full_axes(shape):
    return tuple(d != 1 for d in shape)


# ---------------------------------------------------------------------------------------------------------------
# Entry point


def _as_rank4(mask, name):
    """A mask broadcastable to (B, T, S) or (B, N, T, S) -> (B|1, N|1, T|1, S|1)."""
    if len(mask.shape) == 3:
        return ops.expand_dims(mask, 1)
    if len(mask.shape) != 4:
        raise ValueError(
            f"`{name}` must be broadcastable to (batch, query_length, key_length) or (batch, num_heads, "
            f"query_length, key_length); received shape {format_shape(mask.shape)}."
        )
    return mask


def _check_inputs(query, key, value):
    for name, x, layout in (("query", query, "(B, T, N, H)"), ("key", key, "(B, S, N_kv, H)"),
                            ("value", value, "(B, S, N_kv, Hv)")):
        if len(x.shape) != 4:
            raise ValueError(f"`{name}` must have shape {layout}; received shape {format_shape(x.shape)}.")
    n, n_kv = query.shape[2], key.shape[2]
    if n is None or n_kv is None or n % n_kv or value.shape[2] != n_kv:
        raise ValueError(
            f"The number of query heads must be a multiple of the (equal) numbers of key and value heads; received "
            f"query {format_shape(query.shape)}, key {format_shape(key.shape)}, value {format_shape(value.shape)}."
        )
    if query.shape[3] != key.shape[3] or value.shape[3] is None:
        raise ValueError(
            f"`query` and `key` must have the same (static) head size; received query {format_shape(query.shape)} "
            f"and key {format_shape(key.shape)}."
        )


def _chunks(query, key, query_chunk_size, key_chunk_size):
    cq = positive_int(query_chunk_size, "query_chunk_size")
    ck = positive_int(key_chunk_size, "key_chunk_size")
    # No block larger than the sequence: short inputs are one block, with no padding.
    t, s = query.shape[1], key.shape[1]
    return (min(cq, t) if t else cq), (min(ck, s) if s else ck)


def chunked_attention(
    query,
    key,
    value,
    bias=None,
    *,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    causal=False,
    offset=None,
    window=None,
    scale=None,
    dropout_rate=0.0,
    seed=None,
    query_chunk_size=DEFAULT_QUERY_CHUNK,
    key_chunk_size=DEFAULT_KEY_CHUNK,
):
    """Exact softmax(Q K^T * scale + bias) V per head (Vaswani et al. 2017, eq. 1), in blocks: memory O(T * chunk).

    The masks are given structurally and combined per block (no (T, S) mask is built): query t at absolute
    position ``offset + t`` may attend key s iff its padding allows both, ``attention_mask`` allows (t, s), the
    causal rule allows (s <= offset + t) and the window allows (|offset + t - s| < window). A query with no
    visible key gets output 0 (and finite, zero gradients), as everywhere in this library. Key blocks outside the
    causal / window band of a query block are skipped, so a window costs O(T * window) work and memory.

    Gradients (``keras.ops.custom_gradient``) reach ``query``, ``key``, ``value`` and ``bias`` (reduced over the
    bias' broadcast axes); the backward pass recomputes each block from Q, K, V, the output and the per-row
    log-sum-exp. A bias adds one more recomputation pass for its gradient.

    Dropout on the attention weights draws, for block (i, j), a stateless uniform U of seed ``seed + (i, j)``
    and keeps the entries with U >= ``dropout_rate``, scaling them by 1 / (1 - dropout_rate) (see
    :func:`dropout_keep_mask`): Bernoulli(1 - rate) per weight, the distribution of ``keras.layers.Dropout``, the
    same mask in the forward and the backward pass. The mask depends on the chunk sizes.

    Float16 / bfloat16 inputs are computed in float32 block by block (the softmax statistics m, l, L and the
    accumulators); the output has the query's dtype.

    The blocks are computed in keras ops on every backend; the backend's own fused kernel (cuDNN under JAX) is
    :func:`attnlayers.fused.fused_attention`, which ``MultiHeadAttention(implementation="auto")`` prefers where
    it exists.

    Args:
        query: (B, T, N, H). key: (B, S, N_kv, H). value: (B, S, N_kv, Hv); N a multiple of N_kv.
        bias: additive logit bias broadcastable to (B, N, T, S), rank 4 (axes of static size 1 broadcast), or None.
        query_mask: (B, T) boolean, False = padded query (output 0), or None.
        key_mask: (B, S) boolean, False = padded key, or None.
        attention_mask: boolean, rank 3 broadcastable to (B, T, S) or rank 4 to (B, N, T, S), or None.
        causal: query t attends keys s <= offset + t only.
        offset: absolute position of query 0 (int or scalar int tensor); default S - T (the queries are the last
            T positions).
        window: None or a positive int W: query t attends keys with |offset + t - s| < W (keras' sliding window;
            with ``causal``, the W - 1 previous keys and its own).
        scale: multiplies Q K^T; default 1 / sqrt(H).
        dropout_rate: rate in [0, 1) of dropout on the attention weights (0: none).
        seed: with dropout: an int, a ``keras.random.SeedGenerator`` or an integer (2,) seed tensor.
        query_chunk_size, key_chunk_size: Cq and Ck, rows of queries and keys per block (clipped to T and S).

    Returns:
        (B, T, N, Hv) in the query's dtype.
    """
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    _check_inputs(query, key, value)
    rate = rate_in_unit_interval(dropout_rate, "dropout_rate")
    window = positive_int(window, "window", allow_none=True)
    scale = float(1.0 / query.shape[-1] ** 0.5 if scale is None else scale)
    if rate > 0 and seed is None:
        raise ValueError("`seed` is required with dropout (dropout_rate > 0); received seed=None.")
    seed = seed_tensor(seed) if rate > 0 else None
    batch = query.shape[0]
    query_mask = masking.check_mask(query_mask, "query_mask", (batch, query.shape[1]))
    key_mask = masking.check_mask(key_mask, "key_mask", (batch, key.shape[1]))
    if attention_mask is not None:
        attention_mask = ops.cast(_as_rank4(ops.convert_to_tensor(attention_mask), "attention_mask"), "bool")
    if bias is not None:
        bias = ops.convert_to_tensor(bias)
        if len(bias.shape) != 4:
            raise ValueError(
                "`bias` must have shape (batch or 1, num_heads or 1, query_length or 1, key_length or 1); received "
                f"shape {format_shape(bias.shape)}."
            )
    if offset is None:  # the queries are the last T of the S positions
        offset = ops.shape(key)[1] - ops.shape(query)[1]
    offset = ops.cast(offset, "int32")
    static = (_chunks(query, key, query_chunk_size, key_chunk_size), bool(causal), window, scale, rate)
    call = _jitted_call() if _BACKEND == "jax" else _call
    return call(static, query, key, value, bias, query_mask, key_mask, attention_mask, seed, offset)


def _problem(static, query, key, value, bias, structure):
    chunks, causal, window, scale, rate = static
    query_mask, key_mask, attention_mask, seed, offset = structure
    return _Problem(query, key, value, bias, query_mask, key_mask, attention_mask, causal, offset, window, scale,
                    rate, seed, chunks)


def _gradients(problem, lse, out, upstream, inputs):
    """(dQ, dK, dV[, d bias]) in the inputs' dtypes, from the saved output O (B, T, N, Hv) float32, L and dO."""
    saved = _Saved(problem, lse, out, upstream)
    dq = _query_gradients(problem, saved)
    dk, dv = _key_value_gradients(problem, saved)
    grads = [dq, dk, dv] + ([_bias_gradient(problem, saved)] if len(inputs) > 3 else [])
    return tuple(ops.cast(g, x.dtype) for g, x in zip(grads, inputs))


def _call(static, query, key, value, bias, *structure):
    """The custom-gradient computation of :func:`chunked_attention` (arguments checked; ``static`` =
    (chunks, causal, window, scale, rate); ``structure`` = (query_mask, key_mask, attention_mask, seed, offset))."""
    if _BACKEND == "jax":
        return _call_jax(static, query, key, value, bias, structure)

    def attention(*inputs):
        problem = _problem(static, *inputs[:3], inputs[3] if len(inputs) > 3 else None, structure)
        out, lse = _forward(problem)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _gradients(problem, lse, out, upstream, inputs)

        return ops.cast(out, query.dtype), grad

    inputs = (query, key, value) + (() if bias is None else (bias,))
    return ops.custom_gradient(attention)(*inputs)


def _call_jax(static, query, key, value, bias, structure):
    """JAX: a ``jax.custom_vjp`` taking the masks, seed and offset as (non-differentiated) arguments.
    ``jax.custom_gradient`` (under ``keras.ops.custom_gradient``) cannot close over values traced by an enclosing
    ``jax.jit``."""
    import jax

    @jax.custom_vjp
    def attention(q, k, v, b, structure):
        return ops.cast(_forward(_problem(static, q, k, v, b, structure))[0], q.dtype)

    def forward(q, k, v, b, structure):
        out, lse = _forward(_problem(static, q, k, v, b, structure))
        return ops.cast(out, q.dtype), (q, k, v, b, structure, out, lse)

    def backward(residuals, upstream):
        q, k, v, b, structure, out, lse = residuals
        inputs = (q, k, v) + (() if b is None else (b,))
        grads = _gradients(_problem(static, q, k, v, b, structure), lse, out, upstream, inputs)
        return grads[:3] + (grads[3] if b is not None else None, None)

    attention.defvjp(forward, backward)
    return attention(query, key, value, bias, tuple(structure))


_JITTED = []


def _jitted_call():
    """JAX: :func:`_call` under ``jax.jit`` (static configuration hashed), so eager calls compile their loops once
    per configuration and shapes instead of at every call; inside another jit it is inlined."""
    if not _JITTED:
        import jax

        _JITTED.append(jax.jit(_call, static_argnums=0))
    return _JITTED[0]


def visible_queries(query_length, key_length, **structure):
    """Deprecated: :func:`attnlayers.masking.visible_queries` (the same function)."""
    warnings.warn("attnlayers.chunked.visible_queries is deprecated; use attnlayers.masking.visible_queries.",
                  DeprecationWarning, stacklevel=2)
    return masking.visible_queries(query_length, key_length, **structure)
