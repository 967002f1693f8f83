"""Where and in what precision a model trains: the ``tf.distribute`` strategy and the Keras dtype policy, set up
by one function from two flags that every example script shares.

    parser = argparse.ArgumentParser()
    cli.add_runtime_arguments(parser)        # --strategy none|data-parallel|mirrored|multi-worker|tpu, --precision
    args = parser.parse_args()
    strategy = setup_runtime(args.strategy, args.precision, tpu=args.tpu)
    with strategy.scope():
        model = build_model(...)             # variables are created under the strategy
    model.fit(...)

Strategies:

- ``none``: TensorFlow's default strategy (one device: the first GPU, or the CPU).
- ``mirrored``: ``tf.distribute.MirroredStrategy`` over every local GPU, or over the logical CPU devices when
  there is no GPU (one CPU device unless the process configured several, as the tests do).
- ``multi-worker``: ``tf.distribute.MultiWorkerMirroredStrategy``; every worker runs the same command with the
  environment variable ``TF_CONFIG`` describing the cluster and its own index (``core.runs.launch.launch_workers``
  starts N local workers with theirs). Create it first thing in the program, before any other TensorFlow op.
  Keras 3's ``Model.fit`` fails under this strategy as shipped; :func:`make_strategy` installs the fixes of
  ``core.runs.keras_fixes``.
- ``tpu``: ``tf.distribute.TPUStrategy`` through ``TPUClusterResolver(tpu=...)`` (a Cloud TPU name or
  ``grpc://`` address; "" or "local" for a TPU VM). Data must have static shapes there
  (``make_dataset(..., pad_to_max_length=True, drop_remainder=True)`` in the NMT application).

- ``data-parallel``: the name that works under both backends: ``mirrored`` under TensorFlow (synchronous data
  parallelism over the local devices), ``keras.distribution.DataParallel`` under JAX.
- ``model-parallel``: JAX only (``tf.distribute`` has no tensor parallelism: its strategies replicate every
  weight, so under TensorFlow it raises a ValueError saying so). See below.

``multi-worker`` and ``tpu`` raise a ValueError saying so where no cluster or TPU exists.

Under ``KERAS_BACKEND=jax`` the strategies are ``none``, ``data-parallel`` and ``model-parallel`` only
(:func:`jax_runtime`, which returns a :class:`JaxRuntime` in place of the strategy: ``scope()``,
``num_replicas_in_sync``); a ``tf.distribute`` name (mirrored, multi-worker, tpu) raises a ValueError naming
``data-parallel``:

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
  multiple of the device count, and the datasets batch with ``drop_remainder=True`` (``static_shapes``
  says so for every JAX runtime; fixed shapes also keep XLA from compiling the step again for a new shape).
- ``model-parallel``: ``keras.distribution.ModelParallel`` over a DATA x MODEL mesh of the local devices
  (``mesh="2x4"``: the batch split over 2, each large weight over 4), with the model's layout map (``layout``: an
  application's ``sharding.layout_map``, e.g. ``gpt.sharding.layout_map``) in the style ``sharding`` ("tensor":
  Megatron's column / row splits; "fsdp": every matrix along its d_model axis): ``core.runs.model_parallel`` and
  docs/guides/model-parallelism.md. Set before the model is built, like DataParallel; ``--batch-size`` must be a
  multiple of DATA.

Precisions (Keras dtype policies, Micikevicius et al. 2018): ``float32``; ``mixed_float16`` (float16
compute, float32 variables, dynamic loss scaling added by ``Model.compile``; for GPUs); ``mixed_bfloat16``
(bfloat16 compute, float32 variables; for TPUs and recent CPUs / GPUs). Losses and softmaxes of the library
run in float32 under both.

TensorFlow is imported when a strategy is built, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import os

import keras

from attnlayers.validation import one_of

from . import keras_fixes

__all__ = ["JAX_STRATEGIES", "JaxRuntime", "PRECISIONS", "STRATEGIES", "canonical_strategy", "describe_runtime",
           "jax_runtime", "make_strategy", "set_precision", "setup_runtime"]

STRATEGIES = ("none", "data-parallel", "model-parallel", "mirrored", "multi-worker", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
_ALIASES = {"default": "none", "multi_worker": "multi-worker", "multiworker": "multi-worker",
            "data_parallel": "data-parallel", "model_parallel": "model-parallel"}


def canonical_strategy(text):
    """The strategy name ``text`` stands for (older spellings such as "default" or "multi_worker" included)."""
    return _ALIASES.get(text, text)


def make_strategy(name="none", *, tpu=None, devices=None, mesh=None, sharding="tensor", layout=None):
    """The ``tf.distribute.Strategy`` named ``name`` (one of :data:`STRATEGIES`); under the JAX backend the
    :class:`JaxRuntime` of :func:`jax_runtime`.

    Args:
        name: "none", "data-parallel" (= "mirrored" under TensorFlow), "model-parallel" (JAX only), "mirrored",
            "multi-worker" or "tpu".
        tpu: for "tpu", the TPU name or address (None: a local TPU VM).
        devices: for "mirrored" / "data-parallel" / "model-parallel", the devices (default: every GPU, else every
            logical CPU).
        mesh, sharding, layout: for "model-parallel" (:func:`jax_runtime`).

    Raises:
        ValueError: an unknown name, a multi-worker / TPU strategy where no cluster / TPU is available, a
            ``tf.distribute`` strategy under the JAX backend, or "model-parallel" under TensorFlow.
    """
    name = one_of(canonical_strategy(name), "strategy", STRATEGIES)
    if keras.backend.backend() == "jax":  # keras.distribution, not tf.distribute
        return jax_runtime(name, devices, mesh=mesh, sharding=sharding, layout=layout)
    if name == "model-parallel":
        raise ValueError(
            "strategy 'model-parallel' needs KERAS_BACKEND=jax (keras.distribution.ModelParallel): tf.distribute "
            "has no tensor parallelism, its strategies replicate every weight on every device. Run with "
            "KERAS_BACKEND=jax, or use --strategy data-parallel here."
        )

    import tensorflow as tf

    if name == "none":
        return tf.distribute.get_strategy()
    keras_fixes.apply_distribution_fixes()  # Keras' trainer under several replicas (keras_fixes' docstring)
    if name in ("mirrored", "data-parallel"):
        if devices is None:
            gpus = tf.config.list_logical_devices("GPU")
            devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        if any("GPU" in str(d).upper() for d in devices):
            return tf.distribute.MirroredStrategy(devices=devices)
        # CPU replicas: reduce on one device. The default all-reduce of CPUs runs collective ops, whose instance
        # keys a second MirroredStrategy in the same process reuses ("Shape mismatch in the collective instance").
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if name == "multi-worker":
        if not os.environ.get("TF_CONFIG"):
            raise ValueError(
                "strategy 'multi-worker' needs the environment variable TF_CONFIG (the cluster's workers and this "
                "worker's index) on every worker; it is not set here. Use 'mirrored' for the devices of one machine."
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="" if tpu in (None, "local") else tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"strategy 'tpu': no TPU is available here (tpu={tpu!r}: {detail}). Run on a TPU VM or pass --tpu NAME."
        ) from None
    return tf.distribute.TPUStrategy(resolver)


JAX_STRATEGIES = ("none", "data-parallel", "model-parallel")


class JaxRuntime:
    """The part of a ``tf.distribute.Strategy`` that the recipes and example scripts use, for the JAX backend:
    ``scope()`` (the distribution's scope, or nothing), ``num_replicas_in_sync`` (the devices a batch is split over)
    and ``cluster_resolver`` (None: one process, so it is the chief).

    Attributes:
        name: "none", "data-parallel" or "model-parallel".
        distribution: the ``keras.distribution.DataParallel`` or ``ModelParallel`` (set globally), or None.
        devices: the devices the run uses (one for "none").
        mesh: for "model-parallel", the (data, model) shape of the device mesh; else None.
        sharding: for "model-parallel", the layout map's style ("tensor" or "fsdp"); else None.
    """

    cluster_resolver = None

    def __init__(self, name, distribution=None, devices=(), mesh=None, sharding=None):
        self.name, self.distribution, self.devices = name, distribution, list(devices)
        self.mesh, self.sharding = mesh, sharding

    @property
    def num_replicas_in_sync(self):
        """The devices a batch is split over: every device for DataParallel, the mesh's DATA for ModelParallel."""
        return self.mesh[0] if self.mesh is not None else max(len(self.devices), 1)

    @property
    def runtime_name(self):
        """For :func:`describe_runtime`: "JAX DataParallel (gpu)", "JAX ModelParallel 2x4 tensor (cpu)" or "JAX,
        one device"."""
        if self.distribution is None:
            return "JAX, one device"
        kinds = ", ".join(sorted({str(d).split(":")[0] for d in self.devices}))
        if self.mesh is not None:
            return f"JAX ModelParallel {self.mesh[0]}x{self.mesh[1]} {self.sharding} ({kinds})"
        return f"JAX DataParallel ({kinds})"

    def scope(self):
        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()

    def __repr__(self):
        return f"JaxRuntime({self.name!r}, devices={self.devices})"


def jax_runtime(name="none", devices=None, *, mesh=None, sharding="tensor", layout=None):
    """Sets up ``--strategy name`` under the JAX backend (see the module docstring); returns a :class:`JaxRuntime`.

    Args:
        name: "none", "data-parallel" or "model-parallel".
        devices: for "data-parallel" / "model-parallel", the devices (``keras.distribution.list_devices()`` names;
            default all local).
        mesh: for "model-parallel", "DATAxMODEL" (or a (data, model) pair) whose product is the device count.
        sharding: for "model-parallel", the layout map's style: "tensor" or "fsdp".
        layout: for "model-parallel", the model's layout function ``layout(mesh, style=...)`` -> LayoutMap (an
            application's ``sharding.layout_map``, or a ``functools.partial`` of it with the model's config).

    Raises:
        ValueError: a ``tf.distribute`` strategy name or another unknown name; for "model-parallel", no or a bad
            mesh, an unknown style, or no layout function.
    """
    if name not in JAX_STRATEGIES:
        raise ValueError(
            f"strategy {name!r} is a tf.distribute strategy: it needs KERAS_BACKEND=tensorflow. Under "
            f"KERAS_BACKEND={keras.backend.backend()} use --strategy data-parallel (keras.distribution.DataParallel "
            "over every local device), model-parallel (keras.distribution.ModelParallel, with --mesh) or none "
            "(one device)."
        )
    if name == "none":
        return JaxRuntime(name, devices=keras.distribution.list_devices()[:1])
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    if name == "model-parallel":
        return _model_parallel_runtime(devices, mesh, sharding, layout)
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    return JaxRuntime(name, distribution, devices)


def _model_parallel_runtime(devices, mesh, sharding, layout):
    from . import model_parallel

    if mesh is None:
        raise ValueError(f"strategy 'model-parallel' needs --mesh DATAxMODEL (e.g. 1x{len(devices)}: every weight "
                         f"split over the {len(devices)} devices here).")
    shape = model_parallel.parse_mesh(mesh if isinstance(mesh, str) else "x".join(map(str, mesh)), len(devices))
    model_parallel.check_style(sharding)
    if layout is None:
        raise ValueError("strategy 'model-parallel' needs the model's layout map, and this run's model has none (there "
                         "is one for GPT, BERT, ViT and the Transformer translator): use --strategy data-parallel.")
    distribution = model_parallel.model_parallel(layout, model_parallel.device_mesh(shape, devices), sharding)
    keras.distribution.set_distribution(distribution)
    return JaxRuntime("model-parallel", distribution, devices, mesh=shape, sharding=sharding)


def set_precision(precision="float32"):
    """Sets the global Keras dtype policy to ``precision`` (one of :data:`PRECISIONS`); returns it.

    Args:
        precision: one of :data:`PRECISIONS`.
    """
    keras.config.set_dtype_policy(one_of(precision, "precision", PRECISIONS))
    return precision


def setup_runtime(strategy="none", precision="float32", *, tpu=None, devices=None, mesh=None, sharding="tensor",
                  layout=None):
    """Sets the dtype policy and builds the strategy: build and compile models under ``strategy.scope()``.

    Args:
        strategy: the strategy's name (see :func:`make_strategy`).
        precision: one of :data:`PRECISIONS`.
        tpu, devices, mesh, sharding, layout: as :func:`make_strategy`.

    Returns:
        The ``tf.distribute.Strategy`` (see :func:`make_strategy`).
    """
    from attnlayers import startup

    # first: a multi-worker strategy must precede other TensorFlow ops
    built = make_strategy(strategy, tpu=tpu, devices=devices, mesh=mesh, sharding=sharding, layout=layout)
    startup.run_first_graph()  # where a script asked for a quiet start: oneDNN's first-graph line, dropped
    set_precision(precision)
    return built


def describe_runtime(strategy):
    """One line: the strategy, its replicas and the dtype policy, e.g. "MirroredStrategy, 2 replicas, float32".

    Args:
        strategy: the strategy of :func:`setup_runtime` (or :func:`make_strategy`).
    """
    name = getattr(strategy, "runtime_name", None) or type(strategy).__name__
    if name.startswith("_Default"):
        name = "default strategy"
    return (f"{name}, {strategy.num_replicas_in_sync} replica"
            f"{'s' if strategy.num_replicas_in_sync != 1 else ''}, {keras.config.dtype_policy().name}")
