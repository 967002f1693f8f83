"""Smoke test of examples/train_captioning.py: a short run on generated scenes with every artefact (the metrics
table with localization, the attention pictures, the caption SavedModel, results.json), and clear errors. The run's
caption SavedModel is served in a process where attnlayers, keras and keras_hub cannot be imported: it agrees with
the script's in-process beam search; gray, RGBA, other sizes and empty batches are served, other channel counts
refused (test_export.py: a model without attention, the image conversion)."""

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

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "examples" / "train_captioning.py"
ENV = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}


SERVE = """
import json, sys
hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
import numpy as np
import tensorflow as tf
captioner = tf.saved_model.load(sys.argv[1])
images = np.load(sys.argv[2])
out = captioner.signatures["caption"](images=tf.constant(images))
gray = captioner.caption(tf.constant(images[..., :1]))
rgba = captioner.caption(tf.concat([images, np.full(images.shape[:3] + (1,), 255, np.uint8)], -1))
large = captioner.caption(tf.image.resize(images, (40, 56), method="nearest"))
empty = captioner.caption(tf.zeros((0, 30, 30, 3), tf.uint8))
try:
    captioner.caption(tf.zeros((1, 16, 16, 2), tf.uint8))
    refused = ""
except tf.errors.InvalidArgumentError as error:
    refused = error.message
print(json.dumps({
    "caption": [c.decode() for c in out["caption"].numpy()], "token_ids": out["token_ids"].numpy().tolist(),
    "attention": list(out["attention"].shape), "attention_sums": out["attention"].numpy().sum((2, 3)).tolist(),
    "first_attention": out["attention"].numpy()[0].tolist(),
    "gray": len(gray["caption"]), "rgba": [c.decode() for c in rgba["caption"].numpy()],
    "large": len(large["caption"]), "empty": list(empty["caption"].shape), "refused": refused,
}))
"""


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
         "--verbose", "0", "--viewer", "--scheduled-sampling", "inverse_sigmoid:2", "--doubly-stochastic-steps", "2",
         "--learning-rate", "0.01"],  # 3 steps: captions that end before --max-length (served below)
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

    # The caption SavedModel, served without attnlayers / keras, captions the run's 8 test scenes (generated again
    # here: the same seed) as the script's in-process beam search did (results.json "captions"; BeamSearch(2),
    # --max-length 20: the export's settings), with one attention map per generated token.
    from attnlayers.applications.captioning import data

    images = data.load_scenes(96, 8, 8, image_size=32, seed=0).test.images
    np.save(tmp_path / "images.npy", images)
    served = serve_alone(SERVE, out / "captioner", tmp_path / "images.npy", cwd=tmp_path)
    expected = result["captions"]
    assert len(expected) == 8 and served["caption"] == expected and served["rgba"] == expected
    tokens = np.asarray(served["token_ids"])
    assert tokens.shape == (8, 20) and (tokens[:, 0] == data.CaptionVocabulary.start_token_id).all()
    grid = [int(n) for n in re.search(r"\(grid \((\d+), (\d+)\)\)", run.stdout).groups()]
    assert served["attention"] == [8, 19] + grid
    sums = np.asarray(served["attention_sums"])  # one map per generated token, zero after [end]
    lengths = (tokens[:, 1:] != data.CaptionVocabulary.pad_token_id).sum(1)
    for row, n in zip(sums, lengths):
        np.testing.assert_allclose(row[:n], 1.0, rtol=1e-4)
        np.testing.assert_allclose(row[n:], 0.0)
    assert lengths.min() < 19, served["caption"]  # a caption ended: its later maps are zero
    # The maps depend on the image: the first test image's served maps are the viewer's (the script's in-process
    # maps of the same caption; stored to 16 bits, within 7.6e-6).
    from attnlayers.viewer import read_attention_viewer

    maps = read_attention_viewer(out / "viewer.html")["images"]["caption"]["weights"][0, 0]  # (words + end, cells)
    first = np.asarray(served["first_attention"]).reshape(19, -1)
    assert maps.shape == (lengths[0], first.shape[1])
    np.testing.assert_allclose(first[: lengths[0]], maps, atol=1e-5)
    assert served["gray"] == 8 and served["large"] == 8 and served["empty"] == [0]
    assert "1 (gray), 3 (RGB) or 4 (RGBA) channels" in served["refused"]


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
