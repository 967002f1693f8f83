"""The train -> evaluate -> pictures -> export recipe end to end: a tiny translator on the synthetic task, every
phase timed, the time budget's effect reported, the best weights restored, results.json written. (The NMT
scripts' own evaluate / pictures / export callables run in tests/applications/nmt/test_example.py and
test_quickstart.py.)"""

import json

import keras
import numpy as np
import pytest

from attnlayers.applications import core

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.data pipeline")


def test_recipe_on_the_synthetic_task(tmp_path):
    from attnlayers.applications import nmt

    splits, tokenizers = nmt.synthetic_task(500, max_length=8, num_test=20, num_validation=40, seed=0)
    batches = dict(max_source_length=8, max_target_length=8, batch_size=64, pad_to_max_length=True)
    train = nmt.make_dataset(splits.train, tokenizers, **batches)
    # A tiny model (a target-side bigram model: it does not read the source), so that the test times the recipe,
    # not graph tracing; tests/applications/nmt/test_example.py runs the recipe with the translators.
    train = train.map(lambda inputs, target_out: (inputs[1], target_out))
    vocabulary = tokenizers.target.vocabulary_size
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(vocabulary, 16),
                              keras.layers.Dense(vocabulary)])
    model.compile(keras.optimizers.Adam(3e-2), loss=core.MaskedCrossEntropy(), metrics=[core.MaskedAccuracy()])
    lines, phases = [], []

    def evaluate_model(model):  # the NMT scripts decode and score BLEU here; the recipe only times and records
        phases.append("evaluate")
        return {"scores": {"weights": float(sum(abs(w).sum() for w in model.get_weights()))}}

    def pictures(model, out):
        phases.append("pictures")
        (out / "picture.txt").write_text("a picture")
        return [out / "picture.txt"]

    def export(model, out):
        phases.append("export")
        (out / "weights.txt").write_text(str(model.count_params()))
        return str(out / "weights.txt")

    # No validation split, to keep the test short: the best epoch by training accuracy.
    callbacks = core.standard_callbacks(tmp_path, minutes=10, best={"monitor": "accuracy"})
    result = core.run_recipe(model, train, epochs=3, callbacks=callbacks,
                             evaluate=evaluate_model, pictures=pictures, export=export, out_dir=tmp_path,
                             record={"model": "tiny"}, verbose=0, print_fn=lines.append)
    assert phases == ["evaluate", "pictures", "export"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved == result and result["results_path"] == str(tmp_path / "results.json")
    assert saved["model"] == "tiny" and saved["parameters"] == model.count_params()
    training = saved["training"]
    assert training["epochs"] == 3 and training["steps"] == 3 * training["steps_per_epoch"]
    assert not training["stopped_by_budget"] and training["budget_seconds"] == 600
    accuracies = training["history"]["accuracy"]
    assert saved["weights"]["best_epoch"] == 1 + int(np.argmax(accuracies))
    assert saved["weights"]["best"] == pytest.approx(max(accuracies))
    assert saved["scores"]["weights"] > 0
    assert saved["pictures"][0].endswith("picture.txt") and saved["export"].endswith("weights.txt")
    assert set(saved["seconds"]) == {"train", "evaluate", "pictures", "export"}
    assert lines[0].startswith("training: ") and "did not stop it" in lines[0]
    assert lines[1].startswith("weights: epoch ") and "best accuracy" in lines[1]
    assert lines[2].startswith("after training (not bounded by the time budget): evaluation ")
    assert list((tmp_path / "logs").rglob("events.out.tfevents.*")), "no TensorBoard logs"


def test_recipe_reports_a_budget_that_stopped_training_mid_epoch():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    import tensorflow as tf

    x = np.zeros((40, 3), "float32")
    train = tf.data.Dataset.from_tensor_slices((x, x[:, 0])).batch(8)  # 5 steps per epoch
    lines = []
    result = core.run_recipe(model, train, epochs=5, callbacks=[core.TimeBudget(1e-9)], verbose=0,
                             print_fn=lines.append)
    training = result["training"]
    assert training["stopped_by_budget"] and training["mid_epoch"]
    assert (training["stopped_epoch"], training["stopped_step"], training["steps"]) == (1, 1, 1)
    assert lines == [f"training: {training['seconds']:.1f} s, 1 epoch, 1 step; stopped by the "
                     f"{1e-9 / 60:g}-minute time budget in epoch 1 after 1 of 5 steps (mid-epoch)"]
    assert "results_path" not in result and result["weights"] is None  # no out_dir: nothing written


def test_fit_prints_a_line_per_epoch_off_a_terminal_and_no_shuffle_warning(capfd):
    """A progress bar redrawn into a file or a pipe is a line per step: off a terminal verbose=1 becomes 2; a
    tf.data pipeline shuffles itself, so fit's shuffle=True (which it ignores there, with a warning) is not passed."""
    import io
    import warnings

    import tensorflow as tf

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert core.runs.recipe.fit_verbosity(1, io.StringIO()) == 2 and core.runs.recipe.fit_verbosity(1, Terminal()) == 1
    assert core.runs.recipe.fit_verbosity(0, io.StringIO()) == 0 and core.runs.recipe.fit_verbosity(2, Terminal()) == 2
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.zeros((40, 3), "float32")
    train = tf.data.Dataset.from_tensor_slices((x, x[:, 0])).batch(8)  # 5 steps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        core.run_recipe(model, train, epochs=2, verbose=1, print_fn=lambda *a: None)
    assert not [w for w in caught if "shuffle" in str(w.message)]
    out = capfd.readouterr().out
    assert out.count("5/5") == 2 and "1/5" not in out, out  # a line per epoch, no per-step redraws


class _Killed(Exception):
    """Stands for a kill of the process mid-training."""


class _KillAfter(keras.callbacks.Callback):
    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epochs:
            raise _Killed


def _small_fit_problem():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x.sum(-1) > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    import tensorflow as tf

    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def test_a_resumed_run_says_so_gets_the_budget_left_and_reports_every_run(tmp_path):
    """A run killed after 2 of 6 epochs (backup every epoch) and run again: the second run says where it resumed, its
    budget counts the seconds before the kill (edited here to leave ~0: it stops after one step instead of training
    4 more epochs), and results.json has both runs' epochs and seconds."""
    model, train = _small_fit_problem()
    first = core.standard_callbacks(tmp_path, minutes=1, tensorboard=False) + [_KillAfter(2)]
    with pytest.raises(_Killed):
        core.run_recipe(model, train, epochs=6, callbacks=first, out_dir=tmp_path, verbose=0, print_fn=print)
    pointer = tmp_path / "backup" / "backup.json"
    saved = json.loads(pointer.read_text())
    assert saved["epoch"] == 2 and saved["invocations"] == 1 and len(saved["history"]["loss"]) == 2
    saved["seconds"] = 59.999  # of the 60-second budget, spent before the kill
    pointer.write_text(json.dumps(saved))

    model, train = _small_fit_problem()
    lines = []
    callbacks = core.standard_callbacks(tmp_path, minutes=1, tensorboard=False)
    backup = next(c for c in callbacks if isinstance(c, core.BackupAndRestore))
    backup.print_fn = lines.append
    result = core.run_recipe(model, train, epochs=6, callbacks=callbacks, out_dir=tmp_path, verbose=0,
                             print_fn=lines.append)
    assert lines[0].startswith(f"resumed from the backup in {tmp_path / 'backup'}: epoch 3, from its start")
    assert "59.999 s" not in lines[0] and "60.0 s of training before; run 2" in lines[0]
    training = result["training"]
    assert training["stopped_by_budget"] and training["steps"] == 1 and training["stopped_epoch"] == 3
    assert training["resumed"] == {"epoch": 3, "step": 0, "seconds_before": 59.999, "steps_before": 8, "run": 2}
    assert training["seconds_total"] == pytest.approx(59.999 + training["seconds"], abs=0.1)
    assert training["epochs"] == 3 and len(training["history"]["loss"]) == 3  # 2 before the kill, 1 after
    assert training["history"]["loss"][:2] == saved["history"]["loss"]
    assert "resumed in epoch 3 after step 0 (run 2" in lines[1] and "stopped by the 1-minute time budget" in lines[1]
    assert json.loads((tmp_path / "results.json").read_text())["training"] == training


def test_a_resumed_budgeted_schedule_goes_on_from_the_seconds_before():
    """BudgetedLearningRate following a backup that restored 30 s of a 60 s budget starts at half progress."""
    schedule = core.BudgetedLearningRate(1.0, warmup_fraction=0.1, seconds=60)

    class Restored:
        restored = {"seconds": 30.0}

    schedule.follow_backup(Restored())
    schedule._start = __import__("time").perf_counter()
    assert schedule.progress() == pytest.approx(0.5, abs=0.01)


def test_a_run_bounded_by_its_budget_alone_says_steps_and_time_not_epoch_of_100000(capsys):
    """Every script's --minutes without --epochs: fit's epochs are UNBOUNDED_EPOCHS, so its bar would read
    "Epoch 1/100000"; run_recipe prints ProgressLog's lines against the budget instead."""
    from attnlayers.applications.core.runs.cli import UNBOUNDED_EPOCHS

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")

    class StopAfterTwo(keras.callbacks.Callback):  # the budget (10 minutes) would stop it much later
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = epoch >= 1

    callbacks = core.standard_callbacks(None, minutes=10) + [StopAfterTwo()]
    result = core.run_recipe(model, x, epochs=UNBOUNDED_EPOCHS, callbacks=callbacks, fit_kwargs={"y": y,
                             "batch_size": 4}, verbose=2)
    printed = capsys.readouterr().out
    assert result["training"]["epochs"] == 2 and "/100000" not in printed and "Epoch 1/" not in printed
    assert "epoch 1: 2 steps" in printed and "step 4, " in printed and " of 10:00 budget" in printed
