"""Data whose order is a pure function of (seed, epoch): what a run resumed from its backup needs to draw the
batches an uninterrupted run drew (issue: "kill anywhere, lose nothing").

``tf.data``'s ``shuffle(n, seed, reshuffle_each_iteration=True)`` gives the k-th iterator of a dataset the k-th order
of a seeded sequence: a new process that starts at epoch e draws epoch 1's order, and every extra pass (building the
model on a first batch, ``fit``'s symbolic build) moves the sequence on. Here the order of epoch e is
``stateless_shuffle(range(n), seed=(seed, e))`` and the per-batch random draws (BERT's dynamic masks) are seeded by
(seed, e, batch), whoever iterated the data before.

The epoch is the process's ``fit`` epoch, set by :class:`DataEpoch` (among :func:`~.callbacks.standard_callbacks`,
so every example trains with it) at the start of every epoch, before ``fit`` draws its first batch. A pipeline
iterated while no ``fit`` with a ``DataEpoch`` runs (a user's ``fit`` without it, a custom loop) counts its own
passes instead: the k-th pass over it takes order k - 1, as ``reshuffle_each_iteration`` did.

    train = tf.data.Dataset.from_tensor_slices(...)      # before: ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
    train = data_order.shuffled_slices(tensors, seed)     # after: the same elements, epoch e in (seed, e)'s order
    model.fit(train.batch(32), epochs=10, callbacks=[data_order.DataEpoch()])   # (standard_callbacks has it)

For Python data (a ``keras.utils.PyDataset``) :func:`current_epoch` is the epoch: seed its generators with (seed,
epoch, batch), e.g. ``numpy.random.default_rng([seed, current_epoch(), index])``.
"""

from __future__ import annotations

import keras

from attnlayers.validation import non_negative_int

_state = {"epoch": 0, "driven": False, "variables": None}


def _variables():
    """(epoch, driven): TensorFlow variables mirroring the Python state, made on first use (eagerly, outside any
    strategy's scope: the input pipeline runs on the host)."""
    if _state["variables"] is None:
        import tensorflow as tf

        with tf.init_scope():
            _state["variables"] = (tf.Variable(_state["epoch"], dtype=tf.int64, trainable=False, name="data_epoch"),
                                   tf.Variable(_state["driven"], dtype=tf.bool, trainable=False, name="data_driven"))
    return _state["variables"]


def set_epoch(epoch, driven=True):
    """Sets the epoch the pipelines of this process draw (0-based); ``driven=False`` hands the count back to each
    pipeline's own passes."""
    _state["epoch"], _state["driven"] = non_negative_int(epoch, "epoch"), bool(driven)
    if _state["variables"] is not None:
        _state["variables"][0].assign(_state["epoch"])
        _state["variables"][1].assign(_state["driven"])


def current_epoch():
    """The epoch :func:`set_epoch` (a :class:`DataEpoch`) last set; 0 before any."""
    return _state["epoch"]


class DataEpoch(keras.callbacks.Callback):
    """Tells the input pipelines which epoch ``fit`` is in (:func:`set_epoch` at every ``on_epoch_begin``, which
    Keras calls before the epoch's first batch is drawn), so that epoch e comes in (seed, e)'s order also in a run
    that a backup resumed at epoch e; when ``fit`` ends the pipelines count their own passes again."""

    def on_train_begin(self, logs=None):
        set_epoch(current_epoch(), driven=True)

    def on_epoch_begin(self, epoch, logs=None):
        set_epoch(epoch, driven=True)

    def on_train_end(self, logs=None):
        set_epoch(current_epoch(), driven=False)


def _pass_epoch(passes):
    """The epoch of a pass starting now (a graph op, run once per iterator): :func:`set_epoch`'s while driven,
    else this pipeline's own count of passes (0, 1, 2, ...)."""
    import tensorflow as tf

    epoch, driven = _variables()
    return tf.cond(driven.read_value(), epoch.read_value, lambda: passes.assign_add(1) - 1)


def shuffled_slices(tensors, seed, shuffle=True, each_epoch=True):
    """``tf.data.Dataset.from_tensor_slices(tensors)`` with epoch e in the order ``stateless_shuffle(range(n),
    (seed, e))``; ragged tensors (rows of different lengths) work too.

    Args:
        tensors: a structure of tensors / arrays with one first dimension n (> 0).
        seed: an int; the order of every epoch depends on it and on the epoch only.
        shuffle: False: in order (the plain ``from_tensor_slices``).
        each_epoch: False: every epoch (every pass) in the one order of (seed, 0).

    Returns:
        A ``tf.data.Dataset`` of the slices (n elements per pass).
    """
    import tensorflow as tf

    if not shuffle:
        return tf.data.Dataset.from_tensor_slices(tensors)
    seed = int(seed)
    tensors = tf.nest.map_structure(
        lambda t: t if isinstance(t, (tf.Tensor, tf.RaggedTensor)) else tf.convert_to_tensor(t), tensors)
    n = int(tf.nest.flatten(tensors)[0].shape[0])
    with tf.init_scope():
        passes = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_passes")

    def order(_):  # (n,) int64: a permutation keyed by (seed, epoch); Philox, the same on every platform
        epoch = _pass_epoch(passes) if each_epoch else tf.constant(0, tf.int64)
        key = tf.stack([tf.constant(seed, tf.int64), epoch])
        return tf.data.Dataset.from_tensor_slices(tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64),
                                                                                           seed=key))

    def take(i):
        return tf.nest.map_structure(lambda t: tf.gather(t, i), tensors)

    # flat_map hides the size; fit needs it to know an epoch's steps.
    return tf.data.Dataset.range(1).flat_map(order).map(take).apply(tf.data.experimental.assert_cardinality(n))


def epoch_seeds(seed):
    """An endless ``tf.data.Dataset`` of int64 seeds, one per element (zip it with batches): element i of epoch e
    is a pure function of (seed, e, i), as :func:`shuffled_slices` orders are."""
    import tensorflow as tf

    seed = int(seed)
    with tf.init_scope():
        passes = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_passes")

    def full_int(key):  # one int64 drawn with Philox from a (2,) key
        return tf.random.stateless_uniform([], seed=key, minval=None, maxval=None, dtype=tf.int64)

    def draws(_):
        epoch_key = full_int(tf.stack([tf.constant(seed, tf.int64), _pass_epoch(passes)]))
        return tf.data.Dataset.range(2**62).map(lambda i: full_int(tf.stack([epoch_key, i])))

    return tf.data.Dataset.range(1).flat_map(draws).apply(
        tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))  # endless, as zip needs


__all__ = ["DataEpoch", "current_epoch", "epoch_seeds", "set_epoch", "shuffled_slices"]
