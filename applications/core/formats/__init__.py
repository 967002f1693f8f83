"""Files and weights in and out: safetensors (``safetensors``), Hugging Face config.json fields (``hf_config``),
weights copied by path and from keras-hub (``weights``), and generators' SavedModels (``export``).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
