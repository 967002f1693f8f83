"""Every application trains the same way wherever it runs: its small job (``benchmarks/jobs/<app>.py``, run
by ``benchmarks/jobs/runner.py``) ends with the weights of one device under MirroredStrategy over 2 logical
CPUs; its whole train step compiles with XLA; its input pipeline has no Python op (TPU-ready). GPT's job also ends
with the weights of one process under MultiWorkerMirroredStrategy over 2 worker processes and under JAX's
DataParallel over 2 host devices."""

import io
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from attnlayers.applications.core.runs import launch

# The jobs live in benchmarks/jobs/, imported from the repository root: on sys.path under `python -m pytest` (run
# from the root), put there for a bare `pytest`; the subprocesses below get it first on their PYTHONPATH.
ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)
from benchmarks.jobs import runner, training_job  # noqa: E402

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="tf.distribute strategies and XLA through tf.function need TensorFlow")

APPLICATIONS = ("nmt", "captioning", "bert", "gpt")
_PYTHONPATH = os.pathsep.join([ROOT, *sys.path])  # for ``python -m benchmarks.jobs``


@pytest.fixture(params=APPLICATIONS)
def app(request):
    return request.param


def _env(**extra):
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": _PYTHONPATH, **extra}


class _Kept(keras.callbacks.Callback):
    """Keeps the model that ``runner.train`` builds, and its weights before the first step."""

    def on_train_begin(self, logs=None):
        self.initial = [np.asarray(w) for w in self.model.get_weights()]


@pytest.fixture(scope="module")
def one_device():
    """``app -> (weights, losses, initial weights, model)`` of the job trained on one device in this process (once
    per application): the reference of the mirrored and of the two-worker runs, and the model whose train step
    XLA compiles."""
    runs = {}

    def run(app):
        if app not in runs:
            kept = _Kept()
            weights, losses = runner.train(training_job(app), callbacks=[kept])
            runs[app] = weights, losses, kept.initial, kept.model
        return runs[app]

    return run


def test_mirrored_over_two_cpus_equals_one_device_and_the_train_step_compiles_with_xla(app, one_device):
    """One device's run serves both checks: the mirrored run's reference, and the model (its optimizer built)
    whose whole train step -- forward, loss, gradients, optimizer update -- XLA compiles (``tf.function(
    jit_compile=True)`` has no fallback: a ``py_function``, a data-dependent shape or an op XLA lacks raises)."""
    import tensorflow as tf

    from attnlayers.applications.core import make_strategy

    job = training_job(app)
    mirrored, mirrored_loss = runner.train(job, make_strategy("mirrored"))
    single, single_loss, initial, model = one_device(app)
    assert len(mirrored) == len(single)
    assert mirrored_loss[0] == pytest.approx(single_loss[0], rel=1e-5)
    assert runner.max_difference(mirrored, single) <= job.tolerance
    # The job must move the weights, or equality would say nothing.
    assert runner.max_difference(single, initial) > 100 * job.tolerance

    hlo = runner.xla_train_step(job, model)
    assert "HloModule" in hlo and ("dot(" in hlo or "convolution(" in hlo)
    assert runner.python_ops(job.dataset(job.global_batch)) == []
    shapes = [tuple(t.shape) for t in tf.nest.flatten(runner.first_batch(job))]
    assert all(s[0] == job.global_batch for s in shapes), shapes  # a static global batch


def _jobs(lines):
    """{job name: its JSON line} from the output of ``python -m benchmarks.jobs`` (a worker's lines start
    with "[worker i] ")."""
    jobs = {}
    for line in lines.splitlines():
        if '{"job"' in line:
            job = json.loads(line[line.index("{"):])
            jobs.setdefault(job["job"], job)
    return jobs


# The processes below import TensorFlow (or JAX) and train GPT's job: the placement code (a cluster of two workers,
# JAX's DataParallel) is the same for every application, while what is particular to each one (its pipeline
# split over replicas, its masked means, XLA) is checked for all four above. GPT's job has everything the other
# placements must get right: masks, a metric reduced across workers, gradients clipped after the all-reduce.
# The one-device reference is trained in this process.
PLACEMENT_APPLICATIONS = ("gpt",)
_COMMAND = [sys.executable, "-m", "benchmarks.jobs", *PLACEMENT_APPLICATIONS]


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory):
    """The jobs trained by 2 workers (MultiWorkerMirroredStrategy): (folder of the weights, exit code, output)."""
    folder = tmp_path_factory.mktemp("workers")
    out = io.StringIO()
    code = launch.launch_workers(_COMMAND + ["--placement", "multi-worker", "--out", str(folder)], 2,
                                 env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": _PYTHONPATH}, out=out)
    return folder, code, out.getvalue()


@pytest.mark.parametrize("app", PLACEMENT_APPLICATIONS)
def test_two_workers_equal_one_process(app, worker_runs, one_device):
    folder, code, out = worker_runs
    assert code == 0, out[-3000:]
    assert _jobs(out)[app]["replicas"] == 2
    two = np.load(folder / f"{app}.npz")
    tolerance = training_job(app).tolerance
    assert runner.max_difference([two[k] for k in two], one_device(app)[0]) <= tolerance


@pytest.fixture(scope="module")
def data_parallel_runs():
    """The jobs under KERAS_BACKEND=jax, DataParallel over 1 and over 2 host devices (one process)."""
    return subprocess.run(_COMMAND + ["--compare-devices"],
                          env=_env(KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=2"),
                          capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("app", PLACEMENT_APPLICATIONS)
def test_jax_data_parallel_over_two_devices_equals_one(app, data_parallel_runs):
    result = data_parallel_runs
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    measured = _jobs(result.stdout)[app]
    assert measured["devices"] == 2
    assert measured["max_difference"] <= training_job(app).tolerance
