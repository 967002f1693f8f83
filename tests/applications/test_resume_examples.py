"""Kill anywhere, lose nothing: each example script at a tiny size, with a backup every 2 steps, is SIGKILLed in its
second epoch one step after a backup (benchmarks/kill_at.py) and run again with the same command; the resumed run
ends with the weights of an uninterrupted run, bit for bit (a step trained twice or skipped would show), and writes
the same results (every number but the timings). One kill point per script here (BERT fine-tuning in the BERT
test, on the checkpoint its pretraining run wrote; in CI the GPT script, and ViT's PyDataset in process);
benchmarks/resume_examples.py tries every kill point (mid-epoch, right after a backup, during a backup's write,
during validation, after an epoch's last step).

What makes it hold: core.data_order (epoch e's batches are a pure function of (seed, e)), core.BackupAndRestore
(weights, optimizer, seed generators, running metrics and the best weights kept so far, every --backup-every steps;
the batches already trained are drawn and dropped on resume) and the time budget's clock and the history in the
backup. Under JAX the mid-epoch resume is tested in tests/applications/core/test_callbacks.py; the scripts under JAX
(GPT, ViT) and every kill point: docs/results/scale-out.md, "Kill anywhere"."""

import importlib.util
import pathlib
import signal

import keras
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("resume_examples", ROOT / "benchmarks" / "resume_examples.py")
resume = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(resume)

JAX = keras.backend.backend() == "jax"
# In CI (20 minutes on 2 cores for the whole suite): the GPT script (tf.data) under TensorFlow, under a minute, and
# ViT's data (a PyDataset) in process below, a few seconds: both scripts train through core.runs.recipe (one backup,
# one DataEpoch, one resume path), so what the ViT script adds to GPT's is its PyDataset. `pytest
# tests/applications/test_resume_examples.py --all-examples` adds the ViT, NMT and captioning scripts and BERT
# pretraining + fine-tuning (~40, ~130, ~75 and ~170 s), and benchmarks/resume_examples.py every kill point of every
# script, in both backends.
EXAMPLES = ("gpt",)


def _kill_and_resume(name, folder, architecture=None):
    """Runs ``name`` whole, killed and resumed in ``folder``; checks the resumed run against the whole one."""
    if name == "gpt":  # half of benchmarks/resume_examples.py's text: 8 steps an epoch instead of 15
        resume.write_corpus(folder / "corpus.txt", chapters=12)
    script, flags = resume.command(name, folder, JAX, architecture)
    whole = resume.run(script, flags, folder / "whole", "none", folder / "whole-weights")
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    steps = resume.training(folder / "whole")["steps_per_epoch"]
    assert steps >= 5, steps  # the kill, one step after epoch 2's second backup (step S + 5), within the 2 S steps
    kill = resume.kill_spec("mid-epoch", steps)
    killed = resume.run(script, flags, folder / "killed", kill, folder / "killed-weights")
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stdout[-3000:], killed.stderr[-3000:])
    assert not (folder / "killed-weights").exists() and list((folder / "killed").rglob("backup.json"))
    resumed = resume.run(script, flags, folder / "killed", "none", folder / "killed-weights")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resumed from the backup" in resumed.stdout and "epoch 2, after its step 4" in resumed.stdout, \
        resumed.stdout[-2000:]
    got, expected = resume.weights(folder / "killed-weights"), resume.weights(folder / "whole-weights")
    assert len(got) == len(expected) >= 1 and [len(w) for w in got] == [len(w) for w in expected]
    for arrays, reference in zip(got, expected):
        for a, b in zip(arrays, reference):
            np.testing.assert_array_equal(a, b)
    assert resume.results(folder / "killed") == resume.results(folder / "whole")
    assert resume.training(folder / "killed")["resumed"]["epoch"] == 2  # the killed epoch went on, not restarted


def pytest_generate_tests(metafunc):
    if "name" in metafunc.fixturenames:
        every = metafunc.config.getoption("--all-examples", default=False)
        metafunc.parametrize("name", resume.SCRIPTS[:-1] if every else EXAMPLES)  # finetune: inside "bert"


def test_a_killed_run_resumes_to_the_uninterrupted_weights_and_results(name, tmp_path):
    _kill_and_resume(name, tmp_path)
    if name == "bert":  # fine-tuning, from scratch on the architecture and vocabulary the pretraining wrote
        (tmp_path / "finetune").mkdir()
        _kill_and_resume("finetune", tmp_path / "finetune", architecture=tmp_path / "whole")


class _Kill(Exception):
    """Stands for a SIGKILL: nothing of fit runs after it (no on_train_end)."""


def test_a_pydataset_resumes_mid_epoch_to_the_uninterrupted_weights(tmp_path):
    """ViT's training data (vision.data.ShiftedBatches, a keras PyDataset: epoch e's order and batch i's shifts are
    functions of (seed, fit's epoch, i)) in a fit of 4 epochs of 5 batches with a backup every 2 steps, killed after
    epoch 3's third batch and resumed by a new fit on new data and a new model (as a new process would): it restores
    epoch 3 after its second batch, draws and drops those 2 batches, and ends with the uninterrupted fit's weights,
    bit for bit (a batch drawn in another epoch's order, or trained twice, would show; the Dropout's seed too). The
    script around it (train_vit.py: the same core.runs.recipe as train_gpt.py's, killed and resumed above) runs with
    --all-examples."""
    from attnlayers.applications.core import BackupAndRestore
    from attnlayers.applications.core.inputs import data_order
    from attnlayers.applications.vision.data import ShiftedBatches

    rng = np.random.default_rng(0)
    images, labels = rng.normal(size=(40, 6, 6, 1)).astype("float32"), rng.integers(0, 3, 40)

    class KillAt(keras.callbacks.Callback):
        def __init__(self, step):
            super().__init__()
            self.step, self.steps = step, 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == self.step:
                raise _Kill

    def fit(*callbacks):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Flatten(), keras.layers.Dense(8, "relu"),
                                  keras.layers.Dropout(0.3), keras.layers.Dense(3)])
        model.compile(keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        data = ShiftedBatches(images, labels, 8, shift=1, seed=3)  # 5 batches an epoch
        data_order.set_epoch(0, driven=False)  # as a new process starts (the kill skipped DataEpoch's train end)
        # shuffle=False as core.runs.recipe passes it: the data shuffles itself (fit's own shuffle would reorder a
        # PyDataset's batches with Python's global generator).
        model.fit(data, epochs=4, shuffle=False, verbose=0, callbacks=[data_order.DataEpoch(), *callbacks])
        return model

    try:
        uninterrupted = fit()
        with pytest.raises(_Kill):
            fit(BackupAndRestore(tmp_path, save_freq=2), KillAt(13))  # epoch 3 (index 2), after its batch 3
        backup = BackupAndRestore(tmp_path, save_freq=2)
        resumed = fit(backup)
    finally:
        data_order.set_epoch(0, driven=False)
    assert (backup.restored["epoch"], backup.restored["step"], backup.skipped) == (2, 2, 2)
    assert int(keras.ops.convert_to_numpy(resumed.optimizer.iterations)) == 20
    for got, expected in zip(resumed.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, expected)
