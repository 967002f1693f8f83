"""A GPT exports through the shared path (applications.core.formats.export.export_generator, on its GenerativeModel
contract): the loaded SavedModel gives model.generate's tokens, greedy (stopping at end_token_id) and sampled
(the seed an input). TensorFlow only: skipped under other backends."""

import json
import textwrap

import keras
import numpy as np
import pytest
from attnlayers.applications.gpt import GPT, GPTConfig
from model_harness import serve_alone

from attnlayers.decoding import Sampling

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="SavedModel export is TensorFlow-only (it writes a TensorFlow SavedModel)",
)

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    from attnlayers.applications.core.formats.export import export_generator

CONFIG = dict(vocabulary_size=29, max_sequence_length=12, num_layers=2, num_heads=2, hidden_dim=16,
              intermediate_dim=32)
PROMPT = np.array([[5, 9, 3, 7], [7, 4, 0, 0], [11, 0, 0, 0]], "int32")
PROMPT_MASK = PROMPT != 0
LENGTH = 10
SEED = 7


def _gpt_that_stops():
    """A tiny GPT whose end token is one that greedy decoding emits early in row 0 (so stopping is exercised)."""
    keras.utils.set_random_seed(5)
    free = GPT(GPTConfig(**CONFIG)).generate(PROMPT, LENGTH, padding_mask=PROMPT_MASK, stop_token_ids=None)
    end = int(np.asarray(free.tokens)[0, 5])
    keras.utils.set_random_seed(5)
    return GPT(GPTConfig(**CONFIG, end_token_id=end, pad_token_id=0))


@pytest.mark.parametrize("search", ["greedy", "sampling"])
def test_exported_gpt_gives_the_tokens_of_generate(tmp_path, search):
    """Greedy: export_generator(path, model, LENGTH, "greedy"). Sampled: through one GenerateExportOptions, which
    export_generator passes down (the model's stop and pad ids, its default max_length, 12, filled in), refusing
    the ids the model owns as keywords."""
    from attnlayers.export import GenerateExportOptions

    model = _gpt_that_stops()
    stochastic = search == "sampling"
    path = str(tmp_path / "gpt")
    if stochastic:
        options = GenerateExportOptions(search=Sampling(top_k=5, temperature=1.5))
        expected = model.generate(PROMPT, 12, options.search, seed=SEED, padding_mask=PROMPT_MASK)
        export_generator(path, model, options=options)  # max_length: the model's (12)
        with pytest.raises(ValueError, match=r"stop_token_ids.*model"):
            export_generator(None, model, LENGTH, stop_token_ids=[1])
    else:
        expected = model.generate(PROMPT, LENGTH, search, padding_mask=PROMPT_MASK)
        export_generator(path, model, LENGTH, search)

    loaded = tf.saved_model.load(path)
    inputs = {"token_ids": tf.constant(PROMPT), "padding_mask": tf.constant(PROMPT_MASK)}
    if stochastic:
        inputs["seed"] = tf.constant(SEED)
    out = loaded.signatures["generate"](**inputs)
    np.testing.assert_array_equal(out["token_ids"].numpy(), np.asarray(expected.tokens))
    np.testing.assert_array_equal(out["lengths"].numpy(), np.asarray(expected.lengths))
    np.testing.assert_allclose(out["scores"].numpy(), np.asarray(expected.scores), atol=1e-4)
    if not stochastic:  # row 0 stops at the end token, then pad_token_id
        length = int(out["lengths"].numpy()[0])
        assert length <= 6 and out["token_ids"].numpy()[0, length - 1] == model.end_token_id
        assert np.all(out["token_ids"].numpy()[0, length:] == model.pad_token_id)
    else:  # the seed is an input: another seed, other tokens
        assert out["token_ids"].shape == (3, 12)
        other = loaded.generate(**{**inputs, "seed": tf.constant(SEED + 1)})["token_ids"].numpy()
        assert not np.array_equal(other, out["token_ids"].numpy())


def test_export_checks_max_length_against_the_model(tmp_path):
    model = GPT(GPTConfig(**CONFIG))
    with pytest.raises(ValueError, match=r"max_length.*max_sequence_length=12.*max_length=13"):
        export_generator(str(tmp_path / "gpt"), model, 13)


# ---- export_gpt: strings in, text out, the sampling settings as inputs, served by tensorflow alone ----------------

TEXT_CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.", "A cat, a hat; the cat sat on the mat!",
               "Numbers 12 and 345.\n\nNew paragraph here.", "café 日本語 😀 tabs\tand  spaces"] * 4
TEXT_LENGTH, TEXT_INPUT = 20, 8
PROMPTS = ["the cat", "A dog", "The quick brown fox jumps over the lazy dog. The dog sleeps."]  # the last > 8 tokens
# (temperature, top_k, top_p, seed, max_new_tokens): greedy; sampling; top_k=1 (greedy); nucleus; 3 new tokens.
SETTINGS = {"greedy": (0.0, 0, 1.0, 0, 100), "sample": (1.3, 0, 1.0, 5, 100), "top_k_1": (1.7, 1, 1.0, 9, 100),
            "nucleus": (0.9, 5, 0.8, 2, 100), "three": (0.0, 0, 1.0, 0, 3)}
