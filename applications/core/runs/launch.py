"""Local multi-worker launches: N copies of one training command on this machine, each with the ``TF_CONFIG`` of
``tf.distribute.MultiWorkerMirroredStrategy`` (the cluster's worker addresses on 127.0.0.1 and its own index),
their output prefixed with the worker's index, and the whole group restarted after a failure so that
``BackupAndRestore`` (``core.training.backup``'s, or Keras') resumes it from the last backup.

    launch_workers(["python", "examples/train_nmt.py", "--strategy", "multi-worker"], num_workers=2)

What a multi-worker cluster needs on several machines is the same ``TF_CONFIG`` with the machines' addresses:
:func:`tf_config` writes it. Pure Python (no TensorFlow): the workers import it, this process does not.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from attnlayers.validation import non_negative_int, positive_int


def free_ports(count, host="127.0.0.1"):
    """``count`` TCP ports that were free on ``host`` a moment ago (bound to port 0, then released together, so
    they are distinct)."""
    sockets = []
    try:
        for _ in range(positive_int(count, "count")):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(addresses, index):
    """The ``TF_CONFIG`` JSON of worker ``index`` of the cluster whose workers listen at ``addresses``
    ("host:port", worker 0 first; worker 0 is the chief that writes checkpoints and summaries)."""
    addresses = list(addresses)
    if not addresses or not all(isinstance(a, str) and ":" in a for a in addresses):
        raise ValueError(f"`addresses` must be a non-empty list of 'host:port' strings; received {addresses!r}.")
    if not (isinstance(index, int) and 0 <= index < len(addresses)):
        raise ValueError(f"`index` must be a worker index in [0, {len(addresses)}); received index={index!r}.")
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def _relay(stream, prefix, out):
    """Copies ``stream``'s lines to ``out``, each after ``prefix``."""
    for line in iter(stream.readline, ""):
        out.write(prefix + line)
        out.flush()
    stream.close()


def _stop(processes, grace):
    """SIGTERM, then SIGKILL after ``grace`` seconds, to every process still running; returns once all have
    exited (so a restarted group never meets the old one). TensorFlow's multi-worker runtime catches SIGTERM (its
    preemption notifier records it and training goes on), so a worker waiting in a collective for a dead peer only
    ends at the SIGKILL."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in processes:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_group(command, num_workers, *, host="127.0.0.1", env=None, out=None, grace=3.0, poll=0.2):
    """Starts ``num_workers`` copies of ``command`` with their ``TF_CONFIG`` (on ports free at that moment: a
    restarted group gets new ones) and waits for them.

    When one worker fails (a non-zero exit, e.g. killed), the others cannot go on (MultiWorkerMirroredStrategy's
    collectives wait for every worker): they are stopped (SIGTERM, then SIGKILL after ``grace`` seconds; see
    :func:`_stop`: TensorFlow workers only end at the SIGKILL, which loses nothing of an atomic backup,
    :class:`~attnlayers.applications.core.training.backup.BackupAndRestore`).

    Returns:
        (exit codes, worker 0 first (negative: killed by that signal), the index of the worker that failed first or
        None).
    """
    out = out or sys.stdout
    addresses = [f"{host}:{port}" for port in free_ports(num_workers, host)]
    processes, relays, failed = [], [], None
    for index in range(num_workers):
        worker_env = {**os.environ, **(env or {}), "TF_CONFIG": tf_config(addresses, index)}
        p = subprocess.Popen(command, env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             bufsize=1)
        processes.append(p)
        relay = threading.Thread(target=_relay, args=(p.stdout, f"[worker {index}] ", out), daemon=True)
        relay.start()
        relays.append(relay)
    try:
        while any(p.poll() is None for p in processes):
            failed = next((i for i, p in enumerate(processes) if p.poll() not in (None, 0)), None)
            if failed is not None:  # the others would wait for it forever
                break
            time.sleep(poll)
        if failed is None:
            failed = next((i for i, p in enumerate(processes) if p.returncode != 0), None)
    finally:
        _stop(processes, grace)  # also on KeyboardInterrupt: no orphaned workers
        for relay in relays:
            relay.join(timeout=grace)
    return [p.returncode for p in processes], failed


def launch_workers(command, num_workers=2, *, max_restarts=0, host="127.0.0.1", env=None, out=None, grace=3.0):
    """Runs ``command`` as a local cluster of ``num_workers`` workers (:func:`run_group`), restarting the whole
    group up to ``max_restarts`` times after a failure. With ``BackupAndRestore`` in the training command (every
    example script has ``core.training.backup``'s, through ``standard_callbacks``), a restarted group resumes from the
    last backup instead of from the start.

    Args:
        command: the argv of one worker (e.g. ``["python", "examples/train_gpt.py", "--strategy",
            "multi-worker"]``); every worker runs the same one.
        num_workers: N >= 1.
        max_restarts: how many times a failed group is started again (0: never).
        host: the address the workers listen on (127.0.0.1: this machine).
        env: extra environment variables for the workers.
        out: where the workers' prefixed output goes (default sys.stdout).
        grace: seconds between the SIGTERM and the SIGKILL that stop the rest of a failed group.

    Returns:
        0 when every worker of the last group exited 0, else the exit code of the worker that failed first (a
        signal as 128 + its number, as a shell reports it).
    """
    if isinstance(command, str) or not command or not all(isinstance(part, str) for part in command):
        raise ValueError(f"`command` must be a non-empty list of strings (an argv); received {command!r}.")
    positive_int(num_workers, "num_workers")
    max_restarts = non_negative_int(max_restarts, "max_restarts")
    out = out or sys.stdout
    for attempt in range(max_restarts + 1):
        codes, failed = run_group(command, num_workers, host=host, env=env, out=out, grace=grace)
        if failed is None:
            return 0
        code = codes[failed] if codes[failed] > 0 else 128 - codes[failed]
        out.write(f"[launcher] worker {failed} failed (exit code {codes[failed]}; the group's {codes})" +
                  (f"; restarting ({attempt + 1} of {max_restarts})\n" if attempt < max_restarts else "\n"))
        out.flush()
    return code


__all__ = ["free_ports", "launch_workers", "run_group", "tf_config"]
