"""The three places where Keras 3's TensorFlow trainer and optimizer fail, or train differently from one device,
under a ``tf.distribute`` strategy of more than one replica; each replaced by a named fix, installed explicitly.

    from attnlayers.applications.core.runs import keras_fixes
    keras_fixes.apply_distribution_fixes()        # runtime.make_strategy calls it for every strategy but the default
    with keras_fixes.without("clip_after_all_reduce"):
        ...                                        # Keras as shipped, for a block (the tests)

The fixes (:data:`FIXES`, in the order they are installed):

- ``build_from_one_replica``: before training, the trainer builds the model from the first batch
  (``TensorFlowTrainer._maybe_symbolic_build``) by averaging the batch's per-replica values with
  ``strategy.reduce("MEAN", batch)``. Building needs only their shapes and dtypes; the mean fails on a boolean
  input such as a padding mask (MirroredStrategy: no ``AddN`` for bool) and on a nest under
  MultiWorkerMirroredStrategy ("Attempt to convert a value (PerReplica ...) to a Tensor"). The fix builds from each
  value's first local replica: the same shapes and dtypes, no cross-replica op.
- ``reduce_scalars_across_workers``: under MultiWorkerMirroredStrategy the per-replica metric results of each step
  are averaged across workers with ``strategy.reduce("MEAN", value, axis=0)``; a metric result is a scalar, which
  has no axis 0 ("Invalid reduction dimension 0 for input with 0 dimensions"). The fix averages scalars across
  replicas (``axis=None``), which is what axis 0 means for a batch of values.
- ``clip_after_all_reduce``: gradient clipping (``clipnorm`` / ``global_clipnorm`` / ``clipvalue``) runs in each
  replica on its share of the gradient, before the all-reduce that sums the shares: N replicas clip N partial
  gradients, not the global batch's gradient, and training differs from one device whenever clipping is active
  (the GPT and BERT recipes clip at 1.0: 7e-4 / 3e-3 weight differences after 3 steps). The fix sums the
  gradients across replicas first, then clips, and the later all-reduce passes them through: the same single
  all-reduce, in another place.

Each fix names the Keras versions it is installed on (from the first it was seen in; no last one yet) and checks
that Keras still has what it replaces: if not, it warns and leaves Keras as it is. Each has a test that trains with
Keras as shipped and expects the failure (``tests/applications/core/test_keras_fixes.py``, and the multi-worker
case in ``test_fault_tolerance.py``): the day a Keras release fixes one of these, its test fails, and the fix
gets a last version (or is deleted). This is the only module of the package that imports ``keras.src``.

It is also the only one that reads or writes a private name of Keras, keras-hub or TensorFlow where no public API
does the same (``tests/test_private_internals.py`` scans the others): each such use is a function here, with the
versions it is known to work on in :data:`PRIVATE_USES`, and checks that the name is still there (else an
ImportError says which use, which version, and what to install):

- :func:`set_initial_epoch`: the epoch a running ``fit`` starts from, set by a callback's ``on_train_begin``
  (``core.training.backup.BackupAndRestore`` resuming);
- :func:`compiled_metrics`: the metric objects of ``compile(metrics=...)``, which GPT's chunked loss updates from
  its own NLL;
- :func:`bpe_merge_into_cache`: keras-hub's byte-pair merge step alone, after the package's own pre-tokenization
  (``gpt.tokenizer.GPT2Tokenizer``, the GGUF tokenizers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings

import keras


@dataclasses.dataclass(frozen=True)
class KerasFix:
    """One replacement of a Keras internal: ``install()`` / ``uninstall()`` swap ``owner.attribute``.

    Attributes:
        name: the fix's name.
        first_version, last_version: the Keras versions ``(major, minor)`` it is installed on (``last_version``
            None: every later one, until its test says Keras no longer needs it).
        locate: ``() -> (owner, attribute)``, the object and attribute replaced (importing Keras' private modules).
        make: ``(original) -> replacement``.
    """

    name: str
    first_version: tuple
    last_version: tuple | None
    locate: object
    make: object

    def applies(self, version=None):
        """Whether this Keras version (default: the installed one) is in the fix's range."""
        version = version or _version()
        return self.first_version <= version and (self.last_version is None or version <= self.last_version)

    def original(self):
        """What Keras has in the place the fix replaces (its own function, whether or not the fix is installed)."""
        owner, attribute = self.locate()
        current = getattr(owner, attribute)
        return getattr(current, "_attnlayers_original", current)

    def installed(self):
        owner, attribute = self.locate()
        return hasattr(getattr(owner, attribute), "_attnlayers_original")

    def install(self):
        if self.installed():
            return
        owner, attribute = self.locate()
        original = getattr(owner, attribute)
        replacement = self.make(original)
        replacement._attnlayers_original = original
        setattr(owner, attribute, replacement)

    def uninstall(self):
        if self.installed():
            owner, attribute = self.locate()
            setattr(owner, attribute, getattr(owner, attribute)._attnlayers_original)


def _version():
    major, minor = keras.__version__.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _trainer():
    from keras.src.backend.tensorflow import trainer

    return trainer


def _tf_optimizer():
    from keras.src.backend.tensorflow import optimizer

    return optimizer.TFOptimizer


def _first_local(x, strategy):
    import tensorflow as tf

    return strategy.experimental_local_results(x)[0] if isinstance(x, tf.distribute.DistributedValues) else x


def _build_from_one_replica(build):
    import tensorflow as tf

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is None or self._distribute_strategy is None:
            return build(self, iterator=iterator, data_batch=data_batch)
        batch = None
        for _, _, it in iterator:
            batch = tf.nest.map_structure(lambda x: _first_local(x, self.distribute_strategy), next(it))
            break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=batch)

    return _maybe_symbolic_build


