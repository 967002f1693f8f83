"""The train -> evaluate -> pictures -> export recipe, written once for every application's scripts.

    result = run_recipe(
        model, train, validation=validation, epochs=10,
        callbacks=standard_callbacks(out, minutes=20, best={"monitor": "val_accuracy"}),
        evaluate=lambda model: {"bleu": ...},                        # -> a dict of numbers (JSON-able)
        pictures=lambda model, out: plot(model, out + "/a.png"),     # -> the paths written
        export=lambda model, out: export(model, out + "/model"),     # -> the exported path
        out_dir=out, record={"model": "bahdanau", "data": "synthetic"},
    )

Each phase is timed. At the end one summary says how long training ran and whether the time budget
(:class:`~attnlayers.applications.core.training.callbacks.TimeBudget`, which bounds training only) stopped it and where
(the epoch, the steps run of how many, mid-epoch or not), which weights were kept
(:class:`~attnlayers.applications.core.training.callbacks.BestWeights`), and how long evaluation, pictures and export
took; everything goes to ``out_dir/results.json``.

A run resumed from its backup (:class:`~attnlayers.applications.core.training.backup.BackupAndRestore`) says where it
resumed, its time budget and learning-rate schedule count the seconds before the interruption, and its results
cover every run of the training (epochs, history, seconds in all). Under a multi-worker strategy every worker
trains and takes part in evaluation (keras' ``evaluate`` and ``predict`` are collective there); only the chief
(:func:`~attnlayers.applications.core.runs.replicas.is_chief`) prints the evaluation, draws, exports and writes
``results.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings

import keras
import numpy as np

from ..inputs.data_order import DataEpoch
from ..training.backup import BackupAndRestore
from ..training.callbacks import BestWeights, ProgressLog, StepCounter, TimeBudget
from .cli import UNBOUNDED_EPOCHS
from .replicas import is_chief


__all__ = ["PROGRESS_SECONDS", "describe_training", "describe_vocabulary", "fit_verbosity", "run_recipe",
           "saved_model_export", "training_summary"]


def _find(callbacks, kind):
    found = [c for c in callbacks if isinstance(c, kind)]
    return found[-1] if found else None


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _timed(function, *args):
    start = time.perf_counter()
    out = function(*args)
    return out, time.perf_counter() - start


def _merged_history(before, history):
    """The logs of the epochs before a resume (``before``: metric -> values) followed by this run's."""
    now = {key: [float(v) for v in values] for key, values in history.history.items()
           if all(np.ndim(v) == 0 for v in values)}
    return {key: list(before.get(key, [])) + now.get(key, []) for key in {**before, **now}}


def training_summary(counter, history=None, backup=None):
    """What training did: seconds, epochs, steps, and what the time budget (if any) bounded. With a ``backup``
    (a :class:`BackupAndRestore`) that restored an interrupted run, also ``resumed`` (the epoch and step it resumed
    at, 1-based epoch; the seconds and optimizer steps before; which run of the training this is) and
    ``seconds_total``; ``epochs`` and ``history`` then cover every run, and ``steps`` this one (the batches it
    trained on, not the ones it skipped).

    Args:
        counter: the run's step and time counter (``core.StepCounter``).
        history: fit's ``History``, or None.
        backup: the run's ``core.BackupAndRestore``, or None.
    """
    summary = {
        "seconds": round(counter.elapsed, 1),
        "epochs": len(history.epoch) if history is not None else len(counter.epoch_steps),
        "steps": counter.steps,
        "steps_per_epoch": counter.steps_per_epoch,
        "budget_seconds": None, "stopped_by_budget": False,
    }
    if isinstance(counter, TimeBudget):
        summary["budget_seconds"] = counter.seconds
        summary["stopped_by_budget"] = counter.stopped
        if counter.stopped:
            summary.update(stopped_epoch=counter.stopped_epoch + 1, stopped_step=counter.stopped_step,
                           mid_epoch=counter.mid_epoch)
    if history is not None:
        summary["history"] = _merged_history({}, history)
    restored = getattr(backup, "restored", None)
    summary["resumed"] = None
    if restored is not None:
        before = float(restored.get("seconds") or 0.0)
        summary["resumed"] = {"epoch": restored["epoch"] + 1, "step": restored["step"], "seconds_before": before,
                              "steps_before": restored.get("iterations"), "run": backup.invocations}
        summary["seconds_total"] = round(before + summary["seconds"], 1)
        summary["steps"] = counter.steps - backup.skipped
        if history is not None:
            summary["history"] = _merged_history(restored.get("history") or {}, history)
            summary["epochs"] = max((len(v) for v in summary["history"].values()), default=summary["epochs"])
    return summary


