"""Fused attention: softmax(Q K^T * scale + bias) V through the backend's own attention kernel.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                       (Vaswani et al. 2017, eq. 1)

Under JAX this is ``jax.nn.dot_product_attention``: on a GPU with float16 / bfloat16 inputs its cuDNN kernel
(FlashAttention: the (B, N, T, S) logits are never stored, and with ``is_causal`` the upper triangle is not
computed); elsewhere its XLA implementation, the same function computed plainly, which the tests compare with
the library's own paths on a CPU. TensorFlow has no such kernel (``keras.ops.dot_product_attention(...,
flash_attention=True)`` raises there), so this route does not exist under TensorFlow: :func:`kernel` says None.

The library's rules hold here as on every route: boolean masks (True = may attend) are applied as a finite large
negative logit, so a query that sees no key gets a finite row (its output is then zeroed by the caller from
:func:`attnlayers.masking.visible_queries`, never NaN, with finite gradients). The cuDNN kernel takes a mask only
as a (B, 1, T, S) bias; a causal rule with T == S and the default offset goes to its own causal mode instead.

Per-head tensors use the layout of ``keras.layers.MultiHeadAttention``: (B, T, N, H) queries, (B, S, N_kv, H) keys
and values (grouped-query attention: query head n reads key / value head ``n // (N / N_kv)``).
"""

import keras
from keras import backend, ops

from attnlayers import masking
from attnlayers.validation import is_int

__all__ = ["CUDNN_REFUSALS", "compiled_by_xla", "cudnn_refusal", "fused_attention", "kernel", "platform",
           "why_not_cudnn"]

_BACKEND = keras.backend.backend()
_HALF = ("float16", "bfloat16")
#: Head sizes cuDNN's flash attention takes on every GPU it runs on (Ampere: <= 128, Hopper: <= 256).
_CUDNN_MAX_HEAD = 128
#: The oldest GPU cuDNN's flash attention runs on: Ampere (keras' own check asks the same).
_CUDNN_MIN_CAPABILITY = (8, 0)

#: How ``jax.nn.dot_product_attention(implementation="cudnn")`` refuses a call it does not take, while it is traced
#: (jax 0.10.2, ``jax/_src/cudnn/fused_attention_stablehlo.py``): (exception type, start of its message). Only these
#: are refusals (:func:`cudnn_refusal`); any other exception from the call is an error and propagates. The checks of
#: :func:`why_not_cudnn` come first, so most of these are not reached; the ValueErrors of jax's ``check_layout``
#: (shapes or dtypes that disagree) are not refusals but errors of the caller.
CUDNN_REFUSALS = (
    (RuntimeError, "cuDNN is not detected."),  # check_cudnn_version: a jaxlib without CUDA (CPU-only, ROCm)
    (NotImplementedError, "Q must be fp16/bf16"),  # check_layout: the dtype
    (NotImplementedError, "The head dim must be <= "),  # check_is_flash_attention: H > 128 (Hopper 256), H % 8
    (NotImplementedError, "Unsupported sequence length Q "),  # ...: gradients with a bias and an odd T or S
    (NotImplementedError, "Compute capability 10.3 requires cuDNN"),  # ...: cuDNN < 9.11 on that GPU
    (NotImplementedError, "Currently only support batch_dim in [0, None]"),  # its vmap rule: another batch axis
)


def cudnn_refusal(error):
    """cuDNN's message when ``error`` is cuDNN's flash attention refusing a call (one of :data:`CUDNN_REFUSALS`,
    matched by exact type and the start of the message), else None: then ``error`` is not a refusal.

    Args:
        error: an exception raised by ``jax.nn.dot_product_attention(..., implementation="cudnn")``.
    """
    message = str(error)
    for kind, start in CUDNN_REFUSALS:
        if type(error) is kind and message.startswith(start):
            return message
    return None


def platform():
    """The platform of the default JAX device ("gpu", "tpu", "cpu"), or None under another backend."""
    if _BACKEND != "jax":
        return None
    import jax

    return jax.devices()[0].platform


