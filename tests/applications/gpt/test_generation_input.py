"""GPT text generation in-process: bad input is refused with errors naming the argument (empty prompts, prompts
longer than the context, max_length beyond the position table, unknown searches and sampler settings, bad stop
strings), max_new_tokens, and stop strings (the loop stops at their tokens, the text is cut before them).
TensorFlow (the tokenizer's ops)."""

import gc
import weakref

import keras
import numpy as np
import pytest

from attnlayers.applications.gpt import GPT, GPTConfig
from attnlayers.applications.gpt.generation import (
    cut_at_stop_strings,
    generate_text,
    stop_sequences_for,
)
from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe

from attnlayers.decoding import BeamSearch, Sampling

CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.", "A cat, a hat; the cat sat on the mat!",
          "Numbers 12 and 345.\n\nNew paragraph here."] * 4
CONTEXT = 16


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    tokenizer = GPT2Tokenizer(*train_byte_level_bpe(CORPUS, 300, tmp_path_factory.mktemp("bpe")))
    keras.utils.set_random_seed(3)
    config = GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=CONTEXT, num_layers=1,
                       num_heads=2, hidden_dim=16, intermediate_dim=32, end_token_id=tokenizer.end_token_id)
    return GPT(config), tokenizer


def test_empty_prompts_are_refused(gpt):
    model, tokenizer = gpt
    ids = np.array([[5, 6], [0, 0]], "int32")
    with pytest.raises(ValueError, match=r"padding_mask.*rows \[1\].*no token"):
        model.generate(ids, 8, padding_mask=ids != 0)
    with pytest.raises(ValueError, match=r"token_ids.*empty prompts"):
        model.generate(np.zeros((2, 0), "int32"), 8)
    with pytest.raises(ValueError, match=r"`prompts`\[1\] is empty"):
        generate_text(model, tokenizer, ["the cat", ""], max_new_tokens=2)


def test_prompts_longer_than_the_context_are_refused(gpt):
    model, tokenizer = gpt
    with pytest.raises(ValueError, match=rf"prompt length {CONTEXT + 1} exceeds max_sequence_length={CONTEXT}"):
        model.generate(np.ones((1, CONTEXT + 1), "int32"))
    mask = np.zeros((2, CONTEXT + 3), bool)
    mask[0, :CONTEXT + 2] = mask[1, :3] = True  # the longest prompt is named, not the padded width
    with pytest.raises(ValueError, match=rf"prompt length {CONTEXT + 2} exceeds"):
        model.generate(np.ones((2, CONTEXT + 3), "int32"), padding_mask=mask)
    long_text = "the cat sat on the mat " * 10
    with pytest.raises(ValueError, match=rf"`prompts`\[1\] is \d+ tokens long, more than max_sequence_length={CONTEXT}"):
        generate_text(model, tokenizer, ["the cat", long_text])
    with pytest.raises(ValueError, match=r"`prompts`\[0\] is \d+ tokens long, more than max_length=2"):
        generate_text(model, tokenizer, ["the cat sat"], max_length=2)


def test_max_length_beyond_the_position_table(gpt):
    model, _ = gpt
    with pytest.raises(ValueError, match=rf"max_length.*max_sequence_length={CONTEXT}.*max_length={CONTEXT + 1}"):
        model.generate(np.ones((1, 3), "int32"), CONTEXT + 1)


@pytest.mark.parametrize(
    "search, match",
    [
        ("nucleus", r"search.*'nucleus'"),
        (lambda: Sampling(top_k=-1), r"top_k.*top_k=-1"),
        (lambda: Sampling(top_p=1.5), r"top_p.*top_p=1.5"),
        (lambda: Sampling(temperature=-1.0), r"temperature.*temperature=-1.0"),
        (lambda: BeamSearch(num_beams=0), r"num_beams.*num_beams=0"),
    ],
)
def test_unknown_searches_and_settings_are_named(gpt, search, match):
    model, tokenizer = gpt
    with pytest.raises(ValueError, match=match):
        model.generate(np.ones((1, 3), "int32"), 6, search if isinstance(search, str) else search())
    if isinstance(search, str):
        with pytest.raises(ValueError, match=match):
            generate_text(model, tokenizer, ["the cat"], search=search)


def test_bad_stop_strings_and_max_new_tokens(gpt):
    model, tokenizer = gpt
    for bad in ("\n", [""], [3]):
        with pytest.raises(ValueError, match=r"stop_strings.*non-empty strings"):
            generate_text(model, tokenizer, ["the cat"], stop_strings=bad)
    with pytest.raises(ValueError, match=r"max_new_tokens.*max_new_tokens=0"):
        generate_text(model, tokenizer, ["the cat"], max_new_tokens=0)


def test_max_new_tokens(gpt):
    model, tokenizer = gpt
    ids = np.array([[5, 6, 7], [8, 0, 0]], "int32")
    result = model.generate(ids, padding_mask=ids != 0, max_new_tokens=4, stop_token_ids=None)
    assert np.asarray(result.tokens).shape == (2, 7)  # max_length: the width + max_new_tokens
    np.testing.assert_array_equal(np.asarray(result.lengths), [7, 5])  # each row: its prompt + 4
    texts = generate_text(model, tokenizer, ["the cat", "a"], max_new_tokens=3)
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)  # beams: test_jit_compile_compiles_once