def _reduce_scalars_across_workers(reduce_per_replica):
    import tensorflow as tf

    def reduce_scalars_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not _trainer()._collective_all_reduce_multi_worker(strategy):
            return reduce_per_replica(values, strategy, reduction)

        def reduce(v):
            if _first_local(v, strategy).shape.rank == 0:  # one local replica: a plain scalar tensor
                return strategy.reduce("MEAN", v, axis=None)
            return reduce_per_replica(v, strategy, reduction)

        return tf.nest.map_structure(reduce, values)

    return reduce_scalars_per_replica


def _sums_before_clipping(optimizer):
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    return (context is not None and context.num_replicas_in_sync > 1
            and not optimizer.gradient_accumulation_steps
            and bool(optimizer.clipnorm or optimizer.global_clipnorm or optimizer.clipvalue))


def _clip_summed_gradients(clip):
    import tensorflow as tf

    def _clip_gradients(self, grads):
        if _sums_before_clipping(self):  # clip the sum of the replicas' shares: the global batch's gradient
            present = [g for g in grads if g is not None]
            summed = iter(tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, present))
            grads = [None if g is None else next(summed) for g in grads]
        return clip(self, grads)

    return _clip_gradients


def _pass_summed_gradients(all_reduce_sum):
    def _all_reduce_sum_gradients(self, grads_and_vars):
        if _sums_before_clipping(self):  # summed by _clip_gradients already
            return list(grads_and_vars)
        return all_reduce_sum(self, grads_and_vars)

    return _all_reduce_sum_gradients


#: The fixes, by name; a name may stand for several replacements that only work together.
FIXES = {
    "build_from_one_replica": (
        KerasFix("build_from_one_replica", (3, 0), None,
                 lambda: (_trainer().TensorFlowTrainer, "_maybe_symbolic_build"), _build_from_one_replica),
    ),
    "reduce_scalars_across_workers": (
        KerasFix("reduce_scalars_across_workers", (3, 0), None,
                 lambda: (_trainer(), "reduce_per_replica"), _reduce_scalars_across_workers),
    ),
    "clip_after_all_reduce": (
        KerasFix("clip_after_all_reduce", (3, 0), None,
                 lambda: (_tf_optimizer(), "_clip_gradients"), _clip_summed_gradients),
        KerasFix("clip_after_all_reduce", (3, 0), None,
                 lambda: (_tf_optimizer(), "_all_reduce_sum_gradients"), _pass_summed_gradients),
    ),
}


def _present(fix):
    try:
        owner, attribute = fix.locate()
    except ImportError:
        return False
    return hasattr(owner, attribute)


def apply_distribution_fixes():
    """Installs every fix of :data:`FIXES` whose version range holds the installed Keras (once; again is a no-op).
    Returns the names installed. A fix whose Keras internals moved is not installed, with a warning."""
    if keras.backend.backend() != "tensorflow":
        return []
    installed = []
    for name, parts in FIXES.items():
        if not all(part.applies() for part in parts):
            continue
        if not all(_present(part) for part in parts):
            warnings.warn(f"Keras {keras.__version__} moved the internals the fix {name!r} replaces; it is not "
                          "applied (Model.fit may fail, or train differently from one device, under tf.distribute "
                          "strategies of several replicas).", stacklevel=2)
            continue
        for part in parts:
            part.install()
        installed.append(name)
    return installed


@contextlib.contextmanager
def without(*names):
    """Keras as shipped in the places of the fixes ``names`` (all when none is named) for the block; the fixes that
    were installed are installed again after it."""
    unknown = [n for n in names if n not in FIXES]
    if unknown:
        raise ValueError(f"Unknown Keras fix {unknown[0]!r}; the fixes are {', '.join(FIXES)}.")
    parts = [part for name in (names or FIXES) for part in FIXES[name] if part.installed()]
    for part in parts:
        part.uninstall()
    try:
        yield
    finally:
        for part in parts:
            part.install()


