"""Training callbacks shared by the applications: counting steps, a wall-clock budget, a learning rate that
ends at zero when the budget does, keeping the best epochs' weights (the best one, or the mean of the best few:
checkpoint averaging, Vaswani et al. 2017, section 6.1), a one-line-per-epoch log, and
:func:`standard_callbacks`, the list every example script trains with.

    callbacks = standard_callbacks("artifacts/run", minutes=20, best=BestWeights("val_accuracy", average=3))
    model.fit(train, validation_data=validation, epochs=100, callbacks=callbacks)
"""

from __future__ import annotations

import importlib.util
import os
import time

import keras
import numpy as np

from attnlayers.validation import one_of, positive_int, positive_number

from ..inputs.data_order import DataEpoch
from ..runs.replicas import from_chief, is_multi_worker
from .backup import BackupAndRestore


__all__ = ["BACKUP_SECONDS", "BestWeights", "BudgetedLearningRate", "ProgressLog", "SYNC_STEPS", "StepCounter",
           "TimeBudget", "standard_callbacks"]


def _seconds_before(backup):
    """The seconds of training a restored ``backup`` (a :class:`~.backup.BackupAndRestore`, or None) had behind it."""
    restored = getattr(backup, "restored", None)
    return float((restored or {}).get("seconds") or 0.0)


#: Under a multi-worker strategy the chief's clock is shared every SYNC_STEPS steps: one all-reduce of a scalar
#: (5 ms between two local workers, against 90 ms for a step of the tiny GPT), so a time budget may run up to that
#: many steps past its end, and a budgeted learning rate holds between two shares.
SYNC_STEPS = 10


class _Agreed:
    """A number all the workers of a multi-worker run agree on: the chief's, shared on every SYNC_STEPS-th call (every
    worker calls on the same steps) and held in between; elsewhere the number itself."""

    def __init__(self):
        self.value, self.calls = None, 0

    def reset(self):
        self.value, self.calls = None, 0

    def __call__(self, value, model):
        strategy = getattr(model, "distribute_strategy", None)
        if not is_multi_worker(strategy):
            return value
        if self.calls % SYNC_STEPS == 0:
            self.value = float(from_chief([value], strategy)[0])
        self.calls += 1
        return self.value


class StepCounter(keras.callbacks.Callback):
    """Counts the training steps of ``fit``, per epoch and in all, and the seconds spent in it.

    Attributes:
        steps: training steps run (batches; ``steps_per_execution`` counts as one).
        epoch_steps: the steps of each epoch run, in order (the last one may be partial).
        elapsed: seconds from ``on_train_begin`` to the last batch (to ``on_train_end`` once ended).
    """

    def __init__(self):
        super().__init__()
        self.steps, self.epoch_steps, self.elapsed = 0, [], 0.0
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_steps.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if not self.epoch_steps:
            self.epoch_steps.append(0)
        self.epoch_steps[-1] += 1
        self.elapsed = time.perf_counter() - self._start

    def on_train_end(self, logs=None):
        if self._start is not None:
            self.elapsed = time.perf_counter() - self._start

    def seconds_now(self):
        """Seconds from ``on_train_begin`` to now (``elapsed`` is as of the last batch's end); 0 before training."""
        return 0.0 if self._start is None else time.perf_counter() - self._start

    @property
    def steps_per_epoch(self):
        """The steps of a full epoch: ``fit``'s own count when the data has a known size, else the longest
        complete epoch run (None before one completes)."""
        known = (self.params or {}).get("steps")
        if known:
            return int(known)
        complete = self.epoch_steps[:-1] if getattr(self, "stopped", False) else self.epoch_steps
        return max(complete) if complete else None


