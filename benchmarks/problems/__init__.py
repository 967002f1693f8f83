"""Small seeded training jobs ("problems"), one per application, that the scale-out checks run the same way under
every placement: one device, ``MirroredStrategy`` over 2 logical devices, ``MultiWorkerMirroredStrategy`` over 2
worker processes, XLA (``jit_compile=True``), and JAX's ``keras.distribution.DataParallel``. Used by
``tests/applications/test_scale_out.py`` and ``benchmarks/scale_out.py``; not part of the installed package.

    nmt.py, captioning.py, bert.py, gpt.py   each application's job: ``training_problem(seed=0) -> TrainingProblem``
    runner.py                                what they share: TrainingProblem, train, xla_train_step, python_ops, ...
    __main__.py                              the command line: one process (or one worker) per run

    from benchmarks.problems import runner, training_problem     # the repository root on sys.path
    weights, losses = runner.train(training_problem("gpt"), strategy)

The same jobs run from the command line (the repository root on ``PYTHONPATH``, or as the working directory), for
multi-worker runs, the JAX backend and the steps/s tables of ``benchmarks/scale_out.py``:

    python -m benchmarks.problems gpt bert --placement multi-worker --out weights/   # weights/{gpt,bert}.npz
"""

from . import bert, captioning, gpt, nmt
from .runner import TrainingProblem

# application name -> its job's module (each has ``training_problem(seed=0)``)
APPLICATIONS = {"nmt": nmt, "captioning": captioning, "bert": bert, "gpt": gpt}


def training_problem(application, seed=0) -> TrainingProblem:
    """The :class:`TrainingProblem` of ``application`` (a key of :data:`APPLICATIONS`)."""
    if application not in APPLICATIONS:
        raise ValueError(f"`application` must be one of {list(APPLICATIONS)}; received {application!r}.")
    return APPLICATIONS[application].training_problem(seed=seed)
