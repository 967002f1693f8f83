"""XLNet pretraining as a user runs it (examples/pretrain_xlnet.py, applications/xlnet/pretraining.py): the inputs'
layout and factorisation orders (<sep> / <cls> first and never targets, padding last, a uniform order seeded per
batch), a tiny run of the script whose checkpoint is the trained model (the reloaded LM reproduces the reported
held-out loss) and loads into XLNetClassifier, and bad flags refused before any corpus is read."""

import contextlib
import importlib.util
import io
import json
import pathlib

import keras
import numpy as np
import pytest
from attnlayers.applications.bert.pretraining import read_text_documents
from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS, BertTokenizer
from attnlayers.applications.core.inputs import corpora
from attnlayers.applications.xlnet import XLNetClassifier, XLNetPretrainer, load_hf_checkpoint, pretraining
from attnlayers.permutation import prediction_targets
from texts import NOUNS, VERBS, write_documents

ROOT = pathlib.Path(__file__).resolve().parents[3]
WORDS = ["and", "the", "of"] + NOUNS + VERBS


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("pretrain_xlnet_script", ROOT / "examples" / "pretrain_xlnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_inputs_and_orders():
    tokenizer = BertTokenizer(list(SPECIAL_TOKENS) + WORDS + ["."])
    documents = [["and the king saw the city .", "the son kept the bread .", "the lord sent the water ."],
                 ["the people built the house of the land ."]]
    features = pretraining.pretraining_features(pretraining.tokenize_documents(documents, tokenizer), tokenizer, 12)
    ids, segments, real = features["token_ids"], features["segment_ids"], features["padding_mask"]
    sep, cls, pad = tokenizer.sep_token_id, tokenizer.cls_token_id, tokenizer.pad_token_id
    for row in range(len(ids)):  # A <sep> B <sep> <cls>, segment ids 0 / 1 / 2, padded on the right
        n = int(real[row].sum())
        assert list(ids[row, n - 2:n]) == [sep, cls] and (ids[row, :n] == sep).sum() == 2 and (ids[row, n:] == pad).all()
        first = list(ids[row]).index(sep)
        assert (segments[row, :first + 1] == 0).all() and (segments[row, first + 1:n - 1] == 1).all()
        assert segments[row, n - 1] == 2
    assert len(ids) == 4  # chunks of at most 9 pieces: the first document's sentences one at a time, cut at a piece
    def first_orders():
        dataset = pretraining.pretraining_dataset(features, batch_size=4, seed=0, context_tokens=(sep, cls),
                                                  shuffle=False)
        return next(iter(dataset))[0]["order"].numpy()

    order = first_orders()
    np.testing.assert_array_equal(order, first_orders())  # seeded: the same orders again
    context = (ids == sep) | (ids == cls)
    for row in range(len(ids)):
        assert sorted(order[row]) == list(range(12))
        n, m = int(real[row].sum()), int(context[row].sum())
        assert set(order[row, :m]) == set(np.flatnonzero(context[row]))  # context first
        assert list(order[row, n:]) == list(range(n, 12))  # padding last, in position order
    targets = np.asarray(prediction_targets(order, 2.0, padding_mask=real))
    assert targets.any() and not (targets & (context | ~real)).any()  # <sep>, <cls> and padding never predicted
    orders = [pretraining.context_first_order(features, [s, 0], (sep, cls)).numpy() for s in range(60)]
    first = {int(o[3, 3]) for o in orders}  # the first non-context place of the last row, over 60 seeds
    assert first == set(np.flatnonzero(real[3] & ~context[3]))  # every other real token comes first sometimes


def test_script_writes_the_trained_model_and_it_fine_tunes(script, tmp_path):
    corpus = write_documents(tmp_path / "corpus.txt", documents=12, lines=5)
    vocabulary = tmp_path / "vocab.txt"  # given with --vocab: no WordPiece training here
    vocabulary.write_text("\n".join(list(SPECIAL_TOKENS) + WORDS + ["."]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    flags = ["--corpus", f"text:{corpus}", "--vocab", str(vocabulary), "--sequence-length", "24", "--batch-size", "4",
             "--steps", "3", "--held-out", "0.2", "--verbose", "0", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert script.main(flags) == 0
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "results.json"):
        assert (out / name).is_file(), name
    result = json.loads((out / "results.json").read_text())
    assert result["training"]["steps"] == 3 and result["held_out"]["targets"] > 0
    assert 0 < result["held_out"]["loss"] and 0 < result["baselines"]["unigram_loss"]
    assert "permutation LM loss" in printed.getvalue()

    # The checkpoint is the trained model: the reloaded LM gives the reported held-out loss on the same inputs.
    tokenizer = BertTokenizer.from_directory(str(out))
    _, held = corpora.split_documents(read_text_documents(str(corpus)), held_out=0.2, seed=0)
    features = pretraining.pretraining_features(pretraining.tokenize_documents(held, tokenizer), tokenizer, 24, 1)
    dataset = pretraining.pretraining_dataset(features, batch_size=4, seed=1, shuffle=False,
                                              context_tokens=(tokenizer.sep_token_id, tokenizer.cls_token_id))
    lm = XLNetPretrainer.from_hf_checkpoint(str(out))
    held_out, _ = pretraining.held_out_scores(lm, dataset, np.zeros(tokenizer.vocabulary_size))
    np.testing.assert_allclose(held_out["loss"], result["held_out"]["loss"], rtol=1e-5)

    backbone, info = load_hf_checkpoint(str(out))
    assert info["prefix"] == "transformer." and backbone.config.pad_token_id == tokenizer.pad_token_id
    ids = np.asarray(features["token_ids"][:2])
    expected = keras.ops.convert_to_numpy(backbone({"token_ids": ids}))
    classifier = XLNetClassifier(backbone, num_classes=3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(classifier.backbone({"token_ids": ids})), expected,
                               atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(lm.backbone({"token_ids": ids})), expected, atol=1e-6)
    assert classifier({"token_ids": ids}).shape == (2, 3)


def test_bad_flags_are_refused_before_any_corpus_is_read(script, tmp_path, capsys, monkeypatch):
    def no_reading(*args, **kwargs):
        raise AssertionError("a corpus was read before the flags were checked")

    monkeypatch.setattr(corpora, "bible_documents", no_reading)
    for argv, message in ((["--steps", "0"], "--steps must be at least 1"),
                          (["--steps", "5", "--epochs", "1"], "give --steps or --epochs, not both"),
                          (["--sequence-length", "4"], "--sequence-length must be at least 5"),
                          (["--K", "0.5"], "--K must be a number >= 1")):
        with pytest.raises(SystemExit) as exit_:
            script.main(argv + ["--out", str(tmp_path / "o")])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert script.main(["--corpus", "wiki", "--out", str(tmp_path / "o")]) == 2
    assert "received 'wiki'" in capsys.readouterr().err
    assert script.main(["--vocab", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o")]) == 2
    assert "none.txt" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
