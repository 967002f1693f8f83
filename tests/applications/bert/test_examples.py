"""Smoke tests of examples/pretrain_bert.py and examples/finetune_bert.py (and the benchmarks' tables) on tiny
corpora written here: the corpus readers of attnlayers.applications.core.inputs.corpora are replaced by fixtures, so
nothing needs the installed Bible, Brown corpus or tweets. Pretraining for a few steps writes a Hugging Face
checkpoint that loads; fine-tuning each task (from it, or from scratch) runs and prints its baseline, and the tagger
exports a SavedModel that serves strings."""

import contextlib
import importlib.util
import io
import json
import pathlib
import random
import sys

import numpy as np
import pytest

from attnlayers.applications.bert import baselines, finetuning, pretraining, runs
from attnlayers.applications.core.inputs import corpora  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]

NOUNS = ["king", "people", "city", "house", "land", "servant", "son", "lord", "water", "bread", "field", "gate"]
VERBS = ["saw", "built", "gave", "found", "kept", "took", "blessed", "sent"]
ADJECTIVES = ["great", "holy", "good", "old", "young", "strong"]
POSITIVE, NEGATIVE, NEUTRAL = ["love", "great", "happy", "awesome"], ["hate", "awful", "sad", "broken"], [
    "car", "road", "today", "drive"]


def _sentence(rng):
    return (f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} "
            f"of the {rng.choice(NOUNS)} .")


def fake_bible_documents(translation="KJV", **kwargs):
    rng = random.Random(0)
    return [[_sentence(rng) for _ in range(6)] for _ in range(40)]


def fake_paraphrase_pairs(seed=0, **kwargs):
    rng = random.Random(seed)

    def pairs(n):
        out = []
        for _ in range(n):
            kjv = _sentence(rng)
            out.append((kjv, kjv.replace("the ", "a ", 1), 1))
            out.append((kjv, _sentence(rng), 0))
        return out

    return {"train": pairs(24), "validation": pairs(6), "test": pairs(6)}


def fake_brown_tagged_sentences(universal_tags=True, **kwargs):
    rng = random.Random(1)
    return [[("The", "DET"), (rng.choice(ADJECTIVES), "ADJ"), (rng.choice(NOUNS), "NOUN"), (rng.choice(VERBS), "VERB"),
             ("the", "DET"), (rng.choice(NOUNS), "NOUN"), (".", ".")] for _ in range(60)]


def fake_tweets(**kwargs):
    rng = random.Random(2)
    return [(f"i {rng.choice(words)} my {rng.choice(NOUNS)} {rng.choice(words)}", label)
            for label, words in enumerate((NEGATIVE, NEUTRAL, POSITIVE)) for _ in range(30)]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pretrain_script():
    return _load("pretrain_bert_script", ROOT / "examples" / "pretrain_bert.py")


@pytest.fixture(scope="module")
def finetune_script():
    return _load("finetune_bert_script", ROOT / "examples" / "finetune_bert.py")


@pytest.fixture
def fake_corpora(monkeypatch):
    for name, fake in (("bible_documents", fake_bible_documents), ("paraphrase_pairs", fake_paraphrase_pairs),
                       ("brown_tagged_sentences", fake_brown_tagged_sentences), ("tweets", fake_tweets)):
        monkeypatch.setattr(corpora, name, fake)


PRETRAIN_FLAGS = ["--config", "tiny", "--vocab-size", "200", "--sequence-length", "32", "--max-predictions", "5",
                  "--batch-size", "8", "--epochs", "2", "--verbose", "0"]


@pytest.fixture(scope="module")
def pretrained(pretrain_script, tmp_path_factory):
    """A checkpoint pretrained for 2 epochs on the fixture documents (and what the script printed)."""
    import keras

    out = tmp_path_factory.mktemp("pretrained")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(corpora, "bible_documents", fake_bible_documents)
        keras.config.set_dtype_policy("float32")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = pretrain_script.main(PRETRAIN_FLAGS + ["--viewer", "--out", str(out)])
    keras.backend.clear_session()
    assert status == 0
    return out, printed.getvalue()


