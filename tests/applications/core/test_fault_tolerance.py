"""Fault tolerance of multi-worker training: two workers (MultiWorkerMirroredStrategy through
runtime.make_strategy, launched by launch.launch_workers with max_restarts=1) train a seeded model with
deterministic ops on shuffled data (core.inputs.data_order) and core.BackupAndRestore backing up every 2 steps; on the
first attempt worker 1 SIGKILLs itself mid-epoch, the launcher stops worker 0 and starts the group again, and the
second attempt resumes from the chief's last backup (both workers: worker 1 never wrote one) and drops the batches
already trained on. The final weights are bitwise those of an uninterrupted two-worker run (the same processes train it afterwards)."""

import io
import os
import sys

import keras
import numpy as np
import pytest

from attnlayers.applications.core.runs import launch

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="tf.distribute strategies need the TensorFlow backend")

# argv: out folder, kill marker, the global step after which worker 1 kills itself. 3 epochs of 4 global batches of
# 16 (8 per worker), Adam (its moments must come back too), a backup every 2 steps in OUT/backup for the chief and
# OUT/worker-1/backup for worker 1 (distribution.worker_directory, as the example scripts do). Then, in the same
# processes, the uninterrupted reference: the same model from the same seed, trained with no backup and no kill.
WORKER = """
import os, signal, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
from attnlayers.applications.core.runs.runtime import make_strategy
from attnlayers.applications.core.runs.replicas import is_chief, worker_directory
strategy = make_strategy("multi-worker")
import keras, numpy as np, tensorflow as tf
from attnlayers.applications.core import BackupAndRestore
from attnlayers.applications.core.inputs.data_order import DataEpoch, shuffled_slices
tf.config.experimental.enable_op_determinism()
out, marker, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)
x, y = rng.normal(size=(64, 8)).astype("float32"), rng.integers(0, 3, 64)
# Shuffled as the applications' pipelines are: epoch e in (seed, e)'s order on every worker, after a restart too.
data = shuffled_slices((x, y), 5).batch(16, drop_remainder=True)

def build():
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])
        model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

class Steps(keras.callbacks.Callback):  # counts the steps that train; kills worker 1 once, mid-epoch
    trained = 0
    def on_train_batch_end(self, batch, logs=None):
        self.trained = int(self.model.optimizer.iterations.numpy()) - (backup.restored or {}).get("iterations", 0)
        if not is_chief(strategy) and self.trained == kill_at and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

model, steps = build(), Steps()
backup = BackupAndRestore(os.path.join(worker_directory(out, strategy), "backup"), save_freq=2)
model.fit(data, epochs=3, verbose=0, callbacks=[DataEpoch(), backup, steps])
print("restored", backup.restored and (backup.restored["epoch"], backup.restored["step"]), "skipped", backup.skipped,
      "trained", steps.trained, "iterations", int(model.optimizer.iterations.numpy()), flush=True)
reference = build()
reference.fit(data, epochs=3, verbose=0, callbacks=[DataEpoch()])
if is_chief(strategy):
    np.savez(os.path.join(out, "resumed.npz"), *model.get_weights())
    np.savez(os.path.join(out, "uninterrupted.npz"), *reference.get_weights())
"""


def test_a_killed_worker_resumes_from_the_last_backup_and_ends_with_the_uninterrupted_weights(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(sys.path)}
    out, marker = io.StringIO(), tmp_path / "killed"
    code = launch.launch_workers([sys.executable, str(script), str(tmp_path), str(marker), "7"], 2, max_restarts=1,
                                 env=env, out=out, grace=1.0)
    log = out.getvalue()
    assert code == 0, log[-3000:]
    # Attempt 1: worker 1 killed itself after step 7 (epoch 1, batch 3); the last backup was after step 6.
    assert marker.exists() and "[launcher] worker 1 failed (exit code -9" in log and "restarting (1 of 1)" in log
    # Attempt 2, on both workers: restored epoch 1 with 2 of its batches done, dropped those 2 batches, trained the
    # 6 steps left (12 - 6; an epoch restarted from its first batch, as Keras' own callback does, would train 8).
    assert log.count("restored (1, 2) skipped 2 trained 6 iterations 12") == 2, log[-3000:]
    # Only the chief wrote a backup (deleted when fit ended); worker 1's backup folder was never made.
    assert not (tmp_path / "backup").exists() and not (tmp_path / "worker-1").exists()
    resumed, uninterrupted = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "uninterrupted.npz")
    # Deterministic ops, the same global batches in the same order, the weights and Adam's state restored bit for
    # bit: the same float32 operations, so the same bits (tolerance 0).
    for name in uninterrupted:
        np.testing.assert_array_equal(resumed[name], uninterrupted[name])
