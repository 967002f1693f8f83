"""The JAX backend's side of the example scripts' ``--strategy``: ``keras.distribution`` instead of
``tf.distribute``.

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
  multiple of the device count, and the datasets batch with ``drop_remainder=True`` (``runtime.static_shapes``
  says so for every JAX runtime; fixed shapes also keep XLA from compiling the step again for a new shape).

The ``tf.distribute`` names (mirrored, multi-worker, tpu) raise a ValueError that names ``data-parallel``.
TensorFlow is not imported here.
"""

from __future__ import annotations

import contextlib

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
