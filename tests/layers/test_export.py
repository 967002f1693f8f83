"""SavedModel export of generation (TensorFlow only): the `generate` signature round-trips into a fresh process
that imports only tensorflow (and tensorflow_text for the tokenizer case), never attnlayers, keras or keras_hub,
and gives the in-process results: token ids in / token ids and scores out with cached beam search, strings in /
strings out with a keras-hub WordPiece tokenizer, a seed input for sampling (no random state saved); the module
and the loaded SavedModel take keyword arguments; path=None builds the module without saving it, for the caller to
extend and save once. The model is the GPT application's."""

import os
import textwrap

import keras
import numpy as np
import pytest
from model_harness import serve_alone

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="SavedModel export is TensorFlow-only"
)

if keras.backend.backend() == "tensorflow":
    import keras_hub
    import tensorflow as tf

    from attnlayers.applications.gpt import GPT, GPTConfig
    from attnlayers.decoding import BeamSearch, Sampling, generate
    from attnlayers.export import export_generate

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", "to", "red", "big", "and", "##s", "saw"]
VOCAB = ["[PAD]", "[UNK]", "[END]"] + WORDS
LENGTH = 12
END = 2


def tiny_gpt():
    config = GPTConfig(vocabulary_size=len(VOCAB), max_sequence_length=LENGTH, num_layers=2, num_heads=2,
                       hidden_dim=16, intermediate_dim=32, end_token_id=END, pad_token_id=0)
    return GPT(config)


def prepare(lm):
    """export_generate's `prepare` for a GPT: the prompt and its prefilled cache."""
    return lambda ids, mask: {"prompt": ids, "prompt_mask": mask, "cache": lm.initial_cache(ids, mask, LENGTH)}


IDS = np.array([[4, 5, 6, 0], [7, 0, 0, 0]], "int32")
TEXTS = ["the cat sat", "a big dog ran to"]
SEED = 17

SCRIPT = textwrap.dedent(
    """
    import json, sys
    hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
    import tensorflow as tf
    ids_dir, text_dir, sample_dir = sys.argv[1:4]
    ids = tf.constant({ids}, tf.int32)
    mask, seed = ids != 0, tf.constant({seed})
    listed = lambda out: {{k: v.numpy().tolist() for k, v in out.items()}}
    loaded_ids = tf.saved_model.load(ids_dir)
    out = loaded_ids.signatures["generate"](token_ids=ids, padding_mask=mask)
    sampler = tf.saved_model.load(sample_dir)
    sample = sampler.signatures["generate"](token_ids=ids, padding_mask=mask, seed=seed)
    first = list(sampler.signatures["first_token"](token_ids=ids, padding_mask=mask, seed=seed).values())[0]
    captured = sampler.signatures["generate"].variables  # what the signature reads
    result = {{"ids": listed(out), "sample": listed(sample), "signatures": sorted(sampler.signatures),
              "first_token": first.numpy().tolist(), "first_token_call": sampler.first_token(ids, mask, seed).numpy().tolist(),
              "captured": [len(captured), sorted({{v.dtype.name for v in captured}})],
              # the restored functions take their inputs by keyword and positionally
              "ids_keyword": loaded_ids.generate(token_ids=ids, padding_mask=mask)["token_ids"].numpy().tolist(),
              "ids_positional": loaded_ids.generate(ids, mask)["token_ids"].numpy().tolist(),
              "sample_positional": sampler.generate(ids, mask, seed)["token_ids"].numpy().tolist(),
              "seeds": [sampler.generate(token_ids=ids, padding_mask=mask, seed=tf.constant(s))["token_ids"].numpy().tolist()
                        for s in ({seed}, {seed}, {seed} + 1)]}}
    unhide("keras")  # noqa: F821  tensorflow_text imports keras itself (tf.keras); attnlayers stays blocked
    import tensorflow_text  # registers the tokenizer ops
    loaded_text = tf.saved_model.load(text_dir)
    text = loaded_text.signatures["generate"](text=tf.constant({texts}))
    result["text"] = [s.decode() for s in text["text"].numpy().tolist()]
    result["text_ids"] = text["token_ids"].numpy().tolist()
    result["text_keyword"] = loaded_text.generate(text=tf.constant({texts}))["token_ids"].numpy().tolist()
    print(json.dumps(result))
    """
)


