"""BERT's, RoBERTa's and ALBERT's pretraining objectives at the same budget: the recipe of
benchmarks/bert_pretraining.py (`attnlayers.applications.bert.pretraining`: its corpus, split, WordPiece vocabulary,
model size, AdamW and learning-rate schedule) with each sentence objective, the same number of steps of the same
batch size and sequence length, then the held-out masked LM of each model on the SAME held-out batches:

    bert     masked LM + next sentence prediction (weight 0.1, the recipe's)       sentence_objective="nsp"
    albert   masked LM + sentence-order prediction (weight 0.1, as BERT's)         sentence_objective="sop"
    roberta  masked LM alone, single segments of consecutive sentences             sentence_objective=None

Masks are dynamic for all three (the data's default); the architecture is the same (ALBERT's shared layers and
factorised embeddings are not part of this comparison). Two held-out sets, both from the held-out chapters with the
same masks for every model: "pairs" ([CLS] A [SEP] B [SEP], BERT's input, its NSP pairs) and "segments" ([CLS] S
[SEP], RoBERTa's input); each model's sentence accuracy is measured on its own objective's held-out pairs.

    python benchmarks/bert_objectives.py --steps 500 --seeds 0,1      # -> results/bert/objectives/*.json + table
    python benchmarks/bert_objectives.py --table
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import runs  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "bert" / "objectives"
OBJECTIVES = ("bert", "roberta", "albert")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objectives", default=",".join(OBJECTIVES),
                        help=f"comma-separated, of {', '.join(OBJECTIVES)} (default: all three)")
    parser.add_argument("--steps", type=int, default=1000, help="training steps of each run (default 1000)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds (split, vocabulary, data, init)")
    parser.add_argument("--config", default="tiny", help="BERT size (default: the recipe's, tiny)")
    parser.add_argument("--corpus", default="kjv", help="examples/pretrain_bert.py's --corpus (default kjv)")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where each run's JSON goes")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    args = parser.parse_args(argv)
    args.objectives = args.objectives.split(",")
    if not set(args.objectives) <= set(OBJECTIVES):
        parser.error(f"--objectives: choose from {', '.join(OBJECTIVES)}; received {args.objectives}")
    args.seeds = [int(seed) for seed in args.seeds.split(",")]
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def mlm_scores(model, dataset):
    """The masked LM's mean cross-entropy over real predictions and its accuracy, on ``dataset``'s batches."""
    import numpy as np
    from keras import ops

    nll = hits = count = 0.0
    for features, labels, weights in dataset:
        logits = ops.convert_to_numpy(model(features, training=False)["mlm"]).astype("float64")
        target, w = labels["mlm"].numpy(), weights["mlm"].numpy()
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll += float((-np.take_along_axis(log_probs, target[..., None], -1)[..., 0] * w).sum())
        hits += float(((logits.argmax(-1) == target) * w).sum())
        count += float(w.sum())
    return {"loss": nll / count, "accuracy": hits / count, "masked_tokens": int(count)}


def run_seed(args, seed, documents):
    """Every objective at one seed: one split and vocabulary, the same held-out batches for all."""
    import functools

    import keras
    import tensorflow as tf

    from attnlayers.applications.bert import BertConfig
    from attnlayers.applications.bert.objectives import RECIPES
    from attnlayers.applications.bert.pretrainer import BertPretrainer
    from attnlayers.applications.bert.pretraining import (
        PretrainingSettings,
        most_frequent_token,
        pretraining_tokenizer,
        token_counts,
    )
    from attnlayers.applications.bert.pretraining_data import pretraining_dataset
    from attnlayers.applications.bert.training import built_backbone, compile_budgeted
    from attnlayers.applications.core.inputs import corpora

    settings = PretrainingSettings(config=args.config, seed=seed)
    train_documents, held_documents = corpora.split_documents(documents, held_out=settings.held_out, seed=seed)
    out = args.results / f"vocab-seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = pretraining_tokenizer(train_documents, settings.vocabulary_size, path=str(out / "vocab.txt"))
    options = dict(sequence_length=settings.sequence_length, max_predictions=settings.max_predictions,
                   batch_size=settings.batch_size)
    held = {name: pretraining_dataset(held_documents, tokenizer, seed=seed + 1, shuffle=False,
                                      sentence_objective=objective, **options).cache()
            for name, objective in (("pairs", "nsp"), ("segments", None), ("sop", "sop"))}
    frequent = most_frequent_token(token_counts(train_documents, tokenizer), tokenizer)
    config = BertConfig.preset(settings.config, vocabulary_size=tokenizer.vocabulary_size,
                               max_sequence_length=settings.sequence_length)
    baseline = {held_name: mlm_scores(_Constant(frequent, tokenizer.vocabulary_size), held[held_name])["accuracy"]
                for held_name in ("pairs", "segments")}
    rows = []
    for name in args.objectives:
        objective = RECIPES[name]
        train = pretraining_dataset(train_documents, tokenizer, seed=seed, sentence_objective=objective,
                                    drop_remainder=True, **options)
        keras.utils.set_random_seed(seed)
        model = BertPretrainer(built_backbone(config), sentence_objective=objective)
        weighting = {} if objective is None else {"nsp_weight": settings.nsp_weight}
        schedule = compile_budgeted(model, functools.partial(model.compile_for_pretraining, **weighting),
                                    settings.learning_rate, settings.warmup_fraction, settings.weight_decay, None)
        begin = time.perf_counter()
        model.fit(train.repeat(), epochs=1, steps_per_epoch=args.steps, callbacks=[schedule], verbose=0)
        seconds = time.perf_counter() - begin
        row = {"objective": name, "sentence_objective": objective, "seed": seed, "steps": args.steps,
               "config": settings.config, "corpus": args.corpus, "batch_size": settings.batch_size,
               "sequence_length": settings.sequence_length, "learning_rate": settings.learning_rate,
               "nsp_weight": None if objective is None else settings.nsp_weight,
               "train_sequences_per_pass": int(train.reduce(0, lambda n, b: n + tf.shape(b[1]["mlm"])[0])),
               "train_seconds": round(seconds, 1), **runs.machine_record(),
               "held_out": {held_name: mlm_scores(model, held[held_name]) for held_name in ("pairs", "segments")}}
        if objective is not None:
            own = held["pairs" if objective == "nsp" else "sop"]
            row["held_out"][f"{objective}_accuracy"] = float(
                model.evaluate(own, return_dict=True, verbose=0)[f"{objective}_accuracy"])
        row["baseline_accuracy"] = baseline
        path = args.results / f"{name}-{settings.config}-seed{seed}-{args.steps}steps.json"
        path.write_text(json.dumps(row, indent=2) + "\n")
        print(json.dumps({k: row[k] for k in ("objective", "seed", "steps", "train_seconds", "held_out")}),
              flush=True)
        rows.append(row)
        keras.backend.clear_session()
    return rows


class _Constant:
    """The most-frequent-token baseline as a "model": the same logits at every masked position (its accuracy is
    the baseline; its loss means nothing)."""

    def __init__(self, token_id, vocabulary_size):
        self.token_id, self.vocabulary_size = token_id, vocabulary_size

    def __call__(self, features, training=False):
        import numpy as np

        positions = features["mask_positions"].numpy()
        logits = np.zeros(positions.shape + (self.vocabulary_size,), "float32")
        logits[..., self.token_id] = 1.0
        return {"mlm": logits}


def load_results(results_dir):
    return runs.load_rows(results_dir, "*steps.json", keep=lambda r: "held_out" in r and "objective" in r,
                          key=lambda r: (r["steps"], OBJECTIVES.index(r["objective"]), r["seed"]))


def print_table(rows):
    """Per objective and budget: the held-out MLM loss / accuracy on both held-out sets, each seed and their mean."""
    import statistics

    print("| objective | steps | seeds | held-out MLM loss (pairs) | MLM accuracy (pairs) | MLM loss (segments) | "
          "MLM accuracy (segments) | own sentence accuracy | train seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for row in rows:
        groups.setdefault((row["steps"], row["objective"]), []).append(row)
    for (steps, objective), group in groups.items():
        def cell(held, key):
            values = [r["held_out"][held][key] for r in group]
            return " / ".join(f"{v:.3f}" for v in values) + (f" (mean {statistics.mean(values):.3f})"
                                                             if len(values) > 1 else "")
        sentence = group[0]["sentence_objective"]
        own = (" / ".join(f"{r['held_out'][f'{sentence}_accuracy']:.3f}" for r in group) + f" ({sentence.upper()})"
               if sentence else "-")
        seconds = " / ".join(f"{r['train_seconds']:.0f}" for r in group)
        print(f"| {objective} | {steps} | {','.join(str(r['seed']) for r in group)} | {cell('pairs', 'loss')} | "
              f"{cell('pairs', 'accuracy')} | {cell('segments', 'loss')} | {cell('segments', 'accuracy')} | {own} | "
              f"{seconds} |")
    for seed in sorted({row["seed"] for row in rows}):
        base = next(row["baseline_accuracy"] for row in rows if row["seed"] == seed)
        print(f"\nmost frequent training token at every masked position, seed {seed}: accuracy {base['pairs']:.3f} "
              f"(pairs), {base['segments']:.3f} (segments)")


def main(argv=None):
    args = parse_args(argv)
    if not args.table:
        from attnlayers.applications.bert.pretraining import read_text_documents
        from attnlayers.applications.core.runs.cli import load_corpus

        args.results.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            run_seed(args, seed, load_corpus(args.corpus, read_text_documents, seed=seed))
    print_table(load_results(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
