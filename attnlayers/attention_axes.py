"""Attention over any axes of a rank-r input, as keras' ``MultiHeadAttention(attention_axes=...)``: e.g. 2-D attention
over the H x W positions of a (B, H, W, C) image.

An input (B, d_1, ..., d_{r-2}, D) has attention axes A (the positions attended over) and the other middle axes O (each
an independent batch of attention problems). Every projection acts on the last axis only, so attention over A is the
usual sequence attention after folding: transpose to (B, O..., A..., D) and reshape to (B * prod(O), prod(A), D). The
softmax over the flattened key positions is keras' softmax over all key attention axes at once:

    scores[b, o, n, a_q, a_k] = softmax_{a_k}(q[b, o, a_q, n] . k[b, o, a_k, n] / sqrt(d_k))    (keras' einsum equations)

:class:`AxesFold` folds the inputs and the attention mask, and unfolds the output and the scores into keras' layouts:
output (B, d_1, ..., d_{r-2}, *output_shape), scores (B, O..., N, A_q..., A_k...).
"""

import dataclasses
import math

from keras import ops

from attnlayers.validation import format_shape, is_int


__all__ = ["AxesFold", "check_attention_axes", "normalize_attention_axes"]


def normalize_attention_axes(attention_axes, rank):
    """keras' ``attention_axes`` for an input of rank ``rank`` as a tuple of non-negative axes in [1, rank - 2]
    (negative axes count from the input's end, as keras': -2 is the last middle axis). None: every middle axis.

    Raises:
        ValueError: an axis that is the batch or the feature axis, out of range, or repeated.
    """
    if attention_axes is None:
        return tuple(range(1, rank - 1))
    axes = (attention_axes,) if is_int(attention_axes) else tuple(attention_axes)
    normalized = tuple(int(axis) + rank if axis < 0 else int(axis) for axis in axes)
    if not normalized or len(set(normalized)) != len(normalized) or any(
            not 1 <= axis <= rank - 2 for axis in normalized):
        raise ValueError(
            f"`attention_axes` must name distinct axes of the input other than the batch (0) and feature (-1) axes: "
            f"for inputs of rank {rank}, values in [1, {rank - 2}] or [{-(rank - 1)}, -2]; received "
            f"attention_axes={attention_axes!r}."
        )
    return normalized


def check_attention_axes(attention_axes):
    """The constructor argument ``attention_axes`` as a tuple of ints (an int -> a 1-tuple), or None; the rank of
    the inputs, unknown until they come, checks the values (:func:`normalize_attention_axes`)."""
    if attention_axes is None:
        return None
    axes = (attention_axes,) if is_int(attention_axes) else attention_axes
    if not isinstance(axes, (tuple, list)) or not axes or not all(is_int(axis) for axis in axes):
        raise ValueError(
            f"`attention_axes` must be None, an int, or a list or tuple of ints; received attention_axes="
            f"{attention_axes!r}."
        )
    return tuple(int(axis) for axis in axes)


def _size(x, axis):
    return x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]


def _product(sizes):
    return math.prod(sizes) if all(is_int(s) for s in sizes) else _dynamic_product(sizes)


def _dynamic_product(sizes):
    total = 1
    for size in sizes:
        total = total * size
    return total


