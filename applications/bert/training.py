"""What BERT's pretraining and fine-tuning runs share (:mod:`.pretraining`, :mod:`.finetuning`): the backbone built
on its own, BERT's AdamW with a learning rate set by the budget, and the runs' callbacks.

    with strategy.scope():
        model = BertPretrainer(built_backbone(config))
        schedule = compile_budgeted(model, model.compile_for_pretraining, 1e-3, 0.1, 0.01, minutes=20)
    model.fit(data, callbacks=run_callbacks(out_dir, 20, None, schedule, tensorboard=True, backup=True))
"""

from __future__ import annotations


def budgeted_bert_optimizer(peak, weight_decay=0.01):
    """:func:`~attnlayers.applications.bert.pretrainer.bert_optimizer`'s AdamW (its betas, epsilon, gradient
    clipping and the LayerNorm / bias weights out of the weight decay: the shared recipe of
    :func:`~attnlayers.applications.core.optimizers.decoupled_adamw`) with a constant learning rate, which
    :class:`~attnlayers.applications.core.BudgetedLearningRate` sets before every step."""
    from .pretrainer import bert_adamw

    return bert_adamw(float(peak), weight_decay)


def compile_budgeted(model, compile_for, peak, warmup_fraction, weight_decay, minutes):
    """Compiles ``model`` with its own helper ``compile_for`` (the task's losses and metrics), then again with
    :func:`budgeted_bert_optimizer`; returns the :class:`BudgetedLearningRate` callback for ``fit`` (linear
    warm-up over ``warmup_fraction`` of the run, linear decay to 0 at its end: ``minutes`` when given, else the
    last step of ``fit``'s epochs). Call it under the strategy's scope."""
    import keras

    from ..core import BudgetedLearningRate

    compile_for()
    compiled = keras.saving.deserialize_keras_object(model.get_compile_config())
    model.compile(**{**compiled, "optimizer": budgeted_bert_optimizer(peak, weight_decay)})
    return BudgetedLearningRate(peak, warmup_fraction, seconds=None if minutes is None else minutes * 60.0)


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