class TimeBudget(StepCounter):
    """Stops ``fit`` once ``seconds`` of training have passed (checked after every batch).

    Only training counts: validation at the end of an epoch still runs, and nothing after ``fit`` (evaluation,
    export) is bounded. A run resumed by a :class:`~.backup.BackupAndRestore` it follows (:meth:`follow_backup`;
    :func:`standard_callbacks` links them) gets what the interrupted run had left: the backup's seconds count as
    spent. Under a multi-worker strategy the chief's clock decides, shared every :data:`SYNC_STEPS` steps, so every
    worker stops after the same step; workers that stopped on different steps would wait on each other's
    collectives.

    Args:
        seconds: the budget, > 0.

    Attributes:
        stopped: True when the budget ended the run; then ``stopped_epoch`` (0-based) and ``stopped_step``
            (steps run in that epoch) say where, and ``mid_epoch`` whether the epoch was cut short.
        steps, epoch_steps, elapsed: as in :class:`StepCounter`.
    """

    def __init__(self, seconds):
        super().__init__()
        self.seconds = positive_number(seconds, "seconds")
        self.stopped, self.stopped_epoch, self.stopped_step = False, None, None
        self._epoch, self.backup, self._agreed = 0, None, _Agreed()

    def follow_backup(self, backup):
        """Counts the seconds of training behind what ``backup`` restores as spent.

        Args:
            backup: the :class:`~.backup.BackupAndRestore` of the same ``fit``.
        """
        self.backup = backup

    @property
    def seconds_before(self):
        """Seconds of the budget spent before this ``fit`` (by the runs that led to the restored backup)."""
        return _seconds_before(self.backup)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._agreed.reset()

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if self.stopped:
            return
        if self._agreed(self.seconds_before + self.elapsed, self.model) >= self.seconds:
            self.stopped, self.stopped_epoch, self.stopped_step = True, self._epoch, self.epoch_steps[-1]
            self.model.stop_training = True

    @property
    def mid_epoch(self):
        """True when the budget stopped an epoch before its last step; None if it did not stop training, or
        stopped the first epoch of data whose size is unknown (then nothing says where the epoch would end)."""
        if not self.stopped:
            return None
        full = self.steps_per_epoch
        return None if full is None else self.stopped_step < full


class BudgetedLearningRate(keras.callbacks.Callback):
    """A learning rate set by how much of the run's budget is spent: linear warm-up, then linear decay to zero
    when the budget ends ("budgeted training", Li et al. 2020: a schedule that reaches zero exactly at the end
    of the budget trains better in that budget than one made for a longer run).

    ``lr(p) = peak * min(p / w, (1 - p) / (1 - w))``, clipped to ``[0, peak]``, with ``w = warmup_fraction``
    and the progress ``p = max(elapsed / seconds, iterations / steps, iterations / fit_steps)`` over the bounds
    that exist (``elapsed``: seconds since ``on_train_begin``, the clock :class:`TimeBudget` stops on;
    ``iterations``: the optimizer's step count, which ``BackupAndRestore`` restores; ``fit_steps``: ``fit``'s
    ``epochs * steps per epoch`` when the data's size is known): whichever bound ends the run first ends the
    schedule. Set before every batch, so a run bounded by time warms up and decays over the steps it actually
    gets, on a fast machine or a slow one.

    The optimizer must have a constant learning rate (a number, which becomes a variable this callback
    assigns), not a ``LearningRateSchedule``. Under JAX the callback syncs the training state before each
    assignment (``model.jax_state_sync()``), as keras asks of callbacks that change variables mid-epoch. A run
    resumed by a ``BackupAndRestore`` keeps its step progress (the optimizer's step count comes back) and, when the
    callback follows the backup (:meth:`follow_backup`; ``run_recipe`` links them), its time progress: the backup's
    seconds count as spent. Under a multi-worker strategy every worker sets the chief's progress (shared every
    ``SYNC_STEPS`` steps): a learning rate of each worker's own clock would differ between workers, and so would
    their weights.

    Args:
        peak: the largest learning rate, > 0.
        warmup_fraction: the share of the budget spent warming up, in (0, 1).
        seconds: the wall-clock budget (use the :class:`TimeBudget`'s), or None.
        steps: a step budget, or None (``fit``'s epochs bound the steps anyway).

    Attributes:
        last: the learning rate set before the latest batch.
    """

    def __init__(self, peak, warmup_fraction=0.1, seconds=None, steps=None):
        super().__init__()
        self.peak = positive_number(peak, "peak")
        if not 0.0 < warmup_fraction < 1.0:
            raise ValueError(f"`warmup_fraction` must be in (0, 1); received warmup_fraction={warmup_fraction!r}.")
        self.warmup_fraction = float(warmup_fraction)
        self.seconds = None if seconds is None else positive_number(seconds, "seconds")
        self.steps = None if steps is None else positive_int(steps, "steps")
        self.last, self._start, self._total_steps, self.backup = None, None, None, None
        self._agreed = _Agreed()

    def follow_backup(self, backup):
        """Counts the seconds of training behind what ``backup`` restores as spent.

        Args:
            backup: the ``BackupAndRestore`` of the same ``fit``.
        """
        self.backup = backup

    def learning_rate(self, progress):
        """``lr(p)`` of the docstring for a progress ``p``.

        Args:
            progress: p, the share of the budget spent, a float in [0, 1].

        Returns:
            The learning rate, a float.
        """
        w = self.warmup_fraction
        return self.peak * min(1.0, max(0.0, min(progress / w, (1.0 - progress) / (1.0 - w))))

    def on_train_begin(self, logs=None):
        self._agreed.reset()
        optimizer = getattr(self.model.optimizer, "inner_optimizer", self.model.optimizer)  # mixed_float16's wrapper
        schedule = optimizer.get_config()["learning_rate"]  # a dict when it is a schedule
        if isinstance(schedule, dict):
            raise ValueError("BudgetedLearningRate sets the learning rate itself: compile the model with a constant "
                             f"learning rate, not the schedule {schedule.get('class_name', '')}.")
        epochs, steps = (self.params or {}).get("epochs"), (self.params or {}).get("steps")
        bounds = [b for b in (self.steps, epochs and steps and int(epochs) * int(steps)) if b]
        if self.seconds is None and not bounds:
            raise ValueError("BudgetedLearningRate needs `seconds` or `steps` when fit does not know the steps "
                             "of an epoch (data of unknown size): pass one of them.")
        self._total_steps = min(bounds) if bounds else None
        self._start = time.perf_counter()

    def progress(self):
        """The share of the budget spent, in [0, 1] (0 before training starts)."""
        if self._start is None:
            return 0.0
        shares = []
        if self.seconds is not None:
            shares.append((_seconds_before(self.backup) + time.perf_counter() - self._start) / self.seconds)
        if self._total_steps is not None:
            # convert_to_numpy: a MirroredVariable under tf.distribute has no __int__
            shares.append(int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) / self._total_steps)
        return min(1.0, max(shares))

    def on_train_batch_begin(self, batch, logs=None):
        if keras.backend.backend() == "jax":
            self.model.jax_state_sync()  # the loop then reads the variables again, this assignment included
        self.last = self.learning_rate(self._agreed(self.progress(), self.model))
        self.model.optimizer.learning_rate = self.last


