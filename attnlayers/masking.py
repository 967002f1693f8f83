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

from attnlayers.validation import format_shape, positive_int

_REDUCED_PRECISION = ("float16", "bfloat16")


class _ImplicitMask(keras.layers.Layer):
    """Returns the implicit mask of its input: Keras passes it to a ``call`` that takes ``mask``."""

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        return mask

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_spec(self, inputs, mask=None):
        return mask


_MASK_READER = []  # one _ImplicitMask, created on first use


def keras_mask(x):
    """The implicit Keras mask attached to ``x`` (by ``mask_zero=True``, ``Masking``, ...), or None.

    Eager and symbolic tensors carry it as the ``_keras_mask`` attribute. A traced JAX value cannot hold an
    attribute (Keras keeps its mask aside), so it is read the public way: a layer whose ``call`` takes
    ``mask`` receives it from Keras.
    """
    if x is None:
        return None
    mask = getattr(x, "_keras_mask", None)
    if mask is not None or not ops.is_tensor(x):
        return mask
    if not _MASK_READER:
        _MASK_READER.append(_ImplicitMask(name="implicit_mask"))
    return _MASK_READER[0](x)


def large_negative(dtype):
    """A dtype-aware large negative number for filling masked logits.

    ``-0.7 * finfo(dtype).max`` stays finite after subtracting the row maximum inside softmax, unlike
    ``-inf`` (NaN for fully-masked rows) or a literal ``-1e9`` (overflows float16).
    """
    return float(-0.7 * ml_dtypes.finfo(backend.standardize_dtype(dtype)).max)


def _static_shape(x):
    return tuple(x.shape)


def check_mask(mask, name, expected_shape):
    """Validates a user-provided mask and returns it as a boolean tensor.

    Args:
        mask: tensor or None. Boolean or integer (0/1); True / nonzero = may attend.
        name: argument name, for error messages.
        expected_shape: tuple; each entry is the size the mask must have on that axis, or None when unknown.
            An axis of size 1 broadcasts. The rank must match exactly: no silent broadcasting of a
            mask of the wrong rank.

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
    if len(shape) != len(expected_shape):
        raise ValueError(
            f"`{name}` must have rank {len(expected_shape)} with shape {format_shape(expected_shape)}; "
            f"received shape {format_shape(shape)}."
        )
    for got, want in zip(shape, expected_shape):
        if got is not None and want is not None and got not in (1, want):
            raise ValueError(
                f"`{name}` has shape {format_shape(shape)}, which does not broadcast to the expected "
                f"{format_shape(expected_shape)}."
            )
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
