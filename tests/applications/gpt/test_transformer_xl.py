"""Transformer-XL language model (applications/gpt/transformer_xl.py): the stateful data order, the memory kept
between calls (fit, train_on_batch and an explicit loop agree; carried differs from reset), no gradient into the
memory, .keras round trip, cached generation after a memory equal to recomputation. TensorFlow and JAX backends."""

import keras
import numpy as np
from keras import ops

from attnlayers.applications.gpt import data
from attnlayers.applications.gpt.transformer_xl import TransformerXL, TransformerXLConfig, memory_perplexity

B, T, M, V = 2, 6, 6, 23
CONFIG = TransformerXLConfig(vocabulary_size=V, segment_length=T, memory_length=M, batch_size=B, num_layers=2,
                             num_heads=2, hidden_dim=16, intermediate_dim=32)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _stream(length=43, seed=0):
    return np.random.RandomState(seed).randint(0, V - 1, size=length).astype("int32")


def _grad_to(fn, x):
    """d sum(fn(x)) / dx, zeros where no gradient flows."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ops.sum(fn(x))
        return _np(tape.gradient(y, x, unconnected_gradients="zero"))
    import jax

    return _np(jax.grad(lambda x: ops.sum(fn(x)))(ops.convert_to_tensor(x)))


def test_stateful_order_rows_are_contiguous():
    stream = _stream()
    windows, mask = data.stateful_windows(stream, B, T, pad_token_id=V - 1)
    steps = len(windows) // B
    assert windows.shape == (steps * B, T + 1) and len(windows) % B == 0
    w, m = windows.reshape(steps, B, T + 1), mask.reshape(steps, B, T + 1)
    per_stream = -(-(len(stream) - 1) // B)
    labels = []
    for b in range(B):
        # row b of step s + 1 starts where row b of step s ends (the windows overlap by one token) ...
        assert all(w[s + 1, b, 0] == w[s, b, -1] for s in range(steps - 1) if m[s + 1, b, 0])
        # ... and the real tokens of row b, step after step, are the b-th contiguous part of the stream
        row = np.concatenate([w[0, b, :1]] + [w[s, b, 1:][m[s, b, 1:]] for s in range(steps)])
        np.testing.assert_array_equal(row, stream[b * per_stream:(b + 1) * per_stream + 1])
        labels.append(row[1:])
    np.testing.assert_array_equal(np.concatenate(labels), stream[1:])  # every label once, in order
    batches = list(data.stateful_dataset(windows, mask, B).as_numpy_iterator())  # in this order, unshuffled
    assert len(batches) == steps
    np.testing.assert_array_equal(np.concatenate([x["token_ids"] for x, _, _ in batches]), windows[:, :-1])


def _examples(stream_seed=0):
    windows, mask = data.stateful_windows(_stream(seed=stream_seed), B, T, pad_token_id=V - 1)
    x, y, weights = data.lm_examples(windows, mask)
    return windows, mask, x, y, weights


def _model(learning_rate, jit_compile=False):
    keras.utils.set_random_seed(3)
    model = TransformerXL(CONFIG)
    model.compile(keras.optimizers.SGD(learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
                  jit_compile=jit_compile)
    return model


class _BatchLosses(keras.callbacks.Callback):
    """Each batch's own loss from fit's running mean (the mean of batches 1..k)."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self):
        k = np.arange(1, len(self.means) + 1)
        return k * np.array(self.means) - np.concatenate([[0.0], (k * np.array(self.means))[:-1]])