def test_pretraining_writes_a_loadable_checkpoint_and_its_report(pretrained):
    from attnlayers.applications.bert import BertTokenizer, load_hf_checkpoint

    out, printed = pretrained
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "results.json"):
        assert (out / name).is_file(), name
    backbone, info = load_hf_checkpoint(str(out))
    tokenizer = BertTokenizer.from_directory(str(out))
    assert backbone.config.num_layers == 2 and backbone.config.hidden_dim == 128  # the "tiny" preset
    assert backbone.config.vocabulary_size == tokenizer.vocabulary_size and backbone.config.max_sequence_length == 32
    assert info["vocabulary"] and info["do_lower_case"]
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "pretraining" and result["training"]["epochs"] == 2 and result["training"]["steps"] > 0
    for key in ("mlm_accuracy", "nsp_accuracy"):
        assert 0.0 <= result["held_out"][key] <= 1.0
    baselines = result["baselines"]
    assert 0.0 < baselines["mlm_most_frequent_token"] < 1.0 and baselines["nsp_chance"] == 0.5
    assert baselines["masked_tokens"] > 0 and baselines["pairs"] > 0
    history = result["training"]["history"]
    assert len(history["mlm_accuracy"]) == 2 and len(history["val_nsp_accuracy"]) == 2
    assert "most frequent token" in printed and "NSP accuracy" in printed
    if result["pictures"]:  # matplotlib installed
        assert pathlib.Path(result["pictures"][0]).stat().st_size > 0
    assert (out / "logs").is_dir()
    from attnlayers.viewer import read_attention_viewer

    viewer = read_attention_viewer(out / "viewer.html")["sets"]["self-attention"]  # --viewer: a held-out pair
    assert viewer["weights"].shape[:2] == (2, backbone.config.num_heads) and viewer["target_tokens"][0] == "[CLS]"


def test_pretraining_baseline_counts_the_most_frequent_token():
    class Tokenizer:
        special_token_ids = (0, 1, 2, 3, 4)

    counts = np.array([100, 90, 80, 70, 60, 5, 9, 7])  # special tokens are never masked: not the answer
    assert pretraining.most_frequent_token(counts, Tokenizer()) == 6


def test_pretraining_baselines_follow_the_sentence_objective():
    import tensorflow as tf

    def batch(labels):
        return {}, {k: tf.constant(v) for k, v in labels.items()}, {"mlm": tf.constant([[1.0, 1.0], [1.0, 0.0]])}

    mlm = [[7, 5], [7, 7]]  # token 7 is right at 2 of the 3 weighted predictions
    nsp = pretraining.pretraining_baselines([batch({"mlm": mlm, "nsp": [0, 1]})], 7)
    assert nsp["mlm_most_frequent_token"] == pytest.approx(2 / 3) and nsp["nsp_majority"] == 0.5
    assert nsp["pairs"] == 2 and nsp["masked_tokens"] == 3 and nsp["nsp_chance"] == 0.5
    sop = pretraining.pretraining_baselines([batch({"mlm": mlm, "sop": [1, 1]})], 7)
    assert sop["sop_majority"] == 1.0 and sop["sop_chance"] == 0.5 and not any(k.startswith("nsp") for k in sop)
    alone = pretraining.pretraining_baselines([batch({"mlm": mlm})], 7)
    assert set(alone) == {"mlm_most_frequent_token", "pairs", "masked_tokens"} and alone["pairs"] == 2


