"""NMT models: decoding agrees with teacher forcing for all five models, tiny models learn the synthetic task
(and Bahdanau attention finds its gold alignment), configs round-trip with the special ids, bad input is refused
clearly. The loss, metric and schedule are tested with applications.core (tests/applications/core/)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from attnlayers import BeamSearch
from attnlayers.applications import nmt
from attnlayers.applications.nmt import evaluate
from attnlayers.applications.nmt import model as nmt_model
from attnlayers.applications.nmt.model import (
    MODELS,
    RNNSeq2Seq,
    TransformerTranslator,
    build_model,
)
from model_harness import run_model_test

LENGTH = 16


@pytest.fixture(scope="module")
def task():
    """1600 synthetic pairs (swap reordering, known alignments), word-level vocabularies, batches."""
    pairs = nmt.synthetic_pairs(1600, seed=5, max_length=8)
    splits = nmt.split_pairs(pairs, num_test=50, num_validation=50, seed=0)
    tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=200, target_vocabulary_size=200,
                                      model_type="word")
    train = nmt.make_dataset(splits.train, tokenizers, batch_size=32, max_source_length=LENGTH,
                             max_target_length=LENGTH, seed=0)
    return splits, tokenizers, train


def tiny(name, tokenizers, **kwargs):
    source, target = tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size
    if name == "transformer":
        kwargs = dict(num_layers=1, d_model=32, num_heads=2, intermediate_dim=64, dropout=0.0, max_length=LENGTH,
                      **kwargs)
    else:
        kwargs = dict(embedding_dim=32, units=48, dropout=0.0, **kwargs)
    return build_model(name, source, target, **kwargs)


# --------------------------------------------------------------------------------------------------
# Decoding agrees with the teacher-forced model


@pytest.mark.parametrize("name", [*MODELS, "seq2seq-lstm", "luong-lstm"])
def test_decoding_steps_agree_with_teacher_forcing(task, name):
    """Greedy decoding through initial_cache / next, fed back as target_in, is what call() predicts at every
    position: the step function and the teacher-forced model are the same function (caches included)."""
    splits, tokenizers, _ = task
    keras.utils.set_random_seed(1)
    name, _, cell = name.partition("-")
    model = tiny(name, tokenizers, **({"cell": cell} if cell else {}))
    source, _ = evaluate.encode_sources(tokenizers.source, list(splits.test.source[:6]), LENGTH)
    result = model.generate(source, LENGTH, "greedy")
    tokens = np.asarray(result.tokens)
    assert tokens.shape == (6, LENGTH) and (tokens[:, 0] == nmt.START_ID).all()
    logits = np.asarray(model((source, tokens[:, :-1])))  # (B, L - 1, V), teacher forced on the decoded tokens
    assert_greedy(tokens, result.lengths, logits)
    # The step function's logits are the teacher-forced ones.
    cache = model.initial_cache(source)
    for index in range(1, 6):
        step_logits, cache = model.next(tokens, cache, index)
        np.testing.assert_allclose(np.asarray(step_logits), logits[:, index - 1], atol=1e-5)
    # Beam search with one beam is greedy.
    beam = model.generate(source, LENGTH, BeamSearch(1))
    beam_tokens = np.asarray(beam.tokens)[:, 0]
    assert_greedy(beam_tokens, np.asarray(beam.lengths)[:, 0], np.asarray(model((source, beam_tokens[:, :-1]))))


def assert_greedy(tokens, lengths, logits):
    """Every decoded token is an argmax of the teacher-forced logits on its prefix (untrained logits are nearly
    uniform, so near-ties are compared with a tolerance, not by argmax)."""
    for row, length in enumerate(np.asarray(lengths)):
        chosen = logits[row, np.arange(length - 1), tokens[row, 1:length]]
        np.testing.assert_array_less(logits[row, : length - 1].max(-1) - chosen, 1e-5)


def test_transformer_attention_maps_are_per_layer_head_distributions(task):
    splits, tokenizers, train = task
    keras.utils.set_random_seed(2)
    model = TransformerTranslator(
        tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size, num_layers=2, d_model=32,
        num_heads=2, intermediate_dim=64, max_length=LENGTH)
    (source, target_in), _ = next(iter(train))
    maps = model.attention_maps(source, target_in)
    assert len(maps) == 2
    for weights in maps:
        weights = np.asarray(weights)
        assert weights.shape == (source.shape[0], 2, target_in.shape[1], source.shape[1])
        real_rows = (np.asarray(target_in) != 0)[:, None, :]  # padded target positions attend nowhere (0)
        np.testing.assert_allclose(weights.sum(-1), np.broadcast_to(np.where(real_rows, 1.0, 0.0), weights.shape[:3]),
                                   atol=1e-5)
        padded = (np.asarray(source) == 0)[:, None, None, :]
        assert np.all(np.where(padded, weights, 0.0) == 0.0)  # padding never attended


# --------------------------------------------------------------------------------------------------
# Learning


@pytest.mark.parametrize("name", [m for m in MODELS if m != "bahdanau"])
def test_tiny_models_learn_the_synthetic_task(task, name):
    """Loss falls and token accuracy rises for every model (Bahdanau's: tests/test_quickstart.py, whose model it
    is, with its alignment); local-p's window also finds the gold alignment, across the swapped adjectives."""
    splits, tokenizers, _ = task
    keras.backend.clear_session()  # a fresh global seed generator: the initial weights do not depend on earlier tests
    keras.utils.set_random_seed(3)
    # Its own dataset, made after the global seed is set: tf.data's shuffle order depends on the global seed and on
    # how often the dataset was iterated before, so the module's dataset trained in the order the earlier tests left.
    train = nmt.make_dataset(splits.train, tokenizers, batch_size=32, max_source_length=LENGTH,
                             max_target_length=LENGTH, seed=0)
    model = tiny(name, tokenizers)
    if name == "transformer":
        model.compile_for_translation(learning_rate=5e-3)
    else:
        model.compile_for_translation(1e-2)
    before = evaluate.alignment_accuracy(model, tokenizers, splits.test) if name == "local" else None
    history = model.fit(train, epochs=3, verbose=0).history
    # Epoch-mean loss falls steadily and token accuracy rises (chance is ~1/100).
    assert history["loss"][2] < history["loss"][1] < history["loss"][0], history["loss"]
    assert history["loss"][2] < 0.92 * history["loss"][0], history["loss"]
    assert history["accuracy"][2] > 1.4 * history["accuracy"][0], history["accuracy"]
    texts = evaluate.translate(model, tokenizers, list(splits.test.source[:4]), max_source_length=LENGTH,
                               max_length=LENGTH, search=BeamSearch(2))
    # One string per sentence, most of them words. After 3 epochs the tiny Transformer sometimes ends a sentence at
    # once (''): data-order seeds 0-7 give 3, 3, 4, 4, 4, 4, 4, 4 non-empty of these 4 in core.data_order's orders
    # (loss ratio after/before 0.59-0.63), 4 each in the previous tf.data shuffle's (0.60-0.63); seed 0 is a 3.
    assert len(texts) == 4 and all(isinstance(t, str) for t in texts) and sum(bool(t) for t in texts) >= 3, texts
    if name == "local":
        # The diagonal prior alone aligns 0.476 (the swapped adjectives are off it). After 3 epochs, global seeds
        # 0-4 (initial weights and data order) reach 0.81, 0.74, 0.69, 0.85 (this seed), 0.75.
        after = evaluate.alignment_accuracy(model, tokenizers, splits.test)
        assert after > before + 0.2, (before, after)


