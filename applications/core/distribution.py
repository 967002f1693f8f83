"""How training is distributed, apart from making the strategy (``runtime.make_strategy``): the JAX backend's side
of ``--strategy`` (``keras.distribution`` instead of ``tf.distribute``), the batch sizes a strategy can split, which
process of a multi-worker cluster is the chief and where each worker writes (:func:`is_chief`,
:func:`worker_directory`, :func:`from_chief`), and which strategies need static shapes (:func:`static_shapes`).

    runtime = jax_runtime("data-parallel")   # keras.distribution.set_distribution(DataParallel(all local devices))
    with runtime.scope():                    # what the recipes do with a tf.distribute strategy
        model = build_model(...)             # built after set_distribution: variables replicated on every device
    model.fit(dataset, ...)                  # each global batch is split evenly over the devices

Strategies under ``KERAS_BACKEND=jax`` (:data:`JAX_STRATEGIES`):

- ``none``: one device, JAX's default (the first GPU, else the CPU).
- ``data-parallel``: ``keras.distribution.DataParallel`` over ``keras.distribution.list_devices()`` (every local GPU,
  else the CPU devices: one unless ``XLA_FLAGS=--xla_force_host_platform_device_count=N``), set globally with
  ``keras.distribution.set_distribution`` before any model is built. The trainer compiles each step with XLA and
  shards every batch along its first axis, so each batch must split evenly over the devices: ``--batch-size`` a
  multiple of the device count, and the datasets batch with ``drop_remainder=True`` (:func:`static_shapes`
  says so for every JAX runtime; fixed shapes also keep XLA from compiling the step again for a new shape).

The ``tf.distribute`` names (mirrored, multi-worker, tpu) raise a ValueError that names ``data-parallel``.
TensorFlow is imported only by the functions that need it (a cluster's, a TPU's).
"""

from __future__ import annotations

import contextlib
import os

import keras
import numpy as np

JAX_STRATEGIES = ("none", "data-parallel")


class JaxRuntime:
    """The part of a ``tf.distribute.Strategy`` that the recipes and example scripts use, for the JAX backend:
    ``scope()`` (the distribution's scope, or nothing), ``num_replicas_in_sync`` (the devices a batch is split over)
    and ``cluster_resolver`` (None: one process, so it is the chief).

    Attributes:
        name: "none" or "data-parallel".
        distribution: the ``keras.distribution.DataParallel`` (set globally), or None.
        devices: the devices the batches are split over (one for "none").
    """

    cluster_resolver = None

    def __init__(self, name, distribution=None, devices=()):
        self.name, self.distribution, self.devices = name, distribution, list(devices)

    @property
    def num_replicas_in_sync(self):
        return max(len(self.devices), 1)

    @property
    def runtime_name(self):
        """For ``runtime.describe_runtime``: "JAX DataParallel (gpu)" or "JAX, one device"."""
        if self.distribution is None:
            return "JAX, one device"
        kinds = sorted({str(d).split(":")[0] for d in self.devices})
        return f"JAX DataParallel ({', '.join(kinds)})"

    def scope(self):
        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()

    def __repr__(self):
        return f"JaxRuntime({self.name!r}, devices={self.devices})"


def jax_runtime(name="none", devices=None):
    """Sets up ``--strategy name`` under the JAX backend (see the module docstring); returns a :class:`JaxRuntime`.

    Args:
        name: "none" or "data-parallel".
        devices: for "data-parallel", the devices (``keras.distribution.list_devices()`` names; default all local).

    Raises:
        ValueError: a ``tf.distribute`` strategy name or another unknown name.
    """
    if name not in JAX_STRATEGIES:
        raise ValueError(
            f"strategy {name!r} is a tf.distribute strategy: it needs KERAS_BACKEND=tensorflow. Under "
            f"KERAS_BACKEND={keras.backend.backend()} use --strategy data-parallel (keras.distribution.DataParallel "
            "over every local device) or none (one device)."
        )
    if name == "none":
        return JaxRuntime(name, devices=keras.distribution.list_devices()[:1])
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return JaxRuntime(name, distribution, devices)


def check_batch_size(runtime, batch_size, what="--batch-size"):
    """Raises a ValueError when ``batch_size`` does not split evenly over ``runtime``'s devices (JAX's
    DataParallel shards every batch along its first axis); nothing for other runtimes."""
    replicas = getattr(runtime, "num_replicas_in_sync", 1)
    if isinstance(runtime, JaxRuntime) and batch_size % replicas:
        raise ValueError(f"{what} {batch_size} does not split evenly over the {replicas} devices of "
                         f"--strategy {runtime.name}: use a multiple of {replicas}.")