BAD = {"temperature": (-1.0, 0, 1.0, 0, 5), "top_k": (1.0, -1, 1.0, 0, 5), "top_p": (1.0, 0, 1.5, 0, 5),
       "max_new_tokens": (1.0, 0, 1.0, 0, 0)}

SERVE = textwrap.dedent(
    """
    import json, sys

    import tensorflow as tf
    keras_before = set(imported("keras"))  # noqa: F821  (serve_alone's prelude): what tensorflow imports itself
    block("keras")  # noqa: F821  (serve_alone's prelude): nothing more of keras may load

    path, prompts, settings, bad = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
    loaded = tf.saved_model.load(path)
    names = ("temperature", "top_k", "top_p", "seed", "max_new_tokens")
    types = (tf.float32, tf.int32, tf.float32, tf.int32, tf.int32)

    def call(texts, values):
        inputs = {n: tf.constant(v, t) for n, v, t in zip(names, values, types)}
        return loaded.signatures["generate"](text=tf.constant(texts), **inputs)

    results = {}
    for name, values in settings.items():
        out = call(prompts, values)
        results[name] = {k: [t.decode("utf-8", "replace") for t in v.numpy().tolist()] if k == "text"
                         else v.numpy().tolist() for k, v in out.items()}
    errors = {}
    for name, values in list(bad.items()) + [("empty", [0.0, 0, 1.0, 0, 5]), ("scalar", [0.0, 0, 1.0, 0, 5])]:
        try:
            call(prompts[0] if name == "scalar" else prompts[:2] + ([""] if name == "empty" else []), values)
            errors[name] = None
        except tf.errors.InvalidArgumentError as error:
            errors[name] = error.message
    keras_after = set(imported("keras"))  # noqa: F821
    print(json.dumps({"results": results, "errors": errors, "inputs": sorted(
        loaded.signatures["generate"].structured_input_signature[1]),
        "new_keras_modules": sorted(keras_after - keras_before),
        "attnlayers": bool(imported("attnlayers", "keras_hub", "tensorflow_text"))}))  # noqa: F821
    """
)


@pytest.fixture(scope="module")
def text_gpt(tmp_path_factory):
    """A tiny GPT and tokenizer, a stop string its greedy continuation of PROMPTS[0] holds, the exported
    SavedModel, and what a fresh tensorflow-only process served from it."""
    from attnlayers.applications.gpt.export import export_gpt
    from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe

    tokenizer = GPT2Tokenizer(*train_byte_level_bpe(TEXT_CORPUS, 300, tmp_path_factory.mktemp("bpe")))
    keras.utils.set_random_seed(11)
    model = GPT(GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=24, num_layers=1,
                          num_heads=2, hidden_dim=16, intermediate_dim=32, end_token_id=tokenizer.end_token_id))
    ids = tokenizer.tokenize(PROMPTS[0]).numpy()
    greedy = np.asarray(model.generate(ids[None], TEXT_LENGTH).tokens)[0]
    stop = tokenizer.detokenize(greedy[len(ids) + 3: len(ids) + 5]).numpy().decode("utf-8", "replace")
    path = str(tmp_path_factory.mktemp("gpt_text") / "generate")
    export_gpt(path, model, tokenizer, TEXT_LENGTH, input_length=TEXT_INPUT, stop_strings=[stop])
    served = serve_alone(SERVE, path, json.dumps(PROMPTS), json.dumps(SETTINGS), json.dumps(BAD),
                         blocked=("attnlayers", "keras_hub", "tensorflow_text"))
    return model, tokenizer, stop, served


def _in_process(model, tokenizer, values, stop):
    """model.generate on the prompts as the SavedModel feeds them (the last TEXT_INPUT tokens, right-padded)."""
    from attnlayers.applications.gpt.generation import stop_sequences_for

    temperature, top_k, top_p, seed, max_new_tokens = values
    rows = [row[-TEXT_INPUT:] for row in tokenizer.tokenize(PROMPTS).to_list()]
    ids = np.zeros((len(rows), TEXT_INPUT), "int32")
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    search = "greedy" if temperature == 0 else Sampling(temperature, top_k or None, None if top_p == 1 else top_p)
    return model.generate(ids, TEXT_LENGTH, search, seed, padding_mask=ids != 0,
                          max_new_tokens=min(max_new_tokens, TEXT_LENGTH),
                          stop_sequences=stop_sequences_for(tokenizer, [stop]))