@dataclasses.dataclass(frozen=True)
class AxesFold:
    """Folds rank-``rank`` inputs attended over ``axes`` into (B', L, D) sequences and back.

    Attributes:
        rank: r, the rank of the inputs (query, key and value share it).
        axes: the attention axes, normalized (:func:`normalize_attention_axes`).
    """

    rank: int
    axes: tuple

    @classmethod
    def of_shapes(cls, attention_axes, query_shape, value_shape, key_shape):
        """The fold of inputs of these shapes (one rank, at least 3) attended over ``attention_axes``."""
        rank = len(query_shape)
        if rank < 3:
            raise ValueError(f"`query` must have shape (batch, ..., dim) with at least one axis to attend over; "
                             f"received shape {format_shape(query_shape)}.")
        for name, shape in (("value", value_shape), ("key", key_shape)):
            if len(shape) != rank:
                raise ValueError(f"`{name}` must have the rank of `query` ({rank}); received shapes query "
                                 f"{format_shape(query_shape)}, {name} {format_shape(shape)}.")
        return cls(rank, normalize_attention_axes(attention_axes, rank))

    @property
    def other(self):
        """The middle axes that are not attended over (batch-like)."""
        return tuple(axis for axis in range(1, self.rank - 1) if axis not in self.axes)

    @property
    def order(self):
        """The transposition (B, O..., A..., D) of a rank-r tensor."""
        return (0,) + self.other + self.axes + (self.rank - 1,)

    @property
    def is_sequence(self):
        """Whether the inputs already are (B, T, D) sequences attended over axis 1 (nothing to fold)."""
        return self.rank == 3 and self.axes == (1,)

    def check_call(self, unsupported, ordered):
        """Refuses the call arguments that attention over these axes does not take: ``unsupported`` (name: value,
        defined for (B, T, D) sequences only: padding masks, a cache, a bias) given, or ``ordered`` (name: value,
        the causal rule, the window, position hooks: they order positions along one axis) with several axes."""
        given = [name for name, argument in unsupported.items() if argument is not None]
        if given:
            raise ValueError(
                f"Attention over attention_axes={self.axes} of rank-{self.rank} inputs takes `attention_mask` (keras' "
                f"layout) but not {', '.join(f'`{name}`' for name in given)}: those are defined for (batch, length, "
                "dim) sequences."
            )
        ordered = [name for name, used in ordered.items() if used]
        if ordered and len(self.axes) != 1:
            raise ValueError(
                f"{', '.join(f'`{name}`' for name in ordered)} order the positions along one axis; this layer attends "
                f"over {len(self.axes)} axes {self.axes} at once. Attend over one axis, or pass an `attention_mask`."
            )

    def fold(self, x, name):
        """(B, d_1, ..., d_{r-2}, D) -> (B * prod(O), prod(A), D)."""
        if len(x.shape) != self.rank:
            raise ValueError(
                f"`{name}` must have the rank of `query` ({self.rank}) to attend over attention_axes={self.axes}; "
                f"received shape {format_shape(x.shape)}."
            )
        x = ops.transpose(x, self.order)
        batch = _product([_size(x, axis) for axis in range(1 + len(self.other))])
        length = _product([_size(x, axis) for axis in range(1 + len(self.other), self.rank - 1)])
        return ops.reshape(x, (batch, length, _size(x, -1)))

    def folded_shape(self, shape):
        """The static (B', L, D) shape of a folded rank-r shape (None where unknown)."""
        def product(sizes):
            return None if any(size is None for size in sizes) else math.prod(sizes)

        return (product([shape[0]] + [shape[a] for a in self.other]), product([shape[a] for a in self.axes]),
                shape[-1])

    def sizes(self, x):
        """(batch, other sizes, attention sizes) of a rank-r tensor, static where known."""
        return (_size(x, 0), tuple(_size(x, a) for a in self.other), tuple(_size(x, a) for a in self.axes))

    def unfold_output(self, y, query):
        """(B', T', *out) -> (B, d_1, ..., d_{r-2}, *out) in ``query``'s layout."""
        batch, other, attended = self.sizes(query)
        out = tuple(y.shape[2:])
        y = ops.reshape(y, (batch,) + other + attended + out)
        inverse = [0] * (self.rank - 1)
        for position, axis in enumerate(self.order[:-1]):
            inverse[axis] = position
        return ops.transpose(y, tuple(inverse) + tuple(range(self.rank - 1, self.rank - 1 + len(out))))

    def unfold_scores(self, scores, query, key):
        """(B', N, T', S') -> keras' (B, O..., N, A_q..., A_k...)."""
        batch, other, query_sizes = self.sizes(query)
        key_sizes = self.sizes(key)[2]
        return ops.reshape(scores, (batch,) + other + (scores.shape[1],) + query_sizes + key_sizes)

    def scores_shape(self, query_shape, key_shape, num_heads):
        """keras' scores shape (B, O..., N, A_q..., A_k...) from static input shapes."""
        return ((query_shape[0],) + tuple(query_shape[a] for a in self.other) + (num_heads,)
                + tuple(query_shape[a] for a in self.axes) + tuple(key_shape[a] for a in self.axes))

    def fold_mask(self, mask, query, key):
        """keras' attention mask for rank-r inputs -> (B', T', S') or (B', N, T', S').

        keras aligns a mask of lower rank than the scores (B, O..., N, A_q..., A_k...) by inserting axes of size 1
        before the query attention axes (``MultiHeadAttention._masked_softmax``); the result broadcasts to the
        scores. Nonzero entries may attend, as keras' cast to bool.
        """
        mask = ops.convert_to_tensor(mask)
        if mask.dtype != "bool":
            mask = ops.not_equal(mask, 0)
        batch, other, query_sizes = self.sizes(query)
        key_sizes = self.sizes(key)[2]
        k = len(self.axes)
        rank = 1 + len(other) + 1 + 2 * k
        if len(mask.shape) > rank or len(mask.shape) < 2 * k:
            raise ValueError(
                f"`attention_mask` for attention over axes {self.axes} of rank-{self.rank} inputs must broadcast to "
                f"the scores (batch, other axes..., num_heads, query axes..., key axes...) of rank {rank}; received "
                f"shape {format_shape(mask.shape)}."
            )
        while len(mask.shape) < rank:
            mask = ops.expand_dims(mask, -2 * k - 1)
        heads = mask.shape[1 + len(other)]
        heads = 1 if heads is None else heads
        mask = ops.broadcast_to(mask, (batch,) + other + (heads,) + query_sizes + key_sizes)
        mask = ops.reshape(mask, (_product((batch,) + other), heads, _product(query_sizes), _product(key_sizes)))
        return mask[:, 0] if heads == 1 else mask
