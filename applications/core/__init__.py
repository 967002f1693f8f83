"""What every application of attnlayers shares: the generation contract, masked losses and metrics,
learning-rate schedules, training callbacks, strategy + precision setup, corpus BLEU, and the
train -> evaluate -> pictures -> export recipe.

    from attnlayers.applications import core

    class Captioner(core.Seq2SeqGenerator):        # implement encode / initial_cache / next; get generate
        ...
    model.compile(optimizer, loss=core.MaskedCrossEntropy(0.1), metrics=[core.MaskedAccuracy()])
    strategy = core.runtime_from_args(args)          # --strategy / --precision from core.add_runtime_arguments
    core.run_recipe(model, train, validation=validation, callbacks=core.standard_callbacks(out, minutes=20),
                    evaluate=..., pictures=..., export=..., out_dir=out)

Modules: ``generation`` (GenerativeModel, Seq2SeqGenerator), ``losses``, ``metrics``, ``schedules``,
``callbacks`` (BudgetedLearningRate among them), ``backup`` (``BackupAndRestore``: atomic backups, an exact
mid-epoch resume), ``data_order`` (data in an order that is a function of (seed, epoch): what a resume needs), ``runtime`` (the strategy and the precision), ``keras_fixes`` (the three replacements of
Keras' trainer internals under several replicas), ``distribution`` (JAX's data parallelism, the chief and the
workers' folders, static shapes), ``bleu``, ``recipe`` (backend-agnostic or TensorFlow imported on use), ``files``
(``read_lines`` for the readers), ``cli`` (the scripts' shared flags, ``UsageError``, ``run_script``), and ``export`` (``export_generator``; imports TensorFlow, so it is not
imported here), ``safetensors`` (NumPy reader / writer), ``weights`` (``copy_weights_by_path``), ``hf_config``
(``hf_config_fields``: Hugging Face config.json keys to ours), ``token_lookup`` (``TokenLookup``, the token <-> id
plumbing of the in-graph tokenizers; TensorFlow, not imported here), and ``corpora`` (the offline corpus
readers and their document splits; imported on use). Nothing here knows a particular vocabulary:
special token ids are model attributes and tokenizers are passed in.
"""

from .backup import BackupAndRestore
from .bleu import corpus_bleu
from .callbacks import BestWeights, BudgetedLearningRate, ProgressLog, StepCounter, TimeBudget, standard_callbacks
from .generation import GenerativeModel, Seq2SeqGenerator, check_token_ids
from .lazy import lazy_attributes
from .losses import MaskedCrossEntropy
from .metrics import MaskedAccuracy
from .recipe import describe_training, run_recipe, saved_model_export, training_summary
from .cli import add_runtime_arguments, runtime_from_args
from .distribution import is_chief, static_shapes, worker_directory
from .runtime import PRECISIONS, STRATEGIES, describe_runtime, make_strategy, set_precision, setup_runtime
from .schedules import TransformerSchedule, WarmupCosineDecay, WarmupLinearDecay

__all__ = [
    "BackupAndRestore",
    "BestWeights",
    "BudgetedLearningRate",
    "GenerativeModel",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "PRECISIONS",
    "ProgressLog",
    "STRATEGIES",
    "Seq2SeqGenerator",
    "StepCounter",
    "TimeBudget",
    "TransformerSchedule",
    "WarmupCosineDecay",
    "WarmupLinearDecay",
    "add_runtime_arguments",
    "check_token_ids",
    "corpus_bleu",
    "describe_runtime",
    "is_chief",
    "describe_training",
    "make_strategy",
    "run_recipe",
    "runtime_from_args",
    "saved_model_export",
    "set_precision",
    "setup_runtime",
    "standard_callbacks",
    "training_summary",
    "static_shapes",
    "worker_directory",
]

# Each module of the package is an attribute too (core.export, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__)
