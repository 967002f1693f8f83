"""What a run over several replicas or workers must do, once the strategy is made (``runtime.make_strategy``): batch
sizes that split evenly over the replicas (:func:`check_batch_size`, :func:`held_out_batch_size`,
:func:`pad_to_replicas`), which process of a multi-worker cluster is the chief and where each worker writes
(:func:`is_chief`, :func:`worker_directory`, :func:`from_chief`), and which strategies need static shapes
(:func:`static_shapes`). TensorFlow is imported only by the functions that need it (a cluster's, a TPU's).
"""

from __future__ import annotations

import os

import keras
import numpy as np

from .runtime import JaxRuntime


def check_batch_size(runtime, batch_size, what="--batch-size"):
    """Raises a ValueError when ``batch_size`` does not split evenly over ``runtime``'s replicas (JAX's
    DataParallel shards every batch along its first axis over every device, ModelParallel over the mesh's DATA
    axis); nothing for other runtimes."""
    replicas = getattr(runtime, "num_replicas_in_sync", 1)
    if isinstance(runtime, JaxRuntime) and batch_size % replicas:
        over = (f"the mesh's {replicas} data groups" if getattr(runtime, "mesh", None) is not None
                else f"the {replicas} devices")
        raise ValueError(f"{what} {batch_size} does not split evenly over {over} of --strategy {runtime.name}: "
                         f"use a multiple of {replicas}.")


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


# ---- who writes what in a cluster, and which strategies need static shapes ----------------------------------


def is_chief(strategy=None):
    """Whether this process is the one that writes a multi-worker run's outputs: the "chief" task, else worker 0
    of a cluster without one; True outside a cluster (one process).

    Args:
        strategy: the run's strategy; None, or one without a cluster: a single process.
    """
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
    ``core.BackupAndRestore`` writes the chief's backup only, and restores every worker from it.

    Args:
        out_dir: the run's output folder (None is returned as is).
        strategy: the run's strategy; None: a single process.
    """
    if out_dir is None or is_chief(strategy):
        return out_dir
    return os.path.join(out_dir, f"worker-{strategy.cluster_resolver.task_id}")


def static_shapes(strategy=None):
    """Whether ``strategy`` needs every batch in static shapes: a ``TPUStrategy``, which compiles each step with
    XLA, and every JAX runtime (XLA compiles the step again for each new batch shape, and ``DataParallel`` splits
    each batch evenly over the devices). The example scripts then pad sequences to their fixed maximum lengths and
    batch with ``drop_remainder=True`` (the last, smaller batch is dropped). False for every other strategy.

    Args:
        strategy: the run's strategy, or None (under JAX the answer is always True).
    """
    if keras.backend.backend() == "jax":
        return True
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.TPUStrategy)


__all__ = ["check_batch_size", "from_chief", "held_out_batch_size", "is_chief", "is_multi_worker", "pad_to_replicas",
           "static_shapes", "worker_directory"]
