"""Smoke test of examples/quickstart.py: trains the attention translator briefly, scores it, draws the heatmap,
restores the best epoch's weights, exports the translate SavedModel and checks the reloaded one agrees with
in-process decoding."""

import os
import pathlib
import re
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart_trains_translates_exports_and_agrees(tmp_path):
    out = tmp_path / "quickstart"
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "3", "--out", str(out), "--seed", "1"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, f"quickstart failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    heatmap = out / "alignment.png"
    assert heatmap.exists() and heatmap.stat().st_size > 5_000
    assert (out / "translator" / "saved_model.pb").exists()
    assert f"wrote {heatmap}" in result.stdout
    assert re.search(r"agrees with in-process decoding on (\d+)/\1 ", result.stdout), result.stdout

    bleu = [float(b) for b in re.findall(r"test BLEU, [^:]+: ([0-9.]+)", result.stdout)]
    assert len(bleu) == 2 and all(b > 30 for b in bleu), result.stdout  # 3 epochs already translate
    accuracy = re.search(r"alignment accuracy: ([0-9.]+)", result.stdout)
    assert accuracy and float(accuracy.group(1)) > 0.5, result.stdout  # chance is ~1/7
    assert re.search(r"weights: epoch [123] \(best val_accuracy", result.stdout), result.stdout  # the best epoch's
    assert (out / "results.json").exists()