def compiled_by_xla(x):
    """Whether ``x`` belongs to a computation XLA compiles: a JAX tracer (``jax.jit``), or a TensorFlow graph under
    ``tf.function(jit_compile=True)`` (``Model.compile(jit_compile=True)``; Keras' "auto" takes XLA only where a GPU
    is visible); not eager execution or a plain TensorFlow graph. Decided when tracing (a Python bool). Some
    choices of speed depend on it: a cache written in place, a fusion that pays under XLA and costs in a graph.

    Under TensorFlow it asks ``tf.__internal__.get_enclosing_xla_context()``, the XLA context that
    ``tf.function(jit_compile=True)`` opens around the graph it traces (searched through the enclosing graphs).
    Neither TensorFlow's public API nor keras' tells a graph that XLA compiles from one that it does not
    (``tf.inside_function()`` and ``tf.executing_eagerly()`` tell a graph from eager execution only);
    ``tf.__internal__`` is the namespace TensorFlow exports for keras, not ``tensorflow.python``. If it is
    missing, this says False: the choices it informs are of speed, never of the result.

    Args:
        x: a tensor of the computation.
    """
    if _BACKEND == "jax":
        import jax

        return isinstance(x, jax.core.Tracer)
    if _BACKEND != "tensorflow":
        return False
    import tensorflow as tf

    enclosing_xla_context = getattr(getattr(tf, "__internal__", None), "get_enclosing_xla_context", None)
    if enclosing_xla_context is None:  # pragma: no cover - a TensorFlow without it: assume a plain graph
        return False
    return not tf.executing_eagerly() and enclosing_xla_context() is not None


def why_not_cudnn(dtype, head_size):
    """Why cuDNN's flash attention cannot take inputs of ``dtype`` with heads of ``head_size`` here (a sentence),
    or None when it can. Checked before the call; while it is traced, cuDNN may still refuse it
    (:func:`cudnn_refusal`: e.g. gradients through a bias with an odd length, a jaxlib without cuDNN).

    Args:
        dtype: the compute dtype of the queries, keys and values.
        head_size: H of the queries, keys and values.
    """
    if _BACKEND != "jax":
        return f"the {_BACKEND} backend has no cuDNN attention kernel"
    where = platform()
    if where != "gpu":
        return f"the JAX device is a {where}, not a GPU"
    capability = _compute_capability()
    if capability is not None and capability < _CUDNN_MIN_CAPABILITY:
        return (f"the GPU has compute capability {'.'.join(map(str, capability))}; cuDNN's flash attention needs "
                "8.0 (Ampere) or newer")
    dtype = backend.standardize_dtype(dtype)
    if dtype not in _HALF:
        return f"cuDNN's flash attention takes float16 / bfloat16; the inputs are {dtype}"
    if head_size % 8 != 0 or head_size > _CUDNN_MAX_HEAD:
        return f"cuDNN's flash attention takes heads of <= {_CUDNN_MAX_HEAD}, a multiple of 8; received {head_size}"
    return None


def _compute_capability():
    """(major, minor) of the default CUDA device ("8.0" -> (8, 0)), or None where it has no such number (ROCm)."""
    import jax

    parts = str(getattr(jax.devices()[0], "compute_capability", "")).split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else None


def kernel(dtype, head_size, value_head_size=None, explicit=False):
    """Which kernel the fused route would use for inputs of ``dtype`` with heads of ``head_size``.

    Args:
        dtype: the compute dtype of the queries, keys and values.
        head_size: H of the queries and keys; value_head_size: Hv (default H).
        explicit: True when the caller asked for the fused route by name: then the XLA implementation of the same
            op is accepted where cuDNN's does not apply (a CPU, float32); "auto" takes only cuDNN.

    Returns:
        "cudnn", "xla" or None (no fused route: TensorFlow, a TPU, Hv != H, or "auto" without cuDNN). "cudnn" is
        a prediction: cuDNN may still refuse the call while it is traced (:func:`cudnn_refusal`).
    """
    if _BACKEND != "jax" or (value_head_size is not None and value_head_size != head_size):
        return None
    if why_not_cudnn(dtype, head_size) is None:
        return "cudnn"
    if explicit and platform() != "tpu":
        return "xla"
    return None


