"""Decoding: greedy, beam search (t best of k, GNMT length normalisation), sampling (temperature, top-k, top-p:
the noise against NumPy, the empirical distribution, same seed same tokens across calls, compilation and
backends), stop tokens, cached vs full recomputation on the GPT application's model and on an RNN-style nested
cache, compiled loops (tf.function(jit_compile=True) / jax.jit), keras-hub samplers and models, no keras_hub
needed, bad input. Runs under the TensorFlow and JAX backends."""

import itertools
import sys

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from attnlayers import decoding
from attnlayers.applications.gpt import GPT, GPTConfig
from attnlayers.decoding import BeamSearch, GreedySearch, Sampling, generate, length_penalty

BACKEND = keras.backend.backend()


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


# ---- A handcrafted step function on which greedy search is wrong -----------------------------------------------

PAD, EOS, START, A, B = 0, 1, 2, 3, 4
V_TOY, L_TOY = 5, 4
#   after START: A .6, B .4;   after A: EOS .4, A .3, B .3;   after B: EOS .9, A .05, B .05;   then EOS.
# Greedy: START A EOS (p .24). Best: START B EOS (p .36). Then A EOS .24, A A EOS = A B EOS = .18, ...
_TOY = {(START, 1): {A: 0.6, B: 0.4}, (A, 2): {EOS: 0.4, A: 0.3, B: 0.3}, (B, 2): {EOS: 0.9, A: 0.05, B: 0.05}}


def _toy_table():
    table = np.full((V_TOY, L_TOY, V_TOY), 1e-13)
    for prev in range(V_TOY):
        table[prev, 3] = 1e-13
        table[prev, 3, EOS] = 1.0
    for (prev, position), dist in _TOY.items():
        table[prev, position] = 1e-13
        for token, p in dist.items():
            table[prev, position, token] = p
    return np.log(table).astype("float32")


def toy_next(tokens, cache, index):
    """log-probabilities from a (previous token, position) table: no model, no cache."""
    table = ops.convert_to_tensor(_toy_table())
    rows = ops.take(table, ops.take(tokens, index - 1, axis=1), axis=0)  # (B, L, V)
    return ops.take(rows, index, axis=1), cache


def toy_log_prob(sequence):
    """Brute-force log P(sequence | START) from the table."""
    table = _toy_table()
    return float(sum(table[prev, i + 1, tok] for i, (prev, tok) in enumerate(zip(sequence[:-1], sequence[1:]))))


TOY_PROMPT = np.array([[START], [START]], "int32")


def test_greedy_is_wrong_on_the_toy_model():
    result = generate(toy_next, TOY_PROMPT, L_TOY, "greedy", stop_token_ids=[EOS])
    np.testing.assert_array_equal(_np(result.tokens), [[START, A, EOS, PAD]] * 2)
    np.testing.assert_allclose(_np(result.scores), np.log(0.24), rtol=1e-5)
    np.testing.assert_array_equal(_np(result.lengths), [3, 3])


def test_beam_search_finds_the_most_probable_sequences_in_order():
    result = generate(toy_next, TOY_PROMPT, L_TOY, BeamSearch(num_beams=2, num_return=2), stop_token_ids=[EOS])
    assert tuple(result.tokens.shape) == (2, 2, L_TOY)
    np.testing.assert_array_equal(_np(result.tokens)[0], [[START, B, EOS, PAD], [START, A, EOS, PAD]])
    np.testing.assert_allclose(_np(result.log_probs)[0], np.log([0.36, 0.24]), rtol=1e-5)
    np.testing.assert_allclose(_np(result.scores), _np(result.log_probs))  # alpha = 0: scores are log-probs
    np.testing.assert_array_equal(_np(result.lengths), [[3, 3], [3, 3]])
    # They are the two best of all sequences (brute force over every path to EOS).
    everything = {}
    for body in itertools.chain.from_iterable(itertools.product((A, B), repeat=n) for n in (1, 2)):
        sequence = (START, *body, EOS)
        everything[sequence] = toy_log_prob(sequence)
    best = sorted(everything, key=everything.get, reverse=True)[:2]
    assert [tuple(s[: s.index(EOS) + 1]) for s in _np(result.tokens)[0].tolist()] == best
    one = generate(toy_next, TOY_PROMPT, L_TOY, BeamSearch(2, 1), stop_token_ids=[EOS])
    np.testing.assert_array_equal(_np(one.tokens)[:, 0], [[START, B, EOS, PAD]] * 2)


