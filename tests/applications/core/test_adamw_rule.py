"""The one AdamW recipe of BERT and GPT (``core.training.optimizers.decoupled_adamw``) and its one no-decay rule:
biases and normalization parameters are never decayed, embedding tables only where asked (BERT decays them, GPT does
not). Listed on a tiny BERT pretrainer and a tiny GPT, as each model's own compile helper builds its optimizer."""

import keras
import numpy as np
import pytest

from attnlayers.applications.bert.config import BertConfig
from attnlayers.applications.bert.pretrainer import NO_WEIGHT_DECAY as BERT_NO_WEIGHT_DECAY
from attnlayers.applications.bert.pretrainer import BertPretrainer, bert_optimizer
from attnlayers.applications.bert.training import budgeted_bert_optimizer, built_backbone, compile_budgeted
from attnlayers.applications.core import BudgetedLearningRate
from attnlayers.applications.core.training.optimizers import NO_WEIGHT_DECAY, decoupled_adamw, no_weight_decay
from attnlayers.applications.gpt.model import GPT, GPTConfig
from attnlayers.applications.gpt.runs import TrainingSettings, compile_for_training

L = 16


def _decay(model):
    """The last parts of the names of the trainable variables that the model's optimizer decays, and those it
    does not."""
    decayed = {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables if model.optimizer._use_weight_decay(v)}
    kept = {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables if not model.optimizer._use_weight_decay(v)}
    return decayed, kept


def _bert():
    config = BertConfig(vocabulary_size=50, max_sequence_length=L, num_layers=2, num_heads=2, hidden_dim=32,
                        intermediate_dim=64, dropout=0.0)
    return BertPretrainer(built_backbone(config))


def _bert_inputs():
    return {"token_ids": np.ones((1, L), "int32"), "segment_ids": np.zeros((1, L), "int32"),
            "padding_mask": np.ones((1, L), bool), "mask_positions": np.array([[1, 2]], "int32")}


def _gpt():
    config = GPTConfig(vocabulary_size=64, max_sequence_length=L, num_layers=2, num_heads=2, hidden_dim=32,
                       intermediate_dim=128, dropout=0.0, end_token_id=63, pad_token_id=63)
    model = GPT(config)
    compile_for_training(model, TrainingSettings(vocabulary_size=64, sequence_length=L, batch_size=8))
    model(np.ones((1, L), "int32"))
    return model


def test_one_rule_embeddings_are_the_explicit_difference():
    assert NO_WEIGHT_DECAY == no_weight_decay() == ("bias", "gamma", "beta", "scale", "embeddings")  # GPT's
    assert BERT_NO_WEIGHT_DECAY == no_weight_decay(decay_embeddings=True) == ("bias", "gamma", "beta", "scale")


def test_bert_decays_embeddings_and_kernels_not_layer_norms_or_biases():
    for compile_for in ("pretraining", "budgeted"):
        model = _bert()
        if compile_for == "pretraining":
            model.compile_for_pretraining(1e-3, warmup_steps=1, total_steps=4)
        else:
            compile_budgeted(model, model.compile_for_pretraining, 1e-3, 0.1, 0.01, None)
        model(_bert_inputs())
        decayed, kept = _decay(model)
        assert decayed == {"embeddings", "kernel"}, compile_for
        assert kept == {"gamma", "beta", "bias", "output_bias"}, compile_for


def test_gpt_decays_kernels_only():
    decayed, kept = _decay(_gpt())
    assert decayed == {"kernel"}
    assert kept == {"gamma", "beta", "bias", "embeddings"}


def test_bert_optimizers_are_the_shared_adamw_with_berts_settings():
    shared = decoupled_adamw(1e-3, 0.01, beta_2=0.999, epsilon=1e-6, decay_embeddings=True)
    budgeted = bert_optimizer(1e-3, weight_decay=0.01)  # a constant rate: what compile_budgeted compiles with
    scheduled = bert_optimizer(1e-3, warmup_steps=1, total_steps=4)
    def config(optimizer, leave_out=("name",)):  # the name is Keras' unique one (adam_w, adam_w_1, ...)
        return {k: v for k, v in optimizer.get_config().items() if k not in leave_out}

    assert isinstance(budgeted, keras.optimizers.AdamW) and config(budgeted) == config(shared)
    assert config(scheduled, ("name", "learning_rate")) == config(shared, ("name", "learning_rate"))
    assert budgeted.get_config()["learning_rate"] == pytest.approx(1e-3)  # a constant (float32) rate
    for optimizer in (budgeted, scheduled):
        assert sorted(optimizer._exclude_from_weight_decay_pattern.pattern.split("|")) == sorted(BERT_NO_WEIGHT_DECAY)


def test_compile_budgeted_compiles_once_with_a_constant_rate(monkeypatch):
    model = _bert()
    calls = []
    compile = model.compile
    monkeypatch.setattr(model, "compile", lambda **kwargs: calls.append(kwargs) or compile(**kwargs))
    schedule = compile_budgeted(model, model.compile_for_pretraining, 1e-3, 0.1, 0.02, None)
    assert len(calls) == 1 and isinstance(schedule, BudgetedLearningRate) and schedule.peak == 1e-3
    assert model.optimizer.get_config()["learning_rate"] == pytest.approx(1e-3)  # not a schedule: the callback sets it
    assert model.optimizer.weight_decay == pytest.approx(0.02) and set(model.loss) == {"mlm", "nsp"}


def test_budgeted_bert_optimizer_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="bert_optimizer"):
        optimizer = budgeted_bert_optimizer(1e-3, 0.01)
    expected = bert_optimizer(1e-3, weight_decay=0.01)
    assert {k: v for k, v in optimizer.get_config().items() if k != "name"} == {
        k: v for k, v in expected.get_config().items() if k != "name"}
