"""Runs and their launch: the train -> evaluate -> pictures -> export run (``recipe``), the strategy and the
precision (``runtime``), what several replicas or workers need (``replicas``), Keras' trainer under several replicas
(``keras_fixes``), the scripts' shared flags (``cli``, ``scheduled_sampling_flags``) and local multi-worker groups
(``launch``).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
