"""Scheduled sampling (Bengio et al. 2015): the three schedules against their formulas and their specs, the token
choice and the Transformer mix against NumPy, eps = 1 equal to teacher forcing and eps = 0 equal to step-by-step
greedy (or sampled) decoding for the RNN decoders, no gradient through the chosen token, and training with
``fit`` under ``jit_compile`` and MirroredStrategy with the schedule counted in the train step."""

import math

import keras
import numpy as np
import pytest
from harness import BACKEND, gradient, run_layer_test
from keras import ops

import attnlayers as al
from attnlayers import scheduled_sampling as ss
from attnlayers.layer_walk import nested_layers
from attnlayers.recurrent import BahdanauDecoder, LuongDecoder

B, T, S, D, E, U, V = 3, 5, 4, 6, 4, 8, 7


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


# ------------------------------------------------------------------------------------------------ schedules

STEPS = [0, 1, 7, 250, 4000, 9105, 100_000]
FORMULAS = {  # Bengio et al. 2015, section 2.1
    "linear": (ss.LinearDecay(k=1.0, c=1e-4, epsilon=0.1), lambda i: max(0.1, 1.0 - 1e-4 * i)),
    "linear-offset": (ss.LinearDecay(k=1.5, c=1e-3), lambda i: min(1.0, max(0.0, 1.5 - 1e-3 * i))),
    "exponential": (ss.ExponentialDecay(0.999), lambda i: 0.999**i),
    "inverse_sigmoid": (ss.InverseSigmoidDecay(1000), lambda i: 1000 / (1000 + math.exp(i / 1000))),
    "inverse_sigmoid-k1": (ss.InverseSigmoidDecay(1), lambda i: 1 / (1 + math.exp(min(i, 700)))),
}


@pytest.mark.parametrize("name", list(FORMULAS))
def test_schedules_match_the_papers_formulas(name):
    schedule, formula = FORMULAS[name]
    expected = np.array([formula(i) for i in STEPS])
    np.testing.assert_allclose([schedule.value(i) for i in STEPS], expected, rtol=1e-12, atol=1e-300)
    graph = _np(ops.stack([schedule(ops.convert_to_tensor(float(i))) for i in STEPS]))
    np.testing.assert_allclose(graph, expected, rtol=2e-5, atol=1e-7)
    assert all(0.0 <= v <= 1.0 for v in graph)


@pytest.mark.parametrize("spec, expected", [
    ("linear:1,1e-4,0.1", ss.LinearDecay(1.0, 1e-4, 0.1)),
    ("linear:0.9,0.001", ss.LinearDecay(0.9, 0.001, 0.0)),
    ("linear:k=1, c=2e-4, epsilon=0.25", ss.LinearDecay(1.0, 2e-4, 0.25)),
    ("linear:1,c=5e-5", ss.LinearDecay(1.0, 5e-5)),
    ("exponential:0.9999", ss.ExponentialDecay(0.9999)),
    ("Inverse-Sigmoid:1000", ss.InverseSigmoidDecay(1000)),
    ("inverse_sigmoid:k=50", ss.InverseSigmoidDecay(50)),
])
def test_specs(spec, expected):
    schedule = ss.get(spec)
    assert schedule == expected
    assert ss.get(schedule.spec()) == schedule
    assert ss.get(keras.saving.serialize_keras_object(schedule)) == schedule
    assert ss.get(schedule) is schedule