# --------------------------------------------------------------------------------------------------
# Configs, errors


def _special_ids(model):
    assert (model.pad_token_id, model.start_token_id, model.end_token_id) == (nmt.PAD_ID, nmt.START_ID, nmt.END_ID)


@pytest.mark.parametrize("name", ["local", "transformer"])
def test_passes_the_model_harness(task, name, tmp_path):
    """Config and .keras round trips: the same logits, the special ids kept (decoding: the tests above)."""
    splits, tokenizers, _ = task
    source, _ = evaluate.encode_sources(tokenizers.source, list(splits.test.source[:3]), LENGTH)
    target_in = np.asarray(source)[:, :5] % tokenizers.target.vocabulary_size

    def make():
        keras.utils.set_random_seed(4)
        return tiny(name, tokenizers)

    model = run_model_test(make, (source, target_in), tmp_path, check_loaded=lambda loaded, _: _special_ids(loaded))
    _special_ids(model)


def test_shared_embeddings_tie_source_target_and_output():
    model = TransformerTranslator(50, 50, num_layers=1, d_model=16, num_heads=2, intermediate_dim=32,
                                  max_length=8, shared_embeddings=True)
    ids = np.ones((1, 4), "int32")
    model((ids, ids))
    tables = [w for w in model.weights if "embeddings" in w.path and w.shape == (50, 16)]
    assert len(tables) == 1
    assert model.output_layer is None


