"""The optimizer pieces the training recipes share: the example scripts' optimizer flags, AdamW with the weight
decay kept off biases, normalization scales and embeddings, and a time- or step-budgeted warm-up + cosine
learning rate.

    add_optimizer_arguments(parser, settings, "windows")    # --batch-size --learning-rate --warmup-fraction ...
    optimizer = decoupled_adamw(0.0, weight_decay=0.1, beta_2=0.95, global_clipnorm=1.0)
    schedule = BudgetedCosineLearningRate(1e-3, warmup_fraction=0.05, seconds=600)    # a fit callback

Backend-agnostic.
"""

from __future__ import annotations

import math

import keras

from .callbacks import BudgetedLearningRate

# The last part of the variable names (Keras 3 ``variable.name``) that AdamW does not decay: biases, LayerNorm /
# RMSNorm scales and shifts, and embedding tables (ours and keras-hub's layers name them so).
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "scale", "embeddings")


def add_optimizer_arguments(parser, default, unit):
    """The example scripts' --batch-size, --learning-rate, --warmup-fraction (alias --warmup) and --weight-decay
    (an AdamW's), their defaults from ``default`` (a settings dataclass with ``batch_size``, ``learning_rate``,
    ``warmup_fraction`` and ``weight_decay``); ``unit`` names what a batch holds ("pairs", "examples")."""
    parser.add_argument("--batch-size", type=int, default=default.batch_size,
                        help=f"{unit} per batch (default {default.batch_size})")
    parser.add_argument("--learning-rate", type=float, default=default.learning_rate,
                        help=f"peak learning rate of AdamW (default {default.learning_rate:g})")
    parser.add_argument("--warmup-fraction", "--warmup", dest="warmup_fraction", type=float,
                        default=default.warmup_fraction,
                        help=f"share of the run spent warming up (default {default.warmup_fraction:g})")
    parser.add_argument("--weight-decay", type=float, default=default.weight_decay,
                        help=f"AdamW's decoupled weight decay (default {default.weight_decay:g})")


def decoupled_adamw(learning_rate, weight_decay=0.1, *, beta_1=0.9, beta_2=0.95, epsilon=1e-8,
                    global_clipnorm=1.0, exclude=NO_WEIGHT_DECAY):
    """AdamW (Loshchilov & Hutter 2019) as GPT-3 / nanoGPT train GPT-2 (Brown et al. 2020, appendix B: betas
    0.9 / 0.95, epsilon 1e-8, weight decay 0.1, the gradients' global norm clipped at 1.0), the decay applied to
    the weight matrices only: not to biases, normalization parameters or embedding tables (minGPT's rule; the
    variable names of ``exclude``).

    Args:
        learning_rate: a number (a variable that :class:`BudgetedCosineLearningRate` sets) or a schedule.
        weight_decay: the decoupled decay.
        beta_1, beta_2, epsilon: Adam's.
        global_clipnorm: the largest global gradient norm (None: no clipping).
        exclude: substrings of the variable names that are not decayed.

    Returns:
        A ``keras.optimizers.AdamW``.
    """
    optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=beta_1,
                                       beta_2=beta_2, epsilon=epsilon, global_clipnorm=global_clipnorm)
    optimizer.exclude_from_weight_decay(var_names=list(exclude))
    return optimizer


class BudgetedCosineLearningRate(BudgetedLearningRate):
    """:class:`~attnlayers.applications.core.callbacks.BudgetedLearningRate` with a cosine decay: linear warm-up
    over ``warmup_fraction`` of the budget, then a cosine to zero when the budget (time, steps, or ``fit``'s
    epochs, whichever ends first) ends.

    ``lr(p) = peak * p / w`` for ``p < w``, else ``peak * (1 + cos(pi * (p - w) / (1 - w))) / 2`` (Loshchilov &
    Hutter 2017 without restarts; GPT-3's schedule, here to zero at the end of the run), with ``p`` the progress
    of :meth:`BudgetedLearningRate.progress`.
    """

    def learning_rate(self, progress):
        w, p = self.warmup_fraction, min(1.0, max(0.0, progress))
        if p < w:
            return self.peak * p / w
        return self.peak * 0.5 * (1.0 + math.cos(math.pi * (p - w) / (1.0 - w)))


__all__ = ["NO_WEIGHT_DECAY", "BudgetedCosineLearningRate", "add_optimizer_arguments", "decoupled_adamw"]
