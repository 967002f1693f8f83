"""core.inputs.data_order: epoch e's order (and per-batch draws) is a pure function of (seed, e), whoever iterated the
data before; outside a fit with DataEpoch a pipeline counts its own passes. The examples' kill-and-resume runs:
tests/applications/test_resume_examples.py."""

import numpy as np
import pytest
import tensorflow as tf

from attnlayers.applications.core.inputs import data_order
from attnlayers.applications.vision.data import ShiftedBatches


@pytest.fixture(autouse=True)
def _undriven():
    yield
    data_order.set_epoch(0, driven=False)


def _order(dataset):
    return [int(x) for _, x in dataset]


def test_an_epoch_order_depends_on_the_seed_and_the_epoch_only():
    data = (tf.ragged.constant([[1], [2, 2], [3, 3, 3], [4], [5, 5]] * 4), np.arange(20))
    first, second = data_order.shuffled_slices(data, 7), data_order.shuffled_slices(data, 7)
    assert int(first.cardinality()) == 20  # fit knows the steps of an epoch
    _order(first), _order(first)  # passes outside fit (a model built on a first batch, ...) change nothing below
    data_order.set_epoch(3)
    three = _order(first)
    assert three == _order(second) and sorted(three) == list(range(20))  # another dataset, fresh: the same order
    data_order.set_epoch(4)
    assert _order(first) != three
    assert _order(data_order.shuffled_slices(data, 8)) != _order(first)  # another seed
    assert _order(data_order.shuffled_slices(data, 7, each_epoch=False)) == _order(
        data_order.shuffled_slices(data, 7, each_epoch=False).skip(0))
    assert _order(data_order.shuffled_slices(data, 7, shuffle=False)) == list(range(20))


def test_outside_fit_a_pipeline_counts_its_passes():
    data_order.set_epoch(0, driven=False)
    dataset = data_order.shuffled_slices(np.arange(10), 1)
    passes = [[int(x) for x in dataset] for _ in range(3)]
    data_order.set_epoch(1)
    assert passes[1] == [int(x) for x in dataset] and passes[0] != passes[1] != passes[2]  # pass k = epoch k


def test_per_batch_seeds_and_vit_batches_are_functions_of_seed_epoch_and_index():
    data_order.set_epoch(2)
    seeds = [int(s) for s in data_order.epoch_seeds(5).take(4)]
    assert seeds == [int(s) for s in data_order.epoch_seeds(5).take(4)] and len(set(seeds)) == 4
    data_order.set_epoch(3)
    assert seeds != [int(s) for s in data_order.epoch_seeds(5).take(4)]
    images, labels = np.random.default_rng(0).normal(size=(20, 6, 6, 1)).astype("float32"), np.arange(20)
    one, other = ShiftedBatches(images, labels, 4, shift=1, seed=9), ShiftedBatches(images, labels, 4, shift=1, seed=9)
    backwards = [other[i] for i in reversed(range(len(other)))][::-1]  # drawn in another order
    for (x, y), (x2, y2) in zip([one[i] for i in range(len(one))], backwards):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    data_order.set_epoch(4)
    assert not np.array_equal(one[0][1], backwards[0][1]) or not np.array_equal(one[0][0], backwards[0][0])