def held_out_batch_size(strategy, batch_size, examples):
    """The batch size of a held-out set of ``examples`` batched with ``drop_remainder`` (static shapes: a TPU, any
    JAX runtime): ``batch_size``, or for a set smaller than one batch the largest multiple of ``strategy``'s
    replicas that it fills (the replica count at least), so that it still gives one batch and not none."""
    replicas = getattr(strategy, "num_replicas_in_sync", 1)
    return max(min(batch_size, examples // replicas * replicas), replicas)


def pad_to_replicas(arrays, runtime):
    """``(padded, n)``: the NumPy arrays (a nest) with rows repeated from the last so that their length is a
    multiple of ``runtime``'s devices (``model.predict`` under JAX's DataParallel shards every batch evenly; with a
    ``batch_size`` that is a multiple of the devices, every batch then is), and ``n``, the real rows: keep
    ``predictions[:n]``. Unchanged for one device or a ``tf.distribute`` strategy (which splits any batch)."""
    leaves = keras.tree.flatten(arrays)
    n = len(leaves[0])
    replicas = runtime.num_replicas_in_sync if isinstance(runtime, JaxRuntime) else 1
    extra = -n % replicas
    if not extra or not n:
        return arrays, n
    return keras.tree.map_structure(lambda a: np.concatenate([a, np.repeat(np.asarray(a)[-1:], extra, 0)]),
                                    arrays), n


__all__ = ["JAX_STRATEGIES", "JaxRuntime", "check_batch_size", "held_out_batch_size", "jax_runtime",
           "pad_to_replicas"]


# ---- who writes what in a cluster, and which strategies need static shapes ----------------------------------


def is_chief(strategy=None):
    """Whether this process is the one that writes a multi-worker run's outputs: the "chief" task, else worker 0
    of a cluster without one; True outside a cluster (one process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if not task_type:
        return True
    if task_type == "chief":
        return True
    return task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()


def is_multi_worker(strategy):
    """Whether ``strategy`` is a ``MultiWorkerMirroredStrategy`` of more than one worker (False under JAX)."""
    if strategy is None or keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    # Its replicas are this worker's devices times the workers (public: the strategy's worker count is private).
    return strategy.num_replicas_in_sync > len(strategy.extended.worker_devices)


def from_chief(values, strategy):
    """The chief's ``values`` (NumPy arrays or numbers) on every worker of a multi-worker ``strategy``: one
    all-reduce sum per value, to which the other workers add zeros (every worker must call it, in the same order).
    Outside a cluster the values come back as arrays, with no collective."""
    if not is_multi_worker(strategy):
        return [np.asarray(v) for v in values]
    import tensorflow as tf

    chief = is_chief(strategy)
    out = []
    for value in values:
        value = np.asarray(value)
        exact = np.issubdtype(value.dtype, np.floating)  # x + 0 is x; integers go through float64 (< 2**53)
        mine = value if chief else np.zeros_like(value)
        tensor = tf.constant(mine if exact else mine.astype(np.float64))
        summed = strategy.reduce("SUM", tensor, axis=None).numpy()
        out.append(summed if exact else summed.astype(value.dtype))
    return out


def worker_directory(out_dir, strategy=None):
    """Where this process writes a run's files: ``out_dir`` for the chief (or a single process), else
    ``out_dir/worker-{index}``, so that workers never write the same file (TensorBoard's events, the results) at
    the same time. The weights are the same on every worker (synchronous training): the chief's copy is the run's;
    ``core.BackupAndRestore`` writes the chief's backup only, and restores every worker from it."""
    if out_dir is None or is_chief(strategy):
        return out_dir
    return os.path.join(out_dir, f"worker-{strategy.cluster_resolver.task_id}")


def static_shapes(strategy=None):
    """Whether ``strategy`` needs every batch in static shapes: a ``TPUStrategy``, which compiles each step with
    XLA, and every JAX runtime (XLA compiles the step again for each new batch shape, and ``DataParallel`` splits
    each batch evenly over the devices). The example scripts then pad sequences to their fixed maximum lengths and
    batch with ``drop_remainder=True`` (the last, smaller batch is dropped). False for every other strategy."""
    if keras.backend.backend() == "jax":
        return True
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.TPUStrategy)
