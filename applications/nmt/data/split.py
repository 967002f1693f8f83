"""A seeded train / validation / test partition (`split_pairs`) that never puts one sentence, on either side,
in two splits: pairs sharing a sentence are grouped, and whole groups are assigned."""

from __future__ import annotations

import random

from attnlayers.validation import non_negative_int

from ...core.inputs.splits import split_groups
from .pairs import Pairs, Splits


__all__ = ["held_out_sizes", "split_pairs"]


def _content_key(text: str) -> str:
    """What two sentences must share to count as the same: their letters and digits, case-folded."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _groups(pairs: Pairs) -> list:
    """Connected components of pairs that share a sentence (either side, by `_content_key`), as lists of
    indices."""
    parent = list(range(len(pairs)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, (s, t) in enumerate(pairs):
        for key in (("s", _content_key(s)), ("t", _content_key(t))):
            j = owner.setdefault(key, i)
            if j != i:
                parent[find(i)] = find(j)
    groups = {}
    for i in range(len(pairs)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def split_pairs(pairs: Pairs, *, num_test: int = 1000, num_validation: int = 1000, seed: int = 0) -> Splits:
    """A fixed, seeded train / validation / test partition with no sentence shared between splits.

    Pairs that share a sentence (on either side, ignoring case and punctuation) form a group, and each group
    goes to exactly one split, so the test set is disjoint from training and validation by construction.
    Groups are shuffled with `random.Random(seed)`; test groups are taken first (so the test set does not
    depend on `num_validation`), then validation groups, and the rest is training. Each split keeps the
    original order of its pairs.

    Args:
        pairs: the corpus.
        num_test: exact size of the test set.
        num_validation: exact size of the validation set.
        seed: the shuffle seed; the same seed gives the same split in every process.

    Returns:
        `Splits(train, validation, test, indices)`; training gets at least one pair.

    Raises:
        ValueError: when the sizes are negative, leave no pair for training, or cannot be met exactly by
            whole groups.
    """
    num_test = non_negative_int(num_test, "num_test")
    num_validation = non_negative_int(num_validation, "num_validation")
    held_out = num_test + num_validation
    if len(pairs) <= held_out:
        raise ValueError(
            f"Only {len(pairs)} sentence pairs to split; need more than num_test + num_validation = {held_out} "
            f"(num_test={num_test}, num_validation={num_validation} for {len(pairs)} pairs), so that "
            f"training keeps some."
        )
    groups = sorted(_groups(pairs))  # by first index: independent of dict/set ordering
    test, validation, train = split_groups(groups, [num_test, num_validation], random.Random(seed))
    indices = {"test": test, "validation": validation, "train": train}
    for name, size in (("test", num_test), ("validation", num_validation)):
        if len(indices[name]) != size:
            raise ValueError(
                f"split_pairs could not fill {name} with exactly {size} pairs from whole groups of pairs that "
                f"share a sentence; received {len(pairs)} pairs in {len(groups)} groups."
            )
    return Splits(
        train=pairs.select(indices["train"]),
        validation=pairs.select(indices["validation"]),
        test=pairs.select(indices["test"]),
        indices=indices,
    )


def held_out_sizes(num_pairs: int, *, num_test: int = 1000, num_validation: int = 1000,
                   fraction: float = 0.1) -> dict:
    """Validation and test sizes that scale smoothly with the corpus, for `split_pairs(pairs, **sizes)`.

    Each held-out split gets ``min(requested, max(1, floor(fraction * num_pairs)))`` pairs: the requested size
    when the corpus is large enough, else a tenth of it (by default), at least one pair. So training keeps at
    least ``1 - 2 * fraction`` of the pairs once ``fraction * num_pairs >= 1`` (80% of 10 pairs or more by default;
    the majority from 5 pairs on), and the sizes grow one pair at a time with the corpus instead of jumping: 2,999 pairs give 299 / 299, 3,000 give 300 / 300,
    10,000 and more give 1,000 / 1,000.

    Args:
        num_pairs: the corpus size, at least 3 (one pair for each split).
        num_test: the test size asked for (>= 1).
        num_validation: the validation size asked for (>= 1).
        fraction: the largest share of the corpus each held-out split may take, in (0, 0.5).

    Returns:
        ``{"num_test": ..., "num_validation": ...}``.

    Raises:
        ValueError: for fewer than 3 pairs, sizes below 1 or a fraction outside (0, 0.5).
    """
    num_pairs = non_negative_int(num_pairs, "num_pairs")
    num_test = non_negative_int(num_test, "num_test")
    num_validation = non_negative_int(num_validation, "num_validation")
    if num_test < 1 or num_validation < 1:
        raise ValueError(f"held_out_sizes needs num_test >= 1 and num_validation >= 1; received num_test={num_test}, "
                         f"num_validation={num_validation}.")
    if not 0.0 < fraction < 0.5:
        raise ValueError(f"held_out_sizes needs 0 < fraction < 0.5; received fraction={fraction!r}.")
    if num_pairs < 3:
        raise ValueError(f"Only {num_pairs} sentence pairs: training, validation and test need at least one "
                         f"pair each (3 pairs).")
    cap = max(1, int(fraction * num_pairs + 1e-9))  # 0.1 * 30 must give 3, whatever the float rounding
    return {"num_test": min(num_test, cap), "num_validation": min(num_validation, cap)}
