"""BERT fine-tuning quality: pretrained against scratch with the same budget. One run of the recipe of
examples/finetune_bert.py (`attnlayers.applications.bert.finetuning.run_finetuning`) on a task, from the checkpoint
of benchmarks/bert_pretraining.py ("pretrained", or any Hugging Face BERT directory) or from a random
initialization of the same architecture and vocabulary ("scratch"), then the test score beside the task's
non-neural baseline:

    sentiment    tweets, 3 classes: macro-F1 (and accuracy)      bag-of-words logistic regression
    paraphrase   KJV / WEB verse pairs, same verse or not: accuracy   logistic regression on shared words
    pos          Brown corpus, universal tags: word accuracy       most frequent tag per word

    python benchmarks/bert_pretraining.py --minutes 20                      # the checkpoint, once
    python benchmarks/bert_finetune.py --task pos --init pretrained --minutes 4
    python benchmarks/bert_finetune.py --task pos --init scratch --minutes 4
    python benchmarks/bert_finetune.py --task sentiment --init pretrained --epochs 2   # the same steps for both
    python benchmarks/bert_finetune.py --table

An imported checkpoint takes the place of ours with --pretrained DIR (scratch is then its architecture and
vocabulary); --sequence-length fits the inputs to its vocabulary (the defaults were measured with the KJV's).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bert_pretraining  # noqa: E402
import runs  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "bert" / "finetune"
PRETRAINED = bert_pretraining.RESULTS / bert_pretraining.run_name("tiny", 0, 20, bert_pretraining.RECIPE_NSP_WEIGHT)


def parse_args(argv=None):
    from attnlayers.applications.bert.finetuning import FinetuningSettings
    from attnlayers.applications.bert.tasks import TASKS

    default = FinetuningSettings(TASKS[0])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=TASKS, help="which task")
    parser.add_argument("--init", default="pretrained",
                        help="pretrained (the checkpoint --pretrained), scratch (its architecture and vocabulary, "
                             "random weights) or a Hugging Face BERT directory (default pretrained)")
    parser.add_argument("--pretrained", type=pathlib.Path, default=PRETRAINED,
                        help=f"the checkpoint of benchmarks/bert_pretraining.py (default {PRETRAINED})")
    parser.add_argument("--name", default=None,
                        help="the checkpoint's name in the table and the result's file (default: its directory's)")
    parser.add_argument("--minutes", type=float, default=4.0, help="wall-clock training budget (default 4)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="train exactly this many epochs instead, without a time budget: both sides of a pair "
                             "then take the same steps however the machine shares its cores")
    parser.add_argument("--seed", type=int, default=0, help="split, shuffling and initialization seed")
    parser.add_argument("--batch-size", type=int, default=default.batch_size)
    parser.add_argument("--learning-rate", type=float, default=default.learning_rate)
    parser.add_argument("--sequence-length", type=int, default=None,
                        help="pieces per input (default: the recipe's, measured with the KJV vocabulary)")
    parser.add_argument("--validation-examples", type=int, default=None,
                        help="N validation examples drawn at random pick the best weights (default: all)")
    parser.add_argument("--test-examples", type=int, default=None,
                        help="N test examples drawn at random score the model and the baseline (default: all)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    args = parser.parse_args(argv)
    if not args.table and args.task is None:
        parser.error("--task is required (or --table)")
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be at least 1")
    return args


def run(args):
    import keras
    from attnlayers.applications.bert.finetuning import FinetuningSettings, run_finetuning

    keras.utils.set_random_seed(args.seed)
    init = str(args.pretrained) if args.init == "pretrained" else args.init
    label = args.init if args.init in ("pretrained", "scratch") else "pretrained"
    checkpoint = args.name or pathlib.Path(args.pretrained if args.init in ("pretrained", "scratch") else args.init).name
    minutes = None if args.epochs else args.minutes
    budget = f"{args.epochs}ep" if args.epochs else f"{args.minutes:g}min"
    settings = FinetuningSettings(args.task, init=init, architecture=str(args.pretrained), minutes=minutes,
                                  epochs=args.epochs,
                                  batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed,
                                  sequence_length=args.sequence_length,
                                  validation_examples=args.validation_examples, test_examples=args.test_examples)
    record = {"init": label, "checkpoint": checkpoint, **runs.machine_record()}
    return run_finetuning(settings, args.results, verbose=2, record=record, tensorboard=False, backup=False,
                          results_file=f"{args.task}-{checkpoint}-{label}-seed{args.seed}-{budget}.json")


def load_results(results_dir):
    order = {"sentiment": 0, "paraphrase": 1, "pos": 2}
    return runs.load_rows(results_dir, "*.json", keep=lambda r: "test" in r and "baseline" in r,
                          key=lambda r: (order.get(r["task"], 3), r.get("checkpoint", ""), r["minutes"] or 0,
                                         r["seed"], r["init"]))


def main(argv=None):
    from attnlayers.applications.bert.tables import print_table

    return runs.run_or_table(parse_args(argv), run, load_results, print_table)


if __name__ == "__main__":
    sys.exit(main())
