"""The local multi-worker launcher: each worker gets its own TF_CONFIG (the same cluster, its own index, distinct
free ports), output is prefixed by worker, a failed worker stops the group, and the group is restarted up to
--max-restarts times. Workers here are tiny Python commands (no TensorFlow)."""

import io
import json
import sys

import pytest
from attnlayers.applications.core import launch

PRINT_CONFIG = "import os; print(os.environ['TF_CONFIG'])"


def test_each_worker_gets_the_cluster_and_its_own_index():
    out = io.StringIO()
    assert launch.launch_workers([sys.executable, "-c", PRINT_CONFIG], 3, out=out) == 0
    configs = {}
    for line in out.getvalue().splitlines():
        prefix, _, config = line.partition("] ")
        configs[int(prefix.removeprefix("[worker "))] = json.loads(config)
    assert sorted(configs) == [0, 1, 2]
    workers = configs[0]["cluster"]["worker"]
    assert len(set(workers)) == 3 and all(w.startswith("127.0.0.1:") for w in workers)
    for index, config in configs.items():
        assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


def test_a_failed_worker_stops_the_group_and_the_group_restarts(tmp_path):
    # Worker 1 fails on the first two attempts (counted in a file); worker 0 would otherwise wait for a minute.
    script = (
        "import json, os, pathlib, sys, time\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        f"tries = pathlib.Path({str(tmp_path / 'tries')!r})\n"
        "if index == 1:\n"
        "    n = int(tries.read_text()) if tries.exists() else 0\n"
        "    tries.write_text(str(n + 1))\n"
        "    print('attempt', n, flush=True)\n"
        "    sys.exit(3 if n < 2 else 0)\n"
        "time.sleep(0.5 if tries.exists() and int(tries.read_text()) > 2 else 60)\n"
    )
    out = io.StringIO()
    code = launch.launch_workers([sys.executable, "-c", script], 2, max_restarts=1, out=out, grace=2.0)
    assert code == 3  # two failures, one restart allowed
    assert out.getvalue().count("[launcher] worker 1 failed (exit code 3") == 2
    assert "restarting (1 of 1)" in out.getvalue()
    out = io.StringIO()
    assert launch.launch_workers([sys.executable, "-c", script], 2, max_restarts=1, out=out, grace=2.0) == 0
    assert "[worker 1] attempt 2" in out.getvalue()


def test_a_killed_worker_reports_its_signal():
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert launch.launch_workers([sys.executable, "-c", kill_self], 1, out=io.StringIO()) == 128 + 9


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="`command` must be a non-empty list"):
        launch.launch_workers("python train.py", 2)
    with pytest.raises(ValueError, match="num_workers"):
        launch.launch_workers(["true"], 0)
    with pytest.raises(ValueError, match="index"):
        launch.tf_config(["127.0.0.1:1"], 1)


def test_the_example_script_passes_the_command_after_the_separator(monkeypatch):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "examples" / "launch_workers.py"
    spec = importlib.util.spec_from_file_location("launch_workers_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = example.parse_args(["--workers", "3", "--", "python", "train.py", "--strategy", "multi-worker"])
    assert args.workers == 3 and args.command == ["python", "train.py", "--strategy", "multi-worker"]
    with pytest.raises(SystemExit):
        example.parse_args(["--workers", "2"])
