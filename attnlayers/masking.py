"""Mask algebra shared by every attention layer.

Conventions:
- masks are boolean, ``True`` = may attend;
- padding masks have shape ``(B, S)`` (or ``(B, T)`` for queries), attention masks ``(B, T, S)`` or anything
  that broadcasts to it;
- a query with no visible key gets weights 0 and output 0: never NaN (forward or gradient), never an average
  of padding. :func:`masked_softmax` is the one place that rule is implemented.
"""

import keras
import ml_dtypes  # finfo for bfloat16 too; a dependency of TensorFlow and JAX
from keras import backend, ops

from attnlayers.validation import format_shape, is_int, positive_int, same_size

__all__ = ["causal_mask", "check_mask", "combine_masks", "combine_pieces", "compute_attention_mask",
           "keras_attention_mask", "keras_mask", "keras_window_mask", "key_padding_mask", "large_negative",
           "mask_pieces", "masked_softmax", "padding_to_attention_mask", "sequence_length", "sliding_window_mask",
           "static_sizes", "visible_queries", "zero_invisible_queries"]

_REDUCED_PRECISION = ("float16", "bfloat16")


@keras.saving.register_keras_serializable(package="attnlayers", name="ImplicitMask")
class _ImplicitMask(keras.layers.Layer):
    """Returns the implicit mask of its input: Keras passes it to a ``call`` that takes ``mask``. Symbolically (a
    functional model being built) the mask is a new symbolic tensor, this layer's output."""

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        return mask

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_spec(self, inputs, mask=None):
        return None if mask is None else keras.KerasTensor(mask.shape, mask.dtype)


_MASK_READER = []  # one _ImplicitMask for backend tensors, created on first use


def keras_mask(x):
    """The implicit Keras mask attached to ``x`` (by ``mask_zero=True``, ``Masking``, ...), or None.

    Read the public way, for every kind of tensor: a layer whose ``call`` takes ``mask`` receives it from Keras
    (Keras keeps the mask as a private attribute of an eager or graph tensor, and aside for a JAX value, which
    cannot hold one). For a backend tensor (eager, or traced inside a layer's ``call``) the mask itself comes
    back; for a symbolic ``keras.KerasTensor`` (a functional model being built) a symbolic tensor computed from
    it by a small layer of its own (it then appears in the model's ``layers``); anything else has no mask.
    """
    if x is None:
        return None
    if isinstance(x, keras.KerasTensor):
        return _ImplicitMask(name=f"implicit_mask_{keras.backend.get_uid('implicit_mask')}")(x)
    if not ops.is_tensor(x):
        return None
    if not _MASK_READER:
        _MASK_READER.append(_ImplicitMask(name="implicit_mask"))
    return _MASK_READER[0](x)


def large_negative(dtype):
    """A dtype-aware large negative number for filling masked logits.

    ``-0.7 * finfo(dtype).max`` stays finite after subtracting the row maximum inside softmax, unlike
    ``-inf`` (NaN for fully-masked rows) or a literal ``-1e9`` (overflows float16).
    """
    return float(-0.7 * ml_dtypes.finfo(backend.standardize_dtype(dtype)).max)


def sequence_length(x):
    """The length (axis 1) of a (B, L, ...) tensor: static when known, else the dynamic one."""
    return x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]


def _static_shape(x):
    return tuple(x.shape)


def static_sizes(shape):
    """``shape`` (ints, None, or scalar tensors from ``ops.shape`` of a tensor with dynamic axes) with every
    size not known while tracing as None: what error messages and static checks read."""
    return tuple(int(s) if is_int(s) else None for s in shape)


def _mask_layout(name, rank):
    if rank == 3:
        return "(B, T, S)"
    return "(B, T)" if rank == 2 and ("query" in name or "decoder" in name or name == "padding_mask") else (
        "(B, S)" if rank == 2 else f"rank {rank}")


