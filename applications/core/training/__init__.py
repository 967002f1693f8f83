"""What training steps with: the callbacks (budgets, best weights, progress) and ``BackupAndRestore``
(``callbacks``, ``backup``), learning-rate schedules (``schedules``), the shared AdamW (``optimizers``), masked losses
and metrics (``losses``, ``metrics``).

Each module is an attribute of the package, imported on first use (core/lazy.py); nothing is imported here.
"""

from ..lazy import lazy_attributes, submodule_names

__all__ = submodule_names(__name__)  # the package's modules, each imported on first use

__getattr__ = lazy_attributes(__name__)
