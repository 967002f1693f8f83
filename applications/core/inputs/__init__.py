"""What the applications read: the offline corpora (``corpora``), seeded splits (``splits``), data in an order
that a resume can repeat (``data_order``), the generated scenes' images (``scene_images``), users' text files
(``files``) and the in-graph token <-> id tables (``token_lookup``).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
