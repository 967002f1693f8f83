"""Flash attention with dropout inside the kernel: a Pallas (Triton) kernel for JAX on a GPU, forward and backward.

    Attention(Q, K, V) = dropout(softmax(Q K^T * scale + mask)) V           (Vaswani et al. 2017, eq. 1)

The forward kernel is FlashAttention's (Dao et al. 2022, Algorithm 1, with FlashAttention-2's loop order, Dao
2023): one program per (query block i, batch b, query head h) visits the key blocks j in order, keeping per row a
running maximum m, a running sum l and an accumulator A:

    S_ij = scale * Q_i K_j^T, masked entries excluded          P~_ij = exp(S_ij - m_j)
    m_j = max(m_{j-1}, rowmax(S_ij))                            l_j = exp(m_{j-1} - m_j) l_{j-1} + rowsum(P~_ij)
    A_j = exp(m_{j-1} - m_j) A_{j-1} + (Z_ij o P~_ij) V_j / (1 - rate)
    O_i = A_last / l_last,     L_i = m_last + log(l_last)   (the log-sum-exp, saved)

Z is the dropout mask: Z[b, h, t, s] = 1 where a counter-based hash of (seed, b, h, t, s) is at least
``rate * 2^32`` (:func:`dropout_bits`), else 0. The normaliser l sums the weights before dropout, so O is
(Z o softmax(S)) V / (1 - rate): inverted dropout of the attention weights (Srivastava et al. 2014). Nothing of the
mask is stored: the backward kernels compute the same hash again. They recompute P = exp(S - L) block by block
(Dao 2023, Algorithm 2):

    D_i = rowsum(dO_i o O_i)                      (= rowsum(P_i o dP_i), with dropout too)
    dP_ij = Z_ij o (dO_i V_j^T) / (1 - rate),     dS_ij = P_ij o (dP_ij - D_i)
    dV_j = sum_i (Z_ij o P_ij / (1 - rate))^T dO_i,   dK_j = scale * sum_i dS_ij^T Q_i,   dQ_i = scale * sum_j dS_ij K_j

one kernel over key blocks for dK and dV (per query head; the groups of a key head summed after it) and one over
query blocks for dQ. Products take the inputs' dtype (float32 / bfloat16 / float16) with float32 accumulation; the
softmax statistics are float32.

Masks, all optional and combined in the kernel from their pieces (never a (B, N, T, S) tensor): query padding
(B, T), key padding (B, S) (or per-row key lengths), an explicit (B|1, T, S) mask, the causal rule at an offset and
keras' sliding window. A query with no visible key gets output 0 (and zero gradients). Key blocks outside a causal
band are not visited.

Layout as ``keras.layers.MultiHeadAttention``: (B, T, N, H) queries, (B, S, N_kv, H) keys, (B, S, N_kv, Hv) values;
query head n reads key / value head ``n // (N / N_kv)`` (grouped-query attention). Sequences are padded to whole
blocks and heads to a power of two (at least 16, Triton's smallest product) outside the kernel.

``interpret=True`` runs the same kernels through Pallas' interpreter (any device, slowly): how the tests check them
on a CPU against the exact computation with the mask :func:`dropout_keep_mask` materialises from the same hash.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from attnlayers import masking

__all__ = ["DEFAULT_BLOCK_SIZES", "dropout_bits", "dropout_keep_mask", "flash_attention", "keep_threshold", "row_keys"]

#: (query rows, key rows) per block: powers of two, at least 16.
DEFAULT_BLOCK_SIZES = (64, 64)

_NEG = masking.large_negative("float32")


# ---------------------------------------------------------------------------------------------------------------
# The dropout mask: a counter-based hash of (seed, b, h, t, s)

def _fmix(x):
    """MurmurHash3's 32-bit finaliser (Appleby 2008): a bijection of uint32 whose every output bit depends on every
    input bit. ``x`` a uint32 array."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def row_keys(seed, batch, num_heads, query_length):
    """The per-row keys of the hash: (B, N, T) uint32, one for each (batch row, query head, query).

    key = fmix(fmix(seed_0 + c_0) ^ seed_1); row(b, h, t) = fmix(fmix(fmix(key + (b N + h) c_1) + t c_2)).

    Args:
        seed: an integer (2,) seed (a ``keras.random.SeedGenerator`` state) or an int.
    """
    seed = jnp.asarray([seed, 0] if isinstance(seed, int) else seed).astype(jnp.uint32)
    key = _fmix(_fmix(seed[0] + jnp.uint32(0x9E3779B9)) ^ seed[1])
    heads = jnp.arange(batch * num_heads, dtype=jnp.uint32).reshape(batch, num_heads, 1)
    head_keys = _fmix(key + heads * jnp.uint32(0x27D4EB2F))
    rows = jnp.arange(query_length, dtype=jnp.uint32)
    return _fmix(_fmix(head_keys + rows * jnp.uint32(0x165667B1)))


