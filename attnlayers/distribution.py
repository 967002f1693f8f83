"""What losses need under ``tf.distribute``.

Keras divides the losses it reduces itself by the number of replicas, so that summing the replicas' gradients
(what its optimizers do) gives the gradient of the global-batch mean; its TensorFlow trainer does the same to
every ``add_loss`` term. A loss that reduces itself and reaches the total another way (a masked token mean
returned by a loss object, a term added in an overridden ``compute_loss``) must do it too:
:func:`scale_for_replicas`. An ``add_loss`` term must not (it would be divided twice).

Each replica divides its own sum by its own count, so the result is the global mean exactly when the replicas'
counts are equal (equal per-replica batches of equal token counts); an exact global count would need a
cross-replica sum inside the step, a synchronisation point that lets the replica threads interleave while
``add_loss`` collects losses in an attribute shared by all replicas.
"""

import keras


__all__ = ["scale_for_replicas"]


def scale_for_replicas(value):
    """``value / num_replicas_in_sync`` under a ``tf.distribute`` strategy with several replicas (TensorFlow
    backend); ``value`` otherwise."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # only under the TensorFlow backend

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            value = value * (1.0 / replicas)
    return value
