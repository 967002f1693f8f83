"""Transformer-XL's segment-level recurrence (Dai et al. 2019, section 3.2): attention over a memory of the previous
segment's states.

    h~^{n-1}_{tau+1} = [SG(m^{n-1}_tau) o h^{n-1}_{tau+1}]                   (SG: stop-gradient, o: concatenation)
    q = h^{n-1}_{tau+1} W_q,   k = h~^{n-1}_{tau+1} W_k,   v = h~^{n-1}_{tau+1} W_v

Queries come from the segment only; keys and values from the memory and the segment, and the segment's queries sit
after the M memory steps (query t at position M + t). :class:`~attnlayers.MultiHeadAttention` takes the memory as
its ``memory`` call argument (:func:`prepend_memory`); the Transformer blocks pass it to their self-attention. The
caller keeps the memory: a layer's input of this segment is its memory for the next (:func:`update_memory`).
"""

from keras import backend, ops

from attnlayers.masking import check_mask, key_padding_mask
from attnlayers.validation import check_rank, format_shape, non_negative_int, same_size


__all__ = ["prepend_memory", "update_memory"]


def update_memory(memory, x, memory_length):
    """The memory of the next segment: the last ``memory_length`` steps of ``[memory; x]``, stop-gradient
    (SG(m_tau) of section 3.2).

    Args:
        memory: (B, M, ...) the current memory, or None (the first segment).
        x: (B, T, ...) this segment's states of the layer (a block's input), or its (B, T) padding mask to keep a
            ``memory_mask`` alongside.
        memory_length: int >= 0, the memory's length; 0 keeps no memory (returns None).

    Returns:
        (B, min(memory_length, M + T), ...) in the dtype of ``x``, or None for ``memory_length=0``.

    Example:
    >>> memories = [None] * num_layers
    >>> for segment in segments:
    ...     x = embed(segment)
    ...     for n, block in enumerate(blocks):
    ...         x_next = block(x, memory=memories[n])
    ...         memories[n] = update_memory(memories[n], x, memory_length=M)
    ...         x = x_next
    """
    memory_length = non_negative_int(memory_length, "memory_length")
    if memory_length == 0:
        return None
    states = x if memory is None else ops.concatenate([ops.cast(memory, x.dtype), x], axis=1)
    states = states[:, -memory_length:]
    return ops.stop_gradient(states) if "float" in backend.standardize_dtype(states.dtype) else states


def prepend_memory(memory, memory_mask, value, key, value_mask, key_mask, attention_mask):
    """The keys, values and masks of attention with a memory: ``[SG(memory); value]``, ``[SG(memory); key]``, the
    keys' padding ``[memory_mask; value_mask AND key_mask]`` and ``attention_mask`` with every memory column visible.

    Args:
        memory: (B, M, D), the feature size of ``value`` and ``key``. memory_mask: (B, M) boolean / 0-1 or None.
        value, key: (B, S, D). value_mask, key_mask: (B, S) or None.
        attention_mask: None, or boolean (B|1, T, S) or (B|1, N, T, S) over the segment's keys (keras' shapes
            converted by :func:`attnlayers.masking.keras_attention_mask`).

    Returns:
        ``(value, key, key_padding, attention_mask)`` over the M + S keys; ``key_padding`` (B, M + S) and the mask
        None where nothing masks them.
    """
    layout = "(batch, memory_length, dim)"
    check_rank(memory.shape, 3, "memory", layout)
    for name, x in (("value", value), ("key", key)):
        if not (same_size(memory.shape[0], x.shape[0]) and same_size(memory.shape[-1], x.shape[-1])):
            raise ValueError(
                f"`memory` must have the batch and feature sizes of `{name}`, (batch, memory_length, "
                f"{x.shape[-1]}) with batch {x.shape[0]}; received shape {format_shape(memory.shape)}."
            )
    batch, memory_length, segment_length = ops.shape(memory)[0], ops.shape(memory)[1], ops.shape(value)[1]
    memory_mask = check_mask(memory_mask, "memory_mask", (batch, memory_length))
    padding = key_padding_mask(value_mask, key_mask, batch, segment_length)
    if padding is not None or memory_mask is not None:
        padding = ops.concatenate([
            ops.ones((batch, memory_length), "bool") if memory_mask is None else
            ops.broadcast_to(memory_mask, (batch, memory_length)),
            ops.ones((batch, segment_length), "bool") if padding is None else
            ops.broadcast_to(padding, (batch, segment_length)),
        ], axis=1)
    if attention_mask is not None:
        if not same_size(attention_mask.shape[-1], value.shape[1]) and attention_mask.shape[-1] != 1:
            raise ValueError(
                f"With a `memory`, `attention_mask` covers the segment's {value.shape[1]} keys (`memory_mask` masks "
                f"the memory's); received shape {format_shape(attention_mask.shape)}."
            )
        shape = tuple(ops.shape(attention_mask)[:-1])
        attention_mask = ops.concatenate([ops.ones(shape + (memory_length,), "bool"),
                                          ops.broadcast_to(ops.cast(attention_mask, "bool"), shape + (segment_length,))],
                                         axis=-1)
    memory = ops.stop_gradient(memory)  # SG(m): no gradient into the previous segment
    value = ops.concatenate([ops.cast(memory, value.dtype), value], axis=1)
    key = ops.concatenate([ops.cast(memory, key.dtype), key], axis=1)
    return value, key, padding, attention_mask
