"""A ``keras.callbacks.BackupAndRestore`` whose backup survives a kill at any instant and which resumes an
interrupted epoch where it stopped: the drop-in :class:`BackupAndRestore` that
:func:`~attnlayers.applications.core.training.callbacks.standard_callbacks` trains with.

    callback = BackupAndRestore("artifacts/run/backup", save_freq=50)   # every 50 batches (or "epoch")
    model.fit(train, epochs=10, callbacks=[callback])                  # killed? run the same fit again

How it differs from Keras' own (atomic writes, batches trained exactly once, one backup for a cluster) and why:
docs/guides/training-at-scale.md, "A worker dies". The behaviour:

- When: after every ``save_freq`` batches (or at epoch ends only: "epoch"), after the first batch that ends
  ``save_seconds`` or more after the last backup (None: never by time), and at the end of every epoch.
- Layout of ``backup_dir``: ``weights-{n}.weights.h5`` (``n`` counts the backups), ``state-{n}.npz`` (the running
  metrics' variables and the arrays of the followed callbacks, e.g. :class:`~.callbacks.BestWeights`' kept weights)
  and ``backup.json``, the pointer ``{"epoch": e, "step": s, "iterations": i, "weights": "weights-{n}.weights.h5",
  "state": "state-{n}.npz", "followed": {...}, "seeds": [...], "seconds": t, "history": {...}, "invocations": k,
  "previous": {...} | null}``: ``s`` batches of epoch ``e`` (0-based) are done;
  ``seeds`` holds the states of the layers' seed generators (dropout's), which ``save_weights`` leaves out; ``t`` is
  the seconds of training behind the backup, over every ``fit`` that led to it (what a resumed run's time budget
  has already spent: :class:`~.callbacks.TimeBudget`); ``history`` the logs of the epochs that ended before it
  (metric -> one value per epoch), ``k`` how many runs of ``fit`` took part and ``followed`` the JSON part of the
  states of the callbacks given to :meth:`BackupAndRestore.follow`. A backup writes a new weights file and state
  file, fsyncs them, then replaces the pointer atomically (a temporary file, fsync, ``os.replace``, fsync of the
  folder), and only then deletes the files the old pointer named. A kill at any instant leaves the old pointer with
  its files or the new pointer with its files; the weights, the state and the step they belong to are one record.
  Leftovers of a killed write (files no pointer names, temporary pointers) are deleted when training starts. On an
  object store (``gs://``...) the pointer is written whole in one request, which such stores make atomic.
  ``double_checkpoint=True`` keeps the previous backup too and restores it if the latest cannot be read.
- Resume: the weights, the optimizer's state, the seed generators' states, the followed callbacks' states and (in a
  resumed epoch) the running metrics come back, fit starts at epoch ``e``, and the first ``s`` batches of epoch ``e``
  are drawn from the data and dropped without training (the model's train function is swapped for one that only
  advances the iterator; TensorFlow and JAX), so every batch trains exactly once and, with deterministic ops and
  data whose epoch ``e`` comes in the same order in a new process (``core.inputs.data_order``, which every application's
  pipelines use), the resumed run ends with the weights, the metrics and the kept best weights of an uninterrupted
  one. (Data reshuffled every pass, as ``fit`` does to arrays or ``shuffle(..., reshuffle_each_iteration=True)``
  does, comes in another order in a new process: the resumed run is then as good as another shuffle, not the same
  bits.) The skipped batches still pass through the callbacks' batch hooks (with empty logs).
- Multi-worker (``MultiWorkerMirroredStrategy``): only the chief (:func:`~.distribution.is_chief`) writes
  ``backup_dir``; the other workers save the same way into a private temporary folder that they delete (so that
  every worker takes part in each save, should reading a variable need a collective), and never write the
  chief's files, whatever ``backup_dir`` they were given (``distribution.worker_directory``'s, or the chief's own). On
  restore the chief reads its backup and broadcasts it (the step, then every variable, by all-reduces to which the
  other workers add zeros): every worker resumes from the chief's backup, at the same step, without a shared file
  system.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings

import keras
import numpy as np

from attnlayers.validation import positive_number

from ..runs import keras_fixes
from ..runs.replicas import from_chief, is_chief, is_multi_worker

POINTER = "backup.json"
_CLOCK_STEPS = 10  # under multi-worker training, how often the chief's clock is asked whether a backup is due
_FILES = re.compile(r"^(?:weights-(\d+)\.weights\.h5|state-(\d+)\.npz)$")  # a backup's two files
# keras.callbacks.BackupAndRestore's files (weights, {"epoch": ...}, their double_checkpoint copies): resumed from
# when no backup of ours is there, deleted once one is.
_LEGACY = ("latest.weights.h5", "training_metadata.json", "latest.weights.h5.bkp", "training_metadata.json.bkp")


class file_utils:  # noqa: N801 (used like the keras module it replaces)
    """The file operations of a backup: ``os`` / ``shutil`` on a local folder, ``tf.io.gfile`` on a remote one
    (``gs://...``; TensorFlow is imported only then)."""

    join = staticmethod(os.path.join)

    @staticmethod
    def is_remote_path(path):
        return re.match(r"^[a-z][a-z0-9+.-]*://", str(path)) is not None

    @staticmethod
    def _gfile():
        import tensorflow as tf

        return tf.io.gfile

    @classmethod
    def exists(cls, path):
        return cls._gfile().exists(path) if cls.is_remote_path(path) else os.path.exists(path)

    @classmethod
    def File(cls, path, mode):  # noqa: N802
        return cls._gfile().GFile(path, mode) if cls.is_remote_path(path) else open(path, mode)

    @classmethod
    def listdir(cls, path):
        return cls._gfile().listdir(path) if cls.is_remote_path(path) else os.listdir(path)

    @classmethod
    def makedirs(cls, path):
        return cls._gfile().makedirs(path) if cls.is_remote_path(path) else os.makedirs(path, exist_ok=True)

    @classmethod
    def remove(cls, path):
        return cls._gfile().remove(path) if cls.is_remote_path(path) else os.remove(path)

    @classmethod
    def rmtree(cls, path):
        return cls._gfile().rmtree(path) if cls.is_remote_path(path) else shutil.rmtree(path)


def _fsync_path(path, directory=False):
    """Flushes ``path`` (a file, or a folder's entries) to disk; a no-op where the OS cannot open folders."""
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` (same arguments) with atomic backups, an exact mid-epoch resume and
    chief-only writes under multi-worker training: see the module's docstring.

    Args:
        backup_dir: the folder of the backup (only this callback's files may be there).
        save_freq: "epoch" (at the ends of epochs only) or N (also after every N batches).
        double_checkpoint: also keep the previous backup, restored when the latest cannot be read.
        delete_checkpoint: delete ``backup_dir`` when ``fit`` ends.

        print_fn: where the line saying what a resume restored goes (default ``print``; None: nowhere).
        save_seconds: also back up after the first batch that ends this many seconds or more after the last backup
            (or the start of training); None: not by time.

    Attributes:
        restored: the pointer restored by the last ``on_train_begin`` (a dict: epoch, step, iterations, weights,
            seconds, history, invocations), or None when training started from scratch.
        skipped: the batches the resumed epoch dropped (0 without a mid-epoch resume).
        invocations: which run of ``fit`` this is for the training the backup belongs to (1 from scratch, 2 after
            the first resume, ...).
    """

    def __init__(self, backup_dir, save_freq="epoch", double_checkpoint=False, delete_checkpoint=True,
                 print_fn=print, save_seconds=None):
        super().__init__(backup_dir, save_freq=save_freq, double_checkpoint=double_checkpoint,
                         delete_checkpoint=delete_checkpoint)
        self.save_seconds = None if save_seconds is None else positive_number(save_seconds, "save_seconds")
        self._followed, self._metrics_state, self._last_save, self._restored_state = [], None, None, (None, [])
        self._skip_names = None
        self._pointer_path = file_utils.join(backup_dir, POINTER)
        self._remote = file_utils.is_remote_path(backup_dir)
        self.restored, self.skipped = None, 0
        self._pointer, self._number = None, 0  # the committed pointer (None: no backup) and the last weights' n
        self._writes, self._scratch = True, None
        self._skip_until, self._train_function = 0, None
        self._epoch_done, self._since_save = 0, 0
        self.print_fn = print_fn
        self._seconds_before, self._clock, self._history, self.invocations = 0.0, None, {}, 1

    def follow(self, *callbacks):
        """Keeps the state of each of ``callbacks`` in every backup and restores it with the backup.

        Their ``on_epoch_end`` must come before this callback's in ``fit``'s list, so that an epoch's backup holds
        what they made of that epoch.

        Args:
            *callbacks: callbacks with ``backup_state()`` -> (a JSON-able value, a list of arrays) and
                ``restore_backup_state(value, arrays)`` (:class:`~.callbacks.BestWeights`: the kept epochs and their
                weights).

        Returns:
            self.

        Raises:
            ValueError: a callback lacks ``backup_state`` or ``restore_backup_state``.
        """
        for callback in callbacks:
            if not (callable(getattr(callback, "backup_state", None))
                    and callable(getattr(callback, "restore_backup_state", None))):
                raise ValueError(f"BackupAndRestore.follow needs callbacks with backup_state() and "
                                 f"restore_backup_state(value, arrays); received {callback!r}.")
            if all(callback is not f for f in self._followed):
                self._followed.append(callback)
        return self

    def _state(self):
        """(meta, arrays): the running metrics' values and the followed callbacks' states, as one record."""
        metrics = [keras.ops.convert_to_numpy(v) for v in self.model.metrics_variables]
        followed, arrays = [], list(metrics)
        for callback in self._followed:
            value, more = callback.backup_state()
            followed.append({"name": type(callback).__name__, "value": value, "arrays": len(more)})
            arrays.extend(np.asarray(a) for a in more)
        meta = {"metrics": len(metrics), "followed": followed,
                "shapes": [list(a.shape) for a in arrays], "dtypes": [str(a.dtype) for a in arrays]}
        return meta, arrays

    def _set_state(self, meta, arrays):
        """Restores what :meth:`_state` recorded: the followed callbacks now, the metrics at the resumed epoch's
        start (``fit`` resets them just before it)."""
        if meta is None:
            return
        if len(meta["followed"]) != len(self._followed):
            raise ValueError(f"BackupAndRestore: the backup in {self.backup_dir} holds the state of "
                             f"{[f['name'] for f in meta['followed']]}, this run follows "
                             f"{[type(c).__name__ for c in self._followed]}: run with the callbacks it was made with.")
        self._metrics_state = arrays[:meta["metrics"]]
        start = meta["metrics"]
        for callback, record in zip(self._followed, meta["followed"]):
            callback.restore_backup_state(record["value"], arrays[start:start + record["arrays"]])
            start += record["arrays"]

    # -- storage --

    def _read_pointer(self):
        if not file_utils.exists(self._pointer_path):
            return None
        with file_utils.File(self._pointer_path, "r") as f:
            return json.loads(f.read())

    def _write_pointer(self, pointer):
        text = json.dumps(pointer)
        if self._remote:  # an object store writes one object whole or not at all
            with file_utils.File(self._pointer_path, "w") as f:
                f.write(text)
            return
        temporary = f"{self._pointer_path}.tmp-{os.getpid()}"
        with open(temporary, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self._pointer_path)  # atomic on POSIX and Windows
        _fsync_path(self.backup_dir, directory=True)

    def _kept_names(self, pointer):
        names = set()
        while pointer:
            names.update(name for name in (pointer["weights"], pointer.get("state")) if name)
            pointer = pointer.get("previous")
        return names

    def _clean(self, pointer):
        """Deletes what no committed pointer needs: weights of killed or superseded writes, temporary pointers,
        and the files of Keras' own layout once this one has a backup."""
        if not file_utils.exists(self.backup_dir):
            return
        kept = self._kept_names(pointer)
        for name in file_utils.listdir(self.backup_dir):
            stale = (_FILES.match(name) and name not in kept) or name.startswith(f"{POINTER}.tmp")
            if stale or (pointer is not None and name in _LEGACY):
                file_utils.remove(file_utils.join(self.backup_dir, name))

    def _save(self, epoch, step):
        """Backs up the weights as ``step`` batches of ``epoch`` done: a new weights file, then the pointer."""
        if keras.backend.backend() == "jax" and hasattr(self.model, "jax_state_sync"):
            self.model.jax_state_sync()  # mid-epoch, JAX's training state is not in the variables yet
        self._last_save = time.perf_counter()
        iterations = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) if self.model.optimizer else 0
        meta, arrays = self._state()
        if not self._writes:  # a non-chief worker: the same save, into its scratch folder, then dropped
            path = os.path.join(self._scratch, "scratch.weights.h5")
            self.model.save_weights(path, overwrite=True)
            os.remove(path)
            return
        if not file_utils.exists(self.backup_dir):
            file_utils.makedirs(self.backup_dir)
        self._number += 1
        name = f"weights-{self._number:06d}.weights.h5"
        path = file_utils.join(self.backup_dir, name)
        self.model.save_weights(path, overwrite=True)
        state = f"state-{self._number:06d}.npz"
        with file_utils.File(file_utils.join(self.backup_dir, state), "wb") as f:
            np.savez(f, *arrays)
        if not self._remote:
            _fsync_path(path)
            _fsync_path(file_utils.join(self.backup_dir, state))
        previous = None
        if self.double_checkpoint and self._pointer is not None:
            previous = {k: v for k, v in self._pointer.items() if k != "previous"}
        seeds = [keras.ops.convert_to_numpy(v).tolist() for v in self._seed_variables()]
        pointer = {"epoch": int(epoch), "step": int(step), "iterations": iterations, "weights": name,
                   "state": state, "followed": meta, "seeds": seeds,
                   "seconds": round(self.seconds(), 3), "history": self._history, "invocations": self.invocations,
                   "previous": previous}
        self._write_pointer(pointer)  # the commit
        self._pointer = pointer
        self._clean(pointer)

    def seconds(self):
        """Seconds of training so far, over every ``fit`` this backup resumed (0 before training starts)."""
        return self._seconds_before + (0.0 if self._clock is None else time.perf_counter() - self._clock)

    def _seed_variables(self):
        """The model's variables that ``save_weights`` leaves out: the states of its layers' seed generators
        (dropout masks, ...), kept in the pointer so that a resumed run draws the masks an uninterrupted one would."""
        weights = {id(v) for v in self.model.weights}
        return [v for v in self.model.variables if id(v) not in weights]

    def _load(self, pointer):
        """Loads the weights ``pointer`` names (with the optimizer's state and the seed generators' states, when it
        has them); returns the pointer restored."""
        restored = self._load_weights(pointer)
        seeds, variables = restored.get("seeds"), self._seed_variables()
        if seeds is not None and len(seeds) == len(variables):
            for variable, value in zip(variables, seeds):
                variable.assign(np.asarray(value, dtype=keras.backend.standardize_dtype(variable.dtype)))
        self._restored_state = self._read_state(restored)
        self._set_state(*self._restored_state)
        return restored

    def _read_state(self, pointer):
        """(meta, arrays) of the state file ``pointer`` names; (None, []) for a backup without one."""
        if not pointer.get("state"):
            return None, []
        with file_utils.File(file_utils.join(self.backup_dir, pointer["state"]), "rb") as f, np.load(f) as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        return pointer["followed"], arrays

    def _load_weights(self, pointer):
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)  # its variables must exist to be loaded
        try:
            self.model.load_weights(file_utils.join(self.backup_dir, pointer["weights"]))
        except OSError:
            previous = pointer.get("previous")
            if not previous:
                raise
            warnings.warn(f"BackupAndRestore: {pointer['weights']} could not be read; restoring the previous backup "
                          f"({previous['weights']}).", stacklevel=2)
            self.model.load_weights(file_utils.join(self.backup_dir, previous["weights"]))
            return previous
        return pointer

    # -- multi-worker --

    def _restore_multi_worker(self, strategy):
        """Every worker takes the chief's backup: whether there is one and its step, then every variable."""
        pointer = self._restore_local() if self._writes else None
        header = ([1.0, pointer["epoch"], pointer["step"], pointer["iterations"] or 0, pointer.get("seconds", 0.0),
                   pointer.get("invocations", 1)] if pointer else [0.0] * 6)
        present, epoch, step, iterations, seconds, invocations = from_chief([np.array(header, np.float64)], strategy)[0]
        if not present:
            return None
        variables = self._state_variables()
        values = from_chief([keras.ops.convert_to_numpy(v) for v in variables], strategy)
        if not self._writes:
            for variable, value in zip(variables, values):
                variable.assign(value)
        # The state file (metrics, followed callbacks): its record as JSON bytes, then its arrays.
        meta, arrays = self._restored_state if self._writes else (None, [])
        text = json.dumps(meta).encode() if self._writes else b""
        length = int(from_chief([np.array(len(text), np.float64)], strategy)[0])
        mine = np.frombuffer(text, np.uint8) if self._writes else np.zeros(length, np.uint8)
        meta = json.loads(bytes(from_chief([mine], strategy)[0].astype(np.uint8)))
        if meta is not None:
            arrays = from_chief(arrays if self._writes else
                                [np.zeros(s, d) for s, d in zip(meta["shapes"], meta["dtypes"])], strategy)
            if not self._writes:
                self._set_state(meta, arrays)
        return pointer or {"epoch": int(epoch), "step": int(step), "iterations": int(iterations), "weights": None,
                           "seconds": float(seconds), "history": {}, "invocations": int(invocations)}

    def _state_variables(self):
        """The variables a restore sets: the model's (seed generators' included) and the optimizer's (metrics
        excluded)."""
        seen, variables = set(), []
        optimizer = self.model.optimizer
        for v in list(self.model.variables) + (list(optimizer.variables) if optimizer is not None else []):
            if id(v) not in seen:
                seen.add(id(v))
                variables.append(v)
        return variables

    def _restore_local(self):
        """Restores this process's backup (also Keras' own layout); returns its pointer or None."""
        pointer = self._read_pointer()
        if pointer is None:
            weights, metadata = (file_utils.join(self.backup_dir, name) for name in _LEGACY[:2])
            if file_utils.exists(weights):  # written by keras.callbacks.BackupAndRestore: its weights, its epoch
                self._load_weights({"weights": _LEGACY[0]})
                epoch = 0
                if file_utils.exists(metadata):
                    with file_utils.File(metadata, "r") as f:
                        epoch = int(json.loads(f.read())["epoch"])
                return {"epoch": epoch, "step": 0, "iterations": None, "weights": None}
            return None
        self._clean(pointer)
        restored = self._load(pointer)
        self._pointer = pointer
        return restored

    # -- callback hooks --

    def on_train_begin(self, logs=None):
        if not self.model.built:
            raise ValueError("To use the BackupAndRestore callback, your model must be built before you call "
                             f"`fit()`. Model {self.model} is unbuilt. You can build it beforehand by calling it "
                             "on a batch of data.")
        strategy = getattr(self.model, "distribute_strategy", None)
        multi_worker = is_multi_worker(strategy)
        self._writes = not multi_worker or is_chief(strategy)
        if not self._writes and self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="backup-worker-")
        self._pointer, self._number = None, 0
        self._metrics_state, self._restored_state = None, (None, [])
        if self._writes and file_utils.exists(self.backup_dir):  # new files never reuse a name
            numbers = [int(m.group(1) or m.group(2)) for m in map(_FILES.match, file_utils.listdir(self.backup_dir))
                       if m]
            self._number = max(numbers, default=0)
        self.restored = self._restore_multi_worker(strategy) if multi_worker else self._restore_local()
        self.skipped, self._skip_until, self._since_save = 0, 0, 0
        self._seconds_before, self._history, self.invocations = 0.0, {}, 1
        if self.restored is not None:
            self._seconds_before = float(self.restored.get("seconds") or 0.0)
            self._history = {k: list(v) for k, v in (self.restored.get("history") or {}).items()}
            self.invocations = int(self.restored.get("invocations") or 1) + 1
            if self.print_fn is not None:
                self.print_fn(f"resumed from the backup in {self.backup_dir}: {self.describe_restored()}")
            keras_fixes.set_initial_epoch(self.model, self.restored["epoch"])
            self._current_epoch = self.restored["epoch"]
            self._skip_until = self.restored["step"]
        self._clock = self._last_save = time.perf_counter()

    def describe_restored(self):
        """What the last ``on_train_begin`` restored, in words (None when it started from scratch)."""
        r = self.restored
        if r is None:
            return None
        where = f"epoch {r['epoch'] + 1}" + (f", after its step {r['step']}" if r["step"] else ", from its start")
        return (f"{where} ({r.get('iterations') or 0} optimizer steps, {float(r.get('seconds') or 0.0):.1f} s of "
                f"training before; run {self.invocations} of this training)")

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch, self._epoch_done = epoch, 0
        if epoch != (self.restored or {}).get("epoch"):
            self._skip_until = 0
        elif self._skip_until:
            if self._metrics_state is not None:
                self._restore_metrics()
            # The logs a dropped batch returns: the metrics' names, so that an epoch whose batches were all dropped
            # (a kill after its last backed-up step) still ends with its metrics (Keras reads them from the model
            # when the last logs have their names). Under JAX the metrics are read here, before fit takes them.
            self._skip_names = list(self.model.get_metrics_result()) if keras.backend.backend() == "jax" else None

    def _restore_metrics(self):
        """Puts back the running metrics of the interrupted epoch: at its start (``fit`` resets them just before;
        under JAX the first batch reads them from the variables), or, where the compiled metrics are made in the
        first step (TensorFlow without a strategy), once the first dropped batch has made them (:meth:`_skip`)."""
        variables = self.model.metrics_variables
        if len(variables) != len(self._metrics_state):
            return  # not made yet: _skip makes them
        for variable, value in zip(variables, self._metrics_state):
            variable.assign(value)
        self._metrics_state = None

    def _skip(self, *args):
        """The train function of a dropped batch: draws ``steps_per_execution`` batches, trains on none. Keras'
        TensorFlow trainer calls it with the iterator (returns the logs), its JAX trainer with (state, iterator)
        (returns (logs, state))."""
        iterator = args[-1]
        for _ in range(getattr(self.model, "steps_per_execution", 1) or 1):
            batch = next(iterator)
        if self._metrics_state is not None:
            keras_fixes.build_metrics(self.model, batch)
            self._restore_metrics()
        if len(args) == 2:  # JAX: the metrics' names (their values are in fit's state: Keras reads them at the end)
            return {name: 0.0 for name in self._skip_names or ()}, args[0]
        return self.model.get_metrics_result()

    def on_train_batch_begin(self, batch, logs=None):
        skipping = batch < self._skip_until
        if skipping and self._train_function is None:
            self._train_function, self.model.train_function = self.model.train_function, self._skip
        elif not skipping and self._train_function is not None:
            self.model.train_function, self._train_function = self._train_function, None
            if self._metrics_state is not None:
                warnings.warn("BackupAndRestore: the running metrics of the interrupted epoch could not be put back "
                              f"({len(self._metrics_state)} saved values, {len(self.model.metrics_variables)} metric "
                              "variables): the resumed epoch's metrics cover only its batches after the resume.",
                              stacklevel=2)
                self._metrics_state = None
        if skipping:
            self.skipped = batch + (getattr(self.model, "steps_per_execution", 1) or 1)

    def on_train_batch_end(self, batch, logs=None):
        done = batch + 1  # batches of this epoch done, the dropped ones included
        if done <= self._skip_until:
            self._epoch_done = done
            return
        self._since_save += done - self._epoch_done
        self._epoch_done = done
        if done == (self.params or {}).get("steps"):
            return  # the epoch's last batch: on_epoch_end backs up, after validation and the epoch's logs
        by_steps = self.save_freq != "epoch" and self._since_save >= self.save_freq
        by_time = self.save_seconds is not None and time.perf_counter() - self._last_save >= self.save_seconds
        strategy = getattr(self.model, "distribute_strategy", None)
        if self.save_seconds is not None and is_multi_worker(strategy):
            # The chief's clock decides, asked every _CLOCK_STEPS steps (one all-reduce of a scalar), so that every
            # worker saves after the same step.
            by_time = done % _CLOCK_STEPS == 0 and bool(from_chief([float(by_time)], strategy)[0])
        if by_steps or by_time:
            self._since_save = 0
            self._save(self._current_epoch, done)

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            if np.ndim(value) == 0:
                self._history.setdefault(key, []).append(float(value))
        complete = not self.model.stop_training  # else a TimeBudget (or the like) cut the epoch short
        self._since_save = 0
        self._save(epoch + 1, 0) if complete else self._save(epoch, self._epoch_done)
        self._current_epoch = epoch + 1

    def on_train_end(self, logs=None):
        if self._train_function is not None:
            self.model.train_function, self._train_function = self._train_function, None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self._writes and self.delete_checkpoint and file_utils.exists(self.backup_dir):
            file_utils.rmtree(self.backup_dir)


__all__ = ["BackupAndRestore", "POINTER"]
