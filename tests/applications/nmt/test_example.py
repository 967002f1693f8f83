"""Smoke test of examples/train_nmt.py: flags, a one-epoch run on a TSV file with every artefact (BLEU table,
alignment heatmap, translate SavedModel, results.json, the phase timings), and clear errors: bad flags, and
data problems (a missing or empty file) in one line, exit status 2, no traceback, nothing written. The run's
translate SavedModel (an RNN model's) is served in a process where attnlayers cannot be imported and agrees with
the script's own in-process beam search (test_export.py serves a Transformer's export the same way)."""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from model_harness import serve_alone

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_nmt.py"
ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


# TensorFlow's own start-up lines (written by its C++ runtime before Python logging is set up), not the script's.
TF_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d|To enable the following)")


# Serves OUT/translator where attnlayers, keras and keras_hub cannot be imported (tensorflow_text only).
SERVE = """
import json, sys
hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
import tensorflow as tf
unhide("keras")  # noqa: F821  tensorflow_text imports keras itself (tf.keras); attnlayers stays blocked
import tensorflow_text  # noqa: F401  registers the SentencePiece ops
texts = json.loads(sys.argv[2])
translator = tf.saved_model.load(sys.argv[1])
out = translator.signatures["translate"](text=tf.constant(texts))
empty_batch = translator.translate(tf.constant([], tf.string))
bad_utf8 = translator.translate(tf.constant([b"\\xff\\xfe abc"]))
print(json.dumps({
    "translation": [t.decode() for t in out["translation"].numpy()],
    "truncated": out["truncated"].numpy().tolist(), "empty": out["empty"].numpy().tolist(),
    "token_ids": out["token_ids"].numpy().tolist(), "score": out["score"].numpy().tolist(),
    "empty_batch": list(empty_batch["translation"].shape), "bad_utf8": bad_utf8["translation"].numpy()[0].decode(
        "utf-8", "replace"),
}))
"""


def run(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env=ENV, cwd=cwd)


