"""Small seeded training jobs, one per application, that the scale-out checks run the same way under every
placement: one device, ``MirroredStrategy`` over 2 logical devices, ``MultiWorkerMirroredStrategy`` over 2
worker processes, XLA (``jit_compile=True``), and JAX's ``keras.distribution.DataParallel``.

An application offers its job as ``training_problem(seed=0) -> TrainingProblem`` in its ``problem`` module:

    problem = training_problem()
    weights, losses = train(problem, strategy)                  # the same global batches under any strategy
    hlo = xla_train_step(problem)                               # raises unless the whole train step compiles
    assert not python_ops(problem.dataset(problem.global_batch))  # no py_function in the input pipeline

The same jobs run from the command line, one process (or one worker) each, for multi-worker runs, the JAX
backend and the steps/s tables of ``benchmarks/scale_out.py``:

    python -m attnlayers.applications.core.problems attnlayers.applications.gpt.problem \\
        attnlayers.applications.bert.problem --placement multi-worker --out weights/   # weights/{gpt,bert}.npz

A problem's data is static: every batch has the same shapes (padded to fixed lengths, ``drop_remainder``), no
shuffling, so that N replicas see exactly the global batches one device sees.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from typing import Callable

import keras
import numpy as np

PLACEMENTS = ("none", "mirrored", "multi-worker", "jax-data-parallel")


@dataclasses.dataclass(frozen=True)
class TrainingProblem:
    """One application's small training job.

    Attributes:
        name: the application ("nmt", "captioning", "bert", "gpt").
        build: builds and compiles the model (seeded by :func:`train`; called inside the strategy's scope).
            Takes ``jit_compile`` (True, False or "auto": Keras' default, XLA under JAX and on TensorFlow
            GPUs / TPUs) and passes it to ``model.compile``.
        dataset: ``global_batch -> tf.data.Dataset`` of ``(x, y)`` or ``(x, y, sample_weight)`` batches of
            exactly ``global_batch`` examples with static shapes (``drop_remainder=True``), unshuffled, at least
            ``steps`` batches long.
        global_batch: the global batch size (split over the replicas).
        steps: how many optimizer steps :func:`train` runs.
        tolerance: the absolute tolerance on every weight when two placements of the same job are compared:
            replicas sum the same per-example gradients in another order (float32 round-off, amplified a little
            by each optimizer step).
        seed: the seed of weights and data.
    """

    name: str
    build: Callable[..., keras.Model]
    dataset: Callable[[int], object]
    global_batch: int = 8
    steps: int = 3
    tolerance: float = 1e-5
    seed: int = 0


def load_problem(module, seed=0):
    """The :class:`TrainingProblem` of ``module`` (a dotted module path with a ``training_problem`` function)."""
    return importlib.import_module(module).training_problem(seed=seed)


def build(problem, strategy=None, *, jit_compile="auto"):
    """The problem's compiled model, seeded, its variables created under ``strategy`` (TensorFlow) if given."""
    keras.utils.set_random_seed(problem.seed)
    if strategy is None:
        return problem.build(jit_compile=jit_compile)
    with strategy.scope():
        return problem.build(jit_compile=jit_compile)


class StepTimes(keras.callbacks.Callback):
    """The wall-clock end time of every training batch, for steps per second after the first (compiling) ones."""

    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())

    def steps_per_second(self, skip=2):
        """Steps per second over the batches after the first ``skip`` (which hold the tracing and compilation)."""
        if len(self.times) < skip + 2:
            raise ValueError(f"timing needs at least {skip + 2} steps; {len(self.times)} ran.")
        return (len(self.times) - 1 - skip) / (self.times[-1] - self.times[skip])


def train(problem, strategy=None, *, steps=None, jit_compile="auto", verbose=0, callbacks=()):
    """Trains the problem's model for ``steps`` (default ``problem.steps``) global batches with ``Model.fit``
    (the problem's batches in order, repeated if ``steps`` is more than it has).

    Returns:
        ``(weights, losses)``: the model's weights as NumPy arrays, and the loss ``fit`` logged per epoch (here
        one epoch).
    """
    steps = problem.steps if steps is None else steps
    model = build(problem, strategy, jit_compile=jit_compile)
    data = problem.dataset(problem.global_batch).repeat().take(steps)
    history = model.fit(data, epochs=1, steps_per_epoch=steps, verbose=verbose, callbacks=list(callbacks))
    return [np.asarray(w) for w in model.get_weights()], history.history["loss"]


