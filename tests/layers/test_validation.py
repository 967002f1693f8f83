"""attnlayers.validation.concrete_value, the one helper behind the eager value checks (decoding's tensor settings,
the applications' id, position and pixel checks): the values of concrete inputs; None only for symbolic tensors
(KerasTensor, tf.function, jax.jit), detected explicitly; any other failure to read the values raises."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers.validation import concrete_value

BACKEND = keras.backend.backend()


def test_concrete_values_are_read():
    for x in ([[1, 2]], np.array([[1, 2]]), ops.convert_to_tensor([[1, 2]]), keras.Variable([[1, 2]])):
        np.testing.assert_array_equal(concrete_value(x), [[1, 2]])
    assert concrete_value(None) is None and concrete_value(3) == 3


def test_only_symbolic_tensors_are_skipped():
    assert concrete_value(keras.KerasTensor((2, 3))) is None
    seen = {}

    def probe(x, *extra):
        seen.update(argument=concrete_value(x), nested=concrete_value([[x, x]]),
                    made_inside=concrete_value(ops.ones(2)), numpy=concrete_value(np.ones(2)),
                    **{f"extra{i}": concrete_value(e) for i, e in enumerate(extra)})
        return x

    if BACKEND == "tensorflow":
        import tensorflow as tf

        # A tf.Variable read in the graph and a ragged tensor are symbolic too.
        tf.function(probe)(tf.ones(2), tf.Variable(1.0), tf.RaggedTensor.from_row_lengths(tf.ones(3), [1, 2]))
    else:
        import jax

        jax.jit(probe)(jax.numpy.ones(2))
    assert {k for k, v in seen.items() if v is not None} == {"numpy"}, seen


def test_what_is_not_symbolic_is_not_skipped():
    with pytest.raises(ValueError, match=r"`ids` must be a rectangular \(nested\) list or an array; received a ragged"):
        concrete_value([[1, 2], [3]], "ids")
    jnp = pytest.importorskip("jax.numpy")  # a JAX buffer deleted (e.g. donated to a jitted step): not a tracer
    deleted = jnp.ones(2)
    deleted.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        concrete_value(deleted)
