"""The training callbacks of the NMT application: TimeBudget and BestWeights (best epoch, checkpoint averaging)."""

import numpy as np
import pytest

import keras
from attnlayers.applications.nmt.training import BestWeights, TimeBudget


class _Scripted(keras.callbacks.Callback):
    """Logs a scripted validation value per epoch and snapshots the weights the other callbacks see."""

    def __init__(self, values, name):
        super().__init__()
        self.values, self.name, self.snapshots = values, name, []

    def on_epoch_end(self, epoch, logs=None):
        logs[self.name] = self.values[epoch]
        self.snapshots.append([w.copy() for w in self.model.get_weights()])


def _fit(callbacks, epochs):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
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


def test_best_weights_averages_the_best_k_epochs():
    values = [0.2, 0.6, 0.4, 0.7, 0.5]
    scripted, best = _Scripted(values, "val_accuracy"), BestWeights("val_accuracy", average=3)
    model = _fit([scripted, best], len(values))
    assert best.kept_epochs == [3, 1, 4]  # best first
    for i, restored in enumerate(model.get_weights()):
        expected = np.mean([scripted.snapshots[e][i] for e in (1, 3, 4)], axis=0)
        np.testing.assert_allclose(restored, expected, rtol=1e-6)
    assert not np.allclose(model.get_weights()[0], scripted.snapshots[3][0])  # the average is not one epoch


def test_best_weights_mode_and_missing_metric():
    assert BestWeights("val_loss").mode == "min" and BestWeights("val_accuracy").mode == "max"
    best = BestWeights("val_bleu", mode="max")
    model = _fit([best], 2)  # val_bleu is never logged: nothing kept, weights untouched
    assert best.best_epoch is None and best.weights() is None and len(model.get_weights()) == 4
    with pytest.raises(ValueError, match="mode"):
        BestWeights(mode="largest")
    with pytest.raises(ValueError, match="average"):
        BestWeights(average=0)


def test_time_budget_stops_fit_after_the_budget():
    budget = TimeBudget(1e-9)
    _fit([budget], epochs=50)
    assert budget.stopped and budget.steps == 1  # stopped after the first batch of the first epoch
    with pytest.raises(ValueError, match="seconds"):
        TimeBudget(0)