def _check_served_tagger(path, labels):
    """The exported SavedModel, loaded with TensorFlow alone, tags a sentence word by word."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))  # kept referenced: its variables live as long as it does
    out = loaded.tag(tf.constant(["The old king saw the city ."]))
    tags = [t.decode() for t, start in zip(out["tags"][0].numpy(), out["word_start"][0].numpy()) if start]
    assert len(tags) == 7 and set(tags) <= set(labels)


# Each task, each initialization and --export once (test_export.py serves every head's export; here the script's
# flag is wired through).
@pytest.mark.parametrize("task, init, export", [("pos", "pretrained", True), ("paraphrase", "pretrained", False),
                                                ("sentiment", "scratch", False)])
def test_finetuning_runs_reports_and_exports(task, init, export, pretrained, finetune_script, fake_corpora, tmp_path,
                                            capsys):
    checkpoint, _ = pretrained
    out, export_dir = tmp_path / "run", tmp_path / "model"
    init_flags = ["--init", str(checkpoint)] if init == "pretrained" else [
        "--init", "scratch", "--architecture", str(checkpoint)]
    export_flags = ["--export", str(export_dir)] if export else ["--no-export"]
    status = finetune_script.main(["--task", task, *init_flags, "--epochs", "1", "--batch-size", "8",
                                   "--sequence-length", "24", "--out", str(out), *export_flags, "--verbose", "0"])
    assert status == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == task and result["init"] == init and result["training"]["epochs"] == 1
    # the directory read, never --architecture's default beside pretrained weights
    assert result["architecture"] == str(checkpoint)
    assert result["init_path"] == (str(checkpoint) if init == "pretrained" else None)
    assert result["parameters"] > 0 and result["training"]["steps"] > 0
    assert 0.0 <= result["test"]["accuracy"] <= 1.0 and 0.0 <= result["baseline"]["accuracy"] <= 1.0
    assert result["baseline"]["name"] in printed and f"| {task} | {init} |" in printed
    if task == "sentiment":
        assert 0.0 <= result["test"]["macro_f1"] <= 1.0 and result["metric"] == "macro_f1"
    if task == "pos":  # the fixture sentences are regular: most frequent tag is right for every word
        assert result["baseline"]["accuracy"] == 1.0
    if export:
        assert (export_dir / "saved_model.pb").is_file() and result["export"] == str(export_dir)
        _check_served_tagger(export_dir, result["labels"])
    else:
        assert "export" not in result and not export_dir.exists()
    row = runs.result_row(result)
    assert row[:3] == [task, init, "0"] and len(row) == 7


@pytest.mark.parametrize("argv, message", [
    (["--task", "ner"], "invalid choice"),
    (["--task", "pos", "--epochs", "0"], "--epochs must be at least 1"),
    (["--task", "pos", "--minutes", "-1"], "--minutes must be a positive number"),
])
def test_finetune_flags_are_checked(finetune_script, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        finetune_script.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_or_too_short_initialization_is_a_one_line_error(pretrained, finetune_script, fake_corpora,
                                                                  tmp_path, capsys):
    checkpoint, _ = pretrained
    assert finetune_script.main(["--task", "pos", "--init", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("finetune_bert.py: error: --init") and "not a directory" in error[0]
    assert finetune_script.main(["--task", "pos", "--init", str(checkpoint), "--sequence-length", "64"]) == 2
    assert "position table" in capsys.readouterr().err


def test_pretrain_flags_and_corpus_errors(pretrain_script, tmp_path, capsys, monkeypatch):
    def no_reading(*args, **kwargs):
        raise AssertionError("a corpus was read before --corpus was checked")

    # Bad --corpus values are refused before any corpus is read, whatever this machine has installed.
    monkeypatch.setattr(corpora, "bible_documents", no_reading)
    monkeypatch.setattr(corpora, "tweet_documents", no_reading)
    with pytest.raises(SystemExit) as exit_:
        pretrain_script.parse_args(["--sequence-length", "4"])
    assert exit_.value.code == 2 and "--sequence-length must be at least 5" in capsys.readouterr().err
    assert pretrain_script.main(["--corpus", f"text:{tmp_path / 'missing.txt'}", "--out", str(tmp_path / "o")]) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert pretrain_script.main(["--corpus", "wiki", "--out", str(tmp_path / "o")]) == 2
    assert "expected kjv, tweets or text:PATH, or several joined by + (kjv+tweets); received 'wiki'" in (
        capsys.readouterr().err)
    assert pretrain_script.main(["--corpus", "kjv+", "--out", str(tmp_path / "o")]) == 2
    assert "received ''" in capsys.readouterr().err
    assert pretrain_script.main(["--corpus", f"tweets+text:{tmp_path / 'gone.txt'}", "--out", str(tmp_path / "o")]) == 2
    assert "gone.txt: no such file" in capsys.readouterr().err


def test_pretrain_objective_flag(pretrain_script, tmp_path, capsys, monkeypatch):
    """--objective bert | roberta | albert -> the settings' sentence objective; a sentence weight without a sentence
    objective is refused before any data is read."""
    def no_reading(*args, **kwargs):
        raise AssertionError("a corpus was read before the flags were checked")

    monkeypatch.setattr(corpora, "bible_documents", no_reading)
    chosen = {name: pretrain_script.settings_from_args(pretrain_script.parse_args(["--objective", name]))
              for name in ("bert", "roberta", "albert")}
    assert {name: s.sentence_objective for name, s in chosen.items()} == {"bert": "nsp", "roberta": None,
                                                                          "albert": "sop"}
    assert chosen["bert"] == pretrain_script.settings_from_args(pretrain_script.parse_args([]))  # today's default
    assert pretrain_script.parse_args(["--objective", "albert", "--nsp-weight", "1"]).nsp_weight == 1.0
    with pytest.raises(SystemExit) as exit_:
        pretrain_script.main(["--objective", "roberta", "--nsp-weight", "0.5", "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    assert "--nsp-weight weighs the sentence objective's loss; --objective roberta has none" in capsys.readouterr().err


def test_corpora_joined_by_plus(monkeypatch, tmp_path):
    from attnlayers.applications.core.runs import cli
    from attnlayers.applications.core.inputs import corpora

    monkeypatch.setattr(corpora, "bible_documents", lambda: [["a verse.", "another."]])
    monkeypatch.setattr(corpora, "tweet_documents", lambda seed: [[f"tweet of split {seed}", "and another"]])
    path = tmp_path / "corpus.txt"
    path.write_text("Mine.\nAnd mine.\n\nA second.\n")
    documents = cli.load_corpus(f"kjv+tweets+text:{path}", runs.read_text_documents, seed=1)
    assert documents == [["a verse.", "another."], ["tweet of split 1", "and another"], ["Mine.", "And mine."],
                         ["A second."]]


def test_text_corpus_format(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("In the beginning.\nAnd the earth.\n\n\nSecond document.\n  \nThird, one line.\n")
    assert runs.read_text_documents(path) == [["In the beginning.", "And the earth."], ["Second document."],
                                                 ["Third, one line."]]


def test_evaluation_samples_are_drawn_across_the_split():
    examples = [("text", 0)] * 50 + [("text", 1)] * 50  # grouped by label, as the splits are
    drawn = finetuning.sample(examples, 20, seed=3)
    assert len(drawn) == 20 and {label for _, label in drawn} == {0, 1}
    assert drawn == finetuning.sample(examples, 20, seed=3) and finetuning.sample(examples, None) is examples
    assert finetuning.sample(examples, 500) is examples
    with pytest.raises(ValueError, match="test_examples"):
        runs.FinetuningSettings("pos", test_examples=0)


def test_baselines_are_sensible():
    data = runs.TaskData(*[fake_tweets()] * 3, labels=list(corpora.SENTIMENTS), head="classifier")
    scores = baselines.task_baseline("sentiment", data)
    assert scores["accuracy"] == 1.0 and scores["macro_f1"] == 1.0  # the label words separate the classes
    pairs = fake_paraphrase_pairs()
    data = runs.TaskData(pairs["train"], pairs["validation"], pairs["test"], ["other", "same"], "classifier")
    assert baselines.task_baseline("paraphrase", data)["accuracy"] >= 0.9  # overlap tells same from other
    scores = baselines.classification_scores([0, 0, 1, 2], [0, 1, 1, 1], 3)
    assert scores["accuracy"] == 0.5 and scores["f1"] == [2 / 3, 0.5, 0.0]


def test_benchmark_tables_read_the_results(pretrained, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        pretraining = _load("bert_pretraining_benchmark", ROOT / "benchmarks" / "bert_pretraining.py")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    checkpoint, _ = pretrained
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text((checkpoint / "results.json").read_text())
    assert pretraining.main(["--table", "--results", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| task | init | seed | budget | steps | metric | baseline |"
    assert lines[2].startswith("| pretraining (kjv, tiny, lr 0.001, NSP weight 0.1) | random | 0 | 2 epochs |")
    assert "most frequent token" in lines[2]
    # The benchmarks name the recipe's checkpoint without importing the library: the same NSP weight.
    assert pretraining.RECIPE_NSP_WEIGHT == runs.PretrainingSettings().nsp_weight


def test_runs_re_exports_the_modules_that_hold_the_runs():
    from attnlayers.applications.bert import tables, tasks, training

    modules = (finetuning, pretraining, tables, tasks, training)
    for name in runs.__all__:
        if name != "add_optimizer_arguments":
            assert any(getattr(module, name, None) is getattr(runs, name) for module in modules), name