def test_length_normalisation():
    # alpha = 0.6 keeps the order; the score is log P / lp, lp(|Y|=2) = (7/6)^0.6.
    result = generate(toy_next, TOY_PROMPT, L_TOY, BeamSearch(2, 2, alpha=0.6), stop_token_ids=[EOS])
    np.testing.assert_allclose(_np(result.log_probs)[0], np.log([0.36, 0.24]), rtol=1e-5)
    np.testing.assert_allclose(_np(result.scores)[0], np.log([0.36, 0.24]) / (7 / 6) ** 0.6, rtol=1e-5)
    # alpha = 5 favours length: A A EOS and A B EOS (log .18 / (8/6)^5) beat B EOS (log .36 / (7/6)^5).
    result = generate(toy_next, TOY_PROMPT, L_TOY, BeamSearch(2, 2, alpha=5.0), stop_token_ids=[EOS])
    assert {tuple(s) for s in _np(result.tokens)[0].tolist()} == {(START, A, A, EOS), (START, A, B, EOS)}
    np.testing.assert_allclose(_np(result.scores)[0], [np.log(0.18) / (8 / 6) ** 5] * 2, rtol=1e-4)
    np.testing.assert_allclose(_np(result.log_probs)[0], [np.log(0.18)] * 2, rtol=1e-4)
    np.testing.assert_allclose(float(length_penalty(7, 0.6)), (12 / 6) ** 0.6, rtol=1e-6)


# ---- A tiny GPT (random weights) -------------------------------------------------------------------------------

VOCAB, LENGTH = 23, 10
CONFIG = GPTConfig(vocabulary_size=VOCAB, max_sequence_length=LENGTH, num_layers=2, num_heads=2, hidden_dim=16,
                   intermediate_dim=32)


def next_recompute(model):
    """A step without cache: the whole prefix again at every step (causal, so later positions do not matter)."""
    return lambda tokens, cache, index: (ops.take(model(tokens), index - 1, axis=1), cache)


PROMPT = np.array([[5, 9, 3, 0], [7, 0, 0, 0], [11, 4, 8, 2]], "int32")
PROMPT_MASK = PROMPT != 0


@pytest.fixture(scope="module")
def lm():
    """(model, stop): a tiny GPT and a stop token that greedy decoding emits after a few tokens."""
    keras.utils.set_random_seed(7)
    model = GPT(CONFIG)
    greedy = generate(next_recompute(model), PROMPT, LENGTH, "greedy", prompt_mask=PROMPT_MASK)
    return model, int(_np(greedy.tokens)[0, 5])


@pytest.mark.parametrize("search", ["greedy", BeamSearch(3, 2, alpha=0.7)], ids=str)
def test_cached_generation_equals_full_recomputation(lm, search):
    model, stop = lm
    kwargs = dict(prompt_mask=PROMPT_MASK, stop_token_ids=[stop])
    reference = generate(next_recompute(model), PROMPT, LENGTH, search, **kwargs)
    cached = generate(model.next, PROMPT, LENGTH, search, cache=model.initial_cache(PROMPT), **kwargs)
    np.testing.assert_array_equal(_np(cached.tokens), _np(reference.tokens))
    np.testing.assert_array_equal(_np(cached.lengths), _np(reference.lengths))
    np.testing.assert_allclose(_np(cached.scores), _np(reference.scores), atol=1e-4)
    # The given prompt tokens are kept.
    tokens = _np(cached.tokens)
    tokens = tokens if tokens.ndim == 3 else tokens[:, None]
    given = np.broadcast_to(PROMPT_MASK[:, None], tokens[..., :4].shape)
    np.testing.assert_array_equal(tokens[..., :4][given], np.broadcast_to(PROMPT[:, None], given.shape)[given])


def test_beam_search_with_one_beam_is_greedy(lm):
    model, stop = lm
    kwargs = dict(prompt_mask=PROMPT_MASK, stop_token_ids=[stop])
    greedy = generate(model.next, PROMPT, LENGTH, GreedySearch(), cache=model.initial_cache(PROMPT), **kwargs)
    beam = generate(model.next, PROMPT, LENGTH, BeamSearch(1, 1), cache=model.initial_cache(PROMPT), **kwargs)
    assert _np(greedy.lengths).min() < LENGTH  # the stop token matters in this comparison
    np.testing.assert_array_equal(_np(beam.tokens)[:, 0], _np(greedy.tokens))
    np.testing.assert_array_equal(_np(beam.lengths)[:, 0], _np(greedy.lengths))
    np.testing.assert_allclose(_np(beam.scores)[:, 0], _np(greedy.scores), atol=1e-5)
    # The score is the log-probability of the generated tokens under the model.
    log_p = _np(ops.log_softmax(model(greedy.tokens), axis=-1))
    tokens, lengths = _np(greedy.tokens), _np(greedy.lengths)
    for row in range(len(tokens)):
        start = PROMPT_MASK[row].sum()
        expected = sum(log_p[row, i - 1, tokens[row, i]] for i in range(start, lengths[row]))
        np.testing.assert_allclose(_np(greedy.scores)[row], expected, atol=1e-4)


def test_compiled_generation(lm):
    model, _ = lm
    cache = model.initial_cache(PROMPT)

    def run(prompt, cache):
        result = generate(model.next, prompt, LENGTH, BeamSearch(2, 2), cache=cache, stop_token_ids=[3])
        return result.tokens, result.scores

    eager = run(PROMPT, cache)
    other = PROMPT[::-1].copy()
    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, jit_compile=True)
        first = compiled(PROMPT, cache)
        compiled(other, model.initial_cache(other))
        assert compiled.experimental_get_tracing_count() == 1  # no retracing for new values
    else:
        import jax

        first = jax.jit(run)(PROMPT, cache)
    np.testing.assert_array_equal(_np(first[0]), _np(eager[0]))
    np.testing.assert_allclose(_np(first[1]), _np(eager[1]), atol=1e-4)