def test_bad_input_is_refused_with_clear_errors(task):
    _, tokenizers, _ = task
    with pytest.raises(ValueError, match="Unknown model"):
        build_model("gpt", 10, 10)
    with pytest.raises(ValueError, match="attention"):
        RNNSeq2Seq(10, 10, attention="multiplicative")
    with pytest.raises(ValueError, match="cell"):
        RNNSeq2Seq(10, 10, cell="rnn")
    with pytest.raises(ValueError, match="joint vocabulary"):
        TransformerTranslator(10, 12, shared_embeddings=True)
    with pytest.raises(ValueError, match="divisible"):
        TransformerTranslator(10, 10, d_model=30, num_heads=4)
    model = tiny("transformer", tokenizers)
    with pytest.raises(ValueError, match="source_ids, target_in_ids"):
        model(np.ones((2, 4), "int32"))
    with pytest.raises(ValueError, match="max_length"):
        model((np.ones((1, LENGTH + 1), "int32"), np.ones((1, 3), "int32")))
    with pytest.raises(ValueError, match="max_length"):
        model.generate(np.ones((1, 3), "int32"), LENGTH + 1)
    with pytest.raises(ValueError, match="shape \\(batch, length\\)"):
        model.initial_cache(np.ones((3,), "int32"))


def test_translate_handles_empty_unknown_and_too_long_inputs(task):
    splits, tokenizers, _ = task
    keras.utils.set_random_seed(6)
    model = tiny("luong", tokenizers)
    long_sentence = " ".join(splits.train.source[:6])  # far more than LENGTH words
    texts = ["", "   ", "zzzz qqq ÄÖÜ 😀", long_sentence, splits.test.source[0]]
    with pytest.warns(UserWarning, match="truncated \\(indices \\[3\\]\\)"):
        out = evaluate.translate(model, tokenizers, texts, max_source_length=LENGTH, max_length=LENGTH)
    assert len(out) == 5 and out[0] == "" and out[1] == ""
    assert all(isinstance(t, str) for t in out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        assert evaluate.translate(model, tokenizers, [], max_source_length=LENGTH, max_length=LENGTH) == []
    with pytest.raises(ValueError, match="list of strings"):
        evaluate.translate(model, tokenizers, "one string", max_source_length=LENGTH)
    with pytest.raises(ValueError, match="only strings"):
        evaluate.translate(model, tokenizers, ["a", 3], max_source_length=LENGTH)


def test_corpus_bleu_is_sacrebleu():
    assert evaluate.corpus_bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."]) == pytest.approx(100)
    assert evaluate.corpus_bleu(["completely different words here"], ["the cat sat on the mat ."]) < 10
    with pytest.raises(ValueError, match="hypotheses"):
        evaluate.corpus_bleu(["a"], ["a", "b"])


def test_alignment_plots_are_written(task, tmp_path):
    splits, tokenizers, _ = task
    rnn = tiny("bahdanau", tokenizers)
    transformer = TransformerTranslator(tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size,
                                        num_layers=2, d_model=32, num_heads=2, intermediate_dim=64, max_length=LENGTH)
    source, target = splits.test.source[0], splits.test.target[0]
    (path,) = evaluate.plot_alignment(rnn, tokenizers, source, target, tmp_path / "rnn.png")
    layers = evaluate.plot_alignment(transformer, tokenizers, source, target, tmp_path / "t.png")
    assert [p.rsplit("/", 1)[-1] for p in layers] == ["t_layer1.png", "t_layer2.png"]
    for p in [path, *layers]:
        assert tf.io.gfile.stat(str(p)).length > 5_000
    weights, source_pieces, target_pieces = evaluate.alignment(rnn, tokenizers, source, target)
    assert weights.shape == (len(target.split()) + 1, len(source.split()))
    assert source_pieces == source.split() and target_pieces == target.split() + ["[END]"]
    with pytest.raises(ValueError, match="no attention"):
        evaluate.alignment(tiny("seq2seq", tokenizers), tokenizers, source, target)


def test_module_exports_the_five_models():
    assert MODELS == ("seq2seq", "bahdanau", "luong", "local", "transformer")
    local = nmt_model.build_model("local", 10, 10).decoder.attention
    assert (local.mode, local.position) == ("local-p", "diagonal")
    config = nmt_model.build_model("local", 10, 10).get_config()
    del config["position"]  # saved before local-p's diagonal existed
    assert nmt_model.RNNSeq2Seq.from_config(config).decoder.attention.position == "paper"