def _export_all(root, monkeypatch):
    """The three SavedModels and their in-process references. "ids" (cached beam search) and "text" (a keras-hub
    WordPiece tokenizer, greedy) are written by export_generate(path); "sample" (top-k sampling, the seed an input)
    is built with path=None, extended by the caller with a function of its own and saved once, with both
    signatures."""
    keras.utils.set_random_seed(3)
    lm = tiny_gpt()
    paths = {name: str(root / name) for name in ("ids", "text", "sample")}
    beam = BeamSearch(2, 2, alpha=0.6)
    modules = {"ids": export_generate(paths["ids"], lm.next, LENGTH, beam, track=lm, prepare=prepare(lm),
                                      stop_token_ids=[END])}
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    modules["text"] = export_generate(paths["text"], lm.next, LENGTH, "greedy", track=lm, prepare=prepare(lm),
                                      stop_token_ids=[END], tokenizer=tokenizer)
    sampling = Sampling(top_k=4, temperature=2.0)  # XLA-compiled in the SavedModel, eager below: same draws
    # path=None: the module is built (its generate runs in process) and nothing is saved.
    saves, real_save = [], tf.saved_model.save
    empty = root / "empty"
    empty.mkdir()
    monkeypatch.setattr(tf.saved_model, "save", lambda *args, **kwargs: saves.append(args))
    monkeypatch.chdir(empty)
    module = export_generate(None, lm.next, LENGTH, sampling, track=lm, prepare=prepare(lm))
    assert saves == [] and os.listdir(empty) == []
    monkeypatch.setattr(tf.saved_model, "save", real_save)
    # The caller's own function beside generate, then one save.
    module.first_token = tf.function(
        lambda token_ids, padding_mask, seed: module.generate(token_ids, padding_mask, seed)["token_ids"][:, :1],
        input_signature=[tf.TensorSpec((None, None), tf.int32, name="token_ids"),
                         tf.TensorSpec((None, None), tf.bool, name="padding_mask"),
                         tf.TensorSpec((), tf.int32, name="seed")],
    )
    tf.saved_model.save(module, paths["sample"], signatures={"generate": module.generate.get_concrete_function(),
                                                             "first_token": module.first_token.get_concrete_function()})
    modules["sample"] = module
    # In-process references: generate() itself, no export involved.
    ids_mask = IDS != 0
    expected = {
        "ids": generate(lm.next, IDS, LENGTH, beam, cache=lm.initial_cache(IDS, ids_mask, LENGTH), prompt_mask=ids_mask,
                        stop_token_ids=[END]),
        "sample": generate(lm.next, IDS, LENGTH, sampling, cache=lm.initial_cache(IDS, ids_mask, LENGTH),
                           prompt_mask=ids_mask, seed=SEED),
    }
    tokenized = tf.function(lambda t: tokenizer.tokenize(t).to_tensor())(tf.constant(TEXTS)).numpy()
    text_mask = tokenized != 0
    expected["text"] = generate(lm.next, tokenized, LENGTH, "greedy", cache=lm.initial_cache(tokenized, text_mask),
                                prompt_mask=text_mask, stop_token_ids=[END])
    expected["prompt_lengths"] = text_mask.sum(1)
    expected["num_weights"] = len(lm.weights)
    return paths, expected, modules


