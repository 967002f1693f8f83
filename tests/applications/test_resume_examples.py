"""Kill anywhere, lose nothing: each example script at a tiny size, with a backup every 2 steps, is SIGKILLed in its
second epoch one step after a backup (benchmarks/kill_at.py) and run again with the same command; the resumed run
ends with the weights of an uninterrupted run, bit for bit (a step trained twice or skipped would show), and writes
the same results (every number but the timings). One kill point per script here (BERT fine-tuning in the BERT
test, on the checkpoint its pretraining run wrote); benchmarks/resume_examples.py tries every kill point (mid-epoch,
right after a backup, during a backup's write, during validation, after an epoch's last step).

What makes it hold: core.data_order (epoch e's batches are a pure function of (seed, e)), core.BackupAndRestore
(weights, optimizer, seed generators, running metrics and the best weights kept so far, every --backup-every steps;
the batches already trained are drawn and dropped on resume) and the time budget's clock and the history in the
backup. Under JAX the mid-epoch resume is tested in tests/applications/core/test_callbacks.py; the scripts under JAX
(GPT, ViT) and every kill point: benchmarks/README.md, "Kill anywhere"."""

import importlib.util
import pathlib
import signal

import keras
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("resume_examples", ROOT / "benchmarks" / "resume_examples.py")
resume = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(resume)

JAX = keras.backend.backend() == "jax"
# In CI (20-30 minutes on 2 cores for the whole suite): GPT (tf.data) and ViT (a PyDataset) under TensorFlow, ~50 s
# each; `pytest tests/applications/test_resume_examples.py --all-examples` adds NMT, captioning and BERT pretraining +
# fine-tuning (~130, ~75 and ~170 s), and benchmarks/resume_examples.py every kill point of every script, in both
# backends.
EXAMPLES = ("gpt", "vit")


def _kill_and_resume(name, folder, architecture=None):
    """Runs ``name`` whole, killed and resumed in ``folder``; checks the resumed run against the whole one."""
    script, flags = resume.command(name, folder, JAX, architecture)
    whole = resume.run(script, flags, folder / "whole", "none", folder / "whole-weights")
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    steps = resume.training(folder / "whole")["steps_per_epoch"]
    assert steps >= 4, steps  # a kill one step after the second backup of an epoch needs 4 steps or more
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