def describe_training(summary):
    """The summary of :func:`training_summary` as one line.

    Args:
        summary: the dictionary :func:`training_summary` returns.
    """
    def count(n, word):
        return f"{n} {word}{'' if n == 1 else 's'}"

    line = (f"training: {summary['seconds']:.1f} s, {count(summary['epochs'], 'epoch')}, "
            f"{count(summary['steps'], 'step')}")
    resumed = summary.get("resumed")
    if resumed:
        line = (f"training: {summary['seconds']:.1f} s and {count(summary['steps'], 'step')} in this run, resumed in "
                f"epoch {resumed['epoch']} after step {resumed['step']} (run {resumed['run']}: "
                f"{summary['seconds_total']:.1f} s in all, {count(summary['epochs'], 'epoch')})")
    budget = summary.get("budget_seconds")
    if budget is None:
        return line + " (no time budget)"
    minutes = f"{budget / 60:g}-minute"
    if not summary["stopped_by_budget"]:
        return line + f"; the {minutes} time budget did not stop it (all epochs ran)"
    of = f" of {summary['steps_per_epoch']}" if summary.get("steps_per_epoch") else ""
    where = {True: "mid-epoch", False: "at the end of the epoch",
             None: "the length of an epoch of this data is not known yet"}[summary.get("mid_epoch")]
    return (line + f"; stopped by the {minutes} time budget in epoch {summary['stopped_epoch']} after "
            f"{summary['stopped_step']}{of} steps ({where})")


def describe_vocabulary(size, requested=None, kind="", flag="--vocab-size"):
    """"vocabulary N KIND tokens", saying why when a learned vocabulary came out smaller than ``requested`` (the
    most the learner was asked for, None for a vocabulary that was read, not learned)."""
    kind = f"{kind} " if kind else ""
    line = f"vocabulary {size:,} {kind}tokens"
    if requested is not None and size < requested:
        line += (f" (fewer than {flag} {requested:,}: the training text has no more distinct pieces to learn; "
                 f"{flag} is a most, not an exact size)")
    return line


def saved_model_export(export, weights_file):
    """``export`` (``export(model, out_dir)``, writing a TensorFlow SavedModel) under the TensorFlow backend. Under
    another backend (JAX), where a SavedModel cannot be written, a function that saves the model's weights to
    ``out_dir/weights_file`` instead (``model.load_weights`` reads them into the same model built under TensorFlow,
    which then exports) and says so.

    Args:
        export: ``export(model, out_dir)``, writing a TensorFlow SavedModel.
        weights_file: the weights file's name under ``out_dir`` under another backend.
    """
    import keras

    if keras.backend.backend() == "tensorflow":
        return export

    def save_weights(model, out_dir):
        path = os.path.join(out_dir, weights_file)
        model.save_weights(path)
        print(f"saved the weights in {path} (the SavedModel export needs KERAS_BACKEND=tensorflow; this run: "
              f"{keras.backend.backend()})", flush=True)
        return path

    return save_weights


def fit_verbosity(verbose, stream=None):
    """``fit``'s verbosity for ``stream`` (default standard output): the progress bar (1) only on a terminal; in a
    file or a pipe it becomes a line per epoch (2), since a redrawn bar there is a line per step."""
    stream = sys.stdout if stream is None else stream
    if verbose == 1 and not (hasattr(stream, "isatty") and stream.isatty()):
        return 2
    return verbose


