"""The example scripts under KERAS_BACKEND=jax, as a newcomer with a GPU machine runs them (README, "Training on a
GPU"), in a subprocess on 2 host devices. In a top-level file: the suite's JAX run (.ci/run) collects the layer and
GPT tests, and this subprocess needs no second run under that backend."""

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest
from texts import write_documents

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (the jax extra)")
def test_the_script_trains_under_jax_data_parallel_in_bfloat16(tmp_path):
    """What a GPU run under JAX does (docs/guides/training-at-scale.md), on 2 host devices:
    keras.distribution.DataParallel set before the model is built, each batch of 40 windows split over them,
    XLA-compiled steps in mixed_bfloat16,
    2 steps (the 94 training windows in whole batches: static shapes), then the held-out evaluation (padded to whole
    batches: every held-out token counted) and the Hugging Face checkpoint."""
    corpus, out = write_documents(tmp_path / "corpus.txt"), tmp_path / "run"
    argv = ["--config", "tiny", "--vocab-size", "300", "--sequence-length", "16", "--batch-size", "40", "--epochs",
            "1", "--held-out", "0.2", "--verbose", "2", "--strategy", "data-parallel", "--precision", "mixed_bfloat16",
            "--corpus", f"text:{corpus}", "--out", str(out)]
    env = {**os.environ, "KERAS_BACKEND": "jax", "XLA_FLAGS": " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"]).strip()}
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "train_gpt.py"), *argv], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert result["runtime"] == "JAX DataParallel (cpu), 2 replicas, mixed_bfloat16", result["runtime"]
    assert result["training"]["steps"] == result["train_windows"] // 40 == 2  # whole batches only
    assert all(math.isfinite(v) for key in ("loss", "val_loss") for v in result["training"]["history"][key])
    assert math.isfinite(result["held_out"]["perplexity"]) and result["held_out"]["tokens"] > 0
    assert {p.name for p in (out / "checkpoint").iterdir()} >= {"config.json", "model.safetensors", "vocab.json",
                                                              "merges.txt"}
    assert json.loads((out / "checkpoint" / "config.json").read_text())["n_layer"] == 2
