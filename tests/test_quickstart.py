"""Smoke test of examples/quickstart.py: trains briefly, draws the heatmap, exports and reloads."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="needs the examples extra"
)
def test_quickstart_runs_exports_and_agrees(tmp_path):
    out = tmp_path / "quickstart"
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "1", "--out", str(out), "--seed", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, (
        f"quickstart failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )

    heatmap = out / "attention.png"
    assert heatmap.exists() and heatmap.stat().st_size > 5_000
    assert (out / "saved_model" / "saved_model.pb").exists()
    assert f"wrote {heatmap}" in result.stdout

    diff = re.search(r"max abs diff ([0-9.eE+-]+)", result.stdout)
    assert diff, result.stdout
    assert float(diff.group(1)) < 1e-5

    accuracy = re.search(r"held-out token accuracy: ([0-9.]+)", result.stdout)
    assert accuracy and float(accuracy.group(1)) > 0.5, (
        result.stdout
    )  # one epoch is already far past chance
