"""Smoke test of examples/train_nmt.py: flags, a one-epoch run on a TSV file with every artefact (BLEU table,
alignment heatmap, translate SavedModel, results.json, the phase timings), and clear errors: bad flags, and
data problems (a missing or empty file) in one line, exit status 2, no traceback, nothing written."""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_nmt.py"
ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


# TensorFlow's own start-up lines (written by its C++ runtime before Python logging is set up), not the script's.
TF_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d|To enable the following)")


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
    assert "training only" in " ".join(text.split())  # what --minutes bounds


@pytest.mark.parametrize("argv, message", [
    (["--data", "wikipedia"], "--data must be synthetic, de-en or tsv:PATH"),
    (["--model", "rnn"], "invalid choice"),
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--precision", "float8"], "invalid choice"),
    (["--model", "bahdanau", "--variant", "lowres"], "--variant lowres is not a recipe of --model bahdanau"),
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


@pytest.mark.skipif(importlib.util.find_spec("sacrebleu") is None, reason="needs sacrebleu (test extra)")
def test_one_epoch_on_a_tsv_file_writes_every_artefact(tmp_path):
    from attnlayers.applications import nmt

    pairs = nmt.synthetic_pairs(900, seed=2, max_length=8)
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    result = run("--model", "luong", "--data", f"tsv:{tsv}", "--epochs", "1", "--variant", "tiny",
                 "--vocabulary-size", "150", "--max-length", "8", "--beam-size", "2", "--num-test", "50", "--verbose",
                 "2", "--minutes", "30", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "| luong | tsv:" in result.stdout and "BLEU beam (k=2)" in result.stdout
    assert "truncated at --max-length 8: " in result.stdout
    assert "the 30-minute time budget did not stop it" in result.stdout
    assert "after training (not bounded by the time budget): evaluation " in result.stdout
    assert (out / "alignment.png").stat().st_size > 5_000
    assert (out / "translator" / "saved_model.pb").exists()
    assert list((out / "logs").rglob("events.out.tfevents.*")), "no TensorBoard logs"
    results = json.loads((out / "results.json").read_text())
    assert set(results["bleu"]) == {"greedy", "beam (k=2)"}
    assert all(0.0 <= b <= 100.0 for b in results["bleu"].values())
    assert results["variant"] == "tiny" and results["training"]["epochs"] == 1
    assert set(results["seconds"]) == {"train", "evaluate", "pictures", "export"}
    assert 700 < results["truncated"]["train"]["total"] < 900 - 2 * 50 + 1
