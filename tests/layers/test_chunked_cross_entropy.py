"""attnlayers.chunked_cross_entropy: the loss from hidden states and the output matrix, chunk by chunk, equals the
plain sparse categorical cross-entropy of float32 logits, forward and gradients, with ignored positions and a padded
vocabulary. Runs under the TensorFlow and JAX backends (each takes its own gradient)."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers.chunked_cross_entropy import chunked_cross_entropy, chunked_cross_entropy_mean

N, D, V, V_PAD = 37, 8, 29, 32  # 37 rows: chunks of 8 leave a partial one (padded with ignored rows)


def _value_and_gradients(f, *args):
    """f(*args) and its gradients with respect to every argument, in the backend's own way."""
    if keras.backend.backend() == "jax":
        import jax

        value, gradients = jax.jit(jax.value_and_grad(f, argnums=tuple(range(len(args)))))(*args)
        return float(value), [np.asarray(g) for g in gradients]
    import tensorflow as tf

    variables = [tf.Variable(a) for a in args]
    with tf.GradientTape() as tape:
        value = f(*variables)
    return float(value), [np.asarray(g) for g in tape.gradient(value, variables)]


def _data(seed=0):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(N, D)).astype("float32")
    table = rng.normal(size=(V_PAD, D)).astype("float32")
    table[V:] = 5.0  # padded rows that would dominate the softmax if they took part
    labels = rng.integers(0, V, size=N).astype("int32")
    weights = (rng.random(N) > 0.3).astype("float32")
    labels[weights == 0] = -100  # ignored positions may hold any id (Hugging Face's ignore index)
    return hidden, table, labels, weights


def _plain(labels, weights):
    def loss(hidden, table):  # the plain loss: float32 (N, V) logits of the real columns
        logits = ops.matmul(hidden, ops.transpose(table))[:, :V]
        nll = keras.losses.sparse_categorical_crossentropy(np.where(weights > 0, labels, 0), logits, from_logits=True)
        return ops.sum(nll * weights)
    return loss


@pytest.mark.parametrize("chunk_size", [8, 64])  # several chunks (a loop), one chunk
def test_equals_the_plain_loss_forward_and_gradients(chunk_size):
    hidden, table, labels, weights = _data()
    expected, (d_hidden, d_table) = _value_and_gradients(_plain(labels, weights), hidden, table)

    def chunked(hidden, table):
        return chunked_cross_entropy(hidden, table, labels, weights, vocabulary_size=V, chunk_size=chunk_size)

    value, (c_hidden, c_table) = _value_and_gradients(chunked, hidden, table)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(c_hidden, d_hidden, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_table, d_table, rtol=1e-5, atol=1e-6)
    assert not np.any(c_table[V:])  # the padded rows get no gradient
    # The value alone (evaluation), a (B, T, d) batch, and the mean.
    forward = chunked_cross_entropy(hidden.reshape(1, N, D), table, labels.reshape(1, N), weights.reshape(1, N),
                                    vocabulary_size=V, chunk_size=chunk_size, gradients=False)
    np.testing.assert_allclose(float(forward), expected, rtol=1e-6)
    mean = chunked_cross_entropy_mean(hidden, table, labels, weights, vocabulary_size=V, chunk_size=chunk_size)
    np.testing.assert_allclose(float(mean), expected / weights.sum(), rtol=1e-6)


def test_unpadded_unweighted_and_bad_arguments():
    hidden, table, labels, _ = _data(1)
    labels = np.abs(labels) % V_PAD
    expected, _ = _value_and_gradients(
        lambda h, t: ops.sum(keras.losses.sparse_categorical_crossentropy(labels, ops.matmul(h, ops.transpose(t)),
                                                                          from_logits=True)), hidden, table)
    value = chunked_cross_entropy(hidden, table, labels, chunk_size=16)  # V = V_pad, every weight 1
    np.testing.assert_allclose(float(value), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="vocabulary_size"):
        chunked_cross_entropy(hidden, table, labels, vocabulary_size=V_PAD + 1)
    with pytest.raises(ValueError, match="hidden"):
        chunked_cross_entropy(hidden[:, :3], table, labels)
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_cross_entropy(hidden, table, labels, chunk_size=0)


def test_bfloat16_hidden_states_keep_a_float32_matrix_gradient():
    """Mixed precision: bf16 hidden states, the float32 matrix (a variable's dtype) cast for the GEMMs; the softmax
    runs in float32 and the matrix's gradient comes back in float32, close to the float32 loss'."""
    hidden, table, labels, weights = _data(2)
    expected, (_, d_table) = _value_and_gradients(_plain(labels, weights), hidden, table)

    def chunked(hidden, table):
        return chunked_cross_entropy(ops.cast(hidden, "bfloat16"), table, labels, weights, vocabulary_size=V,
                                     chunk_size=8)

    value, (_, c_table) = _value_and_gradients(chunked, hidden, table)
    assert c_table.dtype == np.float32
    np.testing.assert_allclose(value, expected, rtol=2e-2)
    np.testing.assert_allclose(c_table, d_table, rtol=0.1, atol=0.1)