class BestWeights(keras.callbacks.Callback):
    """Keeps the weights of the ``average`` best epochs by ``monitor`` and, when training ends (also when a
    :class:`TimeBudget` or an interrupt stops it mid-epoch), restores the best epoch's weights, or with
    ``average > 1`` the element-wise mean of the best ``average`` epochs' weights (checkpoint averaging;
    non-float variables such as seed states keep the best epoch's value).

    Args:
        monitor: a logged metric, e.g. "val_loss" or "val_accuracy".
        mode: "min", "max", or "auto" ("max" for accuracies, "min" otherwise).
        average: how many of the best epochs to average (1 = restore the best epoch only).

    Attributes:
        best, best_epoch: the best value of ``monitor`` and its (0-based) epoch.
        kept_epochs: the epochs whose weights are kept, best first.
    """

    def __init__(self, monitor="val_loss", mode="auto", average=1):
        super().__init__()
        one_of(mode, "mode", ("auto", "min", "max"))
        self.monitor, self.average = monitor, positive_int(average, "average")
        self.mode = ("max" if "acc" in monitor else "min") if mode == "auto" else mode
        self.best, self.best_epoch = (-np.inf if self.mode == "max" else np.inf), None
        self._kept = []  # (value, epoch, weights), best first

    @property
    def kept_epochs(self):
        return [epoch for _, epoch, _ in self._kept]

    def _better(self, a, b):
        return a > b if self.mode == "max" else a < b

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        value = float(value)
        if len(self._kept) == self.average and not self._better(value, self._kept[-1][0]):
            return
        self._kept.append((value, epoch, self.model.get_weights()))
        self._kept.sort(key=lambda kept: -kept[0] if self.mode == "max" else kept[0])
        del self._kept[self.average:]
        self.best, self.best_epoch = self._kept[0][0], self._kept[0][1]

    def backup_state(self):
        """(the kept epochs' values and epochs, their weights as one flat list): what a backup keeps of this callback
        (:meth:`BackupAndRestore.follow <.backup.BackupAndRestore.follow>`), so that the weights kept after a resume
        are the best of the whole training."""
        kept = [[value, epoch, len(weights)] for value, epoch, weights in self._kept]
        return kept, [array for _, _, weights in self._kept for array in weights]

    def restore_backup_state(self, kept, arrays):
        """Takes back what :meth:`backup_state` returned.

        Args:
            kept: the kept epochs' [value, epoch, number of weight arrays] lists.
            arrays: their weights, as one flat list of arrays.
        """
        self._kept, start = [], 0
        for value, epoch, count in kept:
            self._kept.append((float(value), int(epoch), list(arrays[start:start + count])))
            start += count
        if self._kept:
            self.best, self.best_epoch = self._kept[0][0], self._kept[0][1]

    def weights(self):
        """The weights ``on_train_end`` restores (None before the first monitored epoch)."""
        if not self._kept:
            return None
        snapshots = [weights for _, _, weights in self._kept]
        return [
            np.mean(arrays, axis=0).astype(arrays[0].dtype) if np.issubdtype(arrays[0].dtype, np.floating)
            else arrays[0]
            for arrays in zip(*snapshots)
        ]

    def on_train_end(self, logs=None):
        weights = self.weights()
        if weights is not None:
            self.model.set_weights(weights)

    def describe(self):
        """One line: which weights were restored, e.g. "epoch 9 (best val_accuracy 1.0000)"."""
        if not self._kept:
            return f"the last epoch's ({self.monitor} was never logged)"
        if len(self._kept) == 1:
            return f"epoch {self.best_epoch + 1} (best {self.monitor} {self.best:.4f})"
        epochs = ", ".join(str(e + 1) for e in sorted(self.kept_epochs))
        return f"the mean of epochs {epochs} (the {len(self._kept)} best by {self.monitor}; best {self.best:.4f})"


