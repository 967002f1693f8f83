"""Scheduled sampling in the translators: nothing changes without it (weights, config, outputs); eps = 1 is teacher
forcing exactly (dropout included); eps = 0 makes the RNN decoders read their own greedy tokens, the logits of each
step those of ``model.next``; the Transformer's two passes (Mihaylova & Martins 2019); configs round-trip; the
two-pass model trains under XLA; and the exposure-bias measure against NumPy."""

import keras
import numpy as np
import pytest
from attnlayers import ScheduledSampler
from attnlayers.applications.core.evaluation.exposure_bias import exposure_bias
from attnlayers.applications.nmt.model import RNNSeq2Seq, TransformerTranslator, build_model
from attnlayers.applications.nmt.tokenizer import PAD_ID, START_ID
from keras import ops

V, B, S, T = 24, 4, 6, 7
RNN = ("bahdanau", "luong", "local")


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, V, (B, S)).astype("int32")
    source[0, 4:] = PAD_ID
    target_in = rng.integers(4, V, (B, T)).astype("int32")
    target_in[:, 0] = START_ID
    target_in[1, 5:] = PAD_ID
    return source, target_in


def _model(name, scheduled_sampling=None, dropout=0.0, seed=1):
    keras.backend.clear_session(free_memory=False)  # the same layer names in every model built here
    keras.utils.set_random_seed(seed)
    if name == "transformer":
        return build_model(name, V, V, num_layers=1, d_model=16, num_heads=2, intermediate_dim=32, dropout=dropout,
                           max_length=16, scheduled_sampling=scheduled_sampling)
    return build_model(name, V, V, embedding_dim=8, units=12, dropout=dropout, scheduled_sampling=scheduled_sampling)


@pytest.mark.parametrize("name", [*RNN, "transformer"])
def test_epsilon_one_is_teacher_forcing_and_nothing_changes_without_it(name):
    """The same seed builds the same weights with and without the option (the sampler's variables come last);
    with eps = 1 a training call equals teacher forcing exactly, dropout included."""
    x = _batch()
    plain = _model(name, dropout=0.3)
    plain(x)  # built before the next model is made: initializers made in build draw Python's random state
    sampled = _model(name, "linear:1,0", dropout=0.3)
    sampled(x)
    assert "scheduled_sampling" not in plain.get_config()
    weights = [w.path for w in sampled.weights]
    assert [w.path for w in plain.weights] == [p for p in weights if "scheduled_sampler" not in p]
    assert [p for p in weights if "scheduled_sampler" in p] == weights[len(plain.weights):]
    for a, b in zip(plain.get_weights(), sampled.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_np(sampled(x, training=True)), _np(plain(x, training=True)))
    np.testing.assert_array_equal(_np(sampled(x)), _np(plain(x)))
    assert float(_np(sampled.scheduled_sampler.iterations)) == 1.0  # one training call


@pytest.mark.parametrize("name", RNN)
def test_epsilon_zero_reads_its_own_greedy_tokens(name):
    """eps = 0: every step after the start token reads the model's argmax of the previous step, whatever the
    reference says: the logits are those of greedy decoding step by step (``model.next``)."""
    source, target_in = _batch()
    model = _model(name, ScheduledSampler("linear:0,0", prediction="argmax"))
    logits = _np(model((source, target_in), training=True))
    cache = model.initial_cache(source)
    tokens = np.zeros((B, T + 1), "int32")
    tokens[:, 0] = START_ID
    for index in range(1, T + 1):
        step_logits, cache = model.next(ops.convert_to_tensor(tokens), cache, index)
        np.testing.assert_allclose(logits[:, index - 1], _np(step_logits), rtol=1e-5, atol=1e-5)
        tokens[:, index] = _np(step_logits).argmax(-1)


