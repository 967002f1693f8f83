"""Training helpers for the translation models: a wall-clock budget and keeping the best epoch's weights."""

from __future__ import annotations

import time

import keras


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
    """Remembers the weights of the epoch with the lowest ``monitor`` and restores them when training ends
    (also when a :class:`TimeBudget` or an interrupt stops it mid-epoch)."""

    def __init__(self, monitor="val_loss"):
        super().__init__()
        self.monitor = monitor
        self.best, self.best_epoch, self._weights = float("inf"), None, None

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is not None and value < self.best:
            self.best, self.best_epoch = float(value), epoch
            self._weights = self.model.get_weights()

    def on_train_end(self, logs=None):
        if self._weights is not None:
            self.model.set_weights(self._weights)