@pytest.mark.parametrize("spec, match", [
    ("cosine:10", r"Unknown sampling schedule 'cosine:10'.*\['linear', 'exponential', 'inverse_sigmoid'\]"),
    ("inverse_sigmoid", r"has no values.*inverse_sigmoid:K"),
    ("inverse_sigmoid:", r"has no values"),
    ("linear:1", r"lacks c.*linear:K,C\[,EPSILON\]"),
    ("linear:1,2,3,4", r"has 4 values; linear takes at most 3"),
    ("exponential:abc", r"'abc' is not a number"),
    ("exponential:1", r"ExponentialDecay.*`k` must be a number in \(0, 1\); received k=1.0"),
    ("exponential:0", r"`k` must be a number in \(0, 1\)"),
    ("inverse_sigmoid:0.5", r"InverseSigmoidDecay.*`k` must be a number >= 1; received k=0.5"),
    ("linear:1,-1e-4", r"LinearDecay.*`c` must be a number >= 0"),
    ("linear:1,1e-4,1.5", r"`epsilon` must be a number in \[0, 1\]; received epsilon=1.5"),
    ("linear:1,z=3", r"unknown key 'z'; linear takes \['k', 'c', 'epsilon'\]"),
    ("linear:k=1,2", r"positional values must come before"),
    ("linear:1,,2", r"has no values"),
])
def test_bad_specs_say_what_is_expected(spec, match):
    with pytest.raises(ValueError, match=match):
        ss.get(spec)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"`k` must be a number >= 1; received k='10'"):
        ss.InverseSigmoidDecay("10")
    with pytest.raises(ValueError, match=r"must be a SamplingSchedule, a config dict or a spec"):
        ss.get(0.5)
    with pytest.raises(ValueError, match=r"Unknown `prediction` 'greedy'; expected one of \['sample', 'argmax'\]"):
        al.ScheduledSampler("exponential:0.9", prediction="greedy")


# ------------------------------------------------------------------------------------------- choice and mix


def test_choose_tokens_argmax_and_inverse_transform_sample(rng):
    logits = rng.normal(size=(4, 6, V)).astype("float32")
    np.testing.assert_array_equal(_np(ss.choose_tokens(logits)), logits.argmax(-1))
    uniform = rng.uniform(size=(4, 6)).astype("float32")
    p = np.exp(logits - logits.max(-1, keepdims=True))
    cdf = np.cumsum(p / p.sum(-1, keepdims=True), -1)
    expected = np.minimum((cdf <= uniform[..., None]).sum(-1), V - 1)  # the first v with cdf_v > u
    np.testing.assert_array_equal(_np(ss.choose_tokens(logits, uniform)), expected)
    # Sample frequencies follow the softmax.
    draws = _np(ss.choose_tokens(np.repeat(logits[:1, :1], 20000, 0)[:, 0],
                                 rng.uniform(size=20000).astype("float32")))
    np.testing.assert_allclose(np.bincount(draws, minlength=V) / 20000, p[0, 0] / p[0, 0].sum(), atol=0.015)


def test_feedback_coins_and_the_transformer_mix(rng):
    tokens = rng.integers(3, V, (B, T)).astype("int32")
    predictions = rng.integers(3, V, (B, T)).astype("int32")
    teacher = rng.uniform(size=(B, T)) < 0.5
    feedback = ss.Feedback(tokens, teacher)
    expected_teacher = teacher.copy()
    expected_teacher[:, 0] = True  # the start token is always given
    np.testing.assert_array_equal(_np(feedback.teacher), expected_teacher)
    shifted = np.concatenate([tokens[:, :1], predictions[:, :-1]], 1)
    np.testing.assert_array_equal(_np(feedback.mix(predictions)), np.where(expected_teacher, tokens, shifted))
    for epsilon, share in ((1.0, 1.0), (0.0, 0.0)):
        coins = _np(ss.Feedback.draw(np.zeros((64, 50), "int32"), epsilon, seed=1).teacher)
        assert coins[:, 1:].mean() == share and coins[:, 0].all()
    coins = _np(ss.Feedback.draw(np.zeros((200, 50), "int32"), 0.3, seed=2, prediction="argmax").teacher)
    assert abs(coins[:, 1:].mean() - 0.3) < 0.02


# ---------------------------------------------------------------------------------------- the RNN decoders

DECODERS = {
    "bahdanau": lambda: BahdanauDecoder(U),
    "luong": lambda: LuongDecoder(U),
    "luong-local-p": lambda: LuongDecoder(U, attention=al.LocalAttention(window=1, mode="local-p"), cell="gru"),
}


