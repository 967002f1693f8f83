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

Sub-packages, by concern (each module imported on first use):

- ``generative``: the generation contract (GenerativeModel, Seq2SeqGenerator, check_token_ids).
- ``runs``: ``recipe`` (run_recipe; backend-agnostic, TensorFlow imported on use), ``runtime`` (the strategy and
  the precision, JAX's runtime included), ``replicas`` (batch sizes over replicas, the chief and the workers'
  folders, static shapes), ``keras_fixes`` (the replacements of Keras' trainer internals under several replicas),
  ``cli`` (the scripts' shared flags, ``UsageError``, ``run_script``), ``scheduled_sampling_flags``, ``launch``
  (local multi-worker groups).
- ``training``: ``callbacks`` (BudgetedLearningRate among them), ``backup`` (``BackupAndRestore``: atomic backups,
  an exact mid-epoch resume), ``schedules``, ``optimizers`` (the one AdamW), ``losses``, ``metrics``.
- ``evaluation``: ``bleu``, ``exposure_bias``.
- ``inputs``: ``corpora`` (the offline corpus readers and their document splits), ``splits`` (seeded splits),
  ``data_order`` (data in an order that is a function of (seed, epoch): what a resume needs), ``scene_images``
  (the generated scenes), ``files`` (``read_lines`` for the readers, atomic writes), ``token_lookup``
  (``TokenLookup``, the token <-> id plumbing of the in-graph tokenizers; TensorFlow).
- ``tokenizers``: ``byte_bpe`` (byte-level BPE in TensorFlow ops: GPT-2's pre-tokenizer, byte symbols and
  vocab.json / merges.txt, keras-hub's merges; GPT-2's and RoBERTa's tokenizers run it; TensorFlow).
- ``formats``: ``safetensors`` (NumPy reader / writer), ``hf_config`` (Hugging Face config.json keys to ours),
  ``weights`` (copies by path; the keras-hub copier), ``export`` (``export_generator``; TensorFlow).

A module's former name stays an attribute (``core.runtime`` is ``core.runs.runtime``, ``core.distribution`` is
``core.runs.replicas``, ``core.scenes`` is ``core.inputs.scene_images``, ``core.generation`` is
``core.generative``: :data:`MOVED`). Nothing here knows a particular vocabulary: special token ids are model
attributes and tokenizers are passed in.
"""

from .evaluation.bleu import corpus_bleu
from .generative import GenerativeModel, Seq2SeqGenerator, check_token_ids
from .lazy import lazy_attributes
from .runs.cli import add_runtime_arguments, runtime_from_args
from .runs.recipe import describe_training, run_recipe, saved_model_export, training_summary
from .runs.replicas import is_chief, static_shapes, worker_directory
from .runs.runtime import PRECISIONS, STRATEGIES, describe_runtime, make_strategy, set_precision, setup_runtime
from .training.backup import BackupAndRestore
from .training.callbacks import (
    BestWeights,
    BudgetedLearningRate,
    ProgressLog,
    StepCounter,
    TimeBudget,
    standard_callbacks,
)
from .training.losses import MaskedCrossEntropy
from .training.metrics import MaskedAccuracy
from .training.schedules import TransformerSchedule, WarmupCosineDecay, WarmupLinearDecay

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

# The modules' former names (before the sub-packages): core.runtime, core.export, ... are still those modules.
MOVED = {
    "backup": "training.backup", "callbacks": "training.callbacks", "schedules": "training.schedules",
    "optimizers": "training.optimizers", "losses": "training.losses", "metrics": "training.metrics",
    "bleu": "evaluation.bleu", "exposure_bias": "evaluation.exposure_bias",
    "recipe": "runs.recipe", "runtime": "runs.runtime", "distribution": "runs.replicas",
    "keras_fixes": "runs.keras_fixes", "cli": "runs.cli", "launch": "runs.launch",
    "scheduled_sampling": "runs.scheduled_sampling_flags",
    "corpora": "inputs.corpora", "splits": "inputs.splits", "data_order": "inputs.data_order",
    "scenes": "inputs.scene_images", "files": "inputs.files", "token_lookup": "inputs.token_lookup",
    "safetensors": "formats.safetensors", "hf_config": "formats.hf_config", "weights": "formats.weights",
    "export": "formats.export", "generation": "generative",
}

# Each module of the package is an attribute too (core.runs, core.generative, ...), imported on first use, and so
# is each former name (core/lazy.py).
__getattr__ = lazy_attributes(__name__, moved=MOVED)
