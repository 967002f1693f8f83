"""The optimizer pieces the training recipes share: the example scripts' optimizer flags, the one AdamW recipe of
GPT and BERT (the weight decay kept off biases and normalization parameters, and off embedding tables unless
asked), and a time- or step-budgeted warm-up + cosine learning rate.

    add_optimizer_arguments(parser, settings, "windows")    # --batch-size --learning-rate --warmup-fraction ...
    optimizer = decoupled_adamw(0.0, weight_decay=0.1, beta_2=0.95, global_clipnorm=1.0)              # GPT's
    optimizer = decoupled_adamw(1e-4, 0.01, beta_2=0.999, epsilon=1e-6, decay_embeddings=True)        # BERT's
    schedule = BudgetedCosineLearningRate(1e-3, warmup_fraction=0.05, seconds=600)    # a fit callback

Backend-agnostic.
"""

from __future__ import annotations

import math

import keras

from .callbacks import BudgetedLearningRate

# AdamW's one no-decay rule, on the last part of the variable names (Keras 3 ``variable.name``, matched as a
# substring): biases (also the MLM's "output_bias") and the normalization parameters (LayerNorm's gamma / beta,
# RMSNorm's scale) are never decayed; embedding tables (ours and keras-hub's layers name them "embeddings") are the
# one difference between the models, an explicit choice: GPT-2 as minGPT / nanoGPT train it leaves them out, BERT
# (the reference optimization.py excludes only "LayerNorm" and "bias") decays them.
NO_DECAY_NORMALIZATION_AND_BIAS = ("bias", "gamma", "beta", "scale")
EMBEDDINGS = "embeddings"


def no_weight_decay(decay_embeddings=False):
    """The variable-name substrings that AdamW does not decay (the rule above): biases and normalization
    parameters, and the embedding tables too unless ``decay_embeddings`` (BERT's choice)."""
    return NO_DECAY_NORMALIZATION_AND_BIAS + (() if decay_embeddings else (EMBEDDINGS,))


# GPT's (the default): ("bias", "gamma", "beta", "scale", "embeddings").
NO_WEIGHT_DECAY = no_weight_decay()


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


def check_optimizer_arguments(parser, args):
    """``parser.error`` for an argument of :func:`add_optimizer_arguments` out of range: a --batch-size below 1, a
    --warmup-fraction outside (0, 1), a --learning-rate that is not positive, a negative --weight-decay."""
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    if not 0 < args.warmup_fraction < 1:
        parser.error("--warmup-fraction must be between 0 and 1")
    if not args.learning_rate > 0:
        parser.error("--learning-rate must be a positive number")
    if not args.weight_decay >= 0:
        parser.error("--weight-decay must be a number >= 0")


def decoupled_adamw(learning_rate, weight_decay=0.1, *, beta_1=0.9, beta_2=0.95, epsilon=1e-8,
                    global_clipnorm=1.0, decay_embeddings=False, exclude=None):
    """AdamW (Loshchilov & Hutter 2019), the one recipe of GPT and BERT. Its defaults are GPT-2's as GPT-3 /
    nanoGPT train it (Brown et al. 2020, appendix B: betas 0.9 / 0.95, epsilon 1e-8, weight decay 0.1, the
    gradients' global norm clipped at 1.0), the decay applied to the weight matrices only: not to biases,
    normalization parameters or embedding tables (minGPT's rule, :func:`no_weight_decay`). BERT's
    (:func:`~attnlayers.applications.bert.pretrainer.bert_optimizer`) is this one with beta_2 0.999, epsilon 1e-6,
    weight decay 0.01 and ``decay_embeddings=True``.

    Args:
        learning_rate: a number (a variable that :class:`BudgetedCosineLearningRate` sets) or a schedule.
        weight_decay: the decoupled decay.
        beta_1, beta_2, epsilon: Adam's.
        global_clipnorm: the largest global gradient norm (None: no clipping).
        decay_embeddings: decay the embedding tables too (BERT's reference does; GPT's minGPT rule does not).
        exclude: None: :func:`no_weight_decay` ``(decay_embeddings)``; else the variable-name substrings not
            decayed, in its place.

    Returns:
        A ``keras.optimizers.AdamW``.
    """
    optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay, beta_1=beta_1,
                                       beta_2=beta_2, epsilon=epsilon, global_clipnorm=global_clipnorm)
    exclude = no_weight_decay(decay_embeddings) if exclude is None else exclude
    optimizer.exclude_from_weight_decay(var_names=list(exclude))
    return optimizer


class BudgetedCosineLearningRate(BudgetedLearningRate):
    """:class:`~attnlayers.applications.core.training.callbacks.BudgetedLearningRate` with a cosine decay: linear
    warm-up over ``warmup_fraction`` of the budget, then a cosine to zero when the budget (time, steps, or ``fit``'s
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


__all__ = ["NO_WEIGHT_DECAY", "BudgetedCosineLearningRate", "add_optimizer_arguments", "check_optimizer_arguments",
           "decoupled_adamw", "no_weight_decay"]
