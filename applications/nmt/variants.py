"""The training variants of the translation models, defined once: examples/train_nmt.py (``--variant``) and
benchmarks/nmt_quality.py build their models from here.

A variant (:class:`Variant`) is a model configuration, its optimizer settings and the rule that chooses the
weights kept at the end (:class:`~attnlayers.applications.core.BestWeights`). Each model's default is its best
measured variant on German-English (benchmarks/README.md has the table):

- the RNN models (seq2seq, bahdanau, luong, local): "base" (embeddings 256, 512 units, dropout 0.3, Adam 1e-3,
  the epoch of lowest validation loss);
- the Transformer: "budgeted" (pre-LN, 2 + 2 layers, d_model 256, d_ff 512, dropout 0.1, label smoothing 0.1,
  a learning rate that warms up over the first tenth of the run's budget to 1.6e-3 and decays linearly to 0
  when the budget ends, :class:`~attnlayers.applications.core.BudgetedLearningRate`; the epoch of lowest
  validation loss). "lowres" is the earlier default (dropout 0.3, warm-up over 400 steps then inverse square
  root decay, the mean of the 3 epochs of best validation accuracy); "small" is lowres with dropout 0.1 and the
  best epoch; "base" is the paper's post-LN layout (3 + 3 layers, d_ff 1024). How each compares:
  benchmarks/README.md, "NMT quality".

"tiny" variants are for smoke tests and the synthetic task.

    model, callbacks = build_recipe("transformer", vocabulary_size, vocabulary_size, max_length=48,
                                    shared_embeddings=True, minutes=20)   # compiled; pass callbacks to fit
"""

from __future__ import annotations

import dataclasses

from attnlayers.validation import one_of

from ..core.training.callbacks import BestWeights, BudgetedLearningRate
from ..core.training.schedules import TransformerSchedule
from .model import MODELS, TransformerTranslator, build_model

__all__ = ["DEFAULT_VARIANTS", "RNN_MODELS", "RNN_VARIANTS", "TRANSFORMER_VARIANTS", "Variant", "build_recipe",
           "get_variant", "variants"]