def dropout_bits(row_key, columns):
    """The hash of each (row, key): fmix(row ^ fmix(s c_3 + c_4)), uint32 of the broadcast shape.

    Args:
        row_key: uint32 keys of :func:`row_keys`, (..., T, 1). columns: int32 key indices s, (..., S).
    """
    column_keys = _fmix(columns.astype(jnp.uint32) * jnp.uint32(0xC2B2AE3D) + jnp.uint32(0x61C88647))
    return _fmix(row_key ^ column_keys)


def keep_threshold(rate):
    """The uint32 threshold: an entry is kept where its hash is >= round(rate * 2^32), probability 1 - rate."""
    return min(round(rate * 2.0**32), 2**32 - 1)


def dropout_keep_mask(seed, batch, num_heads, query_length, key_length, rate):
    """The (B, N, T, S) boolean mask (True = kept) that :func:`flash_attention` draws inside its kernels for
    ``seed`` and ``rate``, materialised with the same hash (for tests and references): Bernoulli(1 - rate) per entry,
    a function of (seed, b, h, t, s) only (not of the block sizes)."""
    keys = row_keys(seed, batch, num_heads, query_length)[..., None]
    bits = dropout_bits(keys, jnp.arange(key_length, dtype=jnp.int32))
    return bits >= jnp.uint32(keep_threshold(rate))


# ---------------------------------------------------------------------------------------------------------------
# Kernels

@dataclasses.dataclass(frozen=True)
class _Static:
    """What the kernels are compiled for (hashable)."""

    block_q: int
    block_k: int
    key_length: int  # S (before padding)
    causal: bool
    offset: int  # absolute position of query 0 among the keys
    window: int | None
    scale: float
    rate: float
    groups: int  # N / N_kv
    interpret: bool

    @property
    def band(self):
        """(d_lo, d_hi): key s is visible to query t (by the causal rule and the window) iff
        d_lo <= s - (offset + t) <= d_hi; None where unbounded."""
        d_lo = None if self.window is None else -(self.window - 1)
        d_hi = 0 if self.causal else (None if self.window is None else self.window - 1)
        return d_lo, d_hi


def _both(a, b):
    return b if a is None else jnp.logical_and(a, b)


def _visible(static, rows, columns, query_mask, key_mask, attention_mask):
    """(bq, bk) boolean (or broadcastable, or None when everything is visible): the keys ``columns`` each query of
    ``rows`` may attend, from the padding of the key blocks, the band and the mask pieces (int blocks, 0 = masked)."""
    visible = None
    if static.key_length % static.block_k:
        visible = (columns < static.key_length)[None, :]
    distance = columns[None, :] - (rows[:, None] + static.offset)  # s - (offset + t)
    d_lo, d_hi = static.band
    if d_hi is not None:
        visible = _both(visible, distance <= d_hi)
    if d_lo is not None:
        visible = _both(visible, distance >= d_lo)
    if query_mask is not None:
        visible = _both(visible, (query_mask != 0)[:, None])
    if key_mask is not None:
        visible = _both(visible, (key_mask != 0)[None, :])
    if attention_mask is not None:
        visible = _both(visible, attention_mask != 0)
    return visible


def _dropout_multiplier(static, row_key, columns):
    """Z / (1 - rate) of a block: (bq, bk) float32."""
    kept = dropout_bits(row_key[:, None], columns[None, :]) >= jnp.uint32(keep_threshold(static.rate))
    return jnp.where(kept, 1.0 / (1.0 - static.rate), 0.0)