# ---- Nested caches: an RNN-style decoder with a state and an encoder memory -----------------------------------


def test_nested_cache_rnn_decoder_in_beam_search():
    rng = np.random.default_rng(3)
    vocab, units, length = 11, 8, 7
    embed, recur = ops.convert_to_tensor(rng.normal(size=(vocab, units)), "float32"), ops.convert_to_tensor(
        rng.normal(size=(units, units)) * 0.5, "float32")
    out = ops.convert_to_tensor(rng.normal(size=(units, vocab)) * 2, "float32")
    memory = ops.convert_to_tensor(rng.normal(size=(2, 5, units)), "float32")  # an "encoder output"

    def cell(state, token, memory):
        state = ops.tanh(ops.matmul(state, recur) + ops.take(embed, token, axis=0))
        context = ops.mean(memory * state[:, None], axis=1)  # depends on the carried memory
        return state, ops.matmul(state + context, out)

    def next_cached(tokens, cache, index):
        state, logits = cell(cache["state"], ops.take(tokens, index - 1, axis=1), cache["memory"])
        return logits, {"state": state, "memory": cache["memory"]}

    def next_recompute(tokens, cache, index):  # run the RNN over the whole prefix again
        state = ops.zeros((ops.shape(tokens)[0], units))
        steps = ops.arange(length)
        for i in range(length):
            new, logits_i = cell(state, tokens[:, i], cache["memory"])
            keep = ops.cast(steps[i] < index, "float32")
            state = keep * new + (1 - keep) * state
            if i == 0:
                logits = logits_i
            logits = ops.where(steps[i] == index - 1, logits_i, logits)
        return logits, cache

    start = np.array([1, 2], "int32")
    cache = {"state": ops.zeros((2, units)), "memory": memory}
    search = BeamSearch(3, 3, alpha=0.6)
    cached = generate(next_cached, start, length, search, cache=cache, stop_token_ids=[0])
    reference = generate(next_recompute, start, length, search, cache={"memory": memory}, stop_token_ids=[0])
    np.testing.assert_array_equal(_np(cached.tokens), _np(reference.tokens))
    np.testing.assert_allclose(_np(cached.scores), _np(reference.scores), atol=1e-5)
    assert np.all(np.diff(_np(cached.scores), axis=1) <= 1e-6)  # best first


# ---- Sampling -------------------------------------------------------------------------------------------------

SAMPLE_V, SAMPLE_STEPS = 30, 24


def _fixed_logits():
    return np.random.default_rng(11).normal(size=(SAMPLE_V,)).astype("float32") * 2


def fixed_next(tokens, cache, index):
    """The same distribution at every step."""
    logits = ops.convert_to_tensor(_fixed_logits())
    return ops.broadcast_to(logits, (ops.shape(tokens)[0], SAMPLE_V)), cache


def _sample(search, seed=None, batch=4):
    prompt = np.zeros((batch, 1), "int32")
    result = generate(fixed_next, prompt, SAMPLE_STEPS + 1, search, seed=seed)
    return _np(result.tokens)[:, 1:], result


def test_top_k_never_leaves_the_top_k():
    order = np.argsort(-_fixed_logits())
    tokens, _ = _sample(Sampling(temperature=3.0, top_k=4, seed=1))
    assert set(tokens.ravel()) <= set(order[:4])
    assert len(set(tokens.ravel())) > 1
    plain, _ = _sample(Sampling(temperature=3.0, seed=1))
    assert not set(plain.ravel()) <= set(order[:4])  # without the filter, tokens outside appear


def test_top_p_stays_in_the_nucleus():
    probs = np.exp(_fixed_logits() - _fixed_logits().max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    p = 0.6
    size = int(np.searchsorted(np.cumsum(probs[order]), p) + 1)  # smallest prefix reaching p
    assert 1 < size < SAMPLE_V
    tokens, result = _sample(Sampling(top_p=p, seed=2))
    assert set(tokens.ravel()) <= set(order[:size])
    assert len(set(tokens.ravel())) > 1
    # Scores are the model's log-probabilities of the sampled tokens.
    np.testing.assert_allclose(_np(result.scores), np.log(probs)[tokens].sum(axis=1), rtol=1e-4)


def test_same_seed_same_text():
    search = Sampling(top_k=10, seed=5)
    a, _ = _sample(search)
    b, _ = _sample(search)  # nothing advances between calls
    fresh, _ = _sample(Sampling(top_k=10, seed=5))  # a new object with the same seed
    c, _ = _sample(Sampling(top_k=10, seed=6))
    d, _ = _sample(search, seed=ops.convert_to_tensor(np.array([6, 0]), "int32"))  # per-call override
    e, _ = _sample(search, seed=6)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, fresh)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(c, d)
    np.testing.assert_array_equal(c, e)
    assert not np.array_equal(a[0], a[1])  # rows draw independently
    assert not np.array_equal(a[:, :-1], a[:, 1:])  # steps draw independently
    first_rows, _ = _sample(search, batch=2)
    np.testing.assert_array_equal(first_rows, a[:2])  # a row's tokens do not depend on the batch size


