"""Learning-rate schedules: the Transformer's warm-up (Vaswani et al. 2017, eq. 3), a warm-up + cosine decay
whose length is set by the number of steps a run has, and BERT's warm-up + linear decay.

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from attnlayers.validation import non_negative_int, positive_int, positive_number

from .losses import PACKAGE


__all__ = ["TransformerSchedule", "WarmupCosineDecay", "WarmupLinearDecay"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The warm-up schedule of Vaswani et al. (2017), eq. 3:
    ``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` (step counted from 1).

    Linear warm-up for ``warmup_steps``, then decay with the inverse square root of the step; the peak, at
    step = warmup_steps, is ``scale * (d_model * warmup_steps)^-0.5``.

    Args:
        d_model: the model width.
        warmup_steps: steps of linear warm-up (the paper: 4000).
        scale: a factor on the whole schedule (the paper: 1).

    Call: ``schedule(step)`` with the optimizer's iteration count (from 0) -> float32 scalar.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = positive_int(d_model, "d_model")
        self.warmup_steps = positive_int(warmup_steps, "warmup_steps")
        self.scale = positive_number(scale, "scale")

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package=PACKAGE)
class WarmupCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to ``peak`` over a share of the steps a run has, then cosine decay to ``final * peak``.

    ``w = max(1, round(warmup_fraction * total_steps))``;
    ``lr(s) = peak * s / w`` for s < w, else
    ``peak * (final + (1 - final) * (1 + cos(pi * min(1, (s - w) / (total_steps - w)))) / 2)``
    (s = step + 1; Loshchilov & Hutter 2017 without restarts). The warm-up grows with ``total_steps`` (for a run
    bounded by a time budget: ``total_steps`` = the steps that fit in it), so a short run is not all warm-up.

    Args:
        peak: the largest learning rate.
        total_steps: the steps of the run (an estimate for a time budget; later steps stay at the final rate).
        warmup_fraction: share of ``total_steps`` spent warming up, in (0, 1).
        final: the last learning rate as a share of ``peak``, in [0, 1).
    """

    def __init__(self, peak, total_steps, warmup_fraction=0.1, final=0.0):
        self.peak = positive_number(peak, "peak")
        self.total_steps = positive_int(total_steps, "total_steps")
        if not 0.0 < warmup_fraction < 1.0:
            raise ValueError(f"`warmup_fraction` must be in (0, 1); received warmup_fraction={warmup_fraction!r}.")
        if not 0.0 <= final < 1.0:
            raise ValueError(f"`final` must be in [0, 1); received final={final!r}.")
        self.warmup_fraction, self.final = float(warmup_fraction), float(final)

    @property
    def warmup_steps(self):
        return max(1, round(self.warmup_fraction * self.total_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        decay_steps = max(float(self.total_steps) - warmup, 1.0)
        progress = ops.clip((step - warmup) / decay_steps, 0.0, 1.0)
        cosine = self.final + (1.0 - self.final) * 0.5 * (1.0 + ops.cos(math.pi * progress))
        return self.peak * ops.where(step < warmup, step / warmup, cosine)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_fraction": self.warmup_fraction,
                "final": self.final}


@keras.saving.register_keras_serializable(package=PACKAGE)
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's learning rate (Devlin et al. 2019, appendix A.2): linear warm-up over ``warmup_steps`` to
    ``peak``, then linear decay to 0 at ``total_steps``.

    ``lr(step) = peak * max(0, min((step + 1) / w, (T - step) / (T - w)))`` with w = ``warmup_steps``,
    T = ``total_steps`` and step the optimizer's iteration count from 0 (so the first update is not 0 and the
    last, step T - 1, is not 0 either). ``total_steps=None``: no decay, ``peak`` after the warm-up (fine-tuning
    for an unknown number of steps). ``warmup_steps=0``: no warm-up.

    Args:
        peak: the largest learning rate (BERT pretraining: 1e-4; fine-tuning: 5e-5, 3e-5 or 2e-5).
        warmup_steps: w >= 0 (BERT pretraining: 10,000; fine-tuning: 10 % of the steps is common).
        total_steps: T > w, or None.

    Call: ``schedule(step)`` -> float32 scalar.
    """

    def __init__(self, peak, warmup_steps=0, total_steps=None):
        self.peak = positive_number(peak, "peak")
        self.warmup_steps = non_negative_int(warmup_steps, "warmup_steps")
        self.total_steps = positive_int(total_steps, "total_steps", allow_none=True)
        if self.total_steps is not None and self.total_steps <= self.warmup_steps:
            raise ValueError(
                f"`total_steps` must be larger than `warmup_steps`; received total_steps={total_steps}, "
                f"warmup_steps={warmup_steps}."
            )

    def __call__(self, step):
        step = ops.cast(step, "float32")
        rate = ops.convert_to_tensor(1.0, "float32")
        if self.warmup_steps:
            rate = ops.minimum(rate, (step + 1.0) / float(self.warmup_steps))
        if self.total_steps is not None:
            decay = (float(self.total_steps) - step) / float(self.total_steps - self.warmup_steps)
            rate = ops.minimum(rate, ops.maximum(decay, 0.0))
        return self.peak * rate

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}
