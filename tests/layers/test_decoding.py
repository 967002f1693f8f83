"""Decoding: greedy, beam search (t best of k, GNMT length normalisation), sampling (temperature, top-k, top-p),
stop tokens, cached vs full recomputation on a Transformer stack and on an RNN-style nested cache, compiled
loops (tf.function(jit_compile=True) / jax.jit), bad input. Runs under the TensorFlow and JAX backends."""

import itertools

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from attnlayers import decoding
from attnlayers.decoding import BeamSearch, GreedySearch, Sampling, generate, length_penalty
from attnlayers.embedding import TokenAndPositionEmbedding
from attnlayers.transformer import TransformerDecoder

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


# ---- A tiny decoder-only Transformer (random weights) ----------------------------------------------------------

VOCAB, LENGTH, DIM, LAYERS, HEADS = 23, 10, 16, 2, 2


class TinyLM:
    """TokenAndPositionEmbedding + pre-LN TransformerDecoder + tied logits, with cached and uncached steps."""

    def __init__(self):
        self.embed = TokenAndPositionEmbedding(VOCAB, LENGTH, DIM)
        self.decoder = TransformerDecoder(LAYERS, HEADS, 32, normalize_first=True, activation="gelu")
        self.full_logits(np.zeros((1, LENGTH), "int32"))  # build

    def full_logits(self, tokens):
        return self.embed(self.decoder(self.embed(tokens)), reverse=True)

    def next_recompute(self, tokens, cache, index):
        """No cache: the whole prefix again at every step (causal, so later positions do not matter)."""
        return ops.take(self.full_logits(tokens), index - 1, axis=1), cache

    def next(self, tokens, cache, index):
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)  # (B, 1)
        out = self.decoder(
            self.embed(token, start_index=index - 1),
            self_attention_cache=cache, self_attention_cache_update_index=index - 1,
        )
        return self.embed(out["sequence_output"], reverse=True)[:, 0], out["self_attention_cache"]

    def prefill(self, prompt):
        """The cache of the prompt's keys and values, one forward pass."""
        batch = prompt.shape[0]
        cache = ops.zeros((batch, LAYERS, 2, LENGTH, HEADS, DIM // HEADS))
        out = self.decoder(self.embed(prompt), self_attention_cache=cache, self_attention_cache_update_index=0)
        return out["self_attention_cache"]


PROMPT = np.array([[5, 9, 3, 0], [7, 0, 0, 0], [11, 4, 8, 2]], "int32")
PROMPT_MASK = PROMPT != 0


@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(7)
    model = TinyLM()
    # A stop token: one that greedy decoding emits after a few tokens (with the TensorFlow backend's weights,
    # rows 0 and 1 stop at position 5 and row 2 runs to the end).
    greedy = generate(model.next_recompute, PROMPT, LENGTH, "greedy", prompt_mask=PROMPT_MASK)
    model.stop = int(_np(greedy.tokens)[0, 5])
    return model


@pytest.mark.parametrize("strategy", ["greedy", BeamSearch(3, 2, alpha=0.7)], ids=str)
def test_cached_generation_equals_full_recomputation(lm, strategy):
    kwargs = dict(prompt_mask=PROMPT_MASK, stop_token_ids=[lm.stop])
    reference = generate(lm.next_recompute, PROMPT, LENGTH, strategy, **kwargs)
    cached = generate(lm.next, PROMPT, LENGTH, strategy, cache=lm.prefill(PROMPT), **kwargs)
    np.testing.assert_array_equal(_np(cached.tokens), _np(reference.tokens))
    np.testing.assert_array_equal(_np(cached.lengths), _np(reference.lengths))
    np.testing.assert_allclose(_np(cached.scores), _np(reference.scores), atol=1e-4)
    # The given prompt tokens are kept.
    tokens = _np(cached.tokens)
    tokens = tokens if tokens.ndim == 3 else tokens[:, None]
    given = np.broadcast_to(PROMPT_MASK[:, None], tokens[..., :4].shape)
    np.testing.assert_array_equal(tokens[..., :4][given], np.broadcast_to(PROMPT[:, None], given.shape)[given])


def test_beam_search_with_one_beam_is_greedy(lm):
    kwargs = dict(prompt_mask=PROMPT_MASK, stop_token_ids=[lm.stop])
    greedy = generate(lm.next, PROMPT, LENGTH, GreedySearch(), cache=lm.prefill(PROMPT), **kwargs)
    beam = generate(lm.next, PROMPT, LENGTH, BeamSearch(1, 1), cache=lm.prefill(PROMPT), **kwargs)
    assert _np(greedy.lengths).min() < LENGTH  # the stop token matters in this comparison
    np.testing.assert_array_equal(_np(beam.tokens)[:, 0], _np(greedy.tokens))
    np.testing.assert_array_equal(_np(beam.lengths)[:, 0], _np(greedy.lengths))
    np.testing.assert_allclose(_np(beam.scores)[:, 0], _np(greedy.scores), atol=1e-5)
    # The score is the log-probability of the generated tokens under the model.
    log_p = _np(ops.log_softmax(lm.full_logits(greedy.tokens), axis=-1))
    tokens, lengths = _np(greedy.tokens), _np(greedy.lengths)
    for row in range(len(tokens)):
        start = PROMPT_MASK[row].sum()
        expected = sum(log_p[row, i - 1, tokens[row, i]] for i in range(start, lengths[row]))
        np.testing.assert_allclose(_np(greedy.scores)[row], expected, atol=1e-4)


def test_compiled_generation(lm):
    cache = lm.prefill(PROMPT)

    def run(prompt, cache):
        result = generate(lm.next, prompt, LENGTH, BeamSearch(2, 2), cache=cache, stop_token_ids=[3])
        return result.tokens, result.scores

    eager = run(PROMPT, cache)
    other = PROMPT[::-1].copy()
    if BACKEND == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(run, jit_compile=True)
        first = compiled(PROMPT, cache)
        compiled(other, lm.prefill(other))
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
    strategy = BeamSearch(3, 3, alpha=0.6)
    cached = generate(next_cached, start, length, strategy, cache=cache, stop_token_ids=[0])
    reference = generate(next_recompute, start, length, strategy, cache={"memory": memory}, stop_token_ids=[0])
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


def _sample(strategy, seed=None, batch=4):
    prompt = np.zeros((batch, 1), "int32")
    result = generate(fixed_next, prompt, SAMPLE_STEPS + 1, strategy, seed=seed)
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
    strategy = Sampling(top_k=10, seed=5)
    a, _ = _sample(strategy)
    b, _ = _sample(strategy)  # the seed does not advance between calls
    c, _ = _sample(Sampling(top_k=10, seed=6))
    d, _ = _sample(strategy, seed=ops.convert_to_tensor(np.array([6, 0]), "int32"))  # per-call override
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(c, d)
    assert not np.array_equal(a[0], a[1])  # rows draw independently


def test_keras_hub_samplers_plug_in():
    a, _ = _sample(keras_hub.samplers.GreedySampler())
    assert np.all(a == np.argmax(_fixed_logits()))
    b, _ = _sample(keras_hub.samplers.TopKSampler(k=3, seed=4))
    assert set(b.ravel()) <= set(np.argsort(-_fixed_logits())[:3])
    with pytest.raises(ValueError, match="BeamSearch"):
        _sample(keras_hub.samplers.BeamSampler(num_beams=2))


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


@pytest.mark.parametrize("strategy", ["greedy", Sampling(top_k=1, seed=0), BeamSearch(2, 1)], ids=str)
def test_stop_tokens_mixed_batch(strategy):
    prompt = np.array([[3], [50], [5], [2]], "int32")  # rows stop at positions 3, never, 5, 2
    result = generate(countdown_next, prompt, 8, strategy, stop_token_ids=[1, 7], pad_token_id=6)
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
        (lambda: generate(toy_next, TOY_PROMPT, 4, "nucleus"), r"strategy.*'nucleus'"),
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
    assert decoding.get_strategy("top_k").top_k == 5
    assert isinstance(decoding.get_strategy("beam"), BeamSearch)
