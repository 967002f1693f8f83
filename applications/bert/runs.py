"""The BERT runs of examples/pretrain_bert.py, examples/finetune_bert.py and the benchmarks bert_pretraining.py /
bert_finetune.py, by one name: this module re-exports them from the modules that hold them.

    from attnlayers.applications.bert.runs import (FinetuningSettings, PretrainingSettings, run_finetuning,
                                                   run_pretraining)

    result = run_pretraining(PretrainingSettings(minutes=20), "artifacts/bert/pretrained")
    result = run_finetuning(FinetuningSettings("pos", init="artifacts/bert/pretrained", minutes=4),
                            "artifacts/bert/finetune/pos", export_dir="artifacts/bert/finetune/pos/model")

Where each piece lives:

- :mod:`.pretraining`: PretrainingSettings, DEFAULT_PRETRAINED, run_pretraining (masked LM + next sentence
  prediction on the King James Bible, held-out accuracies beside their baselines, a curve picture, the backbone
  saved as a Hugging Face checkpoint), its corpus reader, tokenizer, baselines, plot and save_checkpoint.
- :mod:`.finetuning`: FinetuningSettings, check_initialization / load_initialization (a Hugging Face BERT
  directory or "scratch"), encode_texts / encode_tagged, sample, run_finetuning (test scores beside the task's
  baseline, a string-in SavedModel).
- :mod:`.tasks`: the fine-tuning tasks' data: TASKS, TASK_SEQUENCE_LENGTH, TaskData, load_task.
- :mod:`.training`: what both runs share: built_backbone, compile_budgeted (one compile with
  :func:`~attnlayers.applications.bert.bert_optimizer`, BERT's AdamW, at a learning rate set by the budget;
  budgeted_bert_optimizer is its deprecated former optimizer), the runs' callbacks.
- :mod:`.tables`: the benchmarks' Markdown tables (result_row, print_table).
- :mod:`.baselines`: the non-neural baselines (NumPy; scikit-learn is not installed here).
"""

from __future__ import annotations

from ..core.training.optimizers import add_optimizer_arguments  # the example scripts' flags (re-exported here)
from .finetuning import (
    FinetuningSettings,
    check_initialization,
    encode_tagged,
    encode_texts,
    load_initialization,
    run_finetuning,
)
from .pretraining import DEFAULT_PRETRAINED, PretrainingSettings, read_text_documents, run_pretraining
from .tables import print_table, result_row
from .tasks import TASK_SEQUENCE_LENGTH, TASKS, TaskData, load_task
from .training import budgeted_bert_optimizer, compile_budgeted

__all__ = [
    "DEFAULT_PRETRAINED",
    "TASKS",
    "TASK_SEQUENCE_LENGTH",
    "FinetuningSettings",
    "PretrainingSettings",
    "TaskData",
    "add_optimizer_arguments",
    "budgeted_bert_optimizer",
    "check_initialization",
    "compile_budgeted",
    "encode_tagged",
    "encode_texts",
    "load_initialization",
    "load_task",
    "print_table",
    "read_text_documents",
    "result_row",
    "run_finetuning",
    "run_pretraining",
]