def _dot(a, b, trans_a=False, trans_b=False):
    """a b (with transposes) accumulated in float32; float32 inputs in full float32 (no TF32)."""
    return plgpu.dot(a, b, trans_a=trans_a, trans_b=trans_b, allow_tf32=a.dtype != jnp.float32)


def _key_blocks(static, i, count):
    """Key blocks [lo, hi) holding a key the band lets some query of block i see."""
    d_lo, d_hi = static.band
    first = static.offset + i * static.block_q  # absolute position of the block's first query
    lo, hi = 0, count
    if d_lo is not None:
        lo = lax.div(jnp.maximum(first + d_lo, 0), static.block_k)
    if d_hi is not None:
        hi = jnp.minimum(lax.div(jnp.maximum(first + static.block_q - 1 + d_hi, 0), static.block_k) + 1, count)
    return lo, hi


def _query_blocks(static, j, count):
    """Query blocks [lo, hi) holding a query the band lets see some key of block j."""
    d_lo, d_hi = static.band
    first = j * static.block_k - static.offset  # the query at the absolute position of the block's first key
    lo, hi = 0, count
    if d_hi is not None:
        lo = lax.div(jnp.maximum(first - d_hi, 0), static.block_q)
    if d_lo is not None:
        hi = jnp.minimum(lax.div(jnp.maximum(first + static.block_k - 1 - d_lo, 0), static.block_q) + 1, count)
    return lo, hi


