"""What BERT's pretraining and fine-tuning runs share (:mod:`.pretraining`, :mod:`.finetuning`): the backbone built
on its own, the one compile with BERT's AdamW at a learning rate set by the budget, and the runs' callbacks.

    with strategy.scope():
        model = BertPretrainer(built_backbone(config))
        schedule = compile_budgeted(model, model.compile_for_pretraining, 1e-3, 0.1, 0.01, minutes=20)
    model.fit(data, callbacks=run_callbacks(out_dir, 20, None, schedule, tensorboard=True, backup=True))
"""

from __future__ import annotations


def compile_budgeted(model, compile_for, peak, warmup_fraction, weight_decay, minutes):
    """Compiles ``model`` once with its own helper ``compile_for`` (the task's losses and metrics;
    ``compile_for_pretraining`` or ``compile_for_finetuning``) and :func:`~.pretrainer.bert_optimizer` at the
    constant rate ``peak``; returns the :class:`BudgetedLearningRate` callback that sets that rate for ``fit``
    (linear warm-up over ``warmup_fraction`` of the run, linear decay to 0 at its end: ``minutes`` when given, else
    the last step of ``fit``'s epochs). Call it under the strategy's scope."""
    from ..core import BudgetedLearningRate

    compile_for(float(peak), warmup_steps=0, total_steps=None, weight_decay=weight_decay)
    return BudgetedLearningRate(peak, warmup_fraction, seconds=None if minutes is None else minutes * 60.0)


def budgeted_bert_optimizer(peak, weight_decay=0.01):
    """Deprecated: ``bert_optimizer(peak, weight_decay=weight_decay)`` (a constant rate) is the same optimizer."""
    import warnings

    from .pretrainer import bert_optimizer

    warnings.warn("budgeted_bert_optimizer is deprecated; use bert_optimizer(peak, weight_decay=weight_decay) "
                  "(attnlayers.applications.bert.bert_optimizer).", DeprecationWarning, stacklevel=2)
    return bert_optimizer(float(peak), weight_decay=weight_decay)


def run_callbacks(out_dir, minutes, best, schedule, tensorboard, backup, backup_every=None):
    """The runs' ``fit`` callbacks: :func:`~attnlayers.applications.core.standard_callbacks` (the time budget,
    ``best`` weights, TensorBoard and BackupAndRestore in ``out_dir`` when asked, every ``backup_every`` steps or by time)
    and the learning rate ``schedule``."""
    from ..core import standard_callbacks

    return standard_callbacks(out_dir if (tensorboard or backup) else None, minutes=minutes, best=best,
                              backup_every=backup_every,
                              tensorboard=tensorboard, backup=backup) + [schedule]


def built_backbone(config):
    """A :class:`BertBackbone` built on its own (called once on a short input) before a task model wraps it: its
    weights' paths then start with the backbone's name, as ``save_hf_checkpoint`` looks them up (built first
    inside a task model's call, they start with the task model's name and saving fails)."""
    import numpy as np

    from .backbone import BertBackbone

    backbone = BertBackbone(config)
    length = min(2, config.max_sequence_length)
    backbone({"token_ids": np.zeros((1, length), "int32"), "padding_mask": np.ones((1, length), bool)})
    return backbone


__all__ = ["budgeted_bert_optimizer", "built_backbone", "compile_budgeted", "run_callbacks"]