def fused_attention(query, key, value, bias=None, *, query_mask=None, key_mask=None, attention_mask=None,
                    causal=False, offset=None, window=None, scale=None, implementation="xla"):
    """softmax(Q K^T * scale + bias) V (eq. 1) through ``jax.nn.dot_product_attention``.

    The masks come as the pieces :func:`attnlayers.chunked.chunked_attention` takes, with the same meaning.

    Args:
        query: (B, T, N, H). key, value: (B, S, N_kv, H), in the query's dtype.
        bias: additive logit bias broadcastable to (B, N, T, S), rank 4, or None.
        query_mask: (B, T) boolean, False = padded query, or None.
        key_mask: (B, S) boolean, False = padded key, or None.
        attention_mask: boolean broadcastable to (B, T, S) (rank 3) or (B, N, T, S) (rank 4), or None.
        causal: query t attends keys s <= offset + t only.
        offset: absolute position of query 0 (int or scalar int tensor); default S - T.
        window: None or W: query t attends keys with |offset + t - s| < W (keras' sliding window).
        scale: multiplies Q K^T; default 1 / sqrt(H).
        implementation: "cudnn" or "xla" (see :func:`kernel`).

    Returns:
        (B, T, N, H) in the query's dtype. Rows with no visible key hold finite values the caller zeroes.

    Raises:
        RuntimeError: with implementation="cudnn", when cuDNN refuses the call: one of :data:`CUDNN_REFUSALS`
            (a RuntimeError or NotImplementedError raised while tracing; :func:`cudnn_refusal` tells them from
            errors).
    """
    import jax

    t, s = query.shape[1], key.shape[1]
    default_offset = offset is None or (is_int(offset) and is_int(t) and is_int(s) and offset == s - t)
    # cuDNN's causal mode is the top-left rule s <= t: ours when T == S and the queries are the keys' positions.
    native_causal = bool(causal) and default_offset and is_int(t) and t == s
    mask = masking.combine_masks(
        None if query_mask is None else ops.cast(query_mask, "bool")[:, None, :, None],
        None if key_mask is None else ops.cast(key_mask, "bool")[:, None, None, :],
        _rank4(attention_mask),
        _band(t, s, causal and not native_causal, offset, window),
    )
    if bias is not None:  # finite in the inputs' dtype: -inf would give NaN rows in float16
        negative = masking.large_negative(query.dtype)
        bias = ops.maximum(ops.cast(bias, "float32"), negative)
        if mask is not None:  # the mask selected into the bias: cuDNN would add the two large negatives (-inf)
            bias, mask = ops.where(mask, bias, negative), None
        bias = ops.cast(bias, query.dtype)
    if implementation == "cudnn":  # cuDNN reads a mask only as a full (., ., T, S) bias
        if mask is not None:
            mask = ops.broadcast_to(mask, (ops.shape(mask)[0], ops.shape(mask)[1], t, s))
        if bias is not None:
            bias = ops.broadcast_to(bias, (ops.shape(bias)[0], ops.shape(bias)[1], t, s))
    return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=mask, scale=scale,
                                        is_causal=native_causal, implementation=implementation)


def _rank4(attention_mask):
    if attention_mask is None:
        return None
    mask = ops.cast(attention_mask, "bool")
    return mask[:, None] if len(mask.shape) == 3 else mask


def _band(query_length, key_length, causal, offset, window):
    """(1, 1, T, S) causal rule and / or keras' window |offset + t - s| < W around query t, or None."""
    if not causal and window is None:
        return None
    start = key_length - query_length if offset is None else offset
    band = masking.causal_mask(query_length, key_length, start) if causal else None
    if window is not None:
        band = masking.combine_masks(band, masking.keras_window_mask(query_length, key_length, window, start))
    return band[None, None]