# ---- private names used where no public API does the same ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PrivateUse:
    """A private attribute of a library that a function of this module reads, writes or calls.

    Attributes:
        library: the importable name of the library (``"keras"``, ``"keras_hub"``).
        first_version, last_version: the library's versions ``(major, minor)`` it is known to work on
            (``last_version`` None: every later one while the attribute is there, until its test says otherwise).
        attribute: the private attribute's name.
    """

    library: str
    first_version: tuple
    last_version: tuple | None
    attribute: str

    def require(self, owner, use):
        """Raises an ImportError naming ``use`` unless the installed library is in the range and ``owner`` has
        the attribute."""
        import importlib

        installed = importlib.import_module(self.library).__version__
        major, minor = installed.split(".")[:2]
        version = int(major), int("".join(c for c in minor if c.isdigit()) or 0)
        in_range = self.first_version <= version and (self.last_version is None or version <= self.last_version)
        if not in_range or not hasattr(owner, self.attribute):
            known = ".".join(map(str, self.first_version)) + (
                " and later" if self.last_version is None else " to " + ".".join(map(str, self.last_version)))
            raise ImportError(
                f"{use} relies on {self.library}'s private {type(owner).__name__}.{self.attribute} ({self.library} "
                f"{known}), which the installed {self.library} {installed} "
                f"{'lacks' if in_range else 'is not known to have'}: install the version pyproject.toml pins."
            )


#: The private uses, by the function of this module that makes each.
PRIVATE_USES = {
    "set_initial_epoch": PrivateUse("keras", (3, 0), None, "_initial_epoch"),
    "bpe_merge_into_cache": PrivateUse("keras_hub", (0, 32), None, "_bpe_merge_and_update_cache_tf"),
    "build_metrics": PrivateUse("keras", (3, 0), None, "_symbolic_build"),
    "compiled_metrics": PrivateUse("keras", (3, 0), None, "_compile_metrics"),
}


def set_initial_epoch(model, epoch):
    """Makes the ``fit`` that is starting run from ``epoch`` (0-based), when called from a callback's
    ``on_train_begin``: how a backup resumes training.

    Keras' trainers read ``model._initial_epoch or initial_epoch`` after ``on_train_begin`` (Keras 3.0 to 3.15 at
    least; its own ``keras.callbacks.BackupAndRestore`` sets it the same way); no public API changes the first
    epoch of a ``fit`` already called.
    """
    PRIVATE_USES["set_initial_epoch"].require(model, "set_initial_epoch")
    model._initial_epoch = int(epoch)


def build_metrics(model, batch):
    """Creates the variables of ``model``'s compiled metrics (and loss) from one ``batch`` of its training data,
    without running it: what a backup needs to put back the running metrics of an interrupted epoch before the
    first step of the resumed one (Keras' TensorFlow trainer makes them inside its first traced step; its JAX trainer,
    and any trainer under a tf.distribute strategy, at the start of ``fit``, through ``Trainer._symbolic_build``, the
    method this calls: Keras 3.0 to 3.15 at least)."""
    PRIVATE_USES["build_metrics"].require(model, "build_metrics")
    model._symbolic_build(data_batch=batch)


def compiled_metrics(model):
    """The container of the metrics ``model.compile(metrics=...)`` made (None before compiling, or without
    metrics): its ``metrics`` (the metric objects), ``built`` and ``build(y_true, y_pred)``. A loss that updates the
    compiled metrics itself (GPT's chunked loss, which has no logits for them to read) needs the objects; Keras 3.0
    to 3.15 keep them in ``Trainer._compile_metrics`` (``model.metrics`` lists the container, with no public type)."""
    PRIVATE_USES["compiled_metrics"].require(model, "compiled_metrics")
    return model._compile_metrics


def bpe_merge_into_cache(bpe, words):
    """keras-hub's byte-pair merge step alone: merges each of ``words`` (a 1-D tf.string tensor of pre-tokens,
    UTF-8) with the merge rules of ``bpe`` (a ``keras_hub.tokenizers.BytePairTokenizer``) and stores the result in
    ``bpe.cache`` (each word's tokens joined by spaces), where ``bpe.cache.lookup(words)`` reads it. TensorFlow ops:
    callable inside a ``tf.function``.

    keras-hub's public ``tokenize`` runs this step only after its own pre-tokenization (GPT-2's regex, redone on
    every input), which GPT2Tokenizer and the GGUF tokenizers replace with theirs (their pieces differ); keras-hub
    0.32 has it as ``BytePairTokenizer._bpe_merge_and_update_cache_tf``.
    """
    PRIVATE_USES["bpe_merge_into_cache"].require(bpe, "bpe_merge_into_cache")
    bpe._bpe_merge_and_update_cache_tf(words)


__all__ = ["FIXES", "PRIVATE_USES", "KerasFix", "PrivateUse", "apply_distribution_fixes", "bpe_merge_into_cache",
           "build_metrics", "compiled_metrics", "set_initial_epoch", "without"]
