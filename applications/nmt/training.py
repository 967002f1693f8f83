"""Training helpers for the translation models: a wall-clock budget, and keeping the best epochs' weights
(the best one, or the average of the best few: checkpoint averaging, Vaswani et al. 2017, section 6.1)."""

from __future__ import annotations

import time

import keras
import numpy as np


class TimeBudget(keras.callbacks.Callback):
    """Stops ``fit`` once ``seconds`` of training have passed (checked after every batch).

    ``elapsed`` and ``steps`` record what was used; ``stopped`` is True when the budget ended the run.
    """

    def __init__(self, seconds):
        super().__init__()
        if seconds <= 0:
            raise ValueError(f"`seconds` must be positive; received {seconds!r}.")
        self.seconds = float(seconds)
        self.elapsed, self.steps, self.stopped = 0.0, 0, False

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        self.elapsed = time.perf_counter() - self._start
        if self.elapsed >= self.seconds:
            self.stopped = True
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self.elapsed = time.perf_counter() - self._start


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
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"`mode` must be 'auto', 'min' or 'max'; received {mode!r}.")
        if not isinstance(average, int) or average < 1:
            raise ValueError(f"`average` must be a positive integer; received {average!r}.")
        self.monitor, self.average = monitor, average
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
