"""The NMT application's training names are the shared core's (their tests: tests/applications/core/), and its
variants are defined once (nmt.variants): each model's default is its best measured variant."""

import pytest

from attnlayers.applications import core, nmt
from attnlayers.applications.nmt import model as nmt_model
from attnlayers.applications.nmt import variants


def test_nmt_reexports_the_core_classes():
    assert nmt.BestWeights is core.BestWeights and nmt.TimeBudget is core.TimeBudget
    assert nmt.MaskedCrossEntropy is nmt_model.MaskedCrossEntropy is core.MaskedCrossEntropy
    assert nmt.MaskedAccuracy is core.MaskedAccuracy and nmt.TransformerSchedule is core.TransformerSchedule


def test_default_recipes_are_the_best_measured():
    assert variants.get_variant("transformer").name == "budgeted"
    budgeted = variants.TRANSFORMER_VARIANTS["budgeted"]
    assert budgeted.model["normalize_first"] and budgeted.model["num_layers"] == 2 and budgeted.model["dropout"] == 0.1
    assert budgeted.selection == {"monitor": "val_loss", "average": 1} and budgeted.optimizer["peak"] == 1.6e-3
    assert variants.TRANSFORMER_VARIANTS["lowres"].selection == {"monitor": "val_accuracy", "average": 3}
    assert all(variants.get_variant(name).name == "base" for name in variants.RNN_MODELS)
    with pytest.raises(ValueError, match="Unknown variant 'lowres' for model 'bahdanau'"):
        variants.get_variant("bahdanau", "lowres")
    with pytest.raises(ValueError, match="model_name"):
        variants.variants("gpt")


@pytest.mark.parametrize("name, variant", [("transformer", "lowres"), ("transformer", "budgeted"), ("luong", "tiny")])
def test_build_recipe_compiles_the_model_and_its_callbacks(name, variant):
    model, callbacks = variants.build_recipe(name, 40, 40, variant, max_length=12, shared_embeddings=True,
                                            minutes=2)
    recipe = variants.get_variant(name, variant)
    best = callbacks[-1]
    assert model.compiled and isinstance(best, core.BestWeights)
    assert (best.monitor, best.average) == (recipe.selection["monitor"], recipe.selection["average"])
    if variant == "budgeted":  # the callback owns the learning rate: peak 1.6e-3 over the 2-minute budget
        schedule = callbacks[0]
        assert isinstance(schedule, core.BudgetedLearningRate) and len(callbacks) == 2
        assert (schedule.peak, schedule.warmup_fraction, schedule.seconds) == (1.6e-3, 0.1, 120.0)
        assert float(model.optimizer.learning_rate) == pytest.approx(1.6e-3)
    elif name == "transformer":
        assert model.normalize_first and model.max_length == 12 and model.shared_embeddings
        warmup = core.TransformerSchedule(256, 400, scale=0.5)  # the recipe's warm-up, at the first step
        assert float(model.optimizer.learning_rate) == pytest.approx(float(warmup(0)))
        assert model.loss.label_smoothing == 0.1 and len(callbacks) == 1
    else:
        assert model.units == 128 and model.attention_type == "luong" and len(callbacks) == 1
