"""Runs a test file that keras ships in its wheel against an attnlayers class: the file is read from the installed
keras package at run time (never copied into this repository), executed as a module of its own, and its
``layers.<Name>`` resolves to the substitute; everything else (keras' ``testing.TestCase``, ``run_layer_test``, its
assertions) stays keras'. See tests/layers/test_keras_conformance.py."""

import importlib.util
import pathlib
import sys
import types
import unittest

import keras
from keras.src import layers as keras_layers


def keras_test_file(name):
    """The path of ``keras/src/layers/attention/<name>_test.py`` in the installed keras (it may not exist)."""
    return pathlib.Path(keras.__file__).parent / "src" / "layers" / "attention" / f"{name}_test.py"


def load_keras_tests(name, substitutes, skips=None):
    """keras' ``<name>_test.py`` with ``layers.X`` replaced by ``substitutes[X]``.

    Args:
        name: the file's stem without ``_test``, e.g. "multi_head_attention".
        substitutes: {keras layer name: replacement class}.
        skips: {test method name: reason}: methods replaced by a skip that states the reason.

    Returns:
        The loaded module (its TestCase classes carry the substitution), or None when keras ships no such file.
    """
    path = keras_test_file(name)
    if not path.exists():
        return None
    proxy = types.ModuleType(f"{__name__}.layers")
    proxy.__getattr__ = lambda attribute: getattr(keras_layers, attribute)  # PEP 562: all else is keras'
    for layer_name, replacement in substitutes.items():
        if not hasattr(keras_layers, layer_name):
            raise ValueError(f"keras.layers has no {layer_name!r} to substitute; keras {keras.__version__}")
        setattr(proxy, layer_name, replacement)
    module_name = f"keras_suite_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    module.layers = proxy  # the test functions read the module global `layers` at call time
    test_cases = [value for value in vars(module).values()
                  if isinstance(value, type) and issubclass(value, unittest.TestCase)]
    found = {attribute for case in test_cases for attribute in dir(case)}
    for method, reason in (skips or {}).items():
        if method not in found:
            raise ValueError(f"skip list names {method!r}, which {path.name} of keras {keras.__version__} does not have")
        for case in test_cases:
            if hasattr(case, method):
                setattr(case, method, unittest.skip(reason)(getattr(case, method)))
    return module


def keras_test_cases(name, substitutes, skips=None):
    """What a test module defines to run keras' ``<name>_test.py`` (:func:`load_keras_tests`): {class name: its
    TestCase classes}, or, when keras ships no such file, {"test_keras_ships_<name>_test": a test that skips saying
    so}. Use as ``globals().update(keras_test_cases(...))``."""
    module = load_keras_tests(name, substitutes, skips)
    if module is None:
        def missing():
            import pytest

            pytest.skip(f"keras {keras.__version__} ships no {keras_test_file(name)}")

        return {f"test_keras_ships_{name}_test": missing}
    return {key: value for key, value in vars(module).items()
            if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == module.__name__}
