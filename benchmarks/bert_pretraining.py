"""BERT pretraining quality on the King James Bible (or --corpus): one run of the recipe of examples/pretrain_bert.py
(`attnlayers.applications.bert.pretraining.run_pretraining`, its default settings unless flags say otherwise) for a
wall-clock budget, then the held-out masked-LM and next-sentence accuracies beside their baselines (the most
frequent training token at every masked position; chance for NSP). The backbone is saved as a Hugging Face
checkpoint beside the result, for benchmarks/bert_finetune.py.

    python benchmarks/bert_pretraining.py --minutes 20                 # -> results/bert/pretraining/tiny-seed0-20min/
    python benchmarks/bert_pretraining.py --minutes 20 --config mini
    python benchmarks/bert_pretraining.py --minutes 20 --corpus kjv+tweets --seed 1   # -> kjv+tweets-tiny-seed1-...
    python benchmarks/bert_pretraining.py --table
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import runs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "bert" / "pretraining"
RECIPE_NSP_WEIGHT = 0.1  # PretrainingSettings().nsp_weight, without importing the library (checked by a test)


def run_name(config, seed, minutes, nsp_weight=1.0, corpus="kjv"):
    return (("" if corpus == "kjv" else corpus + "-") + f"{config}-seed{seed}-{minutes:g}min"
            + ("" if nsp_weight == 1.0 else f"-nsp{nsp_weight:g}"))


def parse_args(argv=None):
    from attnlayers.applications.bert import PRESETS
    from attnlayers.applications.bert.pretraining import PretrainingSettings

    default = PretrainingSettings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock training budget (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="split, pairs, masks and initialization seed")
    parser.add_argument("--config", choices=sorted(PRESETS), default=default.config,
                        help=f"BERT size (default: the recipe's, {default.config})")
    parser.add_argument("--batch-size", type=int, default=default.batch_size)
    parser.add_argument("--learning-rate", type=float, default=default.learning_rate)
    parser.add_argument("--nsp-weight", type=float, default=default.nsp_weight,
                        help=f"the loss is MLM + this x NSP (default: the recipe's, {default.nsp_weight:g})")
    parser.add_argument("--corpus", default="kjv",
                        help="kjv | tweets | text:PATH, or several joined by + (examples/pretrain_bert.py's --corpus; "
                             "tweets: the sentiment task's training tweets at --seed) (default kjv)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS,
                        help="where each run's folder (results.json + checkpoint) is written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    return parser.parse_args(argv)


def run(args):
    import keras
    from attnlayers.applications.bert.pretraining import PretrainingSettings, read_text_documents, run_pretraining
    from attnlayers.applications.core.runs.cli import load_corpus

    keras.utils.set_random_seed(args.seed)
    documents = load_corpus(args.corpus, read_text_documents, seed=args.seed)
    settings = PretrainingSettings(config=args.config, batch_size=args.batch_size, learning_rate=args.learning_rate,
                                   nsp_weight=args.nsp_weight,
                                   minutes=args.minutes, seed=args.seed)
    record = runs.machine_record()
    corpus = "+".join("text" if part.startswith("text:") else part for part in args.corpus.split("+"))
    name = run_name(args.config, args.seed, args.minutes, args.nsp_weight, corpus)
    return run_pretraining(settings, args.results / name, documents=documents, corpus=args.corpus, verbose=2,
                           record=record, tensorboard=False, backup=False)


def load_results(results_dir):
    return runs.load_rows(results_dir, "*/results.json", keep=lambda r: r.get("task") == "pretraining" and "held_out" in r,
                          key=lambda r: (r["config"], r["minutes"] or 0, r["seed"]))


def main(argv=None):
    from attnlayers.applications.bert.tables import print_table

    return runs.run_or_table(parse_args(argv), run, load_results, print_table)


if __name__ == "__main__":
    sys.exit(main())
