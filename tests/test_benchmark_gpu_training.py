"""Smoke test of benchmarks/gpu_training.py at its tiny size, in a subprocess under KERAS_BACKEND=jax (the backend it
is made for; as tests/test_examples_under_jax.py runs train_gpt.py): every part runs, and the JSON holds
every row with positive times, throughputs and ratios, XLA's memory plan of each side, and the same greedy tokens on
both sides of the generation rows (the same weights, float32)."""

import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_training.py"
ROWS = {("gpt", "fit"), ("gpt", "train_on_batch"), ("bert", "fit"), ("bert", "train_on_batch"),
        ("generate", "generate, batch 1"), ("generate", "generate, batch 8")}


@pytest.mark.skipif(importlib.util.find_spec("jax") is None or importlib.util.find_spec("keras_hub") is None,
                    reason="needs jax (the jax extra) and keras_hub")
def test_gpu_training_benchmark_runs_every_part_at_tiny_size(tmp_path):
    out = tmp_path / "gpu_training.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = ["--size", "tiny", "--steps", "2", "--repeats", "1", "--json", str(out), "--markdown"]
    run = subprocess.run([sys.executable, str(SCRIPT), *argv], check=False, env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["environment"]["backend"] == "jax" and record["settings"]["precision"] == "float32"  # CPU default
    rows = record["rows"]
    assert [r for r in rows if "error" in r] == []
    assert {(r["part"], r["method"]) for r in rows} == ROWS
    for row in rows:
        for role in ("peer", "ours"):
            side = row[role]
            assert side["step_ms"] > 0 and side["tokens_per_s"] > 0, (row["method"], role, side)
            assert side["mfu"] is None  # no peak FLOP/s on a CPU
            assert side["peak_bytes"] > 0 and side["memory_source"] == "xla_memory_analysis"
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0
        assert row["ratio"] == pytest.approx(row["ours"]["step_ms"] / row["peer"]["step_ms"])
    for row in rows:
        if row["part"] == "generate":
            assert row["prompt_kept"] and row["tokens_compared"] == row["batch"] * row["new_tokens"]
            assert row["tokens_agree"] == row["tokens_compared"], row  # the same weights: the same greedy tokens
    assert "| GPT-2 training (B 2 x T 32) | fit |" in run.stdout  # the --markdown table