def test_generate_signature_round_trips_without_attnlayers(tmp_path, monkeypatch):
    """Three SavedModels exported once, served in one fresh process that cannot import attnlayers, keras or
    keras_hub; the returned modules in process. Also: the module and the loaded SavedModel take keyword arguments
    (and positional ones); the sampling export holds no random state (the seed is an input); path=None builds the
    module without saving it, for the caller to extend and save once."""
    paths, expected, modules = _export_all(tmp_path, monkeypatch)
    script = SCRIPT.format(ids=IDS.tolist(), seed=SEED, texts=TEXTS)
    loaded = serve_alone(script, paths["ids"], paths["text"], paths["sample"], cwd=str(tmp_path))

    # Token ids in, token ids and scores out: cached beam search with t = 2 and a length penalty.
    ids, beam = loaded["ids"], expected["ids"]
    np.testing.assert_array_equal(ids["token_ids"], np.asarray(beam.tokens))
    np.testing.assert_allclose(ids["scores"], np.asarray(beam.scores), atol=1e-4)
    np.testing.assert_allclose(ids["log_probs"], np.asarray(beam.log_probs), atol=1e-4)
    np.testing.assert_array_equal(ids["lengths"], np.asarray(beam.lengths))
    assert np.asarray(ids["token_ids"]).shape == (2, 2, LENGTH)

    # Sampling: the seed is an input; same seed, same tokens as in process (XLA there, eager here). Built with
    # path=None and saved by the caller with its own first_token beside generate: both signatures serve.
    sample = expected["sample"]
    np.testing.assert_array_equal(loaded["sample"]["token_ids"], np.asarray(sample.tokens))
    np.testing.assert_array_equal(loaded["sample"]["lengths"], np.asarray(sample.lengths))
    np.testing.assert_allclose(loaded["sample"]["scores"], np.asarray(sample.scores), atol=1e-4)
    assert loaded["signatures"] == ["first_token", "generate"]
    np.testing.assert_array_equal(loaded["first_token"], IDS[:, :1])
    np.testing.assert_array_equal(loaded["first_token_call"], IDS[:, :1])

    # Strings in, strings out.
    greedy = expected["text"]
    np.testing.assert_array_equal(loaded["text_ids"], np.asarray(greedy.tokens))
    vocab = np.array(VOCAB)
    for row, text in enumerate(loaded["text"]):
        tokens = np.asarray(greedy.tokens)[row, expected["prompt_lengths"][row]: int(np.asarray(greedy.lengths)[row])]
        words = [w for w in vocab[tokens[tokens != END]]]
        assert text == " ".join(words).replace(" ##", ""), (text, words)
    assert any(text for text in loaded["text"])

    # The loaded SavedModel takes its inputs by keyword (and positionally) in the serving process ...
    np.testing.assert_array_equal(loaded["ids_keyword"], np.asarray(beam.tokens))
    np.testing.assert_array_equal(loaded["ids_positional"], np.asarray(beam.tokens))
    np.testing.assert_array_equal(loaded["sample_positional"], np.asarray(sample.tokens))
    np.testing.assert_array_equal(loaded["text_keyword"], np.asarray(greedy.tokens))
    # ... and so does the returned module, here.
    ids_in, mask, seed = tf.constant(IDS), tf.constant(IDS != 0), tf.constant(SEED)
    out = modules["ids"].generate(token_ids=ids_in, padding_mask=mask)
    np.testing.assert_array_equal(out["token_ids"], np.asarray(beam.tokens), err_msg="module")
    np.testing.assert_array_equal(modules["ids"].generate(ids_in, mask)["token_ids"], out["token_ids"])
    out = modules["sample"].generate(token_ids=ids_in, padding_mask=mask, seed=seed)
    np.testing.assert_array_equal(out["token_ids"], np.asarray(sample.tokens), err_msg="module")
    np.testing.assert_array_equal(out["lengths"], np.asarray(sample.lengths))
    out = modules["text"].generate(text=tf.constant(TEXTS))
    np.testing.assert_array_equal(out["token_ids"], np.asarray(greedy.tokens), err_msg="module")

    # No random state: the SavedModel holds the model's weights and nothing else (no RNG variable); the signature
    # reads only them. Different seeds give different tokens; the same seed, the same tokens, call after call.
    saved = [name for name, _ in tf.train.list_variables(os.path.join(paths["sample"], "variables", "variables"))
             if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")]
    assert len(saved) == expected["num_weights"] and not [name for name in saved if "seed" in name.lower()]
    assert loaded["captured"] == [expected["num_weights"], ["float32"]]
    runs = loaded["seeds"]
    np.testing.assert_array_equal(runs[0], np.asarray(sample.tokens))  # by keyword, in the serving process
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_length.*max_length=0"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 0)
    with pytest.raises(ValueError, match="tokenizer"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 4, tokenizer=object())
    with pytest.raises(ValueError, match="track"):
        export_generate("/tmp/unused", lambda t, c, i: (t, c), 4, track=[object()])


def test_settings_stop_sequences_and_left_truncation_on_token_ids():
    """settings=True on token ids (built with path=None, run in-process): the sampling settings, seed and
    max_new_tokens are inputs of one compiled loop and give generate()'s tokens for the same Python settings;
    stop sequences stop rows; left truncation keeps each prompt's last tokens and flags it; empty prompts and
    settings out of range fail assertions naming the input."""
    keras.utils.set_random_seed(4)
    lm = tiny_gpt()
    width = 3
    stop = [[7, 7]]
    module = export_generate(None, lm.next, LENGTH, track=lm, prepare=prepare(lm), stop_token_ids=[END],
                             settings=True, stop_sequences=stop, input_length=width, truncation="left",
                             require_tokens=True)
    ids = np.array([[4, 5, 6, 9, 10], [7, 0, 0, 0, 0]], "int32")  # row 0 is 5 tokens long: its last 3 are kept
    fed = np.array([[6, 9, 10], [7, 0, 0]], "int32")

    def call(temperature, top_k, top_p, seed, max_new_tokens, token_ids=ids):
        return module.generate(token_ids=tf.constant(token_ids), padding_mask=tf.constant(token_ids != 0),
                               temperature=tf.constant(temperature), top_k=tf.constant(top_k),
                               top_p=tf.constant(top_p), seed=tf.constant(seed),
                               max_new_tokens=tf.constant(max_new_tokens))

    for settings, search in [((0.0, 0, 1.0), "greedy"), ((1.5, 4, 1.0), Sampling(1.5, top_k=4)),
                             ((1.0, 0, 0.9), Sampling(top_p=0.9))]:
        out = call(*settings, SEED, 100)
        expected = generate(lm.next, fed, LENGTH, search, cache=lm.initial_cache(fed, fed != 0, LENGTH),
                            prompt_mask=fed != 0, stop_token_ids=[END], seed=SEED, stop_sequences=stop)
        np.testing.assert_array_equal(out["token_ids"].numpy(), np.asarray(expected.tokens), err_msg=str(settings))
        np.testing.assert_array_equal(out["lengths"].numpy(), np.asarray(expected.lengths))
        assert out["truncated"].numpy().tolist() == [True, False]
    unlimited = call(1.5, 0, 1.0, SEED, 100)["lengths"].numpy()
    lengths = call(1.5, 0, 1.0, SEED, 2)["lengths"].numpy()
    # Each row stops after 2 new tokens (its prompt: 3 and 1 tokens), or earlier where it stopped anyway.
    np.testing.assert_array_equal(lengths, np.minimum(unlimited, [width + 2, 1 + 2]))
    for values, name in [((-1.0, 0, 1.0, 0, 5), "temperature"), ((1.0, -2, 1.0, 0, 5), "top_k"),
                         ((1.0, 0, 0.0, 0, 5), "top_p"), ((1.0, 0, 1.0, 0, 0), "max_new_tokens")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"`{name}`"):
            call(*values)
    with pytest.raises(tf.errors.InvalidArgumentError, match="`padding_mask`.*empty"):
        call(0.0, 0, 1.0, 0, 5, token_ids=np.array([[4, 5], [0, 0]], "int32"))


def test_bad_settings_arguments():
    def step(t, c, i):
        return t, c

    with pytest.raises(ValueError, match=r"settings=True.*search.*BeamSearch"):
        export_generate(None, step, 4, BeamSearch(2), settings=True)
    with pytest.raises(ValueError, match=r"truncation=\"left\".*input_length=None"):
        export_generate(None, step, 4, truncation="left")
    with pytest.raises(ValueError, match=r"truncation.*'middle'"):
        export_generate(None, step, 4, truncation="middle")
    with pytest.raises(ValueError, match=r"stop_strings.*needs a `tokenizer`"):
        export_generate(None, step, 4, stop_strings=["\n"])
    with pytest.raises(ValueError, match=r"stop_sequences"):
        export_generate(None, step, 4, stop_sequences=[[]])


def test_options_object():
    """GenerateExportOptions: checked once when built (ValueErrors naming the argument), frozen, normalized;
    `of` replaces fields; export_generate takes it (options=) or its fields as keywords, with the same
    signature."""
    from attnlayers.export import GenerateExportOptions, signature_of

    options = GenerateExportOptions(LENGTH, "top_k", stop_token_ids=END, stop_sequences=[[7, 7]])
    assert options.stop_token_ids == (END,) and options.stop_sequences == ((7, 7),) and options.stochastic
    assert isinstance(options.search, Sampling) and options.fitted_length is None
    with pytest.raises(AttributeError):
        options.max_length = 3
    assert GenerateExportOptions.of(options) is options
    greedy = GenerateExportOptions.of(options, None, "greedy", input_length=4)
    assert not greedy.stochastic and greedy.input_length == 4 and greedy.stop_token_ids == (END,)
    assert [name for name, _ in signature_of(options)] == ["token_ids", "padding_mask", "seed"]
    assert [name for name, _ in signature_of(GenerateExportOptions(LENGTH, settings=True))] == [
        "token_ids", "padding_mask", "temperature", "top_k", "top_p", "seed", "max_new_tokens"]
    for fields, match in [(dict(max_length=0), "max_length=0"), (dict(input_length=-1), "input_length=-1"),
                          (dict(settings=True, search=BeamSearch(2)), "settings=True"),
                          (dict(truncation="left"), "truncation"), (dict(stop_strings=["x"]), "needs a `tokenizer`"),
                          (dict(stop_sequences=[[-1]]), "stop_sequences"),
                          (dict(source_spec="images"), "source_spec")]:
        with pytest.raises(ValueError, match=match):
            GenerateExportOptions(**fields)
    with pytest.raises(ValueError, match="options"):
        GenerateExportOptions.of({"max_length": 4})
    with pytest.warns(DeprecationWarning, match="`strategy=` is deprecated; use `search=`"):  # the old keyword
        assert GenerateExportOptions(LENGTH, strategy="top_k").search.get_config() == options.search.get_config()
    with pytest.warns(DeprecationWarning, match="`strategy=` is deprecated"):
        assert not GenerateExportOptions.of(options, strategy="greedy").stochastic
    with pytest.warns(DeprecationWarning, match=r"\.strategy is deprecated; use \.search"):
        assert options.strategy is options.search
    with pytest.raises(ValueError, match="max_length"):  # required to export
        export_generate(None, lambda t, c, i: (t, c))

    keras.utils.set_random_seed(3)
    lm = tiny_gpt()
    built = export_generate(None, lm.next, track=lm, prepare=prepare(lm), options=options, jit_compile=False)
    spec = built.generate.get_concrete_function().structured_input_signature
    assert spec == ((tf.TensorSpec((None, None), tf.int32, name="token_ids"),
                     tf.TensorSpec((None, None), tf.bool, name="padding_mask"),
                     tf.TensorSpec((), tf.int32, name="seed")), {})
    out = built.generate(token_ids=tf.constant(IDS), padding_mask=tf.constant(IDS != 0), seed=tf.constant(SEED))
    expected = generate(lm.next, IDS, LENGTH, options.search, cache=lm.initial_cache(IDS, IDS != 0, LENGTH),
                        prompt_mask=IDS != 0, stop_token_ids=[END], seed=SEED, stop_sequences=[[7, 7]])
    np.testing.assert_array_equal(out["token_ids"], np.asarray(expected.tokens))


def test_two_dimensional_attention_in_a_savedmodel_equals_keras(tmp_path):
    """2-D attention over (B, H, W, C) images (attention_axes=(1, 2)) with keras' weights, exported with
    ``model.export`` and reloaded by TensorFlow alone: keras' MultiHeadAttention's outputs to 1e-6."""
    from attnlayers import MultiHeadAttention

    def model(layer_class):
        inputs = keras.Input((3, 4, 8))
        outputs = layer_class(num_heads=2, key_dim=4, attention_axes=(1, 2), bias_initializer="random_normal")(
            inputs, inputs)
        return keras.Model(inputs, outputs)

    theirs, ours = model(keras.layers.MultiHeadAttention), model(MultiHeadAttention)
    ours.set_weights(theirs.get_weights())
    ours.export(str(tmp_path / "images"), verbose=False)
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 8)).astype("float32")
    loaded = tf.saved_model.load(str(tmp_path / "images"))  # held: its variables live as long as it does
    served = loaded.serve(tf.constant(x))
    np.testing.assert_allclose(served.numpy(), keras.ops.convert_to_numpy(theirs(x)), atol=1e-6)
