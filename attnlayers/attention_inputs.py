"""The checks of :class:`~attnlayers.multi_head.MultiHeadAttention`'s constructor arguments and call inputs, with
keras' words where keras checks the same thing (its drop-in test file runs against the layer)."""

import warnings

from attnlayers.validation import (
    check_feature_size,
    check_rank,
    check_tensor,
    format_shape,
    is_int,
    positive_int,
    same_size,
)

__all__ = ["CAUSAL_ALIGNMENTS", "KERAS_ONLY_METHODS", "causal_alignment_argument", "check_attention_bias",
           "check_key_value_shapes", "check_sequences", "keras_positive_int", "key_value_heads_argument",
           "output_shape_argument", "warn_keras_only_overrides"]

_SEQUENCE = "(batch, length, dim)"

#: The values of ``MultiHeadAttention(causal_alignment=...)``: where the T queries sit among S keys when no
#: ``cache_update_index`` says it. "top_left": query t at position t (keras' rule: query t sees keys 0..t);
#: "bottom_right": the queries are the last T positions, query t at S - T + t (a continuation of the keys, as in
#: decoding a chunk against a filled cache).
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")

#: keras.layers.MultiHeadAttention's private methods that attnlayers' layer does not call: a subclass overriding one
#: of them would change nothing, so it is told at class creation (:func:`warn_keras_only_overrides`).
KERAS_ONLY_METHODS = ("_build_attention", "_compute_causal_mask", "_compute_sliding_window_mask",
                      "_make_output_dense", "_get_common_kwargs_for_sublayer", "_build_from_signature")


def warn_keras_only_overrides(cls, override_points):
    """Warns where the subclass ``cls`` overrides one of :data:`KERAS_ONLY_METHODS`, naming ``override_points``."""
    ignored = [name for name in KERAS_ONLY_METHODS if name in vars(cls)]
    if ignored:
        warnings.warn(
            f"{cls.__name__} overrides {', '.join(ignored)} of keras.layers.MultiHeadAttention, which "
            f"attnlayers.MultiHeadAttention does not call; override one of {', '.join(override_points)} instead.",
            stacklevel=3,
        )


def key_value_heads_argument(num_key_value_heads, num_heads):
    """``num_key_value_heads`` (N_kv) as a positive int dividing ``num_heads``, or None (N)."""
    num_key_value_heads = positive_int(num_key_value_heads, "num_key_value_heads", allow_none=True)
    if num_heads % (num_key_value_heads or num_heads):
        raise ValueError(
            f"`num_heads` must be a multiple of `num_key_value_heads`; received num_heads={num_heads}, "
            f"num_key_value_heads={num_key_value_heads}."
        )
    return num_key_value_heads


def causal_alignment_argument(causal_alignment):
    """``causal_alignment``, one of :data:`CAUSAL_ALIGNMENTS`."""
    if causal_alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"`causal_alignment` must be one of {CAUSAL_ALIGNMENTS}; received "
                         f"causal_alignment={causal_alignment!r}.")
    return causal_alignment


def keras_positive_int(value, name, allow_none=False):
    """``value`` as an int > 0 (or None when ``allow_none``); else keras' ValueError for that argument."""
    if allow_none and value is None:
        return None
    if not is_int(value) or value <= 0:
        expected = "a positive integer or `None`" if allow_none else "a positive integer"
        raise ValueError(f"Received an invalid value for argument `{name}`, expected {expected}. Received: "
                         f"{name}={value!r}")
    return int(value)


def output_shape_argument(output_shape):
    """keras' ``output_shape`` argument as a tuple of positive ints, or None (the query's feature size)."""
    if output_shape is None or output_shape == ():
        return None
    if is_int(output_shape):
        output_shape = (output_shape,)
    if not isinstance(output_shape, (tuple, list)) or not all(is_int(d) and d > 0 for d in output_shape):
        raise ValueError(
            f"Invalid `output_shape`: {output_shape!r}. It must be None, a positive int or a tuple of positive ints."
        )
    return tuple(int(d) for d in output_shape)


def check_key_value_shapes(value_shape, key_shape):
    """keras' rule: ``key`` and ``value`` agree on every axis but the last."""
    value_shape, key_shape = tuple(value_shape), tuple(key_shape)
    if len(value_shape) != len(key_shape) or not all(
            same_size(a, b) for a, b in zip(value_shape[1:-1], key_shape[1:-1])):
        raise ValueError(
            "All dimensions of `value` and `key`, except the last one, must be equal. Received: value_shape="
            f"{format_shape(value_shape)} and key_shape={format_shape(key_shape)}"
        )


def check_sequences(query, value, key, built_sizes, projected_keys=True):
    """(B, T, D_q) queries and (B, S, D_v), (B, S, D_k) values and keys: present, of rank 3, of one batch size, with
    the feature sizes the projections were built for (``built_sizes``, query / value / key; the keys and values
    only where ``projected_keys``: a static cache ignores them)."""
    check_tensor(query, "query", _SEQUENCE)
    check_tensor(value, "value", _SEQUENCE)
    check_key_value_shapes(value.shape, key.shape)
    for name, x in (("query", query), ("value", value), ("key", key)):
        check_rank(x.shape, 3, name, _SEQUENCE)
    projected = (("query", query),) + ((("value", value), ("key", key)) if projected_keys else ())
    for (name, x), size in zip(projected, built_sizes):
        check_feature_size(x.shape, size, name)
    batch = query.shape[0]
    for name, x in (("value", value), ("key", key)):
        if not same_size(batch, x.shape[0]):
            raise ValueError(
                f"`{name}` must have the batch size of `query`: expected {batch}; received shape "
                f"{format_shape(x.shape)}."
            )


def check_attention_bias(attention_bias):
    """An ``attention_bias`` call argument of rank 4 (batch or 1, num_heads or 1, T, S), or None."""
    if attention_bias is not None and len(attention_bias.shape) != 4:
        raise ValueError(
            "`attention_bias` must have shape (batch or 1, num_heads or 1, query_length, key_length); "
            f"received shape {format_shape(attention_bias.shape)}."
        )
