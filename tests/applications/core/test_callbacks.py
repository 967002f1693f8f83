"""Training callbacks: BestWeights (best epoch, checkpoint averaging), TimeBudget (where it stopped),
BudgetedLearningRate, StepCounter, ProgressLog, the standard list, and BackupAndRestore (a write killed half-way
leaves the previous backup; a mid-epoch resume trains no batch twice)."""

import json
import os
import re

import keras
import numpy as np
import pytest

from attnlayers.applications.core import (
    BackupAndRestore,
    BestWeights,
    BudgetedLearningRate,
    ProgressLog,
    StepCounter,
    TimeBudget,
    standard_callbacks,
)
from attnlayers.applications.core.training.callbacks import BACKUP_SECONDS


class _Scripted(keras.callbacks.Callback):
    """Logs a scripted validation value per epoch and snapshots the weights the other callbacks see."""

    def __init__(self, values, name):
        super().__init__()
        self.values, self.name, self.snapshots = values, name, []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.name] = self.values[epoch]
        self.snapshots.append([w.copy() for w in self.model.get_weights()])


def _fit(callbacks, epochs, samples=32):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    x = np.random.default_rng(0).normal(size=(samples, 3)).astype("float32")
    model.fit(x, x.sum(1), epochs=epochs, batch_size=8, verbose=0, callbacks=callbacks)
    return model


@pytest.mark.parametrize(
    "monitor, values, best_epoch",
    [("val_loss", [3.0, 1.0, 2.0, 1.5], 1), ("val_accuracy", [0.1, 0.5, 0.7, 0.6], 2)],
)
def test_best_weights_restores_the_best_epoch(monitor, values, best_epoch):
    scripted, best = _Scripted(values, monitor), BestWeights(monitor)  # mode "auto": max for accuracies
    model = _fit([scripted, best], len(values))
    assert best.best_epoch == best_epoch and best.best == values[best_epoch]
    for restored, expected in zip(model.get_weights(), scripted.snapshots[best_epoch]):
        np.testing.assert_array_equal(restored, expected)
    assert best.describe().startswith(f"epoch {best_epoch + 1} (best {monitor}")


def test_best_weights_averages_the_best_k_epochs():
    values = [0.2, 0.6, 0.4, 0.7, 0.5]
    scripted, best = _Scripted(values, "val_accuracy"), BestWeights("val_accuracy", average=3)
    model = _fit([scripted, best], len(values))
    assert best.kept_epochs == [3, 1, 4]  # best first
    for i, restored in enumerate(model.get_weights()):
        expected = np.mean([scripted.snapshots[e][i] for e in (1, 3, 4)], axis=0)
        np.testing.assert_allclose(restored, expected, rtol=1e-6)
    assert not np.allclose(model.get_weights()[0], scripted.snapshots[3][0])  # the average is not one epoch
    assert "mean of epochs 2, 4, 5" in best.describe()


def test_best_weights_mode_and_missing_metric():
    assert BestWeights("val_loss").mode == "min" and BestWeights("val_accuracy").mode == "max"
    best = BestWeights("val_bleu", mode="max")
    model = _fit([best], 2)  # val_bleu is never logged: nothing kept, weights untouched
    assert best.best_epoch is None and best.weights() is None and len(model.get_weights()) == 4
    with pytest.raises(ValueError, match="mode"):
        BestWeights(mode="largest")
    with pytest.raises(ValueError, match="average"):
        BestWeights(average=0)


def test_time_budget_stops_fit_mid_epoch_and_says_where():
    budget = TimeBudget(1e-9)
    _fit([budget], epochs=50)
    assert budget.stopped and budget.steps == 1  # stopped after the first batch of the first epoch
    assert (budget.stopped_epoch, budget.stopped_step, budget.mid_epoch) == (0, 1, True)
    assert budget.steps_per_epoch == 4  # fit knows the size of the NumPy data: 32 samples / 8
    with pytest.raises(ValueError, match="seconds"):
        TimeBudget(0)


def test_step_counter_and_a_budget_that_does_not_stop():
    counter, budget = StepCounter(), TimeBudget(3600)
    _fit([counter, budget], epochs=3, samples=20)  # 3 batches per epoch (8, 8, 4)
    assert counter.steps == 9 and counter.epoch_steps == [3, 3, 3] and counter.elapsed > 0
    assert not budget.stopped and budget.mid_epoch is None and budget.steps == 9


