"""Every application trains the same way wherever it runs: its small job (``<app>/problem.py``,
``core.problems``) ends with the weights of one device under MirroredStrategy over 2 logical CPUs, under
MultiWorkerMirroredStrategy over 2 worker processes, and under JAX's DataParallel over 2 host devices; its whole
train step compiles with XLA; its input pipeline has no Python op (TPU-ready)."""

import io
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from attnlayers.applications.core import launch, problems

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="tf.distribute strategies and XLA through tf.function need TensorFlow")

APPLICATIONS = ("nmt", "captioning", "bert", "gpt")


def _module(app):
    return f"attnlayers.applications.{app}.problem"


@pytest.fixture(params=APPLICATIONS)
def app(request):
    return request.param


def _env(**extra):
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def _last_json(text):
    """The last JSON object printed (core.problems prints one; a worker's line starts with "[worker i] ")."""
    line = [line for line in text.splitlines() if '{"' in line][-1]
    return json.loads(line[line.index("{"):])


def test_mirrored_over_two_cpus_equals_one_device(app):
    from attnlayers.applications.core import make_strategy

    problem = problems.load_problem(_module(app))
    mirrored, mirrored_loss = problems.train(problem, make_strategy("mirrored"))
    single, single_loss = problems.train(problem)
    assert len(mirrored) == len(single)
    assert mirrored_loss[0] == pytest.approx(single_loss[0], rel=1e-5)
    assert problems.max_difference(mirrored, single) <= problem.tolerance
    # The job must move the weights, or equality would say nothing.
    assert problems.max_difference(single, problems.build(problem).get_weights()) > 100 * problem.tolerance


def test_train_step_compiles_with_xla_and_the_pipeline_has_no_python_op(app):
    problem = problems.load_problem(_module(app))
    hlo = problems.xla_train_step(problem)
    assert "HloModule" in hlo and ("dot(" in hlo or "convolution(" in hlo)
    assert problems.python_ops(problem.dataset(problem.global_batch)) == []
    shapes = [tuple(t.shape) for t in __import__("tensorflow").nest.flatten(problems.first_batch(problem))]
    assert all(s[0] == problem.global_batch for s in shapes), shapes  # a static global batch


def test_two_workers_equal_one_process(app, tmp_path):
    command = [sys.executable, "-m", "attnlayers.applications.core.problems", _module(app)]
    one = subprocess.Popen(command + ["--out", str(tmp_path / "one.npz")], env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    out = io.StringIO()
    code = launch.launch_workers(command + ["--placement", "multi-worker", "--out", str(tmp_path / "two.npz")], 2,
                                 env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(sys.path)}, out=out)
    reference = one.communicate()[0]
    assert code == 0, out.getvalue()[-3000:]
    assert one.returncode == 0, reference[-3000:]
    assert _last_json(out.getvalue())["replicas"] == 2
    two, one = np.load(tmp_path / "two.npz"), np.load(tmp_path / "one.npz")
    tolerance = problems.load_problem(_module(app)).tolerance
    assert problems.max_difference([two[k] for k in two], [one[k] for k in one]) <= tolerance


def test_jax_data_parallel_over_two_devices_equals_one(app):
    result = subprocess.run(
        [sys.executable, "-m", "attnlayers.applications.core.problems", _module(app), "--compare-devices"],
        env=_env(KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2"),
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    measured = _last_json(result.stdout)
    assert measured["devices"] == 2
    assert measured["max_difference"] <= problems.load_problem(_module(app)).tolerance
