"""Smoke test of examples/train_captioning.py: a short run on generated scenes with every artefact (the metrics
table with localization, the attention pictures, the caption SavedModel, results.json), and clear errors."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_captioning.py"
ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_captioning_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_explains_every_flag(script, capsys):
    with pytest.raises(SystemExit) as exit_:
        script.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exit_.value.code == 0
    for flag in ("--attention", "--estimator", "--query", "--data", "--encoder", "--encoder-weights", "--fine-tune",
                 "--feature-cache", "--doubly-stochastic-steps",
                 "--epochs", "--minutes", "--batch-size", "--strategy", "--precision", "--beam-size", "--out"):
        assert flag in text
    for choice in ("soft", "hard", "none", "reinforce", "gumbel", "flickr8k:DIR", "coco:DIR", "mirrored"):
        assert choice in text


@pytest.mark.parametrize("argv, message", [
    (["--attention", "local"], "invalid choice"),
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--max-length", "2"], "--max-length must be at least 3"),
    (["--doubly-stochastic-steps", "-1"], "--doubly-stochastic-steps must be >= 0"),
    (["--attention", "transformer", "--scheduled-sampling", "exponential:0.99"],
     "--scheduled-sampling applies to --attention soft and hard"),
])
def test_bad_flags_fail_with_a_message(script, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        script.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_short_run_writes_every_artefact(tmp_path):
    out = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", "scenes:96", "--num-test", "8", "--num-validation", "8",
         "--image-size", "32", "--epochs", "1", "--batch-size", "32", "--beam-size", "2", "--out", str(out),
         "--verbose", "0", "--viewer", "--scheduled-sampling", "inverse_sigmoid:2", "--doubly-stochastic-steps", "2"],
        capture_output=True, text=True, timeout=600, env=ENV, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    for header in ("BLEU-1", "BLEU-4", "CIDEr", "exact_match", "localization"):
        assert header in run.stdout
    result = json.loads((out / "results.json").read_text())
    assert result["training"]["epochs"] == 1 and 0.0 <= result["localization"] <= 1.0
    assert len(result["pictures"]) == 4 and all(pathlib.Path(p).stat().st_size > 0 for p in result["pictures"])
    assert result["pictures"][-1] == str(out / "viewer.html")  # --viewer: the first test image's word maps
    assert (out / "captioner" / "saved_model.pb").exists() and (out / "logs").is_dir()
    assert result["scheduled_sampling"] == "inverse_sigmoid:2 (sample)"  # eps_i = 2 / (2 + exp(i / 2)), logged
    assert 0.0 < result["training"]["history"]["scheduled_sampling_epsilon"][-1] < 2 / 3
    assert result["doubly_stochastic_steps"] == 2  # the penalty faded out within the run's 3 steps


def test_data_problems_are_one_line_errors(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--data", f"flickr8k:{tmp_path / 'missing'}"],
                         capture_output=True, text=True, timeout=300, env=ENV, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("train_captioning.py: error:")
    assert not (tmp_path / "artifacts").exists()


def test_epochs_and_minutes_follow_the_shared_budget_rule(script, capsys):
    from attnlayers.applications.core.runs.cli import UNBOUNDED_EPOCHS

    assert script.parse_args([]).epochs == 30  # the default, no budget
    assert script.parse_args(["--minutes", "1"]).epochs == UNBOUNDED_EPOCHS  # until the budget ends
    both = script.parse_args(["--epochs", "3", "--minutes", "2"])  # whichever ends first
    assert (both.epochs, both.minutes) == (3, 2.0)
    with pytest.raises(SystemExit):
        script.parse_args(["--minutes", "-1"])
    assert "--minutes must be a positive number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "passes over the training captions (default: 30 without --minutes" in text
    assert "with --epochs, whichever ends first" in text
