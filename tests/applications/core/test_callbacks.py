"""Training callbacks: BestWeights (best epoch, checkpoint averaging), TimeBudget (where it stopped),
StepCounter, ProgressLog and the standard list."""

import keras
import numpy as np
import pytest

from attnlayers.applications.core import (
    BestWeights,
    ProgressLog,
    StepCounter,
    TimeBudget,
    standard_callbacks,
)


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


def test_progress_log_prints_one_line_per_epoch():
    lines = []
    _fit([ProgressLog(print_fn=lines.append)], epochs=2)
    assert len(lines) == 2 and lines[0].startswith("epoch 1/2: 4 steps") and "loss" in lines[0]


def test_standard_callbacks(tmp_path):
    callbacks = standard_callbacks(tmp_path, minutes=1.5, best={"monitor": "val_accuracy", "average": 2},
                                   progress=True)
    kinds = [type(c).__name__ for c in callbacks]
    assert kinds == ["ProgressLog", "TensorBoard", "BackupAndRestore", "TimeBudget", "BestWeights"]
    assert callbacks[3].seconds == 90.0 and callbacks[4].average == 2
    assert standard_callbacks(None) == []  # no folder, no budget, no selection: nothing to add
    best = BestWeights()
    assert standard_callbacks(tmp_path, best=best, tensorboard=False, backup=False) == [best]
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
