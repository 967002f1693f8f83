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


def submodule_names(package):
    """The names of the modules and subpackages in ``package``'s folder(s), sorted; none is imported."""
    return sorted(info.name for info in pkgutil.iter_modules(sys.modules[package].__path__))


def lazy_attributes(package, table=None):
    """A module ``__getattr__`` (PEP 562) for ``package``: ``name`` in ``table`` imports ``package.<table[name]>``
    when first read (``from package import name`` too) and returns its attribute ``name``; the name of a module of
    the package imports and returns that module. Called from the package's ``__init__`` (its ``__path__`` set).

    Raises:
        ValueError: a name of ``table`` that is also a module of the package.
    """
    table = dict(table or {})
    submodules = frozenset(submodule_names(package))
    clash = sorted(submodules & table.keys())
    if clash:
        raise ValueError(f"`table` of {package!r} names {clash}, which are also modules of the package: an attribute "
                         f"read would not say which is meant; rename the attribute or the module.")

    def __getattr__(name):  # noqa: N807 (the module hook's name)
        if name in table:
            return getattr(importlib.import_module(f".{table[name]}", package), name)
        if name in submodules:
            return importlib.import_module(f".{name}", package)  # also binds it on the package
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
