"""The one rule of the applications' ``__init__`` modules: each re-exports its public names; a name whose module
imports TensorFlow when it loads is resolved on first use, where the application must import without TensorFlow
(BERT's and GPT's models run under the JAX backend on machines that have no TensorFlow). NMT and captioning are
TensorFlow applications throughout (tf.data pipelines, SavedModels) and import their modules at once.

    __getattr__ = lazy_attributes(__name__, {"export_gpt": "export", "GPT2Tokenizer": "tokenizer"})
"""

from __future__ import annotations

import importlib


def lazy_attributes(package, table):
    """A module ``__getattr__`` (PEP 562) for ``package`` that imports ``package.<table[name]>`` when ``name`` is
    first read (``from package import name`` too) and returns its attribute ``name``."""

    def __getattr__(name):  # noqa: N807 (the module hook's name)
        if name in table:
            return getattr(importlib.import_module(f".{table[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
