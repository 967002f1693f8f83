"""Deprecated: this module is :mod:`.builders` now (the captioning models built and compiled by name; "recipe" is core's
word for the train -> evaluate -> pictures -> export run). Every name read here warns and is ``builders``'s."""

from ..core.lazy import moved_module

__getattr__ = moved_module(__name__, "attnlayers.applications.captioning.builders")
