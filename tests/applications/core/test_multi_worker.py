"""MultiWorkerMirroredStrategy through the shared runtime: two worker processes on 127.0.0.1 (launched by
core.launch_workers, each with its TF_CONFIG) train a small Keras model with Model.fit and end with the weights
of one process trained on the same global batches. Keras 3's fit fails under this strategy without the fixes
that runtime.make_strategy("multi-worker") applies (its first-batch build and its metric reduction)."""

import io
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from attnlayers.applications.core import launch

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="tf.distribute strategies need the TensorFlow backend")

# One worker: the strategy first (before any other TensorFlow op), then a seeded model trained for 2 epochs of 4
# global batches of 16; worker 0 saves the weights.
WORKER = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
from attnlayers.applications.core.runtime import make_strategy
strategy = make_strategy(sys.argv[1])
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x, y = rng.normal(size=(64, 8)).astype("float32"), rng.integers(0, 3, 64)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16, drop_remainder=True), epochs=2, verbose=0)
index = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
if index == 0:
    np.savez(sys.argv[2], *model.get_weights())
print("steps", int(model.optimizer.iterations.numpy()), "replicas", strategy.num_replicas_in_sync)
"""


def test_two_workers_end_with_the_weights_of_one_process(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(sys.path)}
    # The one-process reference runs beside the two workers.
    one = subprocess.Popen([sys.executable, str(script), "none", str(tmp_path / "one.npz")], env={**os.environ, **env},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = io.StringIO()
    code = launch.launch_workers([sys.executable, str(script), "multi-worker", str(tmp_path / "two.npz")], 2,
                                 env=env, out=out)
    reference = one.communicate()[0]
    assert code == 0, out.getvalue()[-3000:]
    assert out.getvalue().count("steps 8 replicas 2") == 2
    assert one.returncode == 0 and "steps 8 replicas 1" in reference, reference[-3000:]
    two, one = np.load(tmp_path / "two.npz"), np.load(tmp_path / "one.npz")
    # Each worker's gradient is the mean over its half of the global batch, then the halves are averaged: the
    # same sum in another order (float32 round-off, ~1e-8 after 8 SGD steps).
    for name in one:
        np.testing.assert_allclose(two[name], one[name], atol=1e-6)