def first_batch(problem):
    """The first global batch of the problem's data (TensorFlow tensors)."""
    return next(iter(problem.dataset(problem.global_batch)))


def xla_train_step(problem):
    """Compiles the problem's whole train step (forward, loss, gradients, optimizer update) with XLA and returns
    its HLO text. Raises if any op cannot be compiled (a ``py_function``, a data-dependent shape, an op XLA
    lacks): ``tf.function(jit_compile=True)`` has no fallback. TensorFlow backend."""
    import tensorflow as tf

    model = build(problem, jit_compile=True)
    batch = first_batch(problem)
    model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)  # builds the optimizer's variables
    step = tf.function(model.train_step, jit_compile=True)
    return step.experimental_get_compiler_ir(batch)(stage="hlo")


_PYTHON_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless"}


def python_ops(dataset):
    """The names of the Python-calling ops (``tf.py_function`` / ``tf.numpy_function``) in a ``tf.data``
    pipeline's graph and its functions: empty for a pipeline that a TPU host or a SavedModel can run."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sorted({n.op for n in nodes if n.op in _PYTHON_OPS})


def max_difference(weights, reference):
    """The largest absolute difference between two lists of weights of the same model."""
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(weights, reference, strict=True))


def data_parallel_difference(problem, steps=None):
    """JAX backend: trains the problem with ``keras.distribution.DataParallel`` over one device and over every
    device (the batch split between them), and returns the largest weight difference. Start the process with
    ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for 2 CPU devices."""
    devices = keras.distribution.list_devices()
    results = []
    for used in (devices[:1], devices):
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=used))
        try:
            results.append(train(problem, steps=steps)[0])
        finally:
            keras.distribution.set_distribution(None)
    return max_difference(results[1], results[0]), len(devices)


def _placement(name):
    """Sets up the placement before any other TensorFlow / JAX work: returns the strategy (TensorFlow) or None."""
    if name == "jax-data-parallel":
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
        return None
    if keras.backend.backend() != "tensorflow":
        return None
    from .runtime import make_strategy

    if name == "mirrored":
        import tensorflow as tf

        cpus = tf.config.list_physical_devices("CPU")
        if not tf.config.list_physical_devices("GPU"):
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    return make_strategy(name)


def _task_index():
    return json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Train applications' small scale-out jobs under one placement, one after the other in this "
                    "process; print one JSON line per job and save its final weights.")
    parser.add_argument("modules", nargs="+",
                        help="problem modules, e.g. attnlayers.applications.gpt.problem")
    parser.add_argument("--placement", choices=PLACEMENTS, default="none",
                        help="none (one device), mirrored (2 logical CPUs), multi-worker (TF_CONFIG), "
                             "jax-data-parallel (KERAS_BACKEND=jax; all JAX devices)")
    parser.add_argument("--out", default=None,
                        help="a folder: write each job's final weights to OUT/<name>.npz (worker 0 only)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: each problem's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jit-compile", action="store_true",
                        help="compile the train step with XLA (default: Keras' auto, XLA under JAX)")
    parser.add_argument("--compare-devices", action="store_true",
                        help="JAX: train under DataParallel over 1 device and over all; print the largest weight "
                             "difference")
    args = parser.parse_args(argv)

    strategy = None if args.compare_devices else _placement(args.placement)  # first: multi-worker precedes TF ops
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for module in args.modules:
        problem = load_problem(module, seed=args.seed)
        if args.compare_devices:
            difference, devices = data_parallel_difference(problem, args.steps)
            print(json.dumps({"problem": problem.name, "max_difference": difference, "devices": devices}), flush=True)
            continue
        timer = StepTimes()
        weights, losses = train(problem, strategy, steps=args.steps, jit_compile=args.jit_compile or "auto",
                                callbacks=[timer])
        if args.out and _task_index() == 0:
            np.savez(os.path.join(args.out, f"{problem.name}.npz"), *weights)
        replicas = (strategy.num_replicas_in_sync if strategy is not None
                    else len(keras.distribution.list_devices()) if args.placement == "jax-data-parallel" else 1)
        print(json.dumps({"problem": problem.name, "placement": args.placement, "replicas": replicas,
                          "steps": args.steps or problem.steps, "loss": losses[-1],
                          "steps_per_second": timer.steps_per_second() if len(timer.times) >= 4 else None}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
