"""Steps per second of every application's small scale-out job (``benchmarks/jobs/<app>.py``, run by
``python -m benchmarks.jobs``) on one device against two: MirroredStrategy over 2 logical CPUs,
MultiWorkerMirroredStrategy over 2 local worker processes, and (KERAS_BACKEND=jax) DataParallel over 2 host devices
against one.

    python benchmarks/scale_out.py                       # every application, every placement -> a table
    python benchmarks/scale_out.py --apps gpt --steps 60 --jit-compile

Every run is its own process (a placement is fixed when a process starts), with the same global batch, so two
replicas each compute half of it: scaling efficiency = steps/s on 2 / (2 x steps/s on 1); 1.0 would be perfect.
The first 2 steps (tracing, compilation) are not timed. On a 2-core CPU one process's ops already use both
cores, so 2 replicas cannot be faster: the numbers measure the cost of the distribution (splitting the batch,
all-reducing the gradients, and for workers the gRPC collectives between processes), not a speed-up.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository root: `benchmarks.jobs` is imported from it
APPLICATIONS = ("nmt", "captioning", "bert", "gpt")
RUNS = (  # (name, placement, backend, replicas)
    ("1 device", "none", "tensorflow", 1),
    ("mirrored, 2 CPUs", "mirrored", "tensorflow", 2),
    ("2 workers", "multi-worker", "tensorflow", 2),
    ("JAX, 1 device", "none", "jax", 1),
    ("JAX DataParallel, 2 devices", "jax-data-parallel", "jax", 2),
)


def _measured(text):
    line = [line for line in text.splitlines() if '{"' in line][-1]
    return json.loads(line[line.index("{"):])


def run_one(app, placement, backend, args):
    """The JSON line ``python -m benchmarks.jobs`` prints for one process (or worker 0 of two)."""
    from attnlayers.applications.core.runs import launch

    command = ([sys.executable, "-m", "benchmarks.jobs", app, "--placement", placement, "--steps", str(args.steps)]
               + (["--jit-compile"] if args.jit_compile else []))
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": backend,
           "PYTHONPATH": os.pathsep.join([str(ROOT), *(p for p in sys.path if p)])}
    if placement == "jax-data-parallel":
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    if placement == "multi-worker":
        out = io.StringIO()
        code = launch.launch_workers(command, 2, env=env, out=out)
        text = out.getvalue()
    else:
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
        code, text = done.returncode, done.stdout + done.stderr
    if code != 0:
        raise RuntimeError(f"{app} {placement} ({backend}) failed:\n{text[-3000:]}")
    return _measured(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", nargs="+", choices=APPLICATIONS, default=list(APPLICATIONS))
    parser.add_argument("--steps", type=int, default=40, help="steps per run, the first 2 untimed (default 40)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the train steps with XLA")
    args = parser.parse_args(argv)
    print(f"steps per second, {args.steps} steps per run (2 untimed), jit_compile={args.jit_compile}\n")
    print("| application | placement | replicas | steps/s | against 1 device | scaling efficiency |")
    print("|---|---|---|---|---|---|")
    for app in args.apps:
        single = {}
        for name, placement, backend, replicas in RUNS:
            rate = run_one(app, placement, backend, args)["steps_per_second"]
            if replicas == 1:
                single[backend] = rate
                print(f"| {app} | {name} | 1 | {rate:.1f} | 1.00 | - |", flush=True)
            else:
                speedup = rate / single[backend]
                print(f"| {app} | {name} | {replicas} | {rate:.1f} | {speedup:.2f} | {speedup / replicas:.2f} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
