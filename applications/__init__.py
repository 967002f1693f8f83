"""Models built from attnlayers: NMT, captioning, BERT, GPT, vision (installed as attnlayers.applications).

Each application is a subpackage, also an attribute imported on first use (``attnlayers.applications.bert``
after ``import attnlayers.applications``); nothing is imported before.
"""

import importlib
import pkgutil

__all__ = sorted(info.name for info in pkgutil.iter_modules(__path__))  # the applications, each a folder


def __getattr__(name):  # noqa: N807 (PEP 562's module hook)
    if name in {info.name for info in pkgutil.iter_modules(__path__)}:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