def _decoder_parts(name, rng):
    keras.utils.set_random_seed(4)
    decoder = DECODERS[name]()
    embedding, dense = keras.layers.Embedding(V, E), keras.layers.Dense(V)
    memory = rng.normal(size=(B, S, D)).astype("float32")
    tokens = rng.integers(1, V, (B, T)).astype("int32")
    tokens[:, 0] = 1  # the start token
    decoder(embedding(tokens), memory)  # builds
    dense.build((None, decoder._output_dim()))
    return decoder, embedding, dense, memory, tokens


@pytest.mark.parametrize("name", list(DECODERS))
def test_epsilon_one_is_teacher_forcing(name, rng):
    decoder, embedding, dense, memory, tokens = _decoder_parts(name, rng)
    y = embedding(tokens)
    feedback = ss.Feedback.draw(tokens, 1.0, seed=0, embed=embedding, logits=lambda output, token: dense(output))
    outputs, weights, fed = decoder(y, memory, return_attention_scores=True, feedback=feedback)
    forced, forced_weights = decoder(y, memory, return_attention_scores=True)
    np.testing.assert_array_equal(_np(outputs), _np(forced))
    np.testing.assert_array_equal(_np(weights), _np(forced_weights))
    np.testing.assert_array_equal(_np(fed), tokens)


@pytest.mark.parametrize("prediction", ["argmax", "sample"])
@pytest.mark.parametrize("name", list(DECODERS))
def test_epsilon_zero_is_step_by_step_decoding_on_its_own_tokens(name, prediction, rng):
    """With eps = 0 every step reads the token the model chose at the previous step: the logits of every step
    are those of ``decoder.step`` fed its own greedy (or, with the same draws, sampled) tokens."""
    decoder, embedding, dense, memory, tokens = _decoder_parts(name, rng)
    feedback = ss.Feedback.draw(tokens, 0.0, prediction=prediction, seed=5, embed=embedding,
                                logits=lambda output, token: dense(output))
    outputs, fed = decoder(embedding(tokens), memory, feedback=feedback)
    logits = _np(dense(outputs))

    cache, token, step_logits, read = decoder.initial_cache(memory), ops.convert_to_tensor(tokens[:, 0]), [], []
    for t in range(T):
        read.append(_np(token))
        output, cache, _ = decoder.step(embedding(token), cache, t)
        step_logits.append(_np(dense(output)))
        token = feedback.choose(dense(output), None if feedback.uniform is None else feedback.uniform[:, t])
    np.testing.assert_allclose(logits, np.stack(step_logits, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_np(fed), np.stack(read, 1))
    assert (_np(fed)[:, 1:] != tokens[:, 1:]).any()  # the gold tokens were not read


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy, rng):
    keras.config.set_dtype_policy(policy)
    decoder, embedding, dense, memory, tokens = _decoder_parts("luong", rng)
    feedback = ss.Feedback.draw(tokens, 0.5, seed=1, embed=embedding, logits=lambda output, token: dense(output))
    outputs, fed = decoder(embedding(tokens), memory, feedback=feedback)
    assert outputs.dtype == policy.split("_")[1] and fed.dtype == "int32"
    assert np.all(np.isfinite(_np(ops.cast(outputs, "float32"))))


def test_no_gradient_through_the_chosen_token(rng):
    """The logits that choose the fed token are outside the gradient: d outputs / d (a bias on them) = 0, while
    the embedding of the chosen token still trains (it is the decoder's input)."""
    decoder, embedding, dense, memory, tokens = _decoder_parts("bahdanau", rng)

    def outputs(bias):
        feedback = ss.Feedback.draw(tokens, 0.0, prediction="argmax", seed=5, embed=embedding,
                                    logits=lambda output, token: dense(output) + bias)
        return decoder(embedding(tokens), memory, feedback=feedback)[0]

    bias = np.zeros((V,), "float32")
    if BACKEND == "tensorflow":  # no path at all: TensorFlow's gradient is None
        import tensorflow as tf

        bias = tf.convert_to_tensor(bias)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(bias)
            total = ops.sum(outputs(bias))
        assert tape.gradient(total, bias) is None
        assert tape.gradient(total, embedding.embeddings.value) is not None
    else:
        assert np.all(gradient(outputs, bias) == 0.0)