def _pcg4d_uniform(seed, index, rows, columns):
    """NumPy, from the equations: pcg4d of (seed0, seed1, index, row * K + column), top 23 bits -> (b + 1/2) / 2^23."""
    with np.errstate(over="ignore"):
        cell = np.arange(rows * columns, dtype=np.uint32).reshape(rows, columns)
        v = [np.uint32(seed[0]) + 0 * cell, np.uint32(seed[1]) + 0 * cell, np.uint32(index) + 0 * cell, cell]
        v = [x * np.uint32(1664525) + np.uint32(1013904223) for x in v]

        def mix(x, y, z, w):
            x = x + y * w
            y = y + z * x
            z = z + x * y
            return x, y, z, w + y * z

        v = mix(*v)
        v = [x ^ (x >> np.uint32(16)) for x in v]
        word = mix(*v)[0]
    return ((word >> np.uint32(9)).astype(np.float64) + 0.5) / 2**23


def test_uniform_noise_matches_numpy():
    seed = np.array([123456789, 4000000000], "uint32")
    noise = _np(decoding.uniform_noise(ops.convert_to_tensor(seed), ops.convert_to_tensor(17, "int32"), 64, 50))
    assert noise.dtype == np.float32 and noise.shape == (64, 50)
    np.testing.assert_array_equal(noise, _pcg4d_uniform(seed, 17, 64, 50))
    assert 0 < noise.min() and noise.max() < 1
    assert abs(noise.mean() - 0.5) < 0.02 and abs(noise.var() - 1 / 12) < 0.005
    assert len(np.unique(noise)) > 0.99 * noise.size


def test_sampling_is_the_same_on_every_backend():
    """Tokens written down once: TensorFlow and JAX (eager or compiled) draw exactly these."""
    expected = {
        "random": [[12, 12, 2, 6, 10, 2, 4, 10, 10, 8, 15, 1], [10, 2, 1, 8, 10, 17, 1, 2, 15, 10, 1, 29]],
        "top_k": [[2, 10, 2, 16, 1, 10, 8, 2, 16, 1, 8, 1], [10, 10, 1, 1, 8, 8, 10, 10, 10, 16, 1, 2]],
        "top_p": [[2, 19, 2, 12, 1, 10, 8, 2, 16, 15, 8, 10], [16, 2, 1, 15, 8, 6, 1, 2, 2, 10, 16, 10]],
    }
    searches = {"random": Sampling(seed=2024), "top_k": Sampling(top_k=5, temperature=1.5, seed=2024),
                  "top_p": Sampling(top_p=0.9, seed=2024)}
    for name, search in searches.items():
        result = generate(fixed_next, np.zeros((2, 1), "int32"), 13, search)
        np.testing.assert_array_equal(_np(result.tokens)[:, 1:], expected[name], err_msg=name)


@pytest.mark.parametrize("top_k, temperature", [(None, 1.0), (4, 2.0)])
def test_sampling_follows_the_distribution(top_k, temperature):
    """Empirical frequencies of 24 x 200 draws against softmax(logits / T) (restricted to the top k)."""
    logits = _fixed_logits().astype("float64") / temperature
    if top_k:
        logits[np.argsort(-logits)[top_k:]] = -np.inf
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    tokens, _ = _sample(Sampling(top_k=top_k, temperature=temperature, seed=3), batch=200)
    frequencies = np.bincount(tokens.ravel(), minlength=SAMPLE_V) / tokens.size
    assert 0.5 * np.abs(frequencies - probs).sum() < 0.04  # total variation distance


def test_same_seed_same_text_compiled():
    """The seed as an input of a compiled function: one trace, the eager tokens, different tokens per seed."""
    search = Sampling(top_p=0.8, temperature=1.5)
    prompt = np.zeros((3, 1), "int32")

    def run(seed):
        return generate(fixed_next, prompt, SAMPLE_STEPS + 1, search, seed=seed).tokens

    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, jit_compile=True)
    else:
        import jax

        compiled = jax.jit(run)
    seven, eight = ops.convert_to_tensor(7, "int32"), ops.convert_to_tensor(8, "int32")
    first, again, other = _np(compiled(seven)), _np(compiled(seven)), _np(compiled(eight))
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, _np(run(7)))
    assert not np.array_equal(first, other)
    if BACKEND == "tensorflow":
        assert compiled.experimental_get_tracing_count() == 1