@pytest.fixture(scope="module")
def script():
    """The script as a module, for checks that need no fresh process (it imports TensorFlow, already here)."""
    spec = importlib.util.spec_from_file_location("train_nmt_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_explains_every_flag(script, capsys):
    with pytest.raises(SystemExit) as exit_:
        script.parse_args(["--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0
    for flag in ("--model", "--data", "--epochs", "--batch-size", "--strategy", "--minutes", "--beam-size", "--out"):
        assert flag in text
    for choice in ("seq2seq", "bahdanau", "luong", "local", "transformer", "tsv:PATH", "mirrored", "multi-worker",
                   "tpu", "mixed_bfloat16", "lowres", "--variant", "--precision"):
        assert choice in text
    text = " ".join(text.split())
    assert "with --epochs, whichever ends first" in text and "as many as the budget allows" in text  # the budget rule
    for flag in ("--num-validation", "--num-test", "--header", "--columns"):
        assert flag in text
    assert "min(asked, 10% of the pairs), at least 1 pair" in text  # the held-out rule


@pytest.mark.parametrize("argv, message", [
    (["--data", "wikipedia"], "--data must be synthetic, de-en or tsv:PATH"),
    (["--model", "rnn"], "invalid choice"),
    (["--model", "seq2seq", "--scheduled-sampling", "linear:1,0.01"], "--scheduled-sampling applies to the models with"),
    (["--scheduled-sampling", "cosine:3"], "Unknown sampling schedule 'cosine:3'"),
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--precision", "float8"], "invalid choice"),
    (["--model", "bahdanau", "--variant", "lowres"], "--variant lowres is not a recipe of --model bahdanau"),
    (["--minutes", "0"], "--minutes must be a positive number"),
    (["--num-validation", "0"], "--num-validation must be at least 1"),
    (["--data", "tsv:x", "--header", "maybe"], "invalid choice"),
    (["--data", "tsv:x", "--columns", "1"], "expected SOURCE,TARGET field numbers such as 1,2"),
    (["--data", "tsv:x", "--columns", "2,2"], "expected two different field numbers counted from 1"),
    (["--data", "tsv:x", "--columns", "0,1"], "expected two different field numbers counted from 1"),
    (["--columns", "1,2"], "--columns applies to --data tsv:PATH only"),
    (["--data", "de-en", "--header", "no"], "--header applies to --data tsv:PATH only"),
])
def test_bad_flags_fail_with_a_message(script, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        script.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_defaults_are_the_best_recipes(script):
    assert script.parse_args(["--model", "transformer"]).variant == "budgeted"
    assert script.parse_args([]).variant == "base"
    assert script.parse_args(["--model", "luong", "--size", "tiny"]).variant == "tiny"  # the older flag


@pytest.mark.parametrize("problem", ["empty", "blank lines", "no tabs"])
def test_data_problems_are_one_line_before_anything_is_written(script, capsys, tmp_path, problem):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text({"empty": "", "blank lines": "\n  \n", "no tabs": "ein Satz\nnoch einer\n"}[problem])
    out = tmp_path / "run"
    assert script.main(["--data", f"tsv:{tsv}", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("train_nmt.py: error: ") and str(tsv) in lines[0], lines
    assert not out.exists()


def test_a_missing_file_is_one_line_with_no_traceback_and_no_folder(tmp_path):
    tsv = tmp_path / "missing.tsv"
    result = run("--data", f"tsv:{tsv}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip() and not TF_LOG.match(line)]
    assert lines == [f"train_nmt.py: error: {tsv}: no such file (--data tsv:PATH needs a file of "
                     "source<TAB>target lines)"], result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "artifacts").exists()


def test_one_epoch_on_a_tsv_file_writes_every_artefact(tmp_path):
    from attnlayers.applications import nmt
    from attnlayers.viewer import read_attention_viewer

    pairs = nmt.synthetic_pairs(900, seed=2, max_length=8)
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    result = run("--model", "luong", "--data", f"tsv:{tsv}", "--epochs", "1", "--variant", "tiny",
                 "--vocabulary-size", "150", "--max-length", "8", "--beam-size", "2", "--num-test", "50", "--verbose",
                 "2", "--minutes", "30", "--viewer", "--scheduled-sampling", "linear:1,0.01", "--out", str(out),
                 cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "| luong | tsv:" in result.stdout and "BLEU beam (k=2)" in result.stdout
    assert "truncated at --max-length 8: " in result.stdout
    assert "the 30-minute time budget did not stop it" in result.stdout
    assert "after training (not bounded by the time budget): evaluation " in result.stdout
    assert (out / "alignment.png").stat().st_size > 5_000
    viewer = read_attention_viewer(out / "viewer.html")  # --viewer: the first test pair's alignment
    assert list(viewer["sets"]) == ["alignment"] and viewer["sets"]["alignment"]["target_tokens"][-1] == "[END]"
    assert (out / "translator" / "saved_model.pb").exists()
    assert list((out / "logs").rglob("events.out.tfevents.*")), "no TensorBoard logs"
    results = json.loads((out / "results.json").read_text())
    assert set(results["bleu"]) == {"greedy", "beam (k=2)"}
    assert all(0.0 <= b <= 100.0 for b in results["bleu"].values())
    assert results["variant"] == "tiny" and results["training"]["epochs"] == 1
    assert set(results["seconds"]) == {"train", "evaluate", "pictures", "export"}
    assert 700 < results["truncated"]["train"]["total"] < 900 - 2 * 50 + 1
    assert results["scheduled_sampling"] == "linear:1,0.01,0 (sample)"  # eps_i = max(0, 1 - 0.01 i), logged:
    assert 0.0 <= results["training"]["history"]["scheduled_sampling_epsilon"][-1] < 1.0

    # The translate SavedModel serves without attnlayers and agrees with the script's in-process beam search
    # (BeamSearch(2, alpha=0.6), --max-length 8 for sources and translations: the export's settings) on the three
    # test sentences it printed; empty, unknown, too-long and non-UTF-8 inputs and empty batches are served.
    printed = re.findall(r"\n  (.*)\n    reference: .*\n    model:     (.*)", result.stdout)
    assert len(printed) == 3, result.stdout[-2000:]
    sources, expected = [s for s, _ in printed], [t for _, t in printed]
    long_sentence = " ".join(pairs.source[:5])  # ~30 words > --max-length 8
    texts = sources + ["", "   ", "qqq zzz ÄÖÜ 😀 " + sources[1], long_sentence]
    served = serve_alone(SERVE, out / "translator", json.dumps(texts), cwd=tmp_path)
    assert served["translation"][:3] == expected, (served["translation"], expected)
    assert served["empty"] == [False, False, False, True, True, False, False]
    assert served["translation"][3] == served["translation"][4] == ""
    assert served["truncated"][3:5] == [False, False] and served["truncated"][6]
    assert all(isinstance(t, str) for t in served["translation"])  # unknown characters, truncation: no crash
    tokens = np.asarray(served["token_ids"])
    assert tokens.shape == (7, 8) and (tokens[:, 0] == nmt.START_ID).all()
    assert np.isfinite(served["score"]).all()
    assert served["empty_batch"] == [0] and isinstance(served["bad_utf8"], str)


# --------------------------------------------------------------------------------------------------
# --epochs / --minutes (the shared budget rule), held-out sizes, header rows, columns, the tiny-data warning:
# parse_args and load_data called directly (no training).


def test_epochs_and_minutes_follow_the_shared_budget_rule(script):
    from attnlayers.applications.core.runs.cli import UNBOUNDED_EPOCHS

    assert script.parse_args([]).epochs == 10  # the default, no budget
    minutes = script.parse_args(["--minutes", "1"])
    assert minutes.epochs == UNBOUNDED_EPOCHS and minutes.minutes == 1.0  # until the budget ends
    assert script.parse_args(["--epochs", "3"]).epochs == 3
    both = script.parse_args(["--epochs", "3", "--minutes", "2"])  # whichever ends first
    assert (both.epochs, both.minutes) == (3, 2.0)


def _write_tsv(path, count, header=None, extra=None, seed=2):
    from attnlayers.applications import nmt

    pairs = nmt.synthetic_pairs(count, seed=seed, max_length=6)
    lines = [f"{s}\t{t}" + (f"\t{extra}" if extra else "") for s, t in pairs]
    path.write_text("".join(line + "\n" for line in ([header] if header else []) + lines), encoding="utf-8")
    return pairs


def _load(script, path, *flags):
    return script.load_data(script.parse_args(["--data", f"tsv:{path}", "--vocabulary-size", "120", *flags]))


def _sizes(splits):
    return len(splits.train), len(splits.validation), len(splits.test)


def test_held_out_sizes_scale_smoothly(script, capsys, tmp_path):
    tsv = tmp_path / "pairs.tsv"
    _write_tsv(tsv, 3000)
    assert _sizes(_load(script, tsv)[0]) == (2400, 300, 300)  # was 1000 / 1000 / 1000
    out = capsys.readouterr().out
    assert "held out 300 validation / 300 test pairs of 3,000: each held-out split takes at most 10%" in out
    _write_tsv(tsv, 2999)
    assert _sizes(_load(script, tsv)[0]) == (2401, 299, 299)
    splits, _ = _load(script, tsv, "--num-validation", "50", "--num-test", "20")  # asked sizes below the cap
    assert _sizes(splits) == (2929, 50, 20) and "held out" not in capsys.readouterr().out.split("299 test")[-1]


def test_synthetic_keeps_its_sizes(script, capsys):
    splits, _ = script.load_data(script.parse_args([]))
    assert _sizes(splits) == (5000, 500, 500)
    splits, _ = script.load_data(script.parse_args(["--num-validation", "100", "--num-test", "200"]))
    assert _sizes(splits) == (5700, 100, 200)
    captured = capsys.readouterr()
    assert "held out" not in captured.out and "warning" not in captured.err  # no cap, no tiny-data warning


@pytest.mark.parametrize("header", ["source\ttarget", "English\tFrench", "en\tde"])
def test_a_header_row_is_skipped_and_said(script, capsys, tmp_path, header):
    tsv = tmp_path / "pairs.tsv"
    pairs = _write_tsv(tsv, 40, header=header)
    splits, _ = _load(script, tsv)
    assert sum(_sizes(splits)) == 40 and header.split("\t")[0] not in splits.train.source
    assert f"skipped the header row {header!r} (--header no reads it as a pair)" in capsys.readouterr().out
    splits, _ = _load(script, tsv, "--header", "no")
    assert sum(_sizes(splits)) == 41  # read as a pair
    splits, _ = _load(script, tsv, "--header", "yes")
    assert sum(_sizes(splits)) == 40 and "skipped the header" not in capsys.readouterr().out
    headless = tmp_path / "headless.tsv"
    _write_tsv(headless, 40)
    assert sum(_sizes(_load(script, headless, "--header", "auto")[0])) == 40
    splits, _ = _load(script, headless, "--header", "yes")  # yes: the first line, whatever it is
    kept = splits.train.source + splits.validation.source + splits.test.source
    assert len(kept) == 39 and pairs.source[0] not in kept


def test_a_three_column_file_needs_columns(script, capsys, tmp_path):
    tsv = tmp_path / "fra.txt"
    pairs = _write_tsv(tsv, 30, extra="CC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)")
    with pytest.raises(script.UsageError) as error:
        _load(script, tsv)
    assert str(error.value) == (f"{tsv}, line 1: this line has 3 tab-separated fields: pass --columns 1,2 to take "
                                "the first two (or --columns SOURCE,TARGET to choose which), 30 of 30 lines do not "
                                "have exactly 2 fields")
    splits, _ = _load(script, tsv, "--columns", "1,2")
    assert sum(_sizes(splits)) == 30 and set(splits.train.source) <= set(pairs.source)
    splits, _ = _load(script, tsv, "--columns", "2,1")  # the other direction
    assert set(splits.train.source) <= set(pairs.target)
    with pytest.raises(script.UsageError, match=r"line 1: this line has 3 tab-separated fields; --columns 1,4 "
                                                r"needs at least 4 \(30 of 30 lines have fewer\)"):
        _load(script, tsv, "--columns", "1,4")
    capsys.readouterr()
    assert script.main(["--data", f"tsv:{tsv}", "--out", str(tmp_path / "run")]) == 2  # one line, exit status 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "pass --columns 1,2 to take the first two" in lines[0], lines


def test_tiny_training_data_gets_a_warning(script, capsys, tmp_path):
    tsv = tmp_path / "pairs.tsv"
    _write_tsv(tsv, 5)
    splits, _ = _load(script, tsv)
    assert _sizes(splits) == (3, 1, 1)
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: only 3 training pairs: expect a model that "
                                                       "memorises them, BLEU near 0"), warning
    _write_tsv(tsv, 1300)  # 1,040 training pairs: no warning
    _load(script, tsv)
    assert "warning" not in capsys.readouterr().err
