"""Scores of generated text: corpus BLEU (``bleu``) and exposure bias, teacher-forced against free-running
accuracy (``exposure_bias``).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
