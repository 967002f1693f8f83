"""The one rule of the applications' ``__init__`` modules: each re-exports its public names; a name whose module
imports TensorFlow when it loads is resolved on first use, where the application must import without TensorFlow
(BERT's and GPT's models run under the JAX backend on machines that have no TensorFlow). NMT and captioning are
TensorFlow applications throughout (tf.data pipelines, SavedModels) and import their modules at once.

Every module of a package is also its attribute, imported on first use (``from attnlayers.applications import bert;
bert.viewer.attention_viewer(...)``), as if ``import attnlayers.applications.bert.viewer`` had run: the modules are
the package's files (``pkgutil.iter_modules``), so a new file needs no entry anywhere. ``dir()`` lists only what is
imported: tools that read every name ``dir()`` gives (``help()``, completion) would otherwise import TensorFlow.

    __getattr__ = lazy_attributes(__name__, {"export_gpt": "export", "GPT2Tokenizer": "tokenizer"})
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings


def submodule_names(package):
    """The names of the modules and subpackages in ``package``'s folder(s), sorted; none is imported."""
    return sorted(info.name for info in pkgutil.iter_modules(sys.modules[package].__path__))


def lazy_attributes(package, table=None, moved=None):
    """A module ``__getattr__`` (PEP 562) for ``package``: ``name`` in ``table`` imports ``package.<table[name]>``
    when first read (``from package import name`` too) and returns its attribute ``name``; the name of a module of
    the package imports and returns that module, and so does a name in ``moved`` (a module that moved into a
    subpackage: ``{"runtime": "runs.runtime"}`` makes ``package.runtime`` the module ``package.runs.runtime``,
    with a DeprecationWarning naming it).
    Called from the package's ``__init__`` (its ``__path__`` set).

    Raises:
        ValueError: a name of ``table`` that is also a module of the package; a name of ``moved`` that is also a
            module of the package or a name of ``table``.
    """
    table, moved = dict(table or {}), dict(moved or {})
    submodules = frozenset(submodule_names(package))
    clash = sorted(submodules & table.keys())
    if clash:
        raise ValueError(f"`table` of {package!r} names {clash}, which are also modules of the package: an attribute "
                         f"read would not say which is meant; rename the attribute or the module.")
    clash = sorted((submodules | table.keys()) & moved.keys())
    if clash:
        raise ValueError(f"`moved` of {package!r} names {clash}, which are also modules or `table` names of the "
                         f"package: an attribute read would not say which is meant; rename one of them.")

    def __getattr__(name):  # noqa: N807 (the module hook's name)
        if name in table:
            return getattr(importlib.import_module(f".{table[name]}", package), name)
        if name in moved:  # a former module name: the module, with a warning naming its place now
            warnings.warn(f"{package}.{name} is deprecated; use {package}.{moved[name]}.", DeprecationWarning,
                          stacklevel=2)
            return importlib.import_module(f".{moved[name]}", package)
        if name in submodules:
            return importlib.import_module(f".{name}", package)  # also binds it on the package
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def moved_module(old, new):
    """A module ``__getattr__`` (PEP 562) for ``old``, a module renamed ``new`` (both full dotted names): every name
    read from ``old`` (``from old import name`` too) warns (DeprecationWarning, naming ``new``) and is ``new``'s."""

    def __getattr__(name):  # noqa: N807 (the module hook's name)
        if name.startswith("__"):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old} is deprecated; import {new} instead.", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
