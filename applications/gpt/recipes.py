"""Deprecated: this module is :mod:`.runs` now (the GPT training run; "recipe" is core's word for the train -> evaluate
-> pictures -> export run). Every name read here warns and is ``runs``'s."""

from ..core.lazy import moved_module

__getattr__ = moved_module(__name__, "attnlayers.applications.gpt.runs")