def test_no_keras_hub_needed(monkeypatch):
    """Greedy, sampling and beam search run with keras_hub unimportable (no keras-hub sampler anywhere)."""
    monkeypatch.setitem(sys.modules, "keras_hub", None)
    greedy, _ = _sample("greedy")
    assert np.all(greedy == np.argmax(_fixed_logits()))
    sampled, _ = _sample(Sampling(top_k=3, seed=1))
    assert set(sampled.ravel()) <= set(np.argsort(-_fixed_logits())[:3])
    beam = generate(toy_next, TOY_PROMPT, L_TOY, BeamSearch(2, 1), stop_token_ids=[EOS])
    np.testing.assert_array_equal(_np(beam.tokens)[:, 0], [[START, B, EOS, PAD]] * 2)
    with pytest.raises(ValueError, match="search"):
        decoding.get_search(object())


def test_keras_hub_samplers_are_translated():
    search = decoding.get_search(keras_hub.samplers.GreedySampler())
    assert isinstance(search, GreedySearch)
    a, _ = _sample(keras_hub.samplers.GreedySampler())
    assert np.all(a == np.argmax(_fixed_logits()))
    top_k = decoding.get_search(keras_hub.samplers.TopKSampler(k=3, seed=4, temperature=2.0))
    assert (top_k.top_k, top_k.top_p, top_k.temperature, top_k.seed) == (3, None, 2.0, 4)
    b, _ = _sample(keras_hub.samplers.TopKSampler(k=3, seed=4))
    assert set(b.ravel()) <= set(np.argsort(-_fixed_logits())[:3])
    np.testing.assert_array_equal(b, _sample(Sampling(top_k=3, seed=4))[0])  # the same draws as ours
    top_p = decoding.get_search(keras_hub.samplers.TopPSampler(p=0.5, k=7))
    assert (top_p.top_k, top_p.top_p) == (7, 0.5)
    assert decoding.get_search(keras_hub.samplers.RandomSampler(seed=3)).seed == 3
    with pytest.raises(ValueError, match="BeamSampler.*BeamSearch"):
        _sample(keras_hub.samplers.BeamSampler(num_beams=2))

    class Custom(keras_hub.samplers.GreedySampler):
        def get_next_token(self, probabilities):
            return ops.argmin(probabilities, axis=-1)

    with pytest.raises(ValueError, match="Custom is not supported"):
        decoding.get_search(Custom())


def test_keras_hub_causal_lm_plugs_in():
    """The `next` keras-hub's CausalLM.generate_step builds from call_with_cache works as is: same tokens."""
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=LENGTH
    )
    hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    hub.compile(sampler="greedy")
    buffer = np.zeros((len(PROMPT), LENGTH), "int32")
    buffer[:, :4] = PROMPT
    mask = buffer != 0
    expected = hub.generate({"token_ids": buffer, "padding_mask": mask}, stop_token_ids=None)["token_ids"]

    def next(tokens, cache, index):  # keras-hub's own step: (logits, hidden_states, cache)
        return hub.call_with_cache(ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1), cache, index - 1)

    _, cache = hub._build_cache(buffer)
    result = generate(next, buffer, LENGTH, "greedy", cache=cache, prompt_mask=mask)
    np.testing.assert_array_equal(_np(result.tokens), _np(expected))


# ---- Stop tokens and lengths ----------------------------------------------------------------------------------


def countdown_next(tokens, cache, index):
    """Emits token 5 until position tokens[:, 0] (the row's own stop position), then the stop token 1."""
    stop_at = ops.take(tokens, 0, axis=1)
    token = ops.where(index >= stop_at, 1, 5)
    return ops.one_hot(token, 8) * 10.0, cache


@pytest.mark.parametrize("search", ["greedy", Sampling(top_k=1, seed=0), BeamSearch(2, 1)], ids=str)
def test_stop_tokens_mixed_batch(search):
    prompt = np.array([[3], [50], [5], [2]], "int32")  # rows stop at positions 3, never, 5, 2
    result = generate(countdown_next, prompt, 8, search, stop_token_ids=[1, 7], pad_token_id=6)
    tokens, lengths = _np(result.tokens), _np(result.lengths)
    tokens = tokens[:, 0] if tokens.ndim == 3 else tokens
    lengths = lengths[:, 0] if lengths.ndim == 2 else lengths
    np.testing.assert_array_equal(
        tokens,
        [
            [3, 5, 5, 1, 6, 6, 6, 6],
            [50, 5, 5, 5, 5, 5, 5, 5],  # unfinished: max_length respected
            [5, 5, 5, 5, 5, 1, 6, 6],
            [2, 5, 1, 6, 6, 6, 6, 6],
        ],
    )
    np.testing.assert_array_equal(lengths, [4, 8, 6, 3])


