"""Soft, Gumbel and REINFORCE hard attention learn to find the answer with plain ``model.fit``.

The task: a sequence of random tokens holds one marker token; the label is the token right after the marker.
The answer sits at one position, so the attention must learn to look there. The model:
Embedding -> keys from a causal Conv1D of width 2 (key j sees tokens j-1 and j, so "my predecessor is the
marker" is a key feature) -> attention with a trainable query over the token embeddings -> Dense softmax.
Evaluation is at training=False: the argmax position for the hard layers.
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

import attnlayers as al
from attnlayers.hard import HardAttention, ReinforceLoss, ReinforceModel

VOCAB, LENGTH, DIM = 12, 10, 16
MARKER = 0
TRAIN, HELD_OUT = 3000, 1000


def make_data(n, seed):
    """Tokens 1..VOCAB-1 with one MARKER at a random position p < LENGTH - 1; label = token at p + 1."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(n, LENGTH))
    position = rng.integers(0, LENGTH - 1, size=n)
    tokens[np.arange(n), position] = MARKER
    labels = tokens[np.arange(n), position + 1]
    return tokens.astype("int32"), labels.astype("int32")


class LearnedQuery(keras.layers.Layer):
    """A trainable query vector, broadcast over the batch: (B, ...) -> (B, dim)."""

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim

    def build(self, input_shape):
        self.query = self.add_weight(name="query", shape=(self.dim,), initializer="random_normal")

    def call(self, inputs):
        return ops.broadcast_to(ops.cast(self.query, self.compute_dtype), (ops.shape(inputs)[0], self.dim))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.dim)


def build_model(attention, model_class=keras.Model):
    tokens = keras.Input((LENGTH,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, DIM)(tokens)
    keys = keras.layers.Conv1D(DIM, 2, padding="causal")(embedded)
    query = LearnedQuery(DIM)(tokens)
    context = attention(query, embedded, key=keys)  # (B, DIM): the embedding of the attended token
    outputs = keras.layers.Dense(VOCAB, activation="softmax")(context)
    model = model_class(tokens, outputs)
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def fit_and_evaluate(model, epochs=5):
    keras.utils.set_random_seed(0)
    x, y = make_data(TRAIN, seed=0)
    x_test, y_test = make_data(HELD_OUT, seed=1)
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    return accuracy


def test_soft_attention_learns():
    keras.utils.set_random_seed(0)
    assert fit_and_evaluate(build_model(al.Attention(score="dot"))) >= 0.95


def test_gumbel_hard_attention_learns():
    keras.utils.set_random_seed(0)
    assert fit_and_evaluate(build_model(HardAttention(score="dot", estimator="gumbel", seed=0))) >= 0.95


def test_reinforce_hard_attention_learns():
    keras.utils.set_random_seed(0)
    layer = HardAttention(score="dot", estimator="reinforce", seed=0)
    model = build_model(layer, ReinforceModel)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # wired: no "nothing wires the reward" warning
        accuracy = fit_and_evaluate(model)
    assert accuracy >= 0.95
    assert float(ops.convert_to_numpy(layer.baseline_steps)) == 5 * int(np.ceil(TRAIN / 64))


def test_reinforce_without_reinforce_model_does_not_learn():
    # The control: the same layer in a plain keras.Model gets no gradient into its scorer (and says so).
    keras.utils.set_random_seed(0)
    model = build_model(HardAttention(score="dot", estimator="reinforce", seed=0))
    with pytest.warns(UserWarning, match="ReinforceModel"):
        accuracy = fit_and_evaluate(model, epochs=3)
    assert accuracy < 0.5


# ------------------------------------------------------------------------------- REINFORCE in a decoder loop
# Xu et al. (2015) train REINFORCE hard attention inside an LSTM decoder. The task: copy a sequence, so target
# step t must read source position t (the tokens are random: nothing else predicts them). Memory = token
# embedding + position embedding; decoder inputs carry their position too. The reward is the sequence's loss.

COPY_VOCAB, COPY_LENGTH = 10, 5


def make_copy_data(n, seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, COPY_VOCAB, size=(n, COPY_LENGTH)).astype("int32")
    decoder_in = np.concatenate([np.zeros((n, 1), "int32"), source[:, :-1]], 1)  # start token 0
    return source, decoder_in, source.copy()


class HardAttentionCopier(keras.Model):
    """Luong decoder with HardAttention(estimator="reinforce"); ``call`` adds the REINFORCE loss."""

    def __init__(self, reinforce=True, **kwargs):
        super().__init__(**kwargs)
        self.source_embedding = keras.layers.Embedding(COPY_VOCAB, 16)
        self.source_positions = keras.layers.Embedding(COPY_LENGTH, 16)
        self.target_embedding = keras.layers.Embedding(COPY_VOCAB, 16)
        self.target_positions = keras.layers.Embedding(COPY_LENGTH, 16)
        self.attention = HardAttention(score="general", estimator="reinforce", seed=0)
        self.decoder = al.LuongDecoder(32, attention=self.attention, cell="gru", input_feeding=False)
        self.project = keras.layers.Dense(COPY_VOCAB)
        self.reinforce = ReinforceLoss(entropy_weight=0.001) if reinforce else None

    def call(self, inputs, training=None):
        source, decoder_in, target = inputs
        positions = self.source_positions(ops.arange(COPY_LENGTH)[None])
        memory = ops.concatenate(
            [self.source_embedding(source), ops.broadcast_to(positions, (ops.shape(source)[0], COPY_LENGTH, 16))], -1
        )
        y = self.target_embedding(decoder_in) + self.target_positions(ops.arange(COPY_LENGTH)[None])
        if self.reinforce is None:
            return self.project(self.decoder(y, memory, training=training))
        outputs, sample = self.decoder(y, memory, return_sample=True, training=training)  # sample: (B, T) each
        logits = self.project(outputs)
        step_loss = keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)  # (B, T)
        self.reinforce(ops.mean(step_loss, axis=-1), sample, training=training)  # reward: the sequence's loss
        return logits


def fit_copier(model, epochs=5):
    keras.utils.set_random_seed(0)
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, x_test = make_copy_data(2000, seed=0), make_copy_data(500, seed=1)
    model.fit(list(x), x[2], batch_size=64, epochs=epochs, verbose=0)
    _, accuracy = model.evaluate(list(x_test), x_test[2], batch_size=500, verbose=0)  # argmax attention
    return accuracy


def test_reinforce_hard_attention_learns_inside_a_decoder():
    keras.utils.set_random_seed(0)
    model = HardAttentionCopier()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the samples are wired: no warning
        accuracy = fit_copier(model)
    assert accuracy >= 0.95, accuracy
    assert float(ops.convert_to_numpy(model.reinforce.baseline_steps)) == 5 * int(np.ceil(2000 / 64))


def test_reinforce_inside_a_decoder_without_its_loss_does_not_learn():
    keras.utils.set_random_seed(0)
    with pytest.warns(UserWarning, match="return_sample=True"):
        accuracy = fit_copier(HardAttentionCopier(reinforce=False), epochs=3)
    assert accuracy < 0.5, accuracy
