"""Small seeded training jobs, one per application, that the scale-out checks run the same way under
every placement: one device, ``MirroredStrategy`` over 2 logical devices, ``MultiWorkerMirroredStrategy`` over 2
worker processes, XLA (``jit_compile=True``), and JAX's ``keras.distribution.DataParallel``. Used by
``tests/applications/test_scale_out.py`` and ``benchmarks/scale_out.py``; not part of the installed package.

    nmt.py, captioning.py, bert.py, gpt.py   each application's job: ``training_job(seed=0) -> TrainingJob``
    runner.py                                what they share: TrainingJob, train, xla_train_step, python_ops, ...
    __main__.py                              the command line: one process (or one worker) per run

    from benchmarks.jobs import runner, training_job     # the repository root on sys.path
    weights, losses = runner.train(training_job("gpt"), strategy)

The same jobs run from the command line (the repository root on ``PYTHONPATH``, or as the working directory), for
multi-worker runs, the JAX backend and the steps/s tables of ``benchmarks/scale_out.py``:

    python -m benchmarks.jobs gpt bert --placement multi-worker --out weights/   # weights/{gpt,bert}.npz
"""

from . import bert, captioning, gpt, nmt
from .runner import TrainingJob

# application name -> its job's module (each has ``training_job(seed=0)``)
APPLICATIONS = {"nmt": nmt, "captioning": captioning, "bert": bert, "gpt": gpt}


def training_job(application, seed=0) -> TrainingJob:
    """The :class:`TrainingJob` of ``application`` (a key of :data:`APPLICATIONS`)."""
    if application not in APPLICATIONS:
        raise ValueError(f"`application` must be one of {list(APPLICATIONS)}; received {application!r}.")
    return APPLICATIONS[application].training_job(seed=seed)
