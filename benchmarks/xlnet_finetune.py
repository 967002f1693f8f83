"""Tiny XLNet against tiny BERT as the starting point of fine-tuning (issue 47): the three tasks of
benchmarks/bert_finetune.py (tweets sentiment, KJV / WEB paraphrase, Brown POS), the same data, the same WordPiece
tokens, the same pretraining steps and the same fine-tuning steps, two seeds, and each model from scratch too, so
that the pretraining gain shows.

    1. BERT tiny: examples/pretrain_bert.py's recipe (run_pretraining, masked LM + 0.1 NSP) on the KJV for
       --bert-epochs epochs of 32 pairs of 128 pieces: S steps; its vocab.txt is the vocabulary of both models.
    2. XLNet tiny (2 layers, d 128, 2 heads: BERT tiny's sizes): examples/pretrain_xlnet.py's recipe (permutation
       LM, K = 6) on the same KJV split and vocabulary, for the same S steps of 32 inputs of 128 pieces.
    3. Fine-tuning (run_finetuning, the recipe of examples/finetune_bert.py, XLNet through its ModelFamily hook):
       every (task, model, init, seed) on the same --train-examples training examples (drawn at the seed) for
       --finetune-epochs epochs, the same --validation-examples picking the best epoch and the same
       --test-examples scoring it beside the task's non-neural baseline (trained on the same examples).

XLNet's inputs are BERT's pieces in XLNet's layout (A [SEP] B [SEP] [CLS], segment ids 0 / 1 / 2; the classifier
reads the last real token), cut where BERT's are cut.

    python benchmarks/xlnet_finetune.py --bert-epochs 2 --train-examples 2048 --finetune-epochs 2
    python benchmarks/xlnet_finetune.py --bert-minutes 2 --sequence-length 64 --train-examples 512   # a loaded CPU
    python benchmarks/xlnet_finetune.py --table

Every run writes its JSON under --results (pretraining/{bert,xlnet}/ with the checkpoints, finetune/*.json) and
a finished run is not run again, so the same command resumes after an interruption.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import runs  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "xlnet"
TASKS = ("sentiment", "paraphrase", "pos")
MODELS = ("bert", "xlnet")
INITS = ("pretrained", "scratch")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bert-epochs", type=int, default=2,
                        help="BERT's pretraining epochs over the KJV; XLNet then takes the same steps (default 2)")
    parser.add_argument("--bert-minutes", type=float, default=None,
                        help="BERT's pretraining ends after this many minutes instead (XLNet still takes BERT's steps)")
    parser.add_argument("--sequence-length", type=int, default=None,
                        help="pieces per input, pretraining and fine-tuning alike (default: the recipes', 128 for "
                             "pretraining, 96 / 128 / 128 for the tasks)")
    parser.add_argument("--train-examples", type=int, default=2048,
                        help="training examples of every fine-tuning run, drawn at its seed (default 2048)")
    parser.add_argument("--finetune-epochs", type=int, default=2, help="fine-tuning epochs (default 2)")
    parser.add_argument("--validation-examples", type=int, default=512,
                        help="validation examples picking the best epoch (default 512)")
    parser.add_argument("--test-examples", type=int, default=2000, help="test examples scored (default 2000)")
    parser.add_argument("--corpus", default="kjv",
                        help="the pretraining corpus, as examples/pretrain_bert.py's --corpus (default kjv)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds (default 0 1)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of the results so far and exit")
    args = parser.parse_args(argv)
    if args.bert_minutes is not None and not args.bert_minutes > 0:
        parser.error("--bert-minutes must be a positive number")
    if args.sequence_length is not None and args.sequence_length < 8:
        parser.error("--sequence-length must be at least 8")
    for flag in ("bert_epochs", "train_examples", "finetune_epochs", "validation_examples", "test_examples"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


# ---- XLNet as a fine-tuning ModelFamily ---------------------------------------------------------------------------

def xlnet_layout(features, cls_token_id, *per_token):
    """BERT's packed rows ([CLS] A [SEP] B [SEP] pad) in XLNet's layout (A [SEP] B [SEP] [CLS] pad): each row's
    real tokens move one place left and [CLS] takes the last real place, with segment id 2; ``per_token`` arrays
    (labels, word ids) move with the tokens and get (array, fill) 's fill at [CLS]. Returns the new features and
    arrays."""
    import numpy as np

    ids, segments, real = features["token_ids"].copy(), features["segment_ids"].copy(), features["padding_mask"]
    others = [(array.copy(), fill) for array, fill in per_token]
    for row, n in enumerate(real.sum(axis=1)):
        ids[row, :n - 1], ids[row, n - 1] = ids[row, 1:n], cls_token_id
        segments[row, :n - 1], segments[row, n - 1] = segments[row, 1:n], 2
        for array, fill in others:
            array[row, :n - 1], array[row, n - 1] = array[row, 1:n], fill
    out = {"token_ids": ids, "segment_ids": segments, "padding_mask": np.asarray(real).copy()}
    return (out, *[array for array, _ in others])


def xlnet_family():
    """XLNet's ModelFamily: a Hugging Face XLNet directory with a WordPiece vocab.txt (examples/pretrain_xlnet.py's
    output) or its architecture from scratch, BERT's encodings in XLNet's layout, XLNetClassifier and
    XLNetTokenClassifier."""
    import numpy as np

    from attnlayers.applications.bert import finetuning
    from attnlayers.applications.bert.tokenizer import BertTokenizer
    from attnlayers.applications.xlnet import XLNetBackbone, XLNetClassifier, XLNetTokenClassifier, load_hf_checkpoint
    from attnlayers.applications.xlnet.checkpoint import config_from_hf

    def load_initialization(init, architecture, strategy, sequence_length=None):
        directory = architecture if init == "scratch" else init
        tokenizer = BertTokenizer.from_directory(directory)
        with strategy.scope():
            if init == "scratch":
                path = os.path.join(directory, "config.json")
                with open(path, encoding="utf-8") as f:
                    backbone = XLNetBackbone(config_from_hf(json.load(f), source=path))
                backbone({"token_ids": np.zeros((1, 2), "int32")})
            else:
                backbone = load_hf_checkpoint(directory)[0]
        if backbone.config.vocabulary_size != tokenizer.vocabulary_size:
            raise ValueError(f"{directory}: vocab.txt has {tokenizer.vocabulary_size} tokens but config.json says "
                             f"vocab_size {backbone.config.vocabulary_size}.")
        return backbone, tokenizer

    def encode_texts(examples, tokenizer, sequence_length):
        features, labels, cut = finetuning.encode_texts(examples, tokenizer, sequence_length)
        return xlnet_layout(features, tokenizer.cls_token_id)[0], labels, cut

    def encode_tagged(sentences, tokenizer, sequence_length, tags):
        features, labels, word_ids, cut = finetuning.encode_tagged(sentences, tokenizer, sequence_length, tags)
        features, labels, word_ids = xlnet_layout(features, tokenizer.cls_token_id, (labels, -100), (word_ids, -1))
        return features, labels, word_ids, cut

    return finetuning.ModelFamily("xlnet", load_initialization, encode_texts, encode_tagged,
                                  lambda backbone, n: XLNetClassifier(backbone, num_classes=n),
                                  lambda backbone, n: XLNetTokenClassifier(backbone, num_tags=n))


# ---- the runs -----------------------------------------------------------------------------------------------------

def _done(path):
    return path.is_file() and "results_path" in json.loads(path.read_text())


def pretrain(args):
    """Pretrains BERT (its epochs) then XLNet (BERT's steps) once; returns their checkpoint directories."""
    import keras

    from attnlayers.applications.bert.pretraining import PretrainingSettings, read_text_documents
    from attnlayers.applications.bert.pretraining import run_pretraining as run_bert
    from attnlayers.applications.bert.tokenizer import BertTokenizer
    from attnlayers.applications.core.runs.cli import load_corpus
    from attnlayers.applications.xlnet.pretraining import XLNetPretrainingSettings
    from attnlayers.applications.xlnet.pretraining import run_pretraining as run_xlnet

    bert_dir, xlnet_dir = args.results / "pretraining" / "bert", args.results / "pretraining" / "xlnet"
    documents = load_corpus(args.corpus, read_text_documents, seed=0)
    if not _done(bert_dir / "results.json"):
        keras.utils.set_random_seed(0)
        length = {} if args.sequence_length is None else {"sequence_length": args.sequence_length}
        budget = {"epochs": args.bert_epochs} if args.bert_minutes is None else {"minutes": args.bert_minutes}
        run_bert(PretrainingSettings(seed=0, **budget, **length), bert_dir, documents=documents, verbose=2,
                 corpus=args.corpus,
                 record=runs.machine_record(), tensorboard=False, backup=False)
        keras.backend.clear_session()
    steps = json.loads((bert_dir / "results.json").read_text())["training"]["steps"]
    if not _done(xlnet_dir / "results.json"):
        keras.utils.set_random_seed(0)
        vocabulary = BertTokenizer.from_directory(str(bert_dir))  # BERT's WordPiece: the same tokens
        length = {} if args.sequence_length is None else {"sequence_length": args.sequence_length}
        run_xlnet(XLNetPretrainingSettings(steps=steps, seed=0, **length), xlnet_dir, documents=documents,
                  make_tokenizer=lambda train_documents, path: vocabulary, verbose=2, corpus=args.corpus,
                  record=runs.machine_record(), tensorboard=False, backup=False)
        keras.backend.clear_session()
    return {"bert": bert_dir, "xlnet": xlnet_dir}


def finetune(args, checkpoints):
    import dataclasses

    import keras

    from attnlayers.applications.bert.finetuning import FinetuningSettings, run_finetuning, sample
    from attnlayers.applications.bert.tasks import load_task

    out = args.results / "finetune"
    families = {"bert": None, "xlnet": xlnet_family()}
    for seed in args.seeds:  # every task at the first seed first
        for task in args.tasks:
            data = load_task(task, seed)
            data = dataclasses.replace(data, train=sample(data.train, args.train_examples, seed))
            for model in MODELS:
                for init in INITS:
                    name = f"{task}-{model}-{init}-seed{seed}.json"
                    if _done(out / name):
                        continue
                    keras.utils.set_random_seed(seed)
                    directory = str(checkpoints[model])
                    settings = FinetuningSettings(task, init=directory if init == "pretrained" else "scratch",
                                                  architecture=directory, epochs=args.finetune_epochs, seed=seed,
                                                  sequence_length=args.sequence_length,
                                                  validation_examples=args.validation_examples,
                                                  test_examples=args.test_examples)
                    record = {"model": model, "checkpoint": model, "train_examples": args.train_examples,
                              **runs.machine_record()}
                    run_finetuning(settings, out, verbose=2, record=record, tensorboard=False, backup=False,
                                   data=data, family=families[model], results_file=name)
                    keras.backend.clear_session()


def load_results(results_dir):
    rows = runs.load_rows(pathlib.Path(results_dir) / "finetune", "*.json",
                          keep=lambda r: "test" in r and "model" in r, key=lambda r: r["seed"])
    pretraining = {}
    for model in MODELS:
        path = pathlib.Path(results_dir) / "pretraining" / model / "results.json"
        if path.is_file():
            pretraining[model] = json.loads(path.read_text())
    return {"finetune": rows, "pretraining": pretraining}


def print_table(results):
    """The pretraining runs, then a row per (task, seed): each model and init's test score, and the baseline."""
    for model, result in results["pretraining"].items():
        training, held = result["training"], result["held_out"]
        score = (f"MLM accuracy {held['mlm_accuracy']:.3f}, NSP {held['nsp_accuracy']:.3f}" if model == "bert" else
                 f"permutation-LM accuracy {held['accuracy']:.3f}, perplexity {held['perplexity']:.1f}")
        print(f"pretraining {model}: {training['steps']} steps in {training['seconds']:.0f} s; held out: {score}")
    columns = [(model, init) for model in MODELS for init in INITS]
    print("\n| task | metric | seed | " + " | ".join(f"{m.upper() if m == 'bert' else 'XLNet'} {i}"
                                                  for m, i in columns) + " | baseline | steps |")
    print("|---|---|---|" + "---|" * len(columns) + "---|---|")
    cells, baselines, steps = {}, {}, {}
    for r in results["finetune"]:
        key = (r["task"], r["seed"])
        cells[key + (r["model"], r["init"])] = r["test"][r["metric"]]
        baselines[key] = (r["baseline"][r["metric"]], r["baseline"]["name"], r["metric"])
        steps[key] = r["training"]["steps"]
    for task in TASKS:
        seeds = sorted({seed for t, seed in baselines if t == task})
        for seed in seeds:
            value, name, metric = baselines[(task, seed)]
            row = [f"{cells[(task, seed, m, i)]:.3f}" if (task, seed, m, i) in cells else "-" for m, i in columns]
            print(f"| {task} | {'macro-F1' if metric == 'macro_f1' else 'accuracy'} | {seed} | " + " | ".join(row)
                  + f" | {value:.3f} ({name}) | {steps[(task, seed)]} |")


def main(argv=None):
    args = parse_args(argv)
    if not args.table:
        finetune(args, pretrain(args))
    print_table(load_results(args.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
