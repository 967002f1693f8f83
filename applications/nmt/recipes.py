"""Deprecated: this module is :mod:`.variants` now (each model's named variants: configuration, optimizer settings,
weights kept; "recipe" is core's word for the train -> evaluate -> pictures -> export run). Every name read here
warns and is ``variants``'s."""

from ..core.lazy import moved_module

__getattr__ = moved_module(__name__, "attnlayers.applications.nmt.variants")
