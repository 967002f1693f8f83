"""The shared application-model test harness (in the spirit of keras-hub's ``run_backbone_test``).

``run_model_test`` puts one application model through what every model must do, on one small batch:

- config: ``from_config(get_config())`` rebuilds the same class with an equal config;
- ``.keras`` round trip: the loaded model is the same class with an equal config, gives the same outputs and
  (for a generative model) generates the same tokens;
- predict / generate on the batch: finite outputs;
- fit one step (optional): ``train_on_batch`` gives a finite loss and moves the trainable weights;
- a SavedModel round trip (optional): the export is served by :func:`serve_alone`, in a fresh process where
  attnlayers and keras_hub cannot be imported.

``serve_alone`` is the one way the tests serve a SavedModel without this library. Works under the TensorFlow and
JAX backends (the SavedModel round trip is TensorFlow's).
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
from keras import ops

# Run first in a serving process: block(name) makes any import of it fail from now on (a finder: what is loaded
# already stays); hide(name) makes it look not installed (an import fails and importlib.util.find_spec, which
# tensorflow asks about keras, finds nothing) until unhide(name); imported(*names) lists the modules under those names
# that were imported.
_PRELUDE = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = set()

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"{{name}} is blocked: the SavedModel must serve without it", name=name)
            return None

    def block(*names):
        BLOCKED.update(names)

    def hide(*names):
        for name in names:
            sys.modules[name] = None

    def unhide(*names):
        for name in names:
            del sys.modules[name]

    def imported(*names):  # the modules under names this process imported (a hidden name's placeholder is none)
        return sorted(m for m, module in list(sys.modules.items())
                      if module is not None and m.split(".")[0] in names)

    sys.meta_path.insert(0, _Block())
    block(*{blocked!r})
    """
)


def serve_alone(script, *args, cwd=None, blocked=("attnlayers", "keras_hub"), timeout=300):
    """Runs ``script`` (Python source) in a fresh interpreter where importing ``blocked`` fails, with ``args`` as
    ``sys.argv[1:]``; returns the JSON object it prints on its last line of output. The script may call
    ``block``, ``hide``, ``unhide`` and ``imported`` (above). keras is not blocked by default, as tensorflow and
    tensorflow_text import parts of it themselves: a script hides it before importing tensorflow, or blocks it after,
    to refuse what tensorflow did not load."""
    source = _PRELUDE.format(blocked=tuple(sorted(blocked))) + textwrap.dedent(script)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""}
    run = subprocess.run([sys.executable, "-c", source, *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, cwd=cwd, env=env, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _numpy(outputs):
    return keras.tree.map_structure(lambda x: np.asarray(ops.convert_to_numpy(x)), outputs)


def _json(config):
    return json.loads(json.dumps(config))


def _assert_close(actual, expected, atol):
    keras.tree.map_structure(lambda a, e: np.testing.assert_allclose(a, e, atol=atol), _numpy(actual),
                             _numpy(expected))


def run_model_test(make_model, batch, tmp_path, *, call=None, generate=None, compile=None, fit_batch=None,
                   saved_model=None, check_loaded=None, atol=1e-6):
    """Checks one application model on ``batch``; returns the model (built and, with ``compile``, trained a step).

    Args:
        make_model: ``make_model() -> keras.Model``, seeded by the caller.
        batch: the model's input; ``call(model, batch)`` defaults to ``model(batch)``.
        tmp_path: a folder for the ``.keras`` file and the SavedModel.
        call: ``call(model, batch) -> outputs`` (any nest of tensors).
        generate: ``generate(model, batch) -> tokens`` for a generative model: checked after the ``.keras`` round
            trip too.
        compile: ``compile(model)``; with ``fit_batch`` = ``(x, y)`` or ``(x, y, sample_weight)``, one
            ``train_on_batch`` step after the round trips: the loss is finite and the trainable weights move.
        saved_model: ``(export, script, check)``: ``export(model, path)`` writes a SavedModel and returns the
            arguments ``script`` takes after the path; ``serve_alone(script, path, *arguments)`` serves it and
            ``check(model, served)`` compares with the model in this process.
        check_loaded: ``check_loaded(loaded, model)``: the model's own checks of the model loaded from ``.keras``.
        atol: the tolerance of every output comparison.
    """
    call = call or (lambda model, x: model(x))
    model = make_model()
    outputs = call(model, batch)
    for array in keras.tree.flatten(_numpy(outputs)):
        assert np.all(np.isfinite(array.astype("float64"))), "the model's outputs are not finite"
    tokens = None if generate is None else _numpy(generate(model, batch))

    config = model.get_config()
    clone = type(model).from_config(config)
    assert type(clone) is type(model)
    assert _json(clone.get_config()) == _json(config)

    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    assert _json(loaded.get_config()) == _json(config)
    _assert_close(call(loaded, batch), outputs, atol)
    if tokens is not None:
        keras.tree.map_structure(np.testing.assert_array_equal, _numpy(generate(loaded, batch)), tokens)
    if check_loaded is not None:
        check_loaded(loaded, model)

    if saved_model is not None:
        export, script, check = saved_model
        served_path = str(tmp_path / "saved_model")
        arguments = export(model, served_path) or ()
        check(model, serve_alone(script, served_path, *arguments, cwd=tmp_path))

    if fit_batch is not None:
        compile(model)
        before = [np.array(ops.convert_to_numpy(w)) for w in model.trainable_weights]
        logs = model.train_on_batch(*fit_batch, return_dict=True)
        assert np.isfinite(float(logs["loss"])), f"fit one step: loss {logs['loss']}"
        moved = [not np.array_equal(b, ops.convert_to_numpy(w)) for b, w in zip(before, model.trainable_weights,
                                                                                  strict=True)]
        assert any(moved), "fit one step moved no trainable weight"
    return model