def test_prompt_tokens_are_not_stops():
    prompt = np.array([[3, 1, 1]], "int32")  # the prompt contains the stop token: not an end
    result = generate(countdown_next, prompt, 6, "greedy", stop_token_ids=[1])
    np.testing.assert_array_equal(_np(result.tokens), [[3, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(_np(result.lengths), [4])
    full = generate(countdown_next, prompt, 3, "greedy")  # nothing to generate
    np.testing.assert_array_equal(_np(full.tokens), prompt)


# ---- Bad input ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: BeamSearch(num_beams=2, num_return=3), r"num_return.*num_beams=2.*num_return=3"),
        (lambda: BeamSearch(num_beams=0), r"num_beams.*num_beams=0"),
        (lambda: BeamSearch(num_beams=2, alpha=-1), r"alpha.*alpha=-1"),
        (lambda: Sampling(top_p=0.0), r"top_p.*\(0, 1\].*top_p=0.0"),
        (lambda: Sampling(top_p=1.5), r"top_p.*top_p=1.5"),
        (lambda: Sampling(top_k=0), r"top_k.*top_k=0"),
        (lambda: Sampling(temperature=0), r"temperature.*temperature=0"),
        (lambda: generate(toy_next, np.zeros((2, 5), "int32"), 4), r"max_length.*prompt length 5.*max_length=4"),
        (lambda: generate(toy_next, TOY_PROMPT, 4, "nucleus"), r"search.*'nucleus'"),
        (lambda: generate(toy_next, TOY_PROMPT, 4, stop_token_ids="eos"), r"stop_token_ids.*'eos'"),
        (lambda: generate(toy_next, TOY_PROMPT, 4, index=9), r"index.*max_length=4.*index=9"),
    ],
)
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_step_function():
    with pytest.raises(ValueError, match="must return"):
        generate(lambda tokens, cache, index: ops.zeros((2, 5)), TOY_PROMPT, 3)


def test_module_exports():
    assert decoding.get_search("top_k").top_k == 5
    assert isinstance(decoding.get_search("beam"), BeamSearch)
    assert issubclass(GreedySearch, decoding.Search) and issubclass(Sampling, decoding.Search)
    assert issubclass(BeamSearch, decoding.Search)


def test_deprecated_strategy_names_warn_and_decode_the_same():
    """`strategy=`, `Strategy` and `get_strategy` (decoding's words before `search`) still work, with a
    DeprecationWarning naming the new name; passing `strategy=` and `search` together is an error."""
    expected = generate(toy_next, TOY_PROMPT, L_TOY, search=BeamSearch(2, 2), stop_token_ids=[EOS])
    with pytest.warns(DeprecationWarning, match="`strategy=` is deprecated; use `search=`"):
        old = generate(toy_next, TOY_PROMPT, L_TOY, strategy=BeamSearch(2, 2), stop_token_ids=[EOS])
    for new, got in zip(expected, old):
        np.testing.assert_array_equal(_np(got), _np(new))
    with pytest.warns(DeprecationWarning, match=r"decoding\.get_strategy is deprecated; use .*decoding\.get_search"):
        get_strategy = decoding.get_strategy
    assert get_strategy is decoding.get_search
    with pytest.warns(DeprecationWarning, match=r"decoding\.Strategy is deprecated; use .*decoding\.Search"):
        assert decoding.Strategy is decoding.Search
    for both in (lambda: generate(toy_next, TOY_PROMPT, L_TOY, "greedy", strategy="beam"),
                 lambda: generate(toy_next, TOY_PROMPT, L_TOY, search="greedy", strategy="beam")):
        with pytest.raises(ValueError, match="`strategy` is the deprecated name of `search`"):
            both()
    assert not hasattr(decoding, "Strategies")  # other names: AttributeError, as before


# ---- Sampling settings as tensors, max_new_tokens, stop sequences ----------------------------------------------

SETTINGS = [(1.0, None, None), (1.5, 5, None), (1.0, None, 0.9), (0.7, 6, 0.8), (2.0, 1, None), (1.3, 40, 0.95)]


def _as_tensors(temperature, top_k, top_p):
    """The tensor form of Python settings: top_k None -> 0 (off), top_p None -> 1.0 (off)."""
    return dict(temperature=ops.convert_to_tensor(temperature, "float32"),
                top_k=ops.convert_to_tensor(top_k or 0, "int32"),
                top_p=ops.convert_to_tensor(1.0 if top_p is None else top_p, "float32"))


def test_tensor_settings_give_the_tokens_of_python_settings():
    prompt = np.zeros((4, 1), "int32")
    for settings in SETTINGS:
        python, tensors = Sampling(*settings), Sampling(**_as_tensors(*settings))
        assert tensors.dynamic and not python.dynamic
        expected = generate(fixed_next, prompt, SAMPLE_STEPS + 1, python, seed=11)
        got = generate(fixed_next, prompt, SAMPLE_STEPS + 1, tensors, seed=11)
        np.testing.assert_array_equal(_np(got.tokens), _np(expected.tokens), err_msg=str(settings))
        np.testing.assert_allclose(_np(got.scores), _np(expected.scores), atol=1e-5)
        if settings[1] != 1:  # another seed, other tokens
            other = generate(fixed_next, prompt, SAMPLE_STEPS + 1, tensors, seed=12)
            assert not np.array_equal(_np(other.tokens), _np(got.tokens))


def test_tensor_settings_on_a_model(lm):
    """A model's logits differ at every step and row: the sorted noise cells still match the Python path's."""
    model, _ = lm
    kwargs = dict(prompt_mask=PROMPT_MASK, seed=3)
    for settings in [(1.0, None, None), (0.7, 6, 0.8)]:
        expected = generate(model.next, PROMPT, LENGTH, Sampling(*settings), cache=model.initial_cache(PROMPT),
                            **kwargs)
        got = generate(model.next, PROMPT, LENGTH, Sampling(**_as_tensors(*settings)),
                       cache=model.initial_cache(PROMPT), **kwargs)
        np.testing.assert_array_equal(_np(got.tokens), _np(expected.tokens), err_msg=str(settings))


def test_tensor_settings_compile_once_and_match_python_settings():
    prompt = np.zeros((3, 1), "int32")

    def run(temperature, top_k, top_p, seed):
        search = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
        return generate(fixed_next, prompt, SAMPLE_STEPS + 1, search, seed=seed).tokens

    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, jit_compile=True)
    else:
        import jax

        compiled = jax.jit(run)
    for settings in SETTINGS[1:5]:
        got = _np(compiled(*_as_tensors(*settings).values(), ops.convert_to_tensor(5, "int32")))
        expected = _np(generate(fixed_next, prompt, SAMPLE_STEPS + 1, Sampling(*settings), seed=5).tokens)
        np.testing.assert_array_equal(got, expected, err_msg=str(settings))
    if BACKEND == "tensorflow":
        assert compiled.experimental_get_tracing_count() == 1