class _LearningRates(keras.callbacks.Callback):
    """Records the learning rate each batch trains with, and the weights after the first batch."""

    def __init__(self):
        super().__init__()
        self.rates, self.initial, self.after_first = [], None, None

    def on_train_begin(self, logs=None):
        self.initial = [w.copy() for w in self.model.get_weights()]

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_train_batch_end(self, batch, logs=None):
        if self.after_first is None:
            self.after_first = [w.copy() for w in self.model.get_weights()]


def test_budgeted_learning_rate_over_the_steps_of_fit():
    """No bound given: the budget is fit's 5 epochs x 4 batches; warm-up over 10% of it, then down to zero."""
    schedule, seen = BudgetedLearningRate(0.05, warmup_fraction=0.1), _LearningRates()
    model = _fit([schedule, seen], epochs=5)
    p = np.arange(20) / 20  # the progress before each batch
    expected = 0.05 * np.clip(np.minimum(p / 0.1, (1 - p) / 0.9), 0, 1)
    np.testing.assert_allclose(seen.rates, expected, rtol=1e-6)
    assert seen.rates[2] == pytest.approx(0.05) and seen.rates[-1] == pytest.approx(0.05 / 18)
    # The optimizer trains with it: the first batch (rate 0) leaves the weights as they were.
    for before, after in zip(seen.initial, seen.after_first):
        np.testing.assert_array_equal(before, after)
    assert not np.allclose(seen.initial[0], model.get_weights()[0])


def test_budgeted_learning_rate_over_a_wall_clock_budget(monkeypatch):
    """A time bound: each batch is (by a fake clock) 10 of 100 seconds later, whatever the steps."""
    from attnlayers.applications.core.training import callbacks as module

    clock = iter(np.arange(0.0, 1000.0, 10.0))
    monkeypatch.setattr(module.time, "perf_counter", lambda: next(clock))
    schedule, seen = BudgetedLearningRate(1.0, warmup_fraction=0.2, seconds=100), _LearningRates()
    _fit([schedule, seen], epochs=3)  # 12 batches; from the 10th on, the budget is spent: rate 0
    expected = [min(p / 0.2, (1 - p) / 0.8, 1.0) for p in np.minimum(np.arange(1, 13) / 10, 1.0)]
    np.testing.assert_allclose(seen.rates, np.maximum(expected, 0), atol=1e-6)
    assert schedule.progress() == 1.0 and seen.rates[-1] == 0.0


def test_budgeted_learning_rate_refuses_what_it_cannot_schedule():
    with pytest.raises(ValueError, match="warmup_fraction"):
        BudgetedLearningRate(1e-3, warmup_fraction=1.0)
    with pytest.raises(ValueError, match="peak"):
        BudgetedLearningRate(0.0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)), "mse")
    with pytest.raises(ValueError, match="constant learning rate, not the schedule ExponentialDecay"):
        model.fit(np.zeros((8, 3)), np.zeros(8), verbose=0, callbacks=[BudgetedLearningRate(1e-3)])


def test_progress_log_prints_one_line_per_epoch():
    lines = []
    _fit([ProgressLog(print_fn=lines.append)], epochs=2)
    assert len(lines) == 2 and lines[0].startswith("epoch 1/2: 4 steps") and "loss" in lines[0]


def test_progress_log_under_a_budget_says_steps_and_time_against_it_not_unbounded_epochs():
    from attnlayers.applications.core.runs.cli import UNBOUNDED_EPOCHS

    class StopAfterTwo(keras.callbacks.Callback):  # fit's epochs as --minutes alone gives them, 2 of them run here
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = epoch == 1

    lines, budget = [], TimeBudget(90)
    _fit([ProgressLog(print_fn=lines.append, budget=budget, every=1e-9), budget, StopAfterTwo()],
         epochs=UNBOUNDED_EPOCHS)
    assert len(lines) == 2 * (4 + 1)  # a line after every step (every=1e-9 s), and at each epoch's end
    assert re.match(r"epoch 1: 2 steps so far, step 2, 0:\d\d of 1:30 budget  loss \d", lines[1]), lines[1]
    assert re.match(r"epoch 1: 4 steps, [\d.]+ s, step 4, 0:\d\d of 1:30 budget  loss \d", lines[4]), lines[4]
    assert re.match(r"epoch 2: 4 steps, [\d.]+ s, step 8, 0:\d\d of 1:30 budget  loss \d", lines[9]), lines[9]
    assert not any(f"/{UNBOUNDED_EPOCHS}" in line for line in lines)
    with pytest.raises(ValueError, match="budget"):
        ProgressLog(budget=90)