def test_transformer_two_passes():
    """eps = 0: the trained pass reads [START] + the first pass's argmax predictions (padding kept), i.e. it is the
    teacher-forced model on those inputs."""
    source, target_in = _batch()
    plain = _model("transformer")
    plain((source, target_in))
    sampled = _model("transformer", ScheduledSampler("linear:0,0", prediction="argmax"))
    sampled((source, target_in))
    first = _np(plain((source, target_in))).argmax(-1)
    mixed = np.concatenate([target_in[:, :1], first[:, :-1]], 1)
    mixed = np.where(target_in == PAD_ID, PAD_ID, mixed)
    expected = _np(plain((source, ops.convert_to_tensor(mixed.astype("int32")))))
    real = target_in != PAD_ID  # padded positions see a padded input either way; the loss masks them
    np.testing.assert_allclose(_np(sampled((source, target_in), training=True))[real], expected[real], atol=1e-5)


@pytest.mark.parametrize("name", ["luong", "transformer"])
def test_config_round_trip(name):
    model = _model(name, ScheduledSampler("exponential:0.999", prediction="argmax", seed=7))
    config = model.get_config()
    clone = type(model).from_config(config)
    sampler = clone.scheduled_sampler
    assert isinstance(sampler, ScheduledSampler) and sampler.schedule.spec() == "exponential:0.999"
    assert sampler.prediction == "argmax" and sampler.seed == 7
    assert _model(name, "inverse_sigmoid:500").scheduled_sampler.schedule.k == 500.0


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`scheduled_sampling` needs an attention decoder"):
        RNNSeq2Seq(V, V, attention=None, scheduled_sampling="inverse_sigmoid:10")
    with pytest.raises(ValueError, match=r"Unknown sampling schedule 'sigmoid:10'"):
        TransformerTranslator(V, V, scheduled_sampling="sigmoid:10")


def test_two_pass_transformer_trains():
    model = _model("transformer", "linear:1,0.5", dropout=0.1)
    model.compile_for_translation(learning_rate=1e-3)
    source, target_in = _batch()
    target_out = np.concatenate([target_in[:, 1:], np.full((B, 1), 3, "int32")], 1)
    history = model.fit((source, target_in), target_out, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1]) and float(_np(model.scheduled_sampler.iterations)) == 2.0


def test_exposure_bias_against_numpy():
    source, target_in = _batch()
    model = _model("bahdanau")
    target_out = np.concatenate([target_in[:, 1:], np.full((B, 1), PAD_ID, "int32")], 1)
    result = exposure_bias(model, [((source, target_in), target_out)], max_length=T + 1)
    real = target_out != PAD_ID
    forced = (_np(model((source, target_in))).argmax(-1) == target_out) & real
    tokens = _np(model.generate(source, T + 1, "greedy").tokens)
    free = (tokens[:, 1:] == target_out) & real
    assert result["tokens"] == real.sum() and result["sequences"] == B
    assert result["teacher_forced_accuracy"] == pytest.approx(forced.sum() / real.sum())
    assert result["free_running_accuracy"] == pytest.approx(free.sum() / real.sum())
    assert result["gap"] == pytest.approx((forced.sum() - free.sum()) / real.sum())
    assert result["by_position"]["tokens"] == real.sum(0).tolist() and result["unreachable_tokens"] == 0
    # One step shorter: free running cannot reach the last position, which neither accuracy then scores.
    short = exposure_bias(model, [((source, target_in), target_out)], max_length=T)
    assert short["unreachable_tokens"] == real[:, T - 1:].sum() and short["tokens"] == real[:, :T - 1].sum()
    # On the model's own greedy output as the reference, free running is teacher forcing: no gap.
    own = exposure_bias(model, [((source, tokens[:, :-1]), tokens[:, 1:])], max_length=T + 1)
    assert own["teacher_forced_accuracy"] == 1.0 and own["free_running_accuracy"] == 1.0 and own["gap"] == 0.0
    with pytest.raises(ValueError, match=r"must yield \(\(source, target_in\), target_out\) batches"):
        exposure_bias(model, [source])