def test_temperature_zero_and_top_k_one_are_greedy(lm):
    model, stop = lm
    kwargs = dict(prompt_mask=PROMPT_MASK, stop_token_ids=[stop])
    greedy = generate(model.next, PROMPT, LENGTH, "greedy", cache=model.initial_cache(PROMPT), **kwargs)
    for seed, settings in enumerate([(0.0, 0, 1.0), (0.0, 3, 0.5), (1.7, 1, 0.3)]):
        search = Sampling(**_as_tensors(*settings))
        got = generate(model.next, PROMPT, LENGTH, search, cache=model.initial_cache(PROMPT), seed=seed, **kwargs)
        np.testing.assert_array_equal(_np(got.tokens), _np(greedy.tokens), err_msg=str(settings))
        np.testing.assert_allclose(_np(got.scores), _np(greedy.scores), atol=1e-5)
    # Python top_k=1 as well.
    got = generate(model.next, PROMPT, LENGTH, Sampling(top_k=1, temperature=3.0, seed=4),
                   cache=model.initial_cache(PROMPT), **kwargs)
    np.testing.assert_array_equal(_np(got.tokens), _np(greedy.tokens))
    # Temperature 0 is greedy, not sampling: a flat-ish distribution would otherwise give other tokens.
    hot = generate(model.next, PROMPT, LENGTH, Sampling(**_as_tensors(50.0, None, None)),
                   cache=model.initial_cache(PROMPT), seed=1, **kwargs)
    assert not np.array_equal(_np(hot.tokens), _np(greedy.tokens))


@pytest.mark.parametrize(
    "settings, match",
    [
        (dict(temperature=-0.5), r"temperature.*>= 0.*temperature=-0.5"),
        (dict(temperature=float("nan")), r"temperature.*finite.*temperature=nan"),
        (dict(top_k=-1), r"top_k.*>= 0.*top_k=-1"),
        (dict(top_p=1.5), r"top_p.*\(0, 1\].*top_p=1.5"),
        (dict(top_p=0.0), r"top_p.*\(0, 1\].*top_p=0.0"),
    ],
)
def test_bad_tensor_settings_are_named(settings, match):
    tensors = {k: ops.convert_to_tensor(v, "int32" if k == "top_k" else "float32") for k, v in settings.items()}
    with pytest.raises(ValueError, match=match):
        Sampling(**tensors)


def test_tensor_settings_whose_values_cannot_be_read_are_not_taken_unchecked():
    """Any exception used to mean "symbolic, check skipped": a deleted JAX buffer (e.g. donated to a jitted step)
    was taken as a setting unchecked. Only symbolic settings (tf.function, jax.jit) skip the value check now."""
    jnp = pytest.importorskip("jax.numpy")
    temperature = jnp.asarray(-1.0)
    temperature.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        Sampling(temperature=temperature)


def test_tensor_settings_shape_and_dtype_are_checked():
    with pytest.raises(ValueError, match=r"top_k.*integer tensor.*float32"):
        Sampling(top_k=ops.convert_to_tensor(2.0))
    with pytest.raises(ValueError, match=r"temperature.*scalar.*\(2,\)"):
        Sampling(temperature=ops.convert_to_tensor([1.0, 2.0]))


def position_next(tokens, cache, index):
    """Emits token index % 6 + 2 at every position index, whatever came before."""
    row = ops.one_hot(index % 6 + 2, 10) * 10.0
    return ops.broadcast_to(row, (ops.shape(tokens)[0], 10)), cache