def test_feedback_checks(rng):
    decoder, embedding, dense, memory, tokens = _decoder_parts("bahdanau", rng)
    y = embedding(tokens)
    with pytest.raises(ValueError, match=r"`feedback` must be None \(teacher forcing\) or an .*Feedback.*dict"):
        decoder(y, memory, feedback={"tokens": tokens})
    with pytest.raises(ValueError, match=r"needs `embed`.*and `logits`"):
        decoder(y, memory, feedback=ss.Feedback(tokens, np.ones((B, T), bool)))
    wrong = ss.Feedback.draw(tokens, 0.0, seed=0, embed=keras.layers.Embedding(V, E + 1),
                             logits=lambda output, token: dense(output))
    with pytest.raises(ValueError, match=rf"must map \(batch,\) token ids to \(batch, {E}\) embeddings"):
        decoder(y, memory, feedback=wrong)


# ---------------------------------------------------------------------------------- the sampler and fit


class TinySeq2Seq(keras.Model):
    """A tiny seq2seq: memory + target_in -> logits, with scheduled sampling in training (and, with
    ``logit_penalty``, an ``add_loss`` term: that weight times the mean squared logit)."""

    def __init__(self, schedule="linear:1,0.25", prediction="sample", logit_penalty=0.0, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(V, E)
        self.decoder = BahdanauDecoder(U)
        self.output_layer = keras.layers.Dense(V)
        self.sampler = al.ScheduledSampler(schedule, prediction=prediction, seed=3)
        self.logit_penalty = logit_penalty

    def call(self, inputs, training=None):
        memory, tokens = inputs
        y = self.embedding(tokens)
        feedback = self.sampler.feedback(tokens, training, embed=self.embedding,
                                         logits=lambda output, token: self.output_layer(output))
        if feedback is None:
            return self.output_layer(self.decoder(y, memory))
        outputs, _ = self.decoder(y, memory, feedback=feedback, training=training)
        logits = self.output_layer(outputs)
        if self.logit_penalty:
            self.add_loss(self.logit_penalty * ops.mean(ops.square(logits)))
        return logits


def _data(rng, n=12):
    tokens = rng.integers(1, V, (n, T)).astype("int32")
    tokens[:, 0] = 1
    return (rng.normal(size=(n, S, D)).astype("float32"), tokens), rng.integers(0, V, (n, T)).astype("int32")


def test_harness():
    """The shared layer checks (tests/harness.py: config and .keras round trips, functional model, jit_compile);
    the layer's call gives eps_i of its count, a scalar."""
    tokens = np.ones((2, T), "int32")
    layer = run_layer_test(
        al.ScheduledSampler,
        {"schedule": "linear:1,0.25,0.1", "prediction": "argmax", "seed": 3},
        tokens,
        # eps_i is a float32 probability under every dtype policy (the coins compare float32 draws with it), so
        # the check that outputs follow the mixed compute dtype does not apply.
        run_mixed_precision=False,
    )
    epsilon = layer(tokens)
    assert tuple(epsilon.shape) == () and float(_np(epsilon)) == 1.0


def test_sampler_counts_training_calls_and_round_trips(rng):
    sampler = al.ScheduledSampler("linear:1,0.25,0.1", prediction="argmax", seed=3)
    tokens = np.ones((2, 4), "int32")
    assert sampler.feedback(tokens, training=False) is None and sampler.epsilon == 1.0
    epsilons = [float(_np(sampler.feedback(tokens, training=True).epsilon)) for _ in range(5)]
    np.testing.assert_allclose(epsilons, [1.0, 0.75, 0.5, 0.25, 0.1])
    assert float(_np(sampler.iterations)) == 5.0 and sampler.epsilon == pytest.approx(0.1)
    assert [v.name for v in sampler.non_trainable_variables] == ["iterations", "seed_generator_state"]
    assert ss.get_sampler(None) is None and ss.get_sampler(sampler) is sampler
    assert ss.get_sampler("exponential:0.5").schedule == ss.ExponentialDecay(0.5)
    assert ss.get_sampler(keras.saving.serialize_keras_object(sampler)).schedule == sampler.schedule


@pytest.mark.parametrize("jit_compile", [False, True] if BACKEND == "tensorflow" else [True])  # JAX: jitted
def test_fit_counts_the_schedule_in_the_train_step(jit_compile, rng):
    """eps_i is computed in the train step from the sampler's count (under JAX's stateless trainer and XLA too);
    the logger puts the last step's eps in the epoch logs (History, TensorBoard)."""
    x, y = _data(rng)
    model = TinySeq2Seq()
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[al.ScheduledSamplingLogger()])
    assert float(_np(model.sampler.iterations)) == 6.0  # 3 steps an epoch, eval calls not counted
    np.testing.assert_allclose(history.history[ss.EPSILON_LOG_KEY], [0.5, 0.0])  # eps of steps 2 and 5
    assert np.all(np.isfinite(history.history["loss"]))
    model.evaluate(x, y, verbose=0)
    assert float(_np(model.sampler.iterations)) == 6.0


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute")
def test_fit_under_mirrored_strategy_equals_one_device(rng):
    """Over 2 replicas the loss ``fit`` logs at every step and the weights after 3 steps are one device's: every
    replica reads the count i of the step (eps 1, 1, then 0 here: argmax, no coin is random), the count advances
    once per step, and no sync point inside the model's call lets a replica sum the other's ``add_loss`` term (a
    count synchronized on write did: replica 1 logged replica 0's logit penalty too)."""
    import tensorflow as tf

    x, y = _data(rng, n=24)

    def train(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(5)
            model = TinySeq2Seq(schedule="linear:2,1", prediction="argmax", logit_penalty=0.5)  # eps_i = min(1, 2 - i)
            model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            model(x)  # built in the scope: mirrored weights
        initial, steps = model.get_weights(), []
        log = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(
            (logs["loss"], logs[ss.EPSILON_LOG_KEY])))  # after the sampling logger: eps of the step
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
                  callbacks=[al.ScheduledSamplingLogger(per_batch=True), log])
        return model, initial, np.array(steps)

    one, initial, one_logs = train(tf.distribute.get_strategy())
    # ReductionToOneDevice, as core.runtime does on CPUs: collective all-reduces reuse instance keys across the
    # MirroredStrategy objects of one process ("Shape mismatch in the collective instance" in the full suite).
    mirrored, _, mirrored_logs = train(tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()))
    np.testing.assert_allclose(mirrored_logs[:, 0], one_logs[:, 0], rtol=1e-5)  # the loss of every step
    for a, b in zip(mirrored.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_array_equal(one_logs[:, 1], [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(mirrored_logs[:, 1], [1.0, 1.0, 0.0])
    assert float(_np(mirrored.sampler.iterations)) == 3.0  # once per step, not once per replica
    assert max(np.abs(a - b).max() for a, b in zip(one.get_weights(), initial)) > 1e-3  # it trained


def test_find_samplers_walks_the_nested_layers():
    """Keras' order of the layers (attnlayers.layer_walk, public means only): a sampler of a model nested in the
    model, and one that a plain layer holds in a list, are found."""
    inner = TinySeq2Seq()

    class Holder(keras.layers.Layer):  # a plain layer, not a model: its sublayers are in its attributes only
        def __init__(self):
            super().__init__()
            self.parts = [keras.layers.Dense(2), ss.ScheduledSampler("linear:1,0.1")]

    class Outer(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense, self.inner, self.holder = keras.layers.Dense(2), inner, Holder()

    outer = Outer()
    assert ss.find_samplers(outer) == [inner.sampler, outer.holder.parts[1]]
    assert ss.find_samplers(inner.sampler) == [inner.sampler]
    assert ss.find_samplers(keras.Sequential([keras.layers.Dense(2)])) == []
    assert [id(x) for x in nested_layers(outer)] == [id(x) for x in outer._flatten_layers(include_self=False)]


def test_logger_without_a_sampler_says_so(rng):
    x, y = _data(rng, n=4)
    model = keras.Sequential([keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match="found no ScheduledSampler in model"):
        model.fit(np.zeros((4, 3)), np.zeros((4, 2)), verbose=0, callbacks=[al.ScheduledSamplingLogger()])
