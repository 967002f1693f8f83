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

from attnlayers.validation import format_shape, is_int, positive_int

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
