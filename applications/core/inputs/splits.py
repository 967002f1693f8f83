"""Seeded splits, written once: shuffle the items (or whole groups of items) with a seeded random generator, then
cut the order into held-out parts of given sizes and a rest (training).

    split_items(range(n), [num_test, num_validation], random.Random(seed))       # -> [test, validation, train]
    split_groups(groups, [num_test, num_validation], random.Random(seed))         # whole groups, first fit
    held_out_counts(n, [0.1, 0.1])                                                # sizes from fractions

The generator is an argument, not a seed, because the splits already recorded (tests, benchmark numbers) were drawn
with two different ones and must not move: ``random.Random(seed)`` (its ``shuffle``) for translation pairs and the
corpora, ``numpy.random.default_rng(seed)`` (its ``permutation``) for captioning images. The two give different
orders for the same seed. Passing one generator to several calls continues its stream (the corpora's splits by
genre shuffle each genre in turn with one generator).

Every part comes back sorted, so a split keeps the original order of its items. Pure Python (NumPy only for its
generator).
"""

from __future__ import annotations

import random

import numpy as np


__all__ = ["cut", "held_out_counts", "shuffled", "split_groups", "split_items"]


def shuffled(items, rng) -> list:
    """``items`` (any iterable) as a list in a random order drawn from ``rng``: a ``random.Random`` (its
    ``shuffle``) or a ``numpy.random.Generator`` (its ``permutation``). The order depends only on the generator's
    state and the number of items, not on the items."""
    items = list(items)
    if isinstance(rng, np.random.Generator):
        return [items[i] for i in rng.permutation(len(items))]
    if isinstance(rng, random.Random):
        rng.shuffle(items)
        return items
    raise ValueError(f"`rng` must be a random.Random or a numpy.random.Generator; received {rng!r}.")


def cut(order, sizes) -> list:
    """``order`` cut into consecutive parts of ``sizes`` and a last part with the rest, each sorted.

    Raises:
        ValueError: when a size is negative or the sizes add up to more than ``len(order)``.
    """
    order = list(order)
    if any(size < 0 for size in sizes) or sum(sizes) > len(order):
        raise ValueError(f"`sizes` must be >= 0 and add up to at most {len(order)} items; received sizes={sizes!r}.")
    parts, start = [], 0
    for size in sizes:
        parts.append(sorted(order[start : start + size]))
        start += size
    return parts + [sorted(order[start:])]


def split_items(items, sizes, rng) -> list:
    """Shuffles ``items`` with ``rng`` (see :func:`shuffled`) and cuts them (see :func:`cut`).

    Returns:
        ``len(sizes) + 1`` sorted lists: the held-out parts of ``sizes`` in order, then the rest.
    """
    return cut(shuffled(items, rng), sizes)


def split_groups(groups, sizes, rng) -> list:
    """Whole groups of items (each item in one group; a group never split) into parts of at most ``sizes`` items and
    a rest.

    The groups are shuffled with ``rng`` (see :func:`shuffled`); each part in turn then takes, in that order, every
    group not taken yet that still fits (first fit), until it holds ``size`` items or no group is left. A part can
    so hold fewer than ``size`` items when no remaining groups add up to it: callers that need exact sizes check.
    The rest (groups no part took) is the last part.

    Returns:
        ``len(sizes) + 1`` sorted lists of items: the parts of ``sizes`` in order, then the rest.
    """
    groups = shuffled(groups, rng)
    taken = [False] * len(groups)
    parts = []
    for size in sizes:
        chosen = []
        for g, group in enumerate(groups):
            if len(chosen) == size:
                break
            if not taken[g] and len(chosen) + len(group) <= size:
                taken[g] = True
                chosen.extend(group)
        parts.append(sorted(chosen))
    return parts + [sorted(item for g, group in enumerate(groups) if not taken[g] for item in group)]


def held_out_counts(n, fractions) -> list:
    """How many of ``n`` items go to each held-out part: ``round(fraction * n)``, at least 1 for a positive fraction
    when ``n`` allows it, leaving at least one item for training (the largest counts give way first)."""
    counts = []
    for fraction in fractions:
        count = round(fraction * n)
        if fraction > 0 and count == 0 and n - sum(counts) > 1:
            count = 1
        counts.append(count)
    while sum(counts) >= n and any(counts):  # keep one for training
        counts[counts.index(max(counts))] -= 1
    return counts
