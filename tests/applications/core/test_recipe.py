"""The train -> evaluate -> pictures -> export recipe end to end: a tiny translator on the synthetic task, every
phase timed, the time budget's effect reported, the best weights restored, results.json written. (The NMT
scripts' own evaluate / pictures / export callables run in tests/test_train_nmt.py and test_quickstart.py.)"""

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
    # not graph tracing; tests/test_train_nmt.py runs the recipe with the translators.
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

    assert core.recipe.fit_verbosity(1, io.StringIO()) == 2 and core.recipe.fit_verbosity(1, Terminal()) == 1
    assert core.recipe.fit_verbosity(0, io.StringIO()) == 0 and core.recipe.fit_verbosity(2, Terminal()) == 2
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