def test_standard_callbacks(tmp_path):
    callbacks = standard_callbacks(tmp_path, minutes=1.5, best={"monitor": "val_accuracy", "average": 2},
                                   progress=True)
    kinds = [type(c).__name__ for c in callbacks]
    # The best weights before the backup, which keeps their state (each epoch's backup sees that epoch).
    assert kinds == ["DataEpoch", "ProgressLog", "TensorBoard", "BestWeights", "BackupAndRestore", "TimeBudget"]
    assert callbacks[5].seconds == 90.0 and callbacks[3].average == 2
    assert callbacks[1].budget is callbacks[5] and callbacks[1].every is None  # its lines say the budget's time
    assert callbacks[4]._followed == [callbacks[3]]
    assert (callbacks[4].save_freq, callbacks[4].save_seconds) == ("epoch", BACKUP_SECONDS)  # by time by default
    backup = standard_callbacks(tmp_path, backup_every=7, tensorboard=False)[-1]
    assert (backup.save_freq, backup.save_seconds) == (7, None)
    assert standard_callbacks(None, progress=30)[1].every == 30.0  # and a number: a line that often mid-epoch too
    assert [type(c).__name__ for c in standard_callbacks(None)] == ["DataEpoch"]  # no folder, budget, selection
    best = BestWeights()
    assert standard_callbacks(tmp_path, best=best, tensorboard=False, backup=False)[1:] == [best]
    with pytest.raises(ValueError, match="backup_every"):
        standard_callbacks(tmp_path, backup_every=0)
    with pytest.raises(ValueError, match="minutes"):
        standard_callbacks(tmp_path, minutes=0)
    with pytest.raises(ValueError, match="best"):
        standard_callbacks(tmp_path, best="val_loss")


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.data")
@pytest.mark.parametrize("stop_at, mid_epoch, steps_per_epoch", [((0, 3), None, None), ((1, 2), True, 3)])
def test_time_budget_on_data_of_unknown_size(stop_at, mid_epoch, steps_per_epoch):
    """Without a known epoch size, the first complete epoch gives it; before one completes, nothing does."""
    import tensorflow as tf

    budget = TimeBudget(3600)

    class Expire(keras.callbacks.Callback):  # ends the budget at a chosen (epoch, step)
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch, len(budget.epoch_steps) and budget.epoch_steps[-1] + 1) == stop_at:
                budget.seconds = 0.0

    x = np.zeros((24, 3), "float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[:, 0])).filter(lambda *_: True).batch(8)  # size unknown
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(data, epochs=3, verbose=0, callbacks=[Expire(), budget])
    assert budget.stopped and (budget.stopped_epoch, budget.stopped_step) == stop_at
    assert budget.mid_epoch is mid_epoch and budget.steps_per_epoch == steps_per_epoch


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute and LossScaleOptimizer")
def test_budgeted_learning_rate_under_mirrored_strategy_and_loss_scaling():
    """The step count is a MirroredVariable under tf.distribute (no int()) and mixed_float16 wraps the optimizer
    in a LossScaleOptimizer, whose config has no learning rate: the schedule reads through both."""
    import tensorflow as tf

    # ReductionToOneDevice, as core.runs.runtime does on CPUs: collective all-reduces would reuse instance keys that
    # another MirroredStrategy of this process (a later test) reuses ("Shape mismatch in the collective instance").
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "mse")
    schedule, seen = BudgetedLearningRate(0.05, warmup_fraction=0.5), _LearningRates()
    model.fit(np.zeros((16, 3)), np.zeros(16), batch_size=8, epochs=2, verbose=0, callbacks=[schedule, seen])
    p = np.arange(4) / 4
    np.testing.assert_allclose(seen.rates, 0.05 * np.clip(np.minimum(p / 0.5, (1 - p) / 0.5), 0, 1), rtol=1e-6)


# BackupAndRestore (core.training.backup): atomic backups, the restore of the last complete one, an exact mid-epoch
# resume.

class _Crash(Exception):
    """Stands for a kill: nothing of fit runs after it (no on_train_end)."""


def _backup_model(dropout=False):
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(4), keras.layers.Dropout(0.3), keras.layers.Dense(1)] if dropout else \
        [keras.layers.Dense(2), keras.layers.Dense(1)]
    model = keras.Sequential([keras.Input((3,)), *layers])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    return model


_X = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")  # 4 batches of 8 per epoch


def _backup_fit(model, callbacks, epochs=3):
    return model.fit(_X, _X.sum(1), epochs=epochs, batch_size=8, shuffle=False, verbose=0, callbacks=callbacks)


