"""The containers every reader returns: `Pairs` (aligned source / target sentences, plain Python strings) and
`Splits` (a train / validation / test partition of one `Pairs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


__all__ = ["Pairs", "Splits"]


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Aligned lists of source and target sentences (plain Python strings).

    Attributes:
        source: list of source sentences.
        target: list of target sentences, `target[i]` translating `source[i]`.
        alignments: optional gold word alignments (the synthetic task has them): `alignments[i][j]` is the
            index of the source word (whitespace-split) that target word j of pair i translates.
    """

    source: list
    target: list
    alignments: list | None = None

    def __post_init__(self):
        if len(self.source) != len(self.target):
            raise ValueError(
                f"Pairs needs as many sources as targets; received {len(self.source)} sources and "
                f"{len(self.target)} targets."
            )
        if self.alignments is not None and len(self.alignments) != len(self.source):
            raise ValueError(
                f"Pairs needs one alignment per pair; received {len(self.alignments)} alignments for "
                f"{len(self.source)} pairs."
            )

    def __len__(self):
        return len(self.source)

    def __iter__(self):
        return iter(zip(self.source, self.target))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.select(range(len(self))[index])
        return self.source[index], self.target[index]

    def select(self, indices: Iterable[int]) -> Pairs:
        """The pairs at `indices`, in that order.

        Args:
            indices: positions of pairs (ints; repeats allowed).

        Returns:
            A new :class:`Pairs` (with the matching alignments, if any).
        """
        indices = list(indices)
        alignments = None if self.alignments is None else [self.alignments[i] for i in indices]
        return Pairs([self.source[i] for i in indices], [self.target[i] for i in indices], alignments)

    def swap(self) -> Pairs:
        """The same pairs translated the other way (alignments are inverted where they are one-to-one)."""
        alignments = None
        if self.alignments is not None:
            alignments = []
            for a in self.alignments:
                if sorted(a) != list(range(len(a))):
                    raise ValueError("swap() can only invert one-to-one alignments.")
                inverse = [0] * len(a)
                for j, i in enumerate(a):
                    inverse[i] = j
                alignments.append(inverse)
        return Pairs(list(self.target), list(self.source), alignments)


@dataclasses.dataclass(frozen=True)
class Splits:
    """A train / validation / test partition of one `Pairs` (see `split_pairs`).

    `indices` holds, for each split, the positions of its pairs in the `Pairs` that was split.

    Attributes:
        train, validation, test: the three `Pairs`.
        indices: for each split's name, the positions of its pairs in the `Pairs` that was split.
    """

    train: Pairs
    validation: Pairs
    test: Pairs
    indices: dict = dataclasses.field(default_factory=dict, repr=False)
