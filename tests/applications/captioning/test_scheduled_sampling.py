"""Scheduled sampling in Show, Attend and Tell: the same weights and outputs without it; eps = 1 is teacher forcing
exactly (dropout and the doubly stochastic penalty included); eps = 0 reads its own greedy words, every step's
logits (deep output included) those of ``model.next``; hard attention's REINFORCE path with it; the config
round-trips."""

import keras
import numpy as np
import pytest
from attnlayers import ScheduledSampler
from attnlayers.applications.captioning import ShowAttendTell
from keras import ops

V, B, T = 12, 3, 6
SMALL = dict(units=16, embedding_dim=8, filters=(4, 8), image_size=16)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (B, 16, 16, 3)).astype("uint8")
    caption_in = rng.integers(4, V, (B, T)).astype("int32")
    caption_in[:, 0] = 1
    caption_in[0, 4:] = 0
    return images, caption_in


def _model(scheduled_sampling=None, dropout=0.0, **kwargs):
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(3)
    model = ShowAttendTell(V, **SMALL, dropout=dropout, seed=0, scheduled_sampling=scheduled_sampling, **kwargs)
    model(_batch())  # built now: initializers made in build draw Python's random state
    return model


def test_epsilon_one_is_teacher_forcing_and_nothing_changes_without_it():
    x = _batch()
    plain, sampled = _model(dropout=0.3, query="current"), _model("linear:1,0", dropout=0.3, query="current")
    assert "scheduled_sampling" not in plain.get_config()
    assert [w.path for w in plain.weights] == [w.path for w in sampled.weights][: len(plain.weights)]
    for a, b in zip(plain.get_weights(), sampled.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_np(sampled(x, training=True)), _np(plain(x, training=True)))
    np.testing.assert_array_equal(_np(sum(sampled.losses)), _np(sum(plain.losses)))  # eq. 14's penalty
    np.testing.assert_array_equal(_np(sampled(x)), _np(plain(x)))


@pytest.mark.parametrize("query", ["previous", "current"])
def test_epsilon_zero_reads_its_own_greedy_words(query):
    images, caption_in = _batch()
    model = _model(ScheduledSampler("linear:0,0", prediction="argmax"), query=query, doubly_stochastic=0.0)
    logits = _np(model((images, caption_in), training=True))
    cache = model.initial_cache(images)
    tokens = np.zeros((B, T + 1), "int32")
    tokens[:, 0] = 1
    for index in range(1, T + 1):
        step_logits, cache = model.next(ops.convert_to_tensor(tokens), cache, index)
        np.testing.assert_allclose(logits[:, index - 1], _np(step_logits), rtol=1e-5, atol=1e-5)
        tokens[:, index] = _np(step_logits).argmax(-1)


def test_hard_attention_reinforce_with_scheduled_sampling():
    model = _model("inverse_sigmoid:1", attention="hard")
    model.compile_for_captioning(1e-3)
    images, caption_in = _batch()
    targets = np.concatenate([caption_in[:, 1:], np.full((B, 1), 2, "int32")], 1)
    loss = model.train_on_batch((images, caption_in), targets)
    assert np.all(np.isfinite(loss)) and float(_np(model.scheduled_sampler.iterations)) == 1.0


def test_config_round_trip():
    model = _model(ScheduledSampler("linear:1,1e-3,0.2", prediction="sample", seed=4))
    clone = ShowAttendTell.from_config(model.get_config())
    assert clone.scheduled_sampler.schedule.spec() == "linear:1,0.001,0.2" and clone.scheduled_sampler.seed == 4