class _Stop(keras.callbacks.Callback):
    """Raises _Crash after ``at`` batches (counted over the whole fit), or at the start of training (at=0), after
    snapshotting the weights."""

    def __init__(self, at=0):
        super().__init__()
        self.at, self.batches, self.weights = at, 0, None

    def on_train_begin(self, logs=None):
        self.weights = self.model.get_weights()
        if self.at == 0:
            raise _Crash

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.at:
            raise _Crash


def _restore(backup_dir, **kwargs):
    """What a new fit restores from ``backup_dir``: (the callback, the weights at the start of training)."""
    callback, stop = BackupAndRestore(backup_dir, **kwargs), _Stop()
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(), [callback, stop])
    return callback, stop.weights


@pytest.mark.parametrize("torn", ["weights", "pointer"])
def test_backup_killed_while_writing_restores_the_previous_complete_backup(tmp_path, monkeypatch, torn):
    """The third backup (epoch 1, after batch 2) dies half-way: in its weights file (a torn HDF5 file left behind)
    or after it, while replacing the pointer. The restore gets the second backup (epoch 0 done) whole."""
    from attnlayers.applications.core.training import backup as module

    model, saved = _backup_model(), []
    save_weights, replace = model.save_weights, os.replace

    def tearing_save_weights(filepath, overwrite=True):
        if torn == "weights" and len(saved) == 2:
            with open(filepath, "wb") as f:
                f.write(b"\x89HDF\r\n\x1a\n" + bytes(200))
            raise _Crash
        save_weights(filepath, overwrite=overwrite)
        saved.append(model.get_weights())

    def failing_replace(src, dst):
        if len(saved) == 3:
            raise _Crash
        return replace(src, dst)

    model.save_weights = tearing_save_weights
    if torn == "pointer":
        monkeypatch.setattr(module.os, "replace", failing_replace)
    with pytest.raises(_Crash):
        _backup_fit(model, [BackupAndRestore(tmp_path, save_freq=2)])
    monkeypatch.undo()
    left = sorted(os.listdir(tmp_path))
    assert "weights-000003.weights.h5" in left and (torn == "weights" or any(".tmp-" in n for n in left))
    callback, restored = _restore(tmp_path, save_freq=2)
    seconds, history = callback.restored.pop("seconds"), callback.restored.pop("history")
    followed = callback.restored.pop("followed")  # the running metrics' 2 variables (the loss' mean), no callback
    assert callback.restored == {"epoch": 1, "step": 0, "iterations": 4, "weights": "weights-000002.weights.h5",
                                 "state": "state-000002.npz", "seeds": [], "invocations": 1, "previous": None}
    assert (followed["metrics"], followed["followed"]) == (2, [])
    assert seconds > 0 and list(history) == ["loss"] and len(history["loss"]) == 1  # epoch 0's
    for got, expected in zip(restored, saved[1]):
        np.testing.assert_array_equal(got, expected)
    assert sorted(os.listdir(tmp_path)) == ["backup.json", "state-000002.npz", "weights-000002.weights.h5"]


def test_backup_resumes_at_the_epoch_it_stopped_as_keras_does(tmp_path):
    """save_freq="epoch": interrupted at the start of epoch 3 of 5, the next fit runs the last 3 epochs and ends
    with the weights of an uninterrupted fit; the backup is deleted at the end."""
    uninterrupted = _backup_model()
    _backup_fit(uninterrupted, [], epochs=5)
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(), [BackupAndRestore(tmp_path), _Stop(at=9)], epochs=5)  # in epoch 3
    model, callback = _backup_model(), BackupAndRestore(tmp_path)
    history = _backup_fit(model, [callback], epochs=5)
    assert callback.restored["epoch"] == 2 and callback.skipped == 0
    assert len(history.history["loss"]) == 3 and not os.path.exists(tmp_path)
    for got, expected in zip(model.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, expected)


def test_backup_resumes_mid_epoch_without_training_a_batch_twice(tmp_path):
    """Killed after batch 7 (epoch 1, batch 3) with a backup every 2 batches: the resume restores epoch 1 after
    batch 2, drops those 2 batches, trains the 6 steps left, and ends bit for bit where an uninterrupted fit does
    (Keras' own callback would train epoch 1's first 2 batches twice: 14 steps). The dropout layer's seed state
    comes back too: the same masks."""
    uninterrupted = _backup_model(dropout=True)
    _backup_fit(uninterrupted, [])
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(dropout=True), [BackupAndRestore(tmp_path, save_freq=2), _Stop(at=7)])
    model, callback = _backup_model(dropout=True), BackupAndRestore(tmp_path, save_freq=2)
    _backup_fit(model, [callback])
    assert (callback.restored["epoch"], callback.restored["step"], callback.skipped) == (1, 2, 2)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 12
    for got, expected in zip(model.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, expected)