# Generated after a prompt of length 2: positions 2, 3, ... -> tokens 4 5 6 7 2 3 4 5 6 7.
@pytest.mark.parametrize("search", ["greedy", Sampling(top_k=1, seed=0), BeamSearch(2, 1)], ids=str)
def test_stop_sequences(search):
    prompt = np.array([[9, 9], [9, 3], [9, 0]], "int32")  # row 2 has one token: its generation starts at 1
    mask = np.array([[True, True], [True, True], [True, False]])
    # [3, 4]: positions 7-8 in rows 0 and 1 (row 1's prompt ends with 3 and generates 4 first: not a stop, the
    # sequence must lie in the generated tokens); row 2 generates 3 at position 1 then 4: stops there.
    # [5, 6, 7] is longer and ends later (position 5) than [3, 4] in row 2: the first one reached stops.
    result = generate(position_next, prompt, 12, search, prompt_mask=mask, stop_sequences=[[3, 4], [9, 5, 6, 7]],
                      pad_token_id=0)
    tokens, lengths = _np(result.tokens), _np(result.lengths)
    tokens = tokens[:, 0] if tokens.ndim == 3 else tokens
    lengths = lengths[:, 0] if lengths.ndim == 2 else lengths
    np.testing.assert_array_equal(tokens, [
        [9, 9, 4, 5, 6, 7, 2, 3, 4, 0, 0, 0],
        [9, 3, 4, 5, 6, 7, 2, 3, 4, 0, 0, 0],
        [9, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ])
    np.testing.assert_array_equal(lengths, [9, 9, 3])
    # A one-token stop sequence is a stop token; a longer sequence stops at its last token.
    single = generate(position_next, prompt[:1], 12, search, stop_sequences=[[6]])
    assert int(np.ravel(_np(single.lengths))[0]) == 5
    longer = generate(position_next, prompt[:1], 12, search, stop_sequences=[[5, 6, 7, 2]])
    assert int(np.ravel(_np(longer.lengths))[0]) == 7


def test_stop_sequences_compile():
    prompt = np.array([[9, 9], [9, 3]], "int32")

    def run(prompt):
        return generate(position_next, prompt, 12, "greedy", stop_sequences=[[3, 4], [6, 7, 2]]).lengths

    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, jit_compile=True)
    else:
        import jax

        compiled = jax.jit(run)
    np.testing.assert_array_equal(_np(compiled(prompt)), [7, 7])


def test_max_new_tokens():
    prompt = np.array([[9, 9, 9], [9, 0, 0], [9, 9, 0]], "int32")
    mask = prompt != 0
    for max_new in (3, ops.convert_to_tensor(3, "int32")):
        result = generate(position_next, prompt, 12, "greedy", prompt_mask=mask, max_new_tokens=max_new)
        np.testing.assert_array_equal(_np(result.lengths), [6, 4, 5])  # each row's prompt + 3
        np.testing.assert_array_equal(_np(result.tokens)[1], [9, 3, 4, 5] + [0] * 8)
    # A stop token before the limit wins (row 1's limit is 6, its 5 comes at position 3); a limit beyond
    # max_length is max_length.
    result = generate(position_next, prompt, 12, "greedy", prompt_mask=mask, max_new_tokens=5, stop_token_ids=[5])
    np.testing.assert_array_equal(_np(result.lengths), [4, 4, 4])
    result = generate(position_next, prompt, 8, "greedy", prompt_mask=mask, max_new_tokens=50)
    np.testing.assert_array_equal(_np(result.lengths), [8, 8, 8])
    # "No limit" as the largest int32 (what a SavedModel's max_new_tokens input takes): the prompt length plus it
    # overflowed int32 and stopped every row after one token.
    for no_limit in (2**31 - 1, ops.convert_to_tensor(2**31 - 1, "int32")):
        result = generate(position_next, prompt, 8, "greedy", prompt_mask=mask, max_new_tokens=no_limit)
        np.testing.assert_array_equal(_np(result.lengths), [8, 8, 8])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(max_new_tokens=0), r"max_new_tokens.*positive.*max_new_tokens=0"),
        (dict(max_new_tokens=2.5), r"max_new_tokens.*max_new_tokens=2.5"),
        (dict(max_new_tokens=2, search=BeamSearch(2)), r"max_new_tokens.*beam search"),
        (dict(stop_sequences=[[]]), r"stop_sequences.*non-empty"),
        (dict(stop_sequences=[3, 4]), r"stop_sequences.*lists of token ids"),
        (dict(stop_sequences=[[3, -1]]), r"stop_sequences.*>= 0"),
    ],
)
def test_bad_max_new_tokens_and_stop_sequences(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate(position_next, np.array([[9, 9]], "int32"), 6, **kwargs)
    if "max_new_tokens" in kwargs and is_int_like(kwargs["max_new_tokens"]):
        with pytest.raises(ValueError, match=r"max_new_tokens.*>= 1.*max_new_tokens=0"):
            generate(position_next, np.array([[9, 9]], "int32"), 6,
                     max_new_tokens=ops.convert_to_tensor(kwargs["max_new_tokens"], "int32"))


def is_int_like(value):
    return isinstance(value, int) and value == 0
