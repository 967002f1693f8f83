"""What every application's small job shares: :class:`TrainingJob` (the job: a model, its data, a tolerance)
and the ways to run it -- :func:`train` under a strategy, :func:`xla_train_step`, :func:`python_ops` of its input
pipeline, :func:`data_parallel_difference` under JAX -- and :func:`set_up_placement` for the command line
(``python -m benchmarks.jobs``).

    job = gpt.training_job()
    weights, losses = train(job, strategy)                  # the same global batches under any strategy
    hlo = xla_train_step(job)                               # raises unless the whole train step compiles
    assert not python_ops(job.dataset(job.global_batch))  # no py_function in the input pipeline

A job's data is static: every batch has the same shapes (padded to fixed lengths, ``drop_remainder``), no
shuffling, so that N replicas see exactly the global batches one device sees.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable

import keras
import numpy as np

PLACEMENTS = ("none", "mirrored", "multi-worker", "jax-data-parallel")


@dataclasses.dataclass(frozen=True)
class TrainingJob:
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


def build(job, strategy=None, *, jit_compile="auto"):
    """The job's compiled model, seeded, its variables created under ``strategy`` (TensorFlow) if given."""
    keras.utils.set_random_seed(job.seed)
    if strategy is None:
        return job.build(jit_compile=jit_compile)
    with strategy.scope():
        return job.build(jit_compile=jit_compile)


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


def train(job, strategy=None, *, steps=None, jit_compile="auto", verbose=0, callbacks=()):
    """Trains the job's model for ``steps`` (default ``job.steps``) global batches with ``Model.fit``
    (the job's batches in order, repeated if ``steps`` is more than it has).

    Returns:
        ``(weights, losses)``: the model's weights as NumPy arrays, and the loss ``fit`` logged per epoch (here
        one epoch).
    """
    steps = job.steps if steps is None else steps
    model = build(job, strategy, jit_compile=jit_compile)
    data = job.dataset(job.global_batch).repeat().take(steps)
    history = model.fit(data, epochs=1, steps_per_epoch=steps, verbose=verbose, callbacks=list(callbacks))
    return [np.asarray(w) for w in model.get_weights()], history.history["loss"]


def first_batch(job):
    """The first global batch of the job's data (TensorFlow tensors)."""
    return next(iter(job.dataset(job.global_batch)))


def xla_train_step(job, model=None):
    """Lowers the job's whole train step (forward, loss, gradients, optimizer update) to XLA and returns its HLO
    text. Raises if any op cannot be compiled (a ``py_function``, a data-dependent shape, an op XLA lacks):
    ``tf.function(jit_compile=True)`` has no fallback. ``model``: a model of the job whose optimizer is built (one
    that has trained); None builds one and trains it a step. TensorFlow backend."""
    import tensorflow as tf

    batch = first_batch(job)
    if model is None:
        model = build(job, jit_compile=True)
        model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)  # builds the optimizer's variables
    step = tf.function(model.train_step, jit_compile=True)
    return step.experimental_get_compiler_ir(batch)(stage="hlo")


_PYTHON_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless"}


def _pipeline_graph(dataset):
    """The ``GraphDef`` of a ``tf.data`` pipeline: its ops and, in ``library``, the functions they call (``map``
    functions and the like).

    Private API, kept to this one function: tf.data offers no public way to read a pipeline's graph (tf.function
    tracing would only show the dataset as one variant tensor). ``Dataset._as_serialized_graph()`` is what
    tf.data itself serializes a pipeline with (tf.data service, iterator checkpoints); if a TensorFlow release
    renames it, only this function changes."""
    import tensorflow as tf

    return tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())


def python_ops(dataset):
    """The names of the Python-calling ops (``tf.py_function`` / ``tf.numpy_function``) in a ``tf.data``
    pipeline's graph and its functions: empty for a pipeline that a TPU host or a SavedModel can run."""
    graph = _pipeline_graph(dataset)
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sorted({n.op for n in nodes if n.op in _PYTHON_OPS})


def max_difference(weights, reference):
    """The largest absolute difference between two lists of weights of the same model."""
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(weights, reference, strict=True))


def data_parallel_difference(job, steps=None):
    """JAX backend: trains the job with ``keras.distribution.DataParallel`` over one device and over every
    device (the batch split between them), and returns the largest weight difference. Start the process with
    ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for 2 CPU devices."""
    devices = keras.distribution.list_devices()
    results = []
    for used in (devices[:1], devices):
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=used))
        try:
            results.append(train(job, steps=steps)[0])
        finally:
            keras.distribution.set_distribution(None)
    return max_difference(results[1], results[0]), len(devices)


def set_up_placement(name):
    """Sets up a placement (one of :data:`PLACEMENTS`) before any other TensorFlow / JAX work in the process:
    returns the strategy (TensorFlow) or None."""
    if name == "jax-data-parallel":
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=keras.distribution.list_devices()))
        return None
    if keras.backend.backend() != "tensorflow":
        return None
    from attnlayers.applications.core.runs.runtime import make_strategy

    if name == "mirrored":
        import tensorflow as tf

        cpus = tf.config.list_physical_devices("CPU")
        if not tf.config.list_physical_devices("GPU"):
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
    return make_strategy(name)


def task_index():
    """This process's worker index in ``TF_CONFIG`` (0 without one)."""
    return json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
