"""The local multi-worker launcher: each worker gets its own TF_CONFIG (the same cluster, its own index, distinct
free ports), output is prefixed by worker, a failed worker stops the group (SIGKILLed after the grace when it
ignores SIGTERM), and the group is restarted, on new ports once the old one is gone, up to --max-restarts times.
Workers here are tiny Python commands (no TensorFlow)."""

import io
import json
import sys
import time

import pytest
from attnlayers.applications.core.runs import launch

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
    # Worker 1 fails on the first two attempts (counted in a file); worker 0 waits (up to a minute) for its third.
    script = (
        "import json, os, pathlib, sys, time\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        f"tries = pathlib.Path({str(tmp_path / 'tries')!r})\n"
        "if index == 1:\n"
        "    n = int(tries.read_text()) if tries.exists() else 0\n"
        "    tries.write_text(str(n + 1))\n"
        "    print('attempt', n, flush=True)\n"
        "    sys.exit(3 if n < 2 else 0)\n"
        "deadline = time.monotonic() + 60\n"  # worker 1 may write its third try after this worker starts
        "while time.monotonic() < deadline and not (tries.exists() and int(tries.read_text() or 0) > 2):\n"
        "    time.sleep(0.1)\n"
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


def test_a_restarted_group_starts_after_the_old_one_is_gone_on_new_ports(tmp_path):
    """Worker 1 fails at once on the first attempt; worker 0 ignores SIGTERM (as TensorFlow's multi-worker runtime
    does) and would wait for a minute: it is SIGKILLed after the grace, before the second group starts (whose
    workers find no process of the first alive), and the second group listens on other ports."""
    script = (
        "import json, os, pathlib, signal, sys, time\n"
        "config = json.loads(os.environ['TF_CONFIG'])\n"
        "index, mine = config['task']['index'], ','.join(config['cluster']['worker'])\n"
        f"log = pathlib.Path({str(tmp_path / 'log')!r})\n"
        "lines = [line.split() for line in log.read_text().splitlines()] if log.exists() else []\n"
        "old = [int(pid) for _, addresses, pid in lines if addresses != mine]\n"
        "def alive(pid):\n"
        "    try:\n"
        "        os.kill(pid, 0)\n"
        "        return True\n"
        "    except ProcessLookupError:\n"
        "        return False\n"
        "print('attempt', 1 if old else 0, 'old alive', sum(map(alive, old)), flush=True)\n"
        "with log.open('a') as f:\n"
        "    f.write(f'{index} {mine} {os.getpid()}\\n')\n"
        "if index == 1:\n"
        "    sys.exit(0 if old else 3)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(0.5 if old else 60)\n"
    )
    out = io.StringIO()
    start = time.monotonic()
    assert launch.launch_workers([sys.executable, "-c", script], 2, max_restarts=1, out=out, grace=0.5) == 0
    assert time.monotonic() - start < 30  # not the minute worker 0 would have slept
    log = out.getvalue()
    assert "[launcher] worker 1 failed (exit code 3; the group's [-9, 3])" in log  # worker 0: SIGKILLed
    assert "[worker 0] attempt 1 old alive 0" in log and "[worker 1] attempt 1 old alive 0" in log
    first, second = {line.split()[1] for line in (tmp_path / "log").read_text().splitlines()}
    assert not set(first.split(",")) & set(second.split(","))
