"""The training callbacks of the translation scripts, which live in ``applications.core.callbacks`` (shared by
every application) and are re-exported here: :class:`TimeBudget`, :class:`BestWeights`,
:func:`standard_callbacks`."""

from ..core.callbacks import BestWeights, ProgressLog, StepCounter, TimeBudget, standard_callbacks

__all__ = ["BestWeights", "ProgressLog", "StepCounter", "TimeBudget", "standard_callbacks"]