def _is_dataset(data):
    return type(data).__module__.startswith("tensorflow") and hasattr(data, "element_spec")


#: With a time budget alone and ``verbose=1``: a progress line every this many seconds of training, mid-epoch too.
PROGRESS_SECONDS = 30.0


def run_recipe(model, train, *, validation=None, epochs=1, callbacks=(), evaluate=None, pictures=None,
               export=None, out_dir=None, record=None, fit_kwargs=None, verbose=1, strategy=None, build=True,
               results_file="results.json", print_fn=None):
    """Trains ``model`` with ``fit``, then evaluates it, draws its pictures and exports it, timing each phase.

    Args:
        model: a compiled ``keras.Model``.
        train: the training data (a ``tf.data.Dataset`` of ``(x, y)`` batches, or anything ``fit`` takes).
        validation: ``fit``'s ``validation_data``.
        epochs: most passes over ``train`` (a :class:`TimeBudget` among ``callbacks`` may stop earlier).
        callbacks: the callbacks for ``fit`` (e.g.
            :func:`~attnlayers.applications.core.training.callbacks.standard_callbacks`); a :class:`TimeBudget` and a
            :class:`BestWeights` among them are reported on.
        evaluate: ``evaluate(model) -> dict`` of results (merged into the result), or None.
        pictures: ``pictures(model, out_dir) -> list of paths``, or None.
        export: ``export(model, out_dir) -> path`` (or a dict), or None.
        out_dir: the run's folder (created if missing): ``results_file`` is written there. None: nothing
            is written.
        record: fields written first in the result (model name, data, settings).
        fit_kwargs: more ``fit`` arguments (``steps_per_epoch``, ``class_weight``, ...).
        verbose: ``fit``'s verbosity; 1 (the progress bar) becomes 2 (a line per epoch) when standard output is
            not a terminal, where a bar writes a line per step (:func:`fit_verbosity`). A run bounded by a
            :class:`TimeBudget` alone (``epochs`` = ``UNBOUNDED_EPOCHS``) prints :class:`ProgressLog`'s lines
            instead (the step and the time against the budget; with 1 also every :data:`PROGRESS_SECONDS`).
        strategy: the ``tf.distribute`` strategy the model was built under (the model is built in its scope).
        build: call the model once on the first batch's inputs before ``fit`` when it is not built yet (so that
            ``BackupAndRestore`` restores into existing variables).
        results_file: the JSON file name (in ``out_dir``), or an absolute path.
        print_fn: where the summary lines go (default ``print``, flushed).

    Returns:
        The result dict (JSON-able): ``record``'s fields, ``parameters``, ``training`` (seconds, epochs, steps,
        steps_per_epoch, budget_seconds, stopped_by_budget, stopped_epoch / stopped_step / mid_epoch, history),
        ``weights`` (the :class:`BestWeights` choice, or None), what ``evaluate`` returned, ``pictures``,
        ``export``, ``seconds`` (train, evaluate, pictures, export) and ``results_path``; ``training`` also has
        ``resumed`` and ``seconds_total`` (see :func:`training_summary`). On a worker other than the chief: the
        record, ``parameters``, ``training`` and ``weights``, with ``results_path`` None (nothing is written).
    """
    say = print_fn or (lambda *a: print(*a, flush=True))
    callbacks = list(callbacks)
    counter = _find(callbacks, StepCounter)
    if counter is None:
        counter = StepCounter()
        callbacks.append(counter)
    if _find(callbacks, DataEpoch) is None:  # the pipelines draw epoch e in (seed, e)'s order (core.inputs.data_order)
        callbacks.insert(0, DataEpoch())
    best = _find(callbacks, BestWeights)
    backup = _find(callbacks, BackupAndRestore)
    if backup is not None:  # the backup keeps the best weights' state, which must see each epoch before it saves
        for callback in [c for c in callbacks if callable(getattr(c, "backup_state", None))]:
            backup.follow(callback)
            if callbacks.index(callback) > callbacks.index(backup):
                callbacks.remove(callback)
                callbacks.insert(callbacks.index(backup), callback)
    for callback in callbacks:  # a resumed run's budget and schedule count the seconds before the interruption
        if hasattr(callback, "follow_backup") and getattr(callback, "backup", None) is None:
            callback.follow_backup(backup)
    budget = _find(callbacks, TimeBudget)
    if budget is not None and epochs >= UNBOUNDED_EPOCHS and verbose in (1, 2) and _find(callbacks, ProgressLog) is None:
        # Bounded by the budget alone, fit's bar would read "Epoch 1/100000": lines with the step and the time
        # against the budget instead (with verbose=1 also every PROGRESS_SECONDS mid-epoch).
        callbacks.insert(0, ProgressLog(budget=budget, every=PROGRESS_SECONDS if verbose == 1 else None))
        verbose = 0
    if build and not model.built:
        x = next(iter(train))[0]
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            model(x)
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)

    fit_kwargs = dict(fit_kwargs or {})
    if _is_dataset(train) or isinstance(train, keras.utils.PyDataset):
        # The pipeline shuffles (core.inputs.data_order: in an order a resumed run draws again); fit's default
        # shuffle=True only warns for a tf.data.Dataset, and reorders a PyDataset's batches with Python's global
        # generator.
        fit_kwargs.setdefault("shuffle", False)
    with warnings.catch_warnings():
        if "steps_per_epoch" not in fit_kwargs:  # the data's end is the epoch's end: keras warns of it needlessly
            warnings.filterwarnings("ignore", message=r"Your input ran out of data", category=UserWarning)
        history, train_seconds = _timed(lambda: model.fit(train, validation_data=validation, epochs=epochs,
                                                          callbacks=callbacks, verbose=fit_verbosity(verbose),
                                                          **fit_kwargs))
    training = training_summary(counter, history, backup)
    training["seconds"] = round(train_seconds, 1)
    if training.get("resumed"):
        training["seconds_total"] = round(training["resumed"]["seconds_before"] + train_seconds, 1)
    weights = None
    if best is not None:
        weights = {"monitor": best.monitor, "mode": best.mode, "average": best.average,
                   "kept_epochs": [e + 1 for e in best.kept_epochs],
                   "best_epoch": None if best.best_epoch is None else best.best_epoch + 1,
                   "best": None if best.best_epoch is None else float(best.best), "restored": best.describe()}
    result = {**(record or {}), "parameters": int(model.count_params()), "training": training, "weights": weights}
    seconds = {"train": round(train_seconds, 1)}
    chief = is_chief(strategy if strategy is not None else getattr(model, "distribute_strategy", None))
    if not chief:  # another worker of a multi-worker run: it takes part in evaluation, the chief reports
        say(f"{describe_training(training)}; the chief worker evaluates, draws, exports and writes the results")
        if evaluate is not None:  # keras' evaluate / predict are collective under MultiWorkerMirroredStrategy
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                evaluate(model)
        return _jsonable({**result, "results_path": None})
    say(describe_training(training))
    if weights is not None:
        say(f"weights: {weights['restored']}")

    if evaluate is not None:
        metrics, seconds["evaluate"] = _timed(evaluate, model)
        result.update(metrics or {})
    if pictures is not None:
        paths, seconds["pictures"] = _timed(pictures, model, out_dir)
        result["pictures"] = [os.fspath(p) for p in (paths or [])]
    if export is not None:
        exported, seconds["export"] = _timed(export, model, out_dir)
        result["export"] = exported
    result["seconds"] = {k: round(v, 1) for k, v in seconds.items()}
    after = [f"{name} {result['seconds'][key]:.1f} s" for key, name in
             (("evaluate", "evaluation"), ("pictures", "pictures"), ("export", "export")) if key in seconds]
    if after:
        say("after training (not bounded by the time budget): " + ", ".join(after))
    if out_dir is not None:
        path = results_file if os.path.isabs(os.fspath(results_file)) else os.path.join(out_dir, results_file)
        result["results_path"] = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_jsonable(result), f, indent=1, ensure_ascii=False)
    return _jsonable(result)