def test_stop_strings_stop_the_loop_and_cut_the_text(gpt):
    model, tokenizer = gpt
    prompts = ["the cat", "Numbers"]
    free = generate_text(model, tokenizer, prompts, max_new_tokens=10, stop_strings=None)
    # A stop string the greedy continuation of row 0 holds: the text of its third and fourth generated tokens.
    ids = tokenizer.tokenize(prompts).to_list()
    tokens = np.asarray(model.generate(np.array([ids[0]], "int32"), max_new_tokens=10).tokens)[0]
    stop = tokenizer.detokenize(tokens[len(ids[0]) + 2: len(ids[0]) + 4]).numpy().decode("utf-8", "replace")
    assert stop and stop in free[0]
    cut = generate_text(model, tokenizer, prompts, max_new_tokens=10, stop_strings=[stop, "never there"])
    assert cut[0] == free[0][: free[0].index(stop)] and stop not in cut[0]
    assert cut[1] == cut_at_stop_strings(free[1], [stop])
    # The loop stopped at the stop sequence: row 0 generated 4 tokens, not 10.
    stopped = model.generate(np.array([ids[0]], "int32"), max_new_tokens=10,
                             stop_sequences=stop_sequences_for(tokenizer, [stop]))
    assert int(np.asarray(stopped.lengths)[0]) <= len(ids[0]) + 4 < int(np.asarray(
        model.generate(np.array([ids[0]], "int32"), max_new_tokens=10).lengths)[0])


def test_cut_at_stop_strings():
    assert cut_at_stop_strings("abc\n\ndef", ["\n\n"]) == "abc"
    assert cut_at_stop_strings("abc", ["x"]) == "abc"
    assert cut_at_stop_strings("a.b;c", [";", "."]) == "a"  # the first occurrence of any
    assert cut_at_stop_strings("abc", []) == "abc"


def test_max_new_tokens_beyond_the_context_runs_to_the_context(gpt):
    """2**31 - 1 (examples/generate.py's "no limit") used to overflow the int32 length arithmetic: one token."""
    model, tokenizer = gpt
    prompts = ["the cat", "A dog sat on the"]
    unlimited = generate_text(model, tokenizer, prompts, max_new_tokens=2**31 - 1)
    assert unlimited == generate_text(model, tokenizer, prompts)
    assert unlimited == generate_text(model, tokenizer, prompts, max_new_tokens=CONTEXT)
    ids = tokenizer.tokenize(prompts[:1]).to_list()
    result = model.generate(np.array(ids, "int32"), stop_token_ids=None, max_new_tokens=2**31 - 1)
    assert int(np.asarray(result.lengths)[0]) == CONTEXT
    assert generate_text(model, tokenizer, prompts, max_new_tokens=2**31 - 1, search=BeamSearch(2)) == \
        generate_text(model, tokenizer, prompts, search=BeamSearch(2))


def test_bad_seeds_and_out_of_vocabulary_ids_are_named(gpt):
    model, tokenizer = gpt
    for jit_compile in (False, True):
        with pytest.raises(ValueError, match=r"`seed` must be None, an int.*received seed='abc'"):
            generate_text(model, tokenizer, ["the cat"], max_new_tokens=2, search="sample", seed="abc",
                          jit_compile=jit_compile)
    too_big = model.config.vocabulary_size
    with pytest.raises(ValueError, match=rf"`token_ids` must hold token ids in \[0, vocabulary_size={too_big}\)"):
        model.generate(np.array([[3, too_big]], "int32"), max_new_tokens=2)


def test_jit_compile_compiles_once_and_reads_the_current_weights(gpt):
    """generate_text(jit_compile=True) runs one XLA-compiled loop on TensorFlow and JAX, beam search included (it ran
    the plain loop, silently, under JAX and for beam search): traced once per prompt width and settings, the plain
    loop's text, the current weights (under JAX they are arguments of the jitted call, not constants baked in at
    tracing), and the cache of compiled loops does not keep the model alive."""
    trained, tokenizer = gpt
    model = GPT(trained.config)  # its own random weights
    traces = []
    generate = model.generate
    model.generate = lambda *args, **kwargs: traces.append(1) or generate(*args, **kwargs)
    prompts, kwargs = ["the cat", "a"], dict(max_new_tokens=3, search=BeamSearch(2, 2))
    compiled = [generate_text(model, tokenizer, prompts, jit_compile=True, **kwargs) for _ in range(2)]
    assert len(traces) == 1  # traced once, then reused (the plain loop calls model.generate every time)
    assert compiled == [generate_text(model, tokenizer, prompts, **kwargs)] * 2
    assert len(compiled[0]) == 2 and all(len(row) == 2 for row in compiled[0])  # B rows of num_return beams
    model.set_weights(trained.get_weights())
    expected = generate_text(trained, tokenizer, prompts, **kwargs)
    assert expected != compiled[0]
    traces.clear()
    assert generate_text(model, tokenizer, prompts, jit_compile=True, **kwargs) == expected and not traces
    model_ref = weakref.ref(model)
    del model, generate
    gc.collect()
    assert model_ref() is None