def _graph_tensor(x):
    """True for a TensorFlow tensor of a graph being traced (tf.function, SavedModel, tf.data): the only place a
    mask's size can be unknown until run time. JAX traces (jit) always have static shapes."""
    if backend.backend() != "tensorflow":
        return False
    import tensorflow as tf  # the TensorFlow backend only: the runtime assertion below

    return tf.is_tensor(x) and not tf.executing_eagerly()


def _assert_mask_shape(mask, name, expected_shape, static_expected):
    """Under ``tf.function`` with dynamic axes (an ``input_signature`` with None batch / length), sizes are
    only known when the graph runs: one runtime assertion (a few scalar ops) that each axis of ``mask`` is 1 or
    the expected size. It names the argument, the expected shape and the one received, where an op error deep
    inside the attention (SelectV2 / broadcasting) would name neither. Only the axes that the static check could
    not decide are compared. Under XLA (``jit_compile=True``) shapes are static when the program compiles: the
    assertion compiles to nothing and a wrong size fails XLA's own shape check (a broadcasting error)."""
    import tensorflow as tf

    axes = [
        axis for axis, (got, want) in enumerate(zip(_static_shape(mask), expected_shape))
        if want is not None and got != 1 and (got is None or static_expected[axis] is None)
    ]
    if not axes:
        return mask
    mask_shape = tf.shape(mask, out_type=tf.int32)
    got = tf.stack([mask_shape[axis] for axis in axes])
    want = tf.stack([tf.cast(expected_shape[axis], "int32") for axis in axes])
    ok = tf.reduce_all(tf.logical_or(tf.equal(got, want), tf.equal(got, 1)))
    layout = _mask_layout(name, len(expected_shape))
    expected = tf.stack([tf.cast(s if s is not None else -1, "int32") for s in expected_shape])
    check = tf.debugging.Assert(
        ok,
        [f"`{name}` must have shape {layout} =", expected, "(an axis of size 1 broadcasts; -1: any size); "
         "received shape", mask_shape],
        name=f"check_{name}_shape",
    )
    with tf.control_dependencies([check]):
        return tf.identity(mask)


def check_mask(mask, name, expected_shape):
    """Validates a user-provided mask and returns it as a boolean tensor.

    Args:
        mask: tensor or None. Boolean or integer (0/1); True / nonzero = may attend.
        name: argument name, for error messages.
        expected_shape: tuple; each entry is the size the mask must have on that axis: an int, None when
            unknown, or a scalar tensor (an entry of ``ops.shape(x)`` for an axis only known at run time).
            An axis of size 1 broadcasts. The rank must match exactly: no silent broadcasting of a
            mask of the wrong rank. Sizes known while tracing are checked at once (a ValueError); under
            ``tf.function`` with dynamic axes the rest are checked when the graph runs (an
            ``InvalidArgumentError`` naming ``name``, the expected and the received shape).

    Returns:
        Boolean tensor, or None if ``mask`` is None.
    """
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    dtype = backend.standardize_dtype(mask.dtype)
    if not (dtype == "bool" or "int" in dtype):
        raise ValueError(
            f"`{name}` must be a boolean mask (True = may attend) or an integer 0/1 mask; received dtype "
            f"{dtype}. A float mask is ambiguous (additive 0/-inf or multiplicative 1/0): convert it "
            f"explicitly, e.g. `{name} > 0`."
        )
    shape = _static_shape(mask)
    static_expected = static_sizes(expected_shape)
    if len(shape) != len(expected_shape):
        raise ValueError(
            f"`{name}` must have rank {len(expected_shape)} with shape {format_shape(static_expected)}; "
            f"received shape {format_shape(shape)}."
        )
    for got, want in zip(shape, static_expected):
        if got is not None and want is not None and got not in (1, want):
            raise ValueError(
                f"`{name}` has shape {format_shape(shape)}, which does not broadcast to the expected "
                f"{format_shape(static_expected)}."
            )
    if (None in shape or None in static_expected) and _graph_tensor(mask):
        mask = _assert_mask_shape(mask, name, expected_shape, static_expected)
    return mask if dtype == "bool" else ops.not_equal(mask, 0)


