"""``python -m benchmarks.jobs APP [APP ...] --placement ...``: trains applications' small scale-out jobs under
one placement, one after the other in this process; prints one JSON line per job (``{"job": name, ...}``) and
saves its final weights. Run from the repository root, or with it on ``PYTHONPATH``."""

from __future__ import annotations

import argparse
import json
import os
import sys

import keras
import numpy as np

from . import APPLICATIONS, training_job
from .runner import PLACEMENTS, StepTimes, data_parallel_difference, set_up_placement, task_index, train


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.jobs",
        description="Train applications' small scale-out jobs under one placement, one after the other in this "
                    "process; print one JSON line per job and save its final weights.")
    parser.add_argument("applications", nargs="+", choices=list(APPLICATIONS), metavar="APP",
                        help=f"the jobs to run, of {', '.join(APPLICATIONS)}")
    parser.add_argument("--placement", choices=PLACEMENTS, default="none",
                        help="none (one device), mirrored (2 logical CPUs), multi-worker (TF_CONFIG), "
                             "jax-data-parallel (KERAS_BACKEND=jax; all JAX devices)")
    parser.add_argument("--out", default=None,
                        help="a folder: write each job's final weights to OUT/<name>.npz (worker 0 only)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: each job's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jit-compile", action="store_true",
                        help="compile the train step with XLA (default: Keras' auto, XLA under JAX)")
    parser.add_argument("--compare-devices", action="store_true",
                        help="JAX: train under DataParallel over 1 device and over all; print the largest weight "
                             "difference")
    args = parser.parse_args(argv)

    strategy = None if args.compare_devices else set_up_placement(args.placement)  # first: multi-worker precedes TF ops
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for application in args.applications:
        job = training_job(application, seed=args.seed)
        if args.compare_devices:
            difference, devices = data_parallel_difference(job, args.steps)
            print(json.dumps({"job": job.name, "max_difference": difference, "devices": devices}), flush=True)
            continue
        timer = StepTimes()
        weights, losses = train(job, strategy, steps=args.steps, jit_compile=args.jit_compile or "auto",
                                callbacks=[timer])
        if args.out and task_index() == 0:
            np.savez(os.path.join(args.out, f"{job.name}.npz"), *weights)
        replicas = (strategy.num_replicas_in_sync if strategy is not None
                    else len(keras.distribution.list_devices()) if args.placement == "jax-data-parallel" else 1)
        print(json.dumps({"job": job.name, "placement": args.placement, "replicas": replicas,
                          "steps": args.steps or job.steps, "loss": losses[-1],
                          "steps_per_second": timer.steps_per_second() if len(timer.times) >= 4 else None}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