def _forward_kernel(*refs, static, names):
    """One (query block i, batch b, head h): O_i and L_i by the online softmax (Algorithm 1)."""
    refs = dict(zip(names, refs))
    bq, bk = static.block_q, static.block_k
    i = pl.program_id(0)
    rows = i * bq + jnp.arange(bq, dtype=jnp.int32)
    q = refs["query"][...]
    query_mask = refs["query_mask"][...] if "query_mask" in refs else None
    row_key = refs["row_keys"][...] if "row_keys" in refs else None

    def body(j, carry):
        accumulator, m, l = carry
        keys = pl.ds(j * bk, bk)
        columns = j * bk + jnp.arange(bk, dtype=jnp.int32)
        k, v = refs["key"][keys, :], refs["value"][keys, :]
        s = _dot(q, k, trans_b=True) * static.scale  # S_ij
        visible = _visible(static, rows, columns, query_mask,
                           refs["key_mask"][keys] if "key_mask" in refs else None,
                           refs["attention_mask"][:, keys] if "attention_mask" in refs else None)
        if visible is not None:
            s = jnp.where(visible, s, _NEG)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))  # m_j
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])  # P~_ij
        if visible is not None:
            p = jnp.where(visible, p, 0.0)
        l = correction * l + jnp.sum(p, axis=1)  # l_j: before dropout
        if row_key is not None:
            p = p * _dropout_multiplier(static, row_key, columns)
        accumulator = correction[:, None] * accumulator + _dot(p.astype(v.dtype), v)  # A_j
        return accumulator, m_new, l

    lo, hi = _key_blocks(static, i, refs["key"].shape[0] // bk)
    init = (jnp.zeros((bq, refs["value"].shape[-1]), jnp.float32), jnp.full((bq,), _NEG, jnp.float32),
            jnp.zeros((bq,), jnp.float32))
    accumulator, m, l = lax.fori_loop(lo, hi, body, init)
    seen = l > 0  # a query with no visible key: output 0
    l = jnp.where(seen, l, 1.0)
    refs["out"][...] = (accumulator / l[:, None]).astype(refs["out"].dtype)
    refs["lse"][...] = jnp.where(seen, m + jnp.log(l), 0.0)  # L_i


def _probabilities(static, q, k, lse, rows, columns, query_mask, key_mask, attention_mask):
    """P_ij = exp(S_ij - L_i) recomputed, masked entries 0: (bq, bk) float32."""
    s = _dot(q, k, trans_b=True) * static.scale
    p = jnp.exp(s - lse[:, None])
    visible = _visible(static, rows, columns, query_mask, key_mask, attention_mask)
    return p if visible is None else jnp.where(visible, p, 0.0)


def _key_value_kernel(*refs, static, names):
    """One (key block j, batch b, query head h): dK_j and dV_j over the query blocks."""
    refs = dict(zip(names, refs))
    bq, bk = static.block_q, static.block_k
    j = pl.program_id(0)
    columns = j * bk + jnp.arange(bk, dtype=jnp.int32)
    k, v = refs["key"][...], refs["value"][...]
    key_mask = refs["key_mask"][...] if "key_mask" in refs else None

    def body(i, carry):
        dk, dv = carry
        queries = pl.ds(i * bq, bq)
        rows = i * bq + jnp.arange(bq, dtype=jnp.int32)
        q, do = refs["query"][queries, :], refs["d_out"][queries, :]
        p = _probabilities(static, q, k, refs["lse"][queries], rows, columns,
                           refs["query_mask"][queries] if "query_mask" in refs else None, key_mask,
                           refs["attention_mask"][queries, :] if "attention_mask" in refs else None)
        dp = _dot(do, v, trans_b=True)  # dO_i V_j^T
        dropped = p
        if "row_keys" in refs:
            z = _dropout_multiplier(static, refs["row_keys"][queries], columns)
            dropped, dp = p * z, dp * z
        dv = dv + _dot(dropped.astype(do.dtype), do, trans_a=True)  # dV_j
        ds = p * (dp - refs["delta"][queries][:, None])  # dS_ij
        dk = dk + _dot(ds.astype(q.dtype), q, trans_a=True)  # dK_j / scale
        return dk, dv

    lo, hi = _query_blocks(static, j, refs["query"].shape[0] // bq)
    init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    dk, dv = lax.fori_loop(lo, hi, body, init)
    refs["d_key"][...] = (dk * static.scale).astype(refs["d_key"].dtype)
    refs["d_value"][...] = dv.astype(refs["d_value"].dtype)


def _query_kernel(*refs, static, names):
    """One (query block i, batch b, head h): dQ_i over the key blocks."""
    refs = dict(zip(names, refs))
    bq, bk = static.block_q, static.block_k
    i = pl.program_id(0)
    rows = i * bq + jnp.arange(bq, dtype=jnp.int32)
    q, do, lse, delta = refs["query"][...], refs["d_out"][...], refs["lse"][...], refs["delta"][...]
    query_mask = refs["query_mask"][...] if "query_mask" in refs else None
    row_key = refs["row_keys"][...] if "row_keys" in refs else None

    def body(j, dq):
        keys = pl.ds(j * bk, bk)
        columns = j * bk + jnp.arange(bk, dtype=jnp.int32)
        k, v = refs["key"][keys, :], refs["value"][keys, :]
        p = _probabilities(static, q, k, lse, rows, columns, query_mask,
                           refs["key_mask"][keys] if "key_mask" in refs else None,
                           refs["attention_mask"][:, keys] if "attention_mask" in refs else None)
        dp = _dot(do, v, trans_b=True)
        if row_key is not None:
            dp = dp * _dropout_multiplier(static, row_key, columns)
        ds = p * (dp - delta[:, None])
        return dq + _dot(ds.astype(k.dtype), k)  # dQ_i / scale

    lo, hi = _key_blocks(static, i, refs["key"].shape[0] // bk)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    refs["d_query"][...] = (dq * static.scale).astype(refs["d_query"].dtype)


# ---------------------------------------------------------------------------------------------------------------
# pallas_call wiring

def _specs(static, aux, rows_whole):
    """BlockSpecs of the mask pieces and row keys, by name, for a grid (block, b, h). ``rows_whole``: the program
    holds a key block and reads every query row (the dK / dV kernel) instead of one query block."""
    bq, bk = static.block_q, static.block_k
    specs = {}
    for name, x in aux.items():
        if name == "row_keys":  # (B, N, Tp)
            specs[name] = (pl.BlockSpec((None, None, x.shape[2]), lambda a, b, h: (b, h, 0)) if rows_whole else
                           pl.BlockSpec((None, None, bq), lambda a, b, h: (b, h, a)))
        elif name == "query_mask":  # (B, Tp)
            specs[name] = (pl.BlockSpec((None, x.shape[1]), lambda a, b, h: (b, 0)) if rows_whole else
                           pl.BlockSpec((None, bq), lambda a, b, h: (b, a)))
        elif name == "key_mask":  # (B, Sp)
            specs[name] = (pl.BlockSpec((None, bk), lambda a, b, h: (b, a)) if rows_whole else
                           pl.BlockSpec((None, x.shape[1]), lambda a, b, h: (b, 0)))
        else:
            specs[name] = _attention_mask_spec(x.shape, bq, bk, rows_whole)
    return specs


def _attention_mask_spec(shape, bq, bk, rows_whole):
    """The BlockSpec of a (B|1, Tp, Sp) attention mask (see :func:`_specs`)."""
    def row(b):
        return b if shape[0] > 1 else 0

    if rows_whole:
        return pl.BlockSpec((None, shape[1], bk), lambda a, b, h: (row(b), 0, a))
    return pl.BlockSpec((None, bq, shape[2]), lambda a, b, h: (row(b), a, 0))


def _heads_spec(rows, groups=1, block_index=True):
    """(B, L, N, H) tensors: ``rows`` rows of head h // groups, block ``a`` of the grid's first axis (or all)."""
    def index(a, b, h):
        return (b, a if block_index else 0, lax.div(h, groups) if groups > 1 else h, 0)
    return lambda width: pl.BlockSpec((None, rows, None, width), index)


def _call(kernel, static, grid, inputs, in_specs, outputs, out_specs, name):
    names = tuple(inputs) + tuple(outputs)
    width = max(x.shape[-1] for x in inputs.values() if x.ndim == 4)
    return pl.pallas_call(
        functools.partial(kernel, static=static, names=names),
        grid=grid,
        in_specs=[in_specs[n] for n in inputs],
        out_specs=[out_specs[n] for n in outputs],
        out_shape=[outputs[n] for n in outputs],
        compiler_params=plgpu.CompilerParams(num_warps=4 if width <= 64 else 8, num_stages=2),
        interpret=static.interpret,
        name=name,
    )(*inputs.values())


def _forward(static, q, k, v, aux):
    """(O (B, Tp, N, Hvp) in the query's dtype, L (B, N, Tp) float32)."""
    batch, tp, n, h = q.shape
    sp, hv = k.shape[1], v.shape[-1]
    bq = static.block_q
    inputs = {"query": q, "key": k, "value": v, **aux}
    in_specs = {"query": _heads_spec(bq)(h), "key": _heads_spec(sp, static.groups, False)(h),
                "value": _heads_spec(sp, static.groups, False)(hv), **_specs(static, aux, rows_whole=False)}
    outputs = {"out": jax.ShapeDtypeStruct((batch, tp, n, hv), q.dtype),
               "lse": jax.ShapeDtypeStruct((batch, n, tp), jnp.float32)}
    out_specs = {"out": _heads_spec(bq)(hv), "lse": pl.BlockSpec((None, None, bq), lambda a, b, hh: (b, hh, a))}
    return _call(_forward_kernel, static, (tp // bq, batch, n), inputs, in_specs, outputs, out_specs,
                 "flash_dropout_forward")


def _backward(static, q, k, v, aux, out, lse, d_out):
    """(dQ, dK, dV) of the padded inputs; dK and dV summed over each key head's group of query heads."""
    batch, tp, n, h = q.shape
    sp, n_kv, hv = k.shape[1], k.shape[2], v.shape[-1]
    bq, bk = static.block_q, static.block_k
    delta = jnp.einsum("btnh,btnh->bnt", d_out.astype(jnp.float32), out.astype(jnp.float32))  # D_i
    stats = {"lse": lse, "delta": delta}
    row_spec = pl.BlockSpec((None, None, bq), lambda a, b, hh: (b, hh, a))
    inputs = {"query": q, "key": k, "value": v, "d_out": d_out, **stats, **aux}
    in_specs = {"query": _heads_spec(bq)(h), "key": _heads_spec(sp, static.groups, False)(h),
                "value": _heads_spec(sp, static.groups, False)(hv), "d_out": _heads_spec(bq)(hv),
                "lse": row_spec, "delta": row_spec, **_specs(static, aux, rows_whole=False)}
    (dq,) = _call(_query_kernel, static, (tp // bq, batch, n), inputs, in_specs,
                  {"d_query": jax.ShapeDtypeStruct(q.shape, q.dtype)}, {"d_query": _heads_spec(bq)(h)},
                  "flash_dropout_backward_query")
    whole_rows = pl.BlockSpec((None, None, tp), lambda a, b, hh: (b, hh, 0))
    in_specs = {"query": _heads_spec(tp, 1, False)(h), "key": _heads_spec(bk, static.groups)(h),
                "value": _heads_spec(bk, static.groups)(hv), "d_out": _heads_spec(tp, 1, False)(hv),
                "lse": whole_rows, "delta": whole_rows, **_specs(static, aux, rows_whole=True)}
    per_head = jnp.float32 if static.groups > 1 else k.dtype  # a group's heads are summed in float32
    outputs = {"d_key": jax.ShapeDtypeStruct((batch, sp, n, h), per_head),
               "d_value": jax.ShapeDtypeStruct((batch, sp, n, hv), per_head)}
    dk, dv = _call(_key_value_kernel, static, (sp // bk, batch, n), inputs, in_specs, outputs,
                   {"d_key": _heads_spec(bk)(h), "d_value": _heads_spec(bk)(hv)}, "flash_dropout_backward_key_value")
    # query head n reads key head n // G: the key head's gradient sums its group's
    dk = dk.reshape(batch, sp, n_kv, static.groups, h).sum(3).astype(k.dtype)
    dv = dv.reshape(batch, sp, n_kv, static.groups, hv).sum(3).astype(v.dtype)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(static, q, k, v, aux):
    return _forward(static, q, k, v, aux)[0]


def _attention_forward(static, q, k, v, aux):
    out, lse = _forward(static, q, k, v, aux)
    return out, (q, k, v, aux, out, lse)


def _attention_backward(static, residuals, d_out):
    q, k, v, aux, out, lse = residuals
    return _backward(static, q, k, v, aux, out, lse, d_out) + (None,)


_attention.defvjp(_attention_forward, _attention_backward)
# Compiled once per configuration and shapes (eager calls included); inlined inside another jit.
_jitted_attention = jax.jit(_attention, static_argnums=0)


# ---------------------------------------------------------------------------------------------------------------
# Entry point

def _padded(x, axis, size):
    pad = size - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def _block(size, length):
    """A power-of-two block of at most ``size`` rows, at least 16, not much longer than ``length``."""
    return max(16, min(size, pl.next_power_of_2(length)))


def _check(query, key, value, block_sizes, rate):
    for name, x, layout in (("query", query, "(B, T, N, H)"), ("key", key, "(B, S, N_kv, H)"),
                            ("value", value, "(B, S, N_kv, Hv)")):
        if x.ndim != 4:
            raise ValueError(f"`{name}` must have shape {layout}; received shape {x.shape}.")
    n, n_kv = query.shape[2], key.shape[2]
    if n % n_kv or value.shape[2] != n_kv or key.shape[:2] != value.shape[:2] or query.shape[3] != key.shape[3]:
        raise ValueError(f"`query` (B, T, N, H), `key` (B, S, N_kv, H) and `value` (B, S, N_kv, Hv) must agree, N a "
                         f"multiple of N_kv; received {query.shape}, {key.shape} and {value.shape}.")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"`dropout_rate` must be in [0, 1); received {rate}.")
    if len(block_sizes) != 2 or any(b < 16 or b & (b - 1) for b in block_sizes):
        raise ValueError(f"`block_sizes` must be two powers of two >= 16; received {block_sizes}.")


def flash_attention(query, key, value, *, query_mask=None, key_mask=None, key_lengths=None, attention_mask=None,
                    causal=False, offset=None, window=None, scale=None, dropout_rate=0.0, seed=None,
                    block_sizes=DEFAULT_BLOCK_SIZES, interpret=False):
    """dropout(softmax(Q K^T * scale + mask)) V per head (eq. 1), one fused Pallas kernel forward and two backward,
    the dropout mask drawn inside them from a hash of (seed, b, h, t, s) (:func:`dropout_keep_mask` gives it).

    Query t sits at absolute position ``offset + t`` and may attend key s iff the paddings allow both, the
    attention mask allows (t, s), the causal rule allows (s <= offset + t) and the window allows
    (|offset + t - s| < window); a query with no visible key gets output 0. The same masks, seed and rate give the
    same function as the exact computation with that mask: softmax over the visible keys, then
    Z o weights / (1 - rate).

    Args:
        query: (B, T, N, H). key: (B, S, N_kv, H). value: (B, S, N_kv, Hv); N a multiple of N_kv. float32,
            bfloat16 or float16 (one dtype).
        query_mask: (B, T) boolean, False = padded query, or None.
        key_mask: (B, S) boolean, False = padded key, or None. key_lengths: (B,) integers, keys s >= length
            masked (another way to say a right padding), or None.
        attention_mask: boolean broadcastable to (B, T, S) (rank 3, or rank 4 with a head axis of 1), or None.
        causal: query t attends keys s <= offset + t only.
        offset: absolute position of query 0, a Python int; default S - T.
        window: None or a positive int W (keras' sliding window).
        scale: multiplies Q K^T; default 1 / sqrt(H).
        dropout_rate: rate in [0, 1) of dropout on the attention weights. seed: with dropout, an int or an integer
            (2,) seed (``keras.random.SeedGenerator.next()``).
        block_sizes: (query rows, key rows) per block, powers of two >= 16 (clipped to the sequences).
        interpret: run the kernels in Pallas' interpreter (any device; slow: for tests) instead of Triton (GPU).

    Returns:
        (B, T, N, Hv) in the query's dtype. Gradients (``jax.custom_vjp``) reach query, key and value.
    """
    query, key, value = jnp.asarray(query), jnp.asarray(key), jnp.asarray(value)
    rate = float(dropout_rate)
    _check(query, key, value, tuple(block_sizes), rate)
    if rate > 0 and seed is None:
        raise ValueError("`seed` is required with dropout (dropout_rate > 0); received seed=None.")
    batch, t, n, h = query.shape
    s, n_kv, hv = key.shape[1], key.shape[2], value.shape[3]
    offset = s - t if offset is None else offset
    if not isinstance(offset, (int, np.integer)):
        raise ValueError(f"`offset` must be a Python int (the kernels are compiled for it); received {offset!r}.")
    bq, bk = _block(block_sizes[0], t), _block(block_sizes[1], s)
    tp, sp = -(-t // bq) * bq, -(-s // bk) * bk
    static = _Static(bq, bk, s, bool(causal), int(offset), None if window is None else int(window),
                     float(1.0 / math.sqrt(h) if scale is None else scale), rate, n // n_kv, bool(interpret))

    aux = {}
    if rate > 0:
        aux["row_keys"] = _padded(row_keys(seed, batch, n, t), 2, tp)
    if query_mask is not None:
        aux["query_mask"] = _padded(jnp.broadcast_to(jnp.asarray(query_mask), (batch, t)).astype(jnp.int32), 1, tp)
    if key_lengths is not None:
        by_length = jnp.arange(s)[None, :] < jnp.asarray(key_lengths)[:, None]
        key_mask = by_length if key_mask is None else jnp.logical_and(jnp.asarray(key_mask, bool), by_length)
    if key_mask is not None:
        aux["key_mask"] = _padded(jnp.broadcast_to(jnp.asarray(key_mask), (batch, s)).astype(jnp.int32), 1, sp)
    if attention_mask is not None:
        mask = jnp.asarray(attention_mask)
        if mask.ndim == 4 and mask.shape[1] == 1:
            mask = mask[:, 0]
        if mask.ndim != 3:
            raise ValueError("`attention_mask` must be broadcastable to (B, T, S) (one mask for all heads); "
                             f"received shape {mask.shape}.")
        mask = jnp.broadcast_to(mask, (mask.shape[0], t, s)).astype(jnp.int8)
        aux["attention_mask"] = _padded(_padded(mask, 1, tp), 2, sp)

    width, value_width = max(16, pl.next_power_of_2(h)), max(16, pl.next_power_of_2(hv))
    q = _padded(_padded(query, 1, tp), 3, width)  # zero features change no product
    k = _padded(_padded(key, 1, sp), 3, width)
    v = _padded(_padded(value, 1, sp), 3, value_width)
    return _jitted_attention(static, q, k, v, aux)[:, :t, :, :hv]