def combine_masks(*masks):
    """Logical AND of the given masks (None entries are skipped); None if all are None."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        result = mask if result is None else ops.logical_and(result, mask)
    return result


def padding_to_attention_mask(query_mask=None, key_mask=None):
    """Turns padding masks into an attention mask.

    Args:
        query_mask: (B, T) or None.
        key_mask: (B, S) or None.

    Returns:
        (B, T, S), (B, 1, S) or (B, T, 1) boolean mask (broadcastable to (B, T, S)), or None.
        A padded query sees no key, so its output is 0.
    """
    q = None if query_mask is None else ops.expand_dims(ops.cast(query_mask, "bool"), -1)
    k = None if key_mask is None else ops.expand_dims(ops.cast(key_mask, "bool"), -2)
    return combine_masks(q, k)


def _positions(query_length, key_length, offset):
    """Absolute query positions (T, 1) and key positions (1, S)."""
    if offset is None:
        offset = key_length - query_length  # queries are the last T of the S positions
    i = ops.expand_dims(ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32"), -1)
    j = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return i, j


def causal_mask(query_length, key_length=None, offset=None):
    """Causal (look-ahead) mask: query i may attend key j iff j <= i + offset.

    Args:
        query_length: T (int or scalar tensor).
        key_length: S; defaults to T.
        offset: absolute position of query 0. Defaults to ``S - T`` (the queries are the last T positions,
            e.g. one decoding step against a full cache). In cached decoding with a preallocated cache,
            pass the cache update index.

    Returns:
        (T, S) boolean mask.
    """
    key_length = query_length if key_length is None else key_length
    i, j = _positions(query_length, key_length, offset)
    return ops.less_equal(j, i)


def sliding_window_mask(query_length, key_length=None, window=1, offset=None, causal=False):
    """Band mask of half-width ``window`` around each query's position.

    Symmetric: |i + offset - j| <= window (2 * window + 1 keys, Luong's local window with D = window).
    Causal: i + offset - window <= j <= i + offset (window + 1 keys, as in sliding-window decoders).

    Args:
        query_length, key_length, offset: as in :func:`causal_mask`.
        window: positive int.
        causal: whether the band only looks back.

    Returns:
        (T, S) boolean mask.
    """
    window = positive_int(window, "window")
    key_length = query_length if key_length is None else key_length
    i, j = _positions(query_length, key_length, offset)
    distance = i - j
    if causal:
        return ops.logical_and(distance >= 0, distance <= window)
    return ops.abs(distance) <= window


def keras_window_mask(query_length, key_length=None, window=1, offset=None):
    """keras' sliding window: query i may attend key j iff |i + offset - j| < ``window`` (``window`` - 1 keys on
    each side and its own; window 1: its own position only). ``keras.layers.MultiHeadAttention(sliding_window=)``.

    Args:
        query_length, key_length, offset: as in :func:`causal_mask`.
        window: positive int W.

    Returns:
        (T, S) boolean mask.
    """
    window = positive_int(window, "window")
    key_length = query_length if key_length is None else key_length
    i, j = _positions(query_length, key_length, offset)
    return ops.abs(i - j) < window


def masked_softmax(logits, mask=None, axis=-1):
    """Softmax over ``axis`` that honours a boolean mask and the fully-masked rule.

    Under float16 / bfloat16 the softmax runs in float32 and the result is cast back. Masked positions get
    weight exactly 0, and a row with no visible position gets all-zero weights (not NaN, not uniform);
    gradients stay finite because masked logits are filled with a finite :func:`large_negative`.

    Args:
        logits: (..., S) tensor.
        mask: boolean tensor broadcastable to ``logits``, or None.

    Returns:
        Weights with the shape and dtype of ``logits``.
    """
    dtype = backend.standardize_dtype(logits.dtype)
    x = ops.cast(logits, "float32") if dtype in _REDUCED_PRECISION else logits
    if mask is None:
        return ops.cast(ops.softmax(x, axis=axis), dtype)
    mask = ops.cast(mask, "bool")
    x = ops.where(mask, x, large_negative(x.dtype))
    weights = ops.softmax(x, axis=axis)
    # A fully-masked row softmaxes to uniform over padding; zeroing masked entries makes it all-zero.
    weights = ops.where(mask, weights, ops.zeros_like(weights))
    return ops.cast(weights, dtype)


def compute_attention_mask(
    query_length,
    key_length,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    offset=None,
):
    """Combines padding masks, an explicit attention mask and the causal rule.

    Args:
        query_length, key_length: T and S.
        query_mask: (B, T) or None. key_mask: (B, S) or None.
        attention_mask: broadcastable to (B, T, S), or None.
        use_causal_mask: add the causal rule (see :func:`causal_mask` for ``offset``).

    Returns:
        Boolean mask broadcastable to (B, T, S), or None when nothing is masked.
    """
    causal = causal_mask(query_length, key_length, offset)[None] if use_causal_mask else None
    return combine_masks(padding_to_attention_mask(query_mask, key_mask), attention_mask, causal)


def visible_queries(query_length, key_length, *, query_mask=None, key_mask=None, attention_mask=None,
                    causal=False, offset=None, window=None):
    """(B|1, T) boolean: the queries that see at least one key under the structural masks of
    :func:`attnlayers.chunked.chunked_attention`, or None when every query does. No (T, S) tensor is built unless
    ``attention_mask`` is given (then it is combined with the others and reduced, at the size of the user's own
    mask).

    Without an explicit mask, query t (position q = offset + t) sees a key iff a key s in
    [max(q + d_lo, 0), min(q + d_hi, S - 1)] is not padded: a difference of prefix counts of ``key_mask``.
    """
    offset = ops.cast(key_length - query_length if offset is None else offset, "int32")
    d_lo = None if window is None else -(window - 1)
    d_hi = 0 if causal else (None if window is None else window - 1)
    if attention_mask is not None:
        mask = ops.cast(attention_mask, "bool")
        if len(mask.shape) == 4:
            mask = ops.any(mask, axis=1)
        band = None
        if d_lo is not None or d_hi is not None:
            i = ops.arange(query_length, dtype="int32")[:, None] + offset
            j = ops.arange(key_length, dtype="int32")[None]
            band = ops.ones((query_length, key_length), "bool")
            if d_hi is not None:
                band = ops.logical_and(band, j - i <= d_hi)
            if d_lo is not None:
                band = ops.logical_and(band, j - i >= d_lo)
            band = band[None]
        keys = None if key_mask is None else ops.cast(key_mask, "bool")[:, None, :]
        visible = ops.any(combine_masks(mask, band, keys), axis=-1)
        return combine_masks(visible, query_mask)
    visible = None
    if d_lo is not None or d_hi is not None or key_mask is not None:
        position = ops.arange(query_length, dtype="int32") + offset  # (T,)
        first = ops.maximum(position + d_lo, 0) if d_lo is not None else ops.zeros_like(position)
        last = ops.minimum(position + d_hi, key_length - 1) if d_hi is not None else ops.full_like(
            position, key_length - 1)
        visible = (last >= first)[None]
        if key_mask is not None:
            counts = ops.cumsum(ops.cast(key_mask, "int32"), axis=1)  # keys visible among 0 .. s
            counts = ops.pad(counts, [[0, 0], [1, 0]])  # counts[:, s] = visible keys among 0 .. s - 1
            upper = ops.take(counts, ops.clip(last + 1, 0, key_length), axis=1)
            lower = ops.take(counts, ops.clip(first, 0, key_length), axis=1)
            visible = ops.logical_and(visible, upper - lower > 0)
    return combine_masks(visible, query_mask)


def keras_attention_mask(mask):
    """keras' attention-mask shapes as (B|1, T, S): (T, S) -> (1, T, S); (B|1, 1, T, S) -> (B|1, T, S); a per-head
    (B|1, N, T, S) kept; a float mask as keras' cast to bool (nonzero = may attend: an additive 0 / -inf mask goes
    to ``attention_bias`` instead). None stays None."""
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


def key_padding_mask(value_mask, key_mask, batch, key_length, cached=False):
    """The (B, S) padding of the keys: ``value_mask`` AND ``key_mask`` (each checked, either may be None), or None.
    With a cache (``cached``) S counts the cache positions, and a mask of another length is refused by name."""
    masks = []
    for name, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
        if mask is None:
            continue
        static = static_sizes((batch, key_length))
        if cached and len(mask.shape) == 2 and not same_size(mask.shape[1], static[1]):
            raise ValueError(
                f"With a `cache`, `{name}` masks the cache positions: expected shape "
                f"{format_shape(static)}; received shape {format_shape(mask.shape)}. (An "
                f"implicit Keras mask of the new tokens cannot be placed in the cache: pass an "
                f"`attention_mask` instead.)"
            )
        masks.append(check_mask(mask, name, (batch, key_length)))
    return combine_masks(*masks)


def mask_pieces(query, value, query_mask, value_mask, key_mask, attention_mask, num_heads, cached=False):
    """The checked mask pieces of a multi-head attention call: query padding (B, T), key padding (B, S)
    (value_mask AND key_mask, :func:`key_padding_mask`) and the explicit attention mask (B, T, S) or per head
    (B, N, T, S) (keras' shapes accepted, :func:`keras_attention_mask`; axes of size 1 broadcast), each boolean or
    None. ``query`` (B, T, ...) and ``value`` (B, S, ...) give the sizes; ``num_heads`` N."""
    # ops.shape: under tf.function with None axes, the sizes only known at run time are checked then.
    (batch, query_length), key_length = ops.shape(query)[:2], ops.shape(value)[1]
    query_mask = check_mask(query_mask, "query_mask", (batch, query_length))
    key_padding = key_padding_mask(value_mask, key_mask, batch, key_length, cached)
    attention_mask = keras_attention_mask(attention_mask)
    expected = (batch, query_length, key_length)
    if attention_mask is not None and len(attention_mask.shape) == 4:
        expected = (batch, num_heads, query_length, key_length)
    attention_mask = check_mask(attention_mask, "attention_mask", expected)
    return query_mask, key_padding, attention_mask


def combine_pieces(query_length, key_length, query_mask, key_padding, attention_mask, *, use_causal_mask=False,
                   offset=None, window=None, cache_mask=None):
    """One mask from the pieces of :func:`mask_pieces`, the causal rule and keras' sliding window at ``offset`` (the
    absolute position of query 0) and a cache's (1, 1, S) written positions.

    Returns:
        Boolean mask broadcastable to (B, T, S) (to (B, N, T, S) with a per-head ``attention_mask``), or None when
        nothing is masked.
    """
    per_head = attention_mask if attention_mask is not None and len(attention_mask.shape) == 4 else None
    mask = compute_attention_mask(
        query_length, key_length, query_mask, key_padding, None if per_head is not None else attention_mask,
        use_causal_mask, offset=offset,
    )
    if window is not None:  # keras' band: |i - j| < window, i the absolute query position
        mask = combine_masks(mask, keras_window_mask(query_length, key_length, window, offset=offset)[None])
    mask = combine_masks(mask, cache_mask)
    if per_head is None:
        return mask
    return per_head if mask is None else ops.logical_and(ops.expand_dims(mask, 1), per_head)  # (B, N, T, S)


def zero_invisible_queries(output, mask):
    """``output`` (B, T, ...) with 0 for each query that sees no key (in any head) under ``mask`` (B|1, T, S) or
    (B|1, N, T, S) (not the output bias); ``output`` itself when ``mask`` is None."""
    if mask is None:
        return output
    visible = ops.any(mask, axis=-1)
    if len(mask.shape) == 4:  # a per-head mask (B, N, T, S)
        visible = ops.any(visible, axis=1)
    visible = ops.reshape(visible, ops.shape(visible) + (1,) * (len(output.shape) - 2))
    return ops.where(visible, output, ops.zeros_like(output))