def test_text_savedmodel_serves_with_tensorflow_alone(text_gpt):
    _, _, _, served = text_gpt
    assert served["inputs"] == ["max_new_tokens", "seed", "temperature", "text", "top_k", "top_p"]
    assert not served["attnlayers"] and served["new_keras_modules"] == []
    out = served["results"]["greedy"]
    assert set(out) == {"text", "token_ids", "lengths", "scores", "log_probs", "truncated"}
    assert np.asarray(out["token_ids"]).shape == (3, TEXT_LENGTH)
    assert out["truncated"] == [False, False, True]  # the third prompt is longer than input_length


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_text_savedmodel_gives_the_tokens_of_generate(text_gpt, name):
    model, tokenizer, stop, served = text_gpt
    expected = _in_process(model, tokenizer, SETTINGS[name], stop)
    out = served["results"][name]
    np.testing.assert_array_equal(out["token_ids"], np.asarray(expected.tokens))
    np.testing.assert_array_equal(out["lengths"], np.asarray(expected.lengths))
    np.testing.assert_allclose(out["scores"], np.asarray(expected.scores), atol=1e-4)
    if name in ("top_k_1",):  # top_k = 1 is greedy whatever the temperature and seed
        np.testing.assert_array_equal(out["token_ids"], served["results"]["greedy"]["token_ids"])
    if name == "three":  # max_new_tokens: each row's prompt + 3 (or an earlier stop)
        prompt_lengths = [min(len(r), TEXT_INPUT) for r in tokenizer.tokenize(PROMPTS).to_list()]
        assert all(n <= p + 3 for n, p in zip(out["lengths"], prompt_lengths))
        assert any(n == p + 3 for n, p in zip(out["lengths"], prompt_lengths))
    if name == "sample":  # another setting, another text
        assert out["token_ids"] != served["results"]["greedy"]["token_ids"]


def test_text_savedmodel_text_and_stop_strings(text_gpt):
    from attnlayers.applications.gpt.generation import cut_at_stop_strings

    model, tokenizer, stop, served = text_gpt
    out = served["results"]["greedy"]
    tokens, lengths = np.asarray(out["token_ids"]), out["lengths"]
    prompt_lengths = [min(len(r), TEXT_INPUT) for r in tokenizer.tokenize(PROMPTS).to_list()]
    for row, text in enumerate(out["text"]):
        generated = [t for t in tokens[row, prompt_lengths[row]: lengths[row]] if t != model.end_token_id]
        full = tokenizer.detokenize(np.array(generated, "int32")).numpy().decode("utf-8", "replace")
        assert text == cut_at_stop_strings(full, [stop])
    # Row 0's greedy continuation holds the stop string: generation stopped at it (5 tokens, not to L) and the
    # text ends before it.
    assert stop not in out["text"][0] and lengths[0] <= prompt_lengths[0] + 5
    # The truncated row kept the prompt's last tokens.
    last = tokenizer.tokenize(PROMPTS[2]).numpy()[-TEXT_INPUT:]
    np.testing.assert_array_equal(tokens[2, :TEXT_INPUT], last)


def test_text_savedmodel_refuses_bad_settings_and_empty_prompts(text_gpt):
    _, _, _, served = text_gpt
    errors = served["errors"]
    for name in BAD:
        assert errors[name] is not None and f"`{name}`" in errors[name], (name, errors[name])
    assert errors["empty"] is not None and "`text`" in errors["empty"] and "empty" in errors["empty"]
    # A scalar string (signatures check dtypes, not shapes) is refused naming `text` and its shape (batch,).
    assert errors["scalar"] is not None and "`text` must have shape (batch,)" in errors["scalar"], errors["scalar"]


def test_pretokenizer_without_tensorflow_text_gives_the_same_ids(text_gpt):
    from attnlayers.applications.gpt.export import ServingTokenizer

    _, tokenizer, _, _ = text_gpt
    hard = ["", " ", "   ", "a\n\nb", "a \n b", "\t\tx", "line one\r\nline two\n", "héllo 日本語 😀 👨‍👩‍👧",
            "I'm can't we've they'll   's", "nul\x00in\x00\x00the middle", "x <|endoftext|> y",
            "<|endoftext|><|endoftext|>", "no\u00a0break \u3000ideographic \u2028line", "a६b ६६", "ĴA ĴAKE",
            "  leading and trailing  ", "Numbers 1234567890 and 3.14159!"]
    serving = ServingTokenizer(tokenizer)
    assert serving.tokenize(tf.constant(hard)).to_list() == tokenizer.tokenize(hard).to_list()
    graph = tf.function(serving.tokenize).get_concrete_function(tf.TensorSpec([None], tf.string)).graph
    ops_used = {op.type for op in graph.get_operations()}
    assert not any("RegexSplit" in op for op in ops_used) and "StaticRegexReplace" in ops_used


def test_export_gpt_refuses_bad_arguments(text_gpt, tmp_path):
    from attnlayers.applications.gpt.export import export_gpt

    model, tokenizer, _, _ = text_gpt
    with pytest.raises(ValueError, match=r"input_length.*20.*below max_length=20"):
        export_gpt(None, model, tokenizer, 20, input_length=20)
    with pytest.raises(ValueError, match=r"max_length.*max_sequence_length=24.*max_length=25"):
        export_gpt(None, model, tokenizer, 25)
    with pytest.raises(ValueError, match=r"stop_strings.*non-empty strings"):
        export_gpt(None, model, tokenizer, 20, stop_strings="\n")
    with pytest.raises(ValueError, match=r"tokenizer.*GPT2Tokenizer"):
        export_gpt(None, model, object(), 20)
