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

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_training.py"
# The gpt part runs in test_isolated_sides_and_their_profiles (each side in its own process).
ROWS = {("bert", "fit"), ("bert", "train_on_batch"), ("generate", "generate, batch 1"), ("generate", "generate, batch 8")}


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (the jax extra)")
def test_gpu_training_benchmark_runs_every_part_at_tiny_size(tmp_path):
    out = tmp_path / "gpu_training.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = ["--size", "tiny", "--steps", "2", "--repeats", "1", "--parts", "bert,generate", "--json", str(out),
            "--markdown"]
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
    assert "| BERT MLM training (B 2 x T 32) | fit |" in run.stdout  # the --markdown table


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax (the jax extra)")
def test_isolated_sides_and_their_profiles(tmp_path):
    """--isolate trains each side in its own process and merges the two into the same rows; --profile keeps a trace
    per side, which xplane_summary.py reads (on a CPU the trace holds no GPU kernels: it says so with zero time)."""
    out, profiles = tmp_path / "gpt.json", tmp_path / "profiles"
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = ["--size", "tiny", "--steps", "2", "--parts", "gpt", "--isolate", "--profile", str(profiles),
            "--json", str(out)]
    run = subprocess.run([sys.executable, str(SCRIPT), *argv], check=False, env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["part"], r["method"]) for r in rows} == {("gpt", "fit"), ("gpt", "train_on_batch")}
    pids = set()
    for row in rows:
        assert row["ratio"] == pytest.approx(row["ours"]["step_ms"] / row["peer"]["step_ms"])
        for role in ("peer", "ours"):
            assert row[role]["profile"] == str(profiles / f"gpt-{role}.xplane.pb")
            pids.add((role, row[role]["process"]))
    assert len({pid for _, pid in pids}) == 2  # one process per side
    spec = importlib.util.spec_from_file_location("xplane_summary", SCRIPT.parent / "xplane_summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    assert summary.load_events(str(profiles / "gpt-ours.xplane.pb")) == []  # no GPU plane on a CPU
    assert summary.instruction("fusion_3271", {"hlo_op": "command_buffer_1"}) == "fusion.3271"
    assert summary.instruction("nvjet_sm90_tst_128x160", {"hlo_op": "command_buffer_1"}) is None
    assert summary.instruction("x", {"hlo_op": "custom-call.48"}) == "custom-call.48"
    assert summary.layer_kind("jit(train_step)/transpose(jvp(decoder))/transformerdecoderblock_11/self_attention/"
                              "dropout/select_n") == "decoder/transformerdecoderblock/self_attention/dropout (backward)"