def _clock(seconds):
    """``seconds`` as M:SS, or H:MM:SS from an hour on (e.g. 65 -> "1:05")."""
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class ProgressLog(keras.callbacks.Callback):
    """Prints one line per epoch: steps, seconds and the logged metrics (for logs written to files, where
    ``fit``'s progress bar is unreadable; use it with ``fit(..., verbose=0)``).

    The epoch reads "epoch 3/10" when ``fit``'s epochs bound the run, and "epoch 3" when only a time budget does
    (``fit``'s epochs are :data:`~.cli.UNBOUNDED_EPOCHS`: a count nobody reaches). With a ``budget`` each line also
    says the optimizer's step and the training time against the budget, e.g. "step 1,234, 1:05 of 2:00 budget" (the
    seconds of a run resumed from its backup included, as the budget counts them).

    Args:
        print_fn: where the lines go (default ``print``, flushed).
        budget: the run's :class:`TimeBudget` (which must be among ``fit``'s callbacks too), or None.
        every: also print a line every this many seconds of training, mid-epoch (the running training metrics), or
            None (at the ends of epochs only).
    """

    def __init__(self, print_fn=None, budget=None, every=None):
        super().__init__()
        if budget is not None and not isinstance(budget, TimeBudget):
            raise ValueError(f"`budget` must be None or a TimeBudget; received budget={budget!r}.")
        self.print_fn = print_fn or (lambda line: print(line, flush=True))
        self.budget, self.every = budget, None if every is None else positive_number(every, "every")
        self._start, self._steps, self._epoch, self._next = None, 0, 0, None

    def _epoch_name(self, epoch):
        from ..runs.cli import UNBOUNDED_EPOCHS

        total = (self.params or {}).get("epochs")
        return f"epoch {epoch + 1}" + (f"/{total}" if total and total < UNBOUNDED_EPOCHS else "")

    def _where(self):
        """", step 1,234, 1:05 of 2:00 budget" with a budget, else ""."""
        if self.budget is None:
            return ""
        if keras.backend.backend() == "jax" and hasattr(self.model, "jax_state_sync"):
            self.model.jax_state_sync()  # mid-epoch, JAX's training state is not in the variables yet
        optimizer = getattr(self.model, "optimizer", None)
        step = int(keras.ops.convert_to_numpy(optimizer.iterations)) if optimizer is not None else self.budget.steps
        spent = self.budget.seconds_before + self.budget.seconds_now()
        return f", step {step:,}, {_clock(spent)} of {_clock(self.budget.seconds)} budget"

    @staticmethod
    def _steps_name(steps):
        return f"{steps} step{'' if steps == 1 else 's'}"

    @staticmethod
    def _metrics(logs):
        return "  ".join(f"{k} {float(v):.4f}" for k, v in (logs or {}).items() if np.ndim(v) == 0)

    def on_train_begin(self, logs=None):
        self._next = None if self.every is None else time.perf_counter() + self.every

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._steps, self._epoch = time.perf_counter(), 0, epoch

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        if self._next is not None and time.perf_counter() >= self._next:
            self._next = time.perf_counter() + self.every
            self.print_fn(f"{self._epoch_name(self._epoch)}: {self._steps_name(self._steps)} so far{self._where()}  "
                          f"{self._metrics(logs)}")

    def on_epoch_end(self, epoch, logs=None):
        self.print_fn(f"{self._epoch_name(epoch)}: {self._steps_name(self._steps)}, "
                      f"{time.perf_counter() - self._start:.1f} s{self._where()}  {self._metrics(logs)}")


