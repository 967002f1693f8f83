"""Training-step counters: the index i of the current training step, for schedules computed in the train step
(scheduled sampling's eps_i, a penalty that fades with lambda_i), the same i on every replica and advanced once
per step, under ``fit``, ``train_on_batch`` and custom loops, ``tf.distribute``, ``jit_compile`` and JAX.

    self.iterations = step_counter(self, "iterations")   # in a layer's __init__: tracked, saved with its weights
    i = count_step(self.iterations, training)           # in call: this step's i; in training the count becomes i + 1

The counter is a float32 scalar ``keras.Variable`` (exact to 2^24 steps), non-trainable, that the layer owns like a
weight: it is saved with the weights (``.keras`` files, checkpoints), so a restored run goes on where it was. It
is advanced inside the layer's call, so nothing outside the train step assigns it (JAX's trainer carries it as
non-trainable state, no sync per step).

Under ``tf.distribute`` it is synchronized on read (``synchronization="on_read"``,
``aggregation="only_first_replica"``): each replica holds a copy that it advances itself, without a sync point;
every replica starts step i from the same count (all start from the same restored value and add 1 per step), and
a read outside the replicas (saving, logs) takes the first replica's copy. A counter synchronized on write
(``add_weight(aggregation="only_first_replica")``) is updated in a replica through a merge call: a barrier inside
the model's call. The replicas' threads then interleave inside the forward pass, and Keras 3 keeps a layer's
``add_loss`` terms in one list shared by the replicas' threads (cleared when a call starts): replica 1 also sums
replica 0's terms, so the logged loss counts them twice (its gradients, with respect to replica 1's own weights,
do not see them).
"""

from __future__ import annotations

import keras
from keras import ops


def step_counter(layer, name="iterations"):
    """A training-step counter for ``layer``, at 0: assign it to an attribute of ``layer`` in its ``__init__``
    (Keras then tracks it among the layer's non-trainable weights and saves it with them).

    Args:
        layer: the ``keras.layers.Layer`` (or model) that owns the counter; its name scopes the variable's path.
        name: the variable's name.

    Returns:
        A float32 scalar, non-trainable ``keras.Variable`` synchronized on read (one copy per replica).
    """
    if not isinstance(layer, keras.layers.Layer):
        raise ValueError(f"`layer` must be the keras.layers.Layer that owns the counter; received {layer!r}.")
    with keras.name_scope(layer.name, caller=layer):  # the path add_weight gives: "<layer>/<name>"
        return keras.Variable(initializer="zeros", shape=(), dtype="float32", trainable=False, autocast=False,
                              aggregation="only_first_replica", synchronization="on_read", name=name)


def count_step(counter, training):
    """i, the count of ``counter`` (a :func:`step_counter`) for this call as a float32 scalar tensor; in training
    the count then becomes i + 1 (once per training call of the layer: call it once per training step). Outside
    training (evaluation, ``predict``) the count stays.

    Args:
        counter: the variable :func:`step_counter` made.
        training: the layer's ``training`` flag.

    Returns:
        i, a float32 scalar tensor.
    """
    i = ops.copy(counter.value)  # read now: a TensorFlow variable is otherwise read where it is used, after the assign
    if training:
        counter.assign(i + 1.0)
    return i


__all__ = ["count_step", "step_counter"]
