"""Smoke test of examples/train_nmt.py: flags, a one-epoch run on the synthetic task with every artefact
(BLEU table, alignment heatmap, translate SavedModel, results.json), and clear errors for bad flags."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_nmt.py"
ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


def run(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env=ENV, cwd=cwd)


def test_help_explains_every_flag(tmp_path):
    result = run("--help", cwd=tmp_path)
    assert result.returncode == 0
    for flag in ("--model", "--data", "--epochs", "--batch-size", "--strategy", "--minutes", "--beam-size", "--out"):
        assert flag in result.stdout
    for choice in ("seq2seq", "bahdanau", "luong", "local", "transformer", "tsv:PATH", "mirrored"):
        assert choice in result.stdout


def test_bad_flags_fail_with_a_message(tmp_path):
    result = run("--data", "wikipedia", cwd=tmp_path)
    assert result.returncode == 2 and "--data must be synthetic, de-en or tsv:PATH" in result.stderr
    result = run("--model", "rnn", cwd=tmp_path)
    assert result.returncode == 2 and "invalid choice" in result.stderr
    result = run("--epochs", "0", cwd=tmp_path)
    assert result.returncode == 2 and "--epochs must be at least 1" in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("sacrebleu") is None, reason="needs sacrebleu (test extra)")
def test_one_epoch_on_a_tsv_file_writes_every_artefact(tmp_path):
    from attnlayers.applications import nmt

    pairs = nmt.synthetic_pairs(900, seed=2, max_length=8)
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    result = run("--model", "luong", "--data", f"tsv:{tsv}", "--epochs", "1", "--size", "tiny", "--vocabulary-size",
                 "150", "--max-length", "16", "--beam-size", "2", "--num-test", "50", "--verbose", "2", "--out",
                 str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "| luong | tsv:" in result.stdout and "BLEU beam (k=2)" in result.stdout
    assert (out / "alignment.png").stat().st_size > 5_000
    assert (out / "translator" / "saved_model.pb").exists()
    assert list((out / "logs").rglob("events.out.tfevents.*")), "no TensorBoard logs"
    results = json.loads((out / "results.json").read_text())
    assert set(results["bleu"]) == {"greedy", "beam (k=2)"}
    assert all(0.0 <= b <= 100.0 for b in results["bleu"].values())