RNN_MODELS = tuple(m for m in MODELS if m != "transformer")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One training variant.

    Attributes:
        name: its name (the ``--variant`` of the scripts).
        description: one line for ``--help``.
        model: the model constructor's arguments (sizes, dropout, layout).
        optimizer: "learning_rate" (Adam's, RNNs); or "warmup_steps" and "scale" (the Transformer's
            :class:`~attnlayers.applications.core.TransformerSchedule`); or "peak" and "warmup_fraction" (a
            :class:`~attnlayers.applications.core.BudgetedLearningRate` over the run's budget); and
            "label_smoothing".
        selection: :class:`~attnlayers.applications.core.BestWeights` arguments: "monitor", "average".
    """

    name: str
    description: str
    model: dict
    optimizer: dict
    selection: dict = dataclasses.field(default_factory=lambda: {"monitor": "val_loss", "average": 1})


_SMALL = dict(num_layers=2, d_model=256, num_heads=4, intermediate_dim=512, normalize_first=True)
_SMALL_OPTIMIZER = dict(warmup_steps=400, scale=0.5, label_smoothing=0.1)  # peak (256 * 400)^-0.5 / 2 = 1.6e-3
_BEST_3_BY_ACCURACY = {"monitor": "val_accuracy", "average": 3}

TRANSFORMER_VARIANTS = {
    "budgeted": Variant(
        "budgeted", "pre-LN 2+2 layers, d 256, d_ff 512, dropout 0.1, warm-up over the first tenth of the budget "
        "to 1.6e-3, then linear decay to 0 when it ends; best epoch by val loss",
        {**_SMALL, "dropout": 0.1}, dict(peak=1.6e-3, warmup_fraction=0.1, label_smoothing=0.1)),
    "lowres": Variant(
        "lowres", "pre-LN 2+2 layers, d 256, d_ff 512, dropout 0.3, mean of the 3 best epochs by val accuracy",
        {**_SMALL, "dropout": 0.3}, _SMALL_OPTIMIZER, _BEST_3_BY_ACCURACY),
    "small": Variant(
        "small", "pre-LN 2+2 layers, d 256, d_ff 512, dropout 0.1, best epoch by val loss",
        {**_SMALL, "dropout": 0.1}, _SMALL_OPTIMIZER),
    "small-avg": Variant(
        "small-avg", "small with the mean of the 3 best epochs by val accuracy",
        {**_SMALL, "dropout": 0.1}, _SMALL_OPTIMIZER, _BEST_3_BY_ACCURACY),
    "base": Variant(
        "base", "the paper's post-LN layout, 3+3 layers, d 256, d_ff 1024, dropout 0.2",
        dict(num_layers=3, d_model=256, num_heads=4, intermediate_dim=1024, normalize_first=False, dropout=0.2),
        dict(warmup_steps=1000, scale=1.0, label_smoothing=0.1)),
    "tiny": Variant(
        "tiny", "1+1 layers, d 64, d_ff 128, for smoke runs",
        dict(num_layers=1, d_model=64, num_heads=4, intermediate_dim=128, normalize_first=True, dropout=0.1),
        dict(warmup_steps=200, scale=1.0, label_smoothing=0.1)),
}

RNN_VARIANTS = {
    "base": Variant("base", "embeddings 256, 512 units (BiGRU 2x256 encoder), dropout 0.3, Adam 1e-3",
                    dict(embedding_dim=256, units=512, dropout=0.3), dict(learning_rate=1e-3)),
    "tiny": Variant("tiny", "embeddings 64, 128 units, dropout 0.1, for smoke runs",
                    dict(embedding_dim=64, units=128, dropout=0.1), dict(learning_rate=1e-3)),
}

DEFAULT_VARIANTS = {**{name: "base" for name in RNN_MODELS}, "transformer": "budgeted"}


def variants(model_name):
    """The variants of ``model_name`` (one of :data:`~attnlayers.applications.nmt.model.MODELS`), by name."""
    one_of(model_name, "model_name", MODELS)
    return TRANSFORMER_VARIANTS if model_name == "transformer" else RNN_VARIANTS


def get_variant(model_name, variant=None):
    """The :class:`Variant` named ``variant`` of ``model_name`` (None: the model's default, its best).

    Args:
        model_name: a name of :data:`MODELS`.
        variant: the variant's name; None: the model's default.
    """
    table = variants(model_name)
    name = DEFAULT_VARIANTS[model_name] if variant is None else variant
    if name not in table:
        raise ValueError(f"Unknown variant {name!r} for model {model_name!r}; expected one of {sorted(table)}.")
    return table[name]


def build_recipe(model_name, source_vocabulary_size, target_vocabulary_size, variant=None, *, max_length=64,
                 shared_embeddings=False, learning_rate=None, minutes=None, **overrides):
    """Builds and compiles ``model_name`` with a variant.

    Args:
        model_name: "seq2seq", "bahdanau", "luong", "local" or "transformer".
        source_vocabulary_size, target_vocabulary_size: V_s, V_t.
        variant: a variant name of :func:`variants` (None: the model's default, its best measured one).
        max_length: the Transformer's longest sequence (positions, caches).
        shared_embeddings: the Transformer ties source, target and output embeddings (one joint vocabulary).
        learning_rate: replaces the variant's learning rate (a budgeted variant's peak; the Transformer's warm-up
            schedule included).
        minutes: the run's wall-clock budget, for a budgeted variant's learning rate (None: it spans ``fit``'s
            epochs).
        **overrides: more model constructor arguments (they win over the variant's).

    Returns:
        ``(model, callbacks)``: the compiled model and the variant's callbacks to pass to ``fit``: a fresh
        :class:`~attnlayers.applications.core.BestWeights` with its selection rule, preceded by a
        :class:`~attnlayers.applications.core.BudgetedLearningRate` in a budgeted variant.
    """
    chosen = get_variant(model_name, variant)
    optimizer = dict(chosen.optimizer)
    config = {**chosen.model, **overrides}
    callbacks = [BestWeights(**chosen.selection)]
    if "peak" in optimizer:  # the learning rate is the callback's, set before every batch
        peak = learning_rate or optimizer["peak"]
        seconds = None if minutes is None else minutes * 60.0
        callbacks.insert(0, BudgetedLearningRate(peak, optimizer["warmup_fraction"], seconds=seconds))
        learning_rate = peak
    if model_name == "transformer":
        model = TransformerTranslator(source_vocabulary_size, target_vocabulary_size, max_length=max_length,
                                      shared_embeddings=shared_embeddings, name="transformer", **config)
        if learning_rate is None:
            learning_rate = TransformerSchedule(model.d_model, optimizer["warmup_steps"], optimizer["scale"])
        model.compile_for_translation(learning_rate=learning_rate, label_smoothing=optimizer["label_smoothing"])
    else:
        model = build_model(model_name, source_vocabulary_size, target_vocabulary_size, **config)
        model.compile_for_translation(learning_rate or optimizer["learning_rate"],
                                      label_smoothing=optimizer.get("label_smoothing", 0.0))
    return model, callbacks