#: Seconds between two backups of a run that asks for none by steps (besides the one at every epoch's end).
BACKUP_SECONDS = 300


def standard_callbacks(out_dir=None, *, minutes=None, best=None, tensorboard=True, backup=True, progress=False,
                       backup_every=None):
    """The callbacks every example trains with, in order: the data's epoch (:class:`~.data_order.DataEpoch`),
    progress log, TensorBoard, best weights, BackupAndRestore (this package's atomic one,
    :class:`~.backup.BackupAndRestore`, which keeps the best weights' state too), time budget.

    Args:
        out_dir: the run's folder: TensorBoard logs go to ``out_dir/logs``, checkpoints to ``out_dir/backup``
            (run the same command again after an interruption and training resumes). None: neither.
        minutes: a wall-clock budget for training (:class:`TimeBudget`, following the backup: a resumed run gets
            what the interrupted one had left), or None.
        best: None (keep the last epoch's weights), a :class:`BestWeights`, or a dict of its arguments
            (e.g. ``{"monitor": "val_accuracy", "average": 3}``).
        tensorboard, backup: add ``keras.callbacks.TensorBoard`` / ``BackupAndRestore`` (need ``out_dir``).
        progress: add a :class:`ProgressLog` (one line per epoch; with ``minutes``, each against the budget), or a
            number of seconds: also a line that often mid-epoch.
        backup_every: back up every this many steps (and at every epoch's end); None: every
            :data:`BACKUP_SECONDS` seconds of training (and at every epoch's end).

    Returns:
        A list of callbacks for ``fit`` (find the budget and the best weights in it with ``isinstance``).
    """
    callbacks = [DataEpoch()]
    budget = None if minutes is None else TimeBudget(positive_number(minutes, "minutes") * 60.0)
    if isinstance(best, dict):
        best = BestWeights(**best)
    if best is not None and not isinstance(best, BestWeights):
        raise ValueError(f"`best` must be None, a BestWeights or a dict of its arguments; received {best!r}.")
    if backup_every is not None:
        backup_every = positive_int(backup_every, "backup_every")
    if progress is not False and progress is not None:
        every = None if progress is True else positive_number(progress, "progress")
        callbacks.append(ProgressLog(budget=budget, every=every))
    if out_dir is not None and tensorboard:
        if importlib.util.find_spec("tensorflow") is None:  # Keras writes its summaries with TensorFlow
            print("TensorBoard logs need TensorFlow (pip install tensorflow): training without them", flush=True)
        else:
            callbacks.append(keras.callbacks.TensorBoard(os.path.join(out_dir, "logs")))
    if best is not None:  # before the backup: an epoch's backup holds the best weights' view of that epoch
        callbacks.append(best)
    restore = None
    if out_dir is not None and backup:
        restore = BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=backup_every or "epoch",
                                   save_seconds=None if backup_every else BACKUP_SECONDS)
        callbacks.append(restore)
        if best is not None:
            restore.follow(best)
    if budget is not None:
        callbacks.append(budget)
        budget.follow_backup(restore)
    return callbacks