def test_best_weights_and_running_metrics_survive_a_kill_past_the_best_epoch(tmp_path):
    """Best epoch 1 (scripted val_loss), killed in epoch 3 after its batch 3 with a backup every 2 batches: the
    resumed fit ends with epoch 1's weights (the best of the whole training, kept in the backup), and epoch 3's
    logged loss is the uninterrupted run's (the running mean came back with the backup), as the followed state
    says. Without the state file the resumed run keeps epoch 3 or 4 (red with BestWeights not followed)."""
    values = [3.0, 1.0, 2.0, 1.5, 2.5]

    def callbacks(**kwargs):
        best = BestWeights("val_loss")
        backup = BackupAndRestore(tmp_path, save_freq=2, **kwargs).follow(best)
        return [_Scripted(values, "val_loss"), best, backup]

    reference = callbacks(delete_checkpoint=False)
    uninterrupted = _backup_model(dropout=True)
    expected = _backup_fit(uninterrupted, reference[:2], epochs=5).history["loss"]
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(dropout=True), [*callbacks(), _Stop(at=11)], epochs=5)  # epoch 3, batch 3
    model, resumed = _backup_model(dropout=True), callbacks()
    history = _backup_fit(model, resumed, epochs=5).history["loss"]
    assert (resumed[2].restored["epoch"], resumed[2].restored["step"], resumed[2].skipped) == (2, 2, 2)
    assert resumed[1].kept_epochs == [1] and resumed[1].best == 1.0
    for got, want in zip(model.get_weights(), reference[0].snapshots[1]):
        np.testing.assert_array_equal(got, want)
    assert history == expected[2:]  # the interrupted epoch's mean loss over all its 4 batches, bit for bit


def test_an_epoch_whose_every_batch_was_backed_up_keeps_its_metrics(tmp_path):
    """Data of unknown size (fit learns an epoch's end when the data ends): the epoch's last step is backed up at the
    batch's end; a kill in the validation that follows resumes with every batch of that epoch dropped, and the epoch
    still logs the loss of its 4 batches, as the uninterrupted run did (red when a dropped batch returns no logs:
    the resumed history lost epoch 1's loss)."""
    import tensorflow as tf

    def data():  # 4 batches of 8; filter() hides the size
        return tf.data.Dataset.from_tensor_slices((_X, _X.sum(1))).batch(8).filter(lambda x, y: True)

    class _Validation(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):  # epoch 0's validation
            raise _Crash

    def fit(callbacks):
        model = _backup_model()
        return model, model.fit(data(), validation_data=data(), epochs=2, verbose=0, callbacks=callbacks)

    _, expected = fit([])
    with pytest.raises(_Crash):
        fit([BackupAndRestore(tmp_path, save_freq=2), _Validation()])
    backup = BackupAndRestore(tmp_path, save_freq=2)
    model, history = fit([backup])
    assert (backup.restored["epoch"], backup.restored["step"], backup.skipped) == (0, 4, 4)
    assert history.history["loss"] == expected.history["loss"]


def test_backup_falls_back_to_the_previous_backup_and_reads_keras_layout(tmp_path):
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(), [BackupAndRestore(tmp_path / "double", save_freq=2, double_checkpoint=True),
                                      _Stop(at=5)])
    pointer = json.loads((tmp_path / "double" / "backup.json").read_text())
    assert (pointer["weights"], pointer["previous"]["weights"]) == ("weights-000002.weights.h5",
                                                                    "weights-000001.weights.h5")
    (tmp_path / "double" / pointer["weights"]).write_bytes(b"not HDF5")  # the latest is unreadable
    with pytest.warns(UserWarning, match="restoring the previous backup"):
        callback, _ = _restore(tmp_path / "double", double_checkpoint=True)
    assert (callback.restored["epoch"], callback.restored["step"]) == (0, 2)
    # A backup that keras.callbacks.BackupAndRestore wrote (after epoch 1) resumes at epoch 1.
    with pytest.raises(_Crash):
        _backup_fit(_backup_model(), [keras.callbacks.BackupAndRestore(tmp_path / "keras"), _Stop(at=5)])
    callback, _ = _restore(tmp_path / "keras")
    assert callback.restored["epoch"] == 1 and callback.skipped == 0