def test_memory_is_carried_between_batches():
    windows, mask, x, y, weights = _examples()
    steps = len(windows) // B
    batches = [({k: v[s * B:(s + 1) * B] for k, v in x.items()}, y[s * B:(s + 1) * B], weights[s * B:(s + 1) * B])
               for s in range(steps)]

    def explicit_losses(model, memory_length):
        memories = memory_mask = None
        losses = []
        for inputs, labels, w in batches:
            logits, memories, memory_mask = model.segment(inputs["token_ids"], memories, memory_mask,
                                                          inputs["padding_mask"], memory_length=memory_length)
            nll = _np(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
            losses.append((nll * w).sum() / w.sum())
        return np.array(losses)

    # learning rate 0: every batch sees the same weights, so fit's losses (under XLA: the memory assigned in a
    # compiled step) are the explicit loop's
    frozen = _model(0.0, jit_compile=True)
    recorder = _BatchLosses()
    frozen.fit(x, y, sample_weight=weights, batch_size=B, shuffle=False, epochs=1, verbose=0, callbacks=[recorder])
    carried, reset = explicit_losses(frozen, M), explicit_losses(frozen, 0)
    np.testing.assert_allclose(recorder.losses(), carried, rtol=1e-4, atol=1e-5)
    assert np.abs(carried[1:] - reset[1:]).max() > 1e-3  # the memory changes every loss after the first ...
    np.testing.assert_allclose(carried[0], reset[0], rtol=1e-5)  # ... and the first batch has none
    # fit left the last segment's memory (M = T: its inputs, the padded steps marked invalid)
    np.testing.assert_array_equal(_np(frozen.memory_valid), batches[-1][0]["padding_mask"])

    # training: fit and train_on_batch take the same steps (each reads the memory the previous one wrote)
    fitted, stepped = _model(0.5), _model(0.5)
    recorder = _BatchLosses()
    fitted.fit(x, y, sample_weight=weights, batch_size=B, shuffle=False, epochs=1, verbose=0, callbacks=[recorder])
    by_step = [stepped.train_on_batch(*batch) for batch in batches]
    np.testing.assert_allclose(recorder.losses(), by_step, rtol=1e-4, atol=1e-5)
    for a, b in zip(fitted.weights, stepped.weights):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-4, atol=1e-5)
    fitted.reset_memory()
    assert float(ops.sum(fitted.memory_valid)) == 0.0

    # no gradient reaches the memory; the memory variables are not trained
    assert not any(v is w for v in fitted.memories for w in fitted.trainable_weights)
    memories, memory_mask = stepped.memory_state()
    grad = _grad_to(lambda m: stepped.segment(x["token_ids"][:B], [m, memories[1]], memory_mask)[0], memories[0])
    assert np.abs(grad).max() == 0.0

    # evaluation with a memory 4x the segment runs over the same tokens
    scores = memory_perplexity(frozen, windows, mask, B, 4 * M)
    assert scores["tokens"] == weights.sum() and np.isfinite(scores["perplexity"])


def test_keras_file_and_cached_generation(tmp_path):
    _, _, x, _, _ = _examples()
    model = _model(0.0)
    rng = np.random.RandomState(5)
    for w in model.trainable_weights:  # weights far from the init, so that the memory sways the logits
        w.assign(rng.normal(0.0, 0.3, w.shape).astype("float32"))
    model(x["token_ids"][:B])  # a memory of one segment
    model({"token_ids": x["token_ids"][B:2 * B], "padding_mask": x["padding_mask"][B:2 * B]})
    path = str(tmp_path / "txl.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.config == model.config
    memories, memory_mask = model.memory_state()
    for a, b in zip(memories, loaded.memory_state()[0]):
        np.testing.assert_allclose(_np(a), _np(b))  # the kept memory travels with the weights
    prompt = x["token_ids"][2 * B:3 * B, :3]
    np.testing.assert_allclose(_np(loaded.segment(prompt, memories, memory_mask)[0]),
                               _np(model.segment(prompt, memories, memory_mask)[0]), rtol=1e-5, atol=1e-6)

    # greedy decoding with the memory written into the cache = the argmax of the logits recomputed over the growing
    # text with the same memory, token by token; its log-probabilities are those logits' (and not those without it)
    length = 9
    memory_mask = np.ones((B, M), bool)
    memory_mask[0, :2] = False  # invalid memory steps stay masked in the cache
    result = model.generate(prompt, length, memories=memories, memory_mask=memory_mask)
    tokens = _np(result.tokens)
    np.testing.assert_array_equal(tokens[:, :3], prompt)
    log_probs = {"memory": 0.0, "none": 0.0}
    for t in range(3, length):
        for name, logits in (("memory", model.segment(tokens[:, :t], memories, memory_mask)[0]),
                             ("none", model.segment(tokens[:, :t])[0])):
            last = _np(ops.log_softmax(logits[:, -1]))
            log_probs[name] += last[np.arange(B), tokens[:, t]]
            if name == "memory":
                np.testing.assert_array_equal(tokens[:, t], last.argmax(-1))
    np.testing.assert_allclose(_np(result.log_probs), log_probs["memory"], rtol=1e-4, atol=1e-4)
    assert np.abs(log_probs["memory"] - log_probs["none"]).max() > 1e-2  # the memory sways the decoding
