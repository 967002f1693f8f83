"""core.inputs.splits: seeded shuffling and cutting, the one implementation behind split_pairs (translation),
split_caption_set (captioning) and the corpora's splits. The pinned partitions below are what those splits have
always given: tests and recorded benchmark numbers depend on them."""

import random

import numpy as np
import pytest

from attnlayers.applications.core.inputs import splits


def test_split_items_pinned_for_each_generator():
    # random.Random's shuffle (translation pairs, corpora) and numpy's permutation (captioning) differ.
    assert splits.split_items(range(10), [2, 3], random.Random(0)) == [[7, 8], [1, 3, 5], [0, 2, 4, 6, 9]]
    assert splits.split_items(range(10), [2, 3], np.random.default_rng(0)) == [[4, 6], [2, 3, 7], [0, 1, 5, 8, 9]]


def test_split_items_is_a_sorted_partition():
    for rng in (random.Random(5), np.random.default_rng(5)):
        parts = splits.split_items(range(50), [7, 0, 11], rng)
        assert [len(p) for p in parts] == [7, 0, 11, 32]
        assert sorted(sum(parts, [])) == list(range(50))
        assert all(p == sorted(p) for p in parts)
        assert all(type(i) is int for p in parts for i in p)


def test_the_order_depends_on_the_generator_and_count_only():
    letters = list("abcdefgh")
    order = splits.shuffled(range(8), random.Random(2))
    assert splits.shuffled(letters, random.Random(2)) == [letters[i] for i in order]
    rng = np.random.default_rng(4)
    assert splits.shuffled(letters, rng) == [letters[i] for i in np.random.default_rng(4).permutation(8)]
    # One generator passed to several calls continues its stream.
    shared = random.Random(3)
    assert splits.split_items(range(5), [1], shared) == [[0], [1, 2, 3, 4]]
    assert splits.split_items(range(5), [1], shared) == [[1], [0, 2, 3, 4]]


def test_split_groups_keeps_groups_whole_first_fit():
    groups = [[0, 1, 2], [3], [4, 5], [6], [7, 8, 9, 10]]
    assert splits.split_groups(groups, [2, 1], random.Random(0)) == [[4, 5], [3], [0, 1, 2, 6, 7, 8, 9, 10]]
    # No group fits: the part stays short (the caller decides whether that is an error).
    assert splits.split_groups([[0, 1, 2], [3, 4]], [1], random.Random(0)) == [[], [0, 1, 2, 3, 4]]
    # Singleton groups are split_items.
    assert (splits.split_groups([[i] for i in range(20)], [3, 4], random.Random(9))
            == splits.split_items(range(20), [3, 4], random.Random(9)))


def test_held_out_counts():
    assert splits.held_out_counts(100, [0.05]) == [5]
    assert splits.held_out_counts(3, [0.05, 0.05]) == [1, 1]  # at least one each, one left for training
    assert splits.held_out_counts(2, [0.5, 0.5]) == [0, 1]
    assert splits.held_out_counts(1, [0.3]) == [0]
    assert splits.held_out_counts(10, [0.0, 0.2]) == [0, 2]


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="`rng` must be a random.Random or a numpy.random.Generator"):
        splits.shuffled(range(3), 0)
    with pytest.raises(ValueError, match=r"`sizes` must be >= 0 and add up to at most 3 items; received sizes=\[2, 2"):
        splits.cut(range(3), [2, 2])
    with pytest.raises(ValueError, match="`sizes`"):
        splits.cut(range(3), [-1])


def test_vision_split_indices_is_split_items():
    from attnlayers.applications.vision.data import split_indices

    train, validation, test = split_indices(100, 3, validation_fraction=0.1, test_fraction=0.2)
    assert [test.tolist(), validation.tolist(), train.tolist()] == splits.split_items(
        range(100), [20, 10], np.random.default_rng(3))
