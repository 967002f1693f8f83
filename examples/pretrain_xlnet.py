"""Pretrain an XLNet (permutation language modelling with partial prediction, Yang et al. 2019) on the King James
Bible and save it as a Hugging Face checkpoint that XLNetClassifier / XLNetTokenClassifier fine-tune.

    python examples/pretrain_xlnet.py --steps 2000                     # tiny: 2 layers, d 128
    python examples/pretrain_xlnet.py --minutes 20 --strategy mirrored
    python examples/pretrain_xlnet.py --corpus text:my_corpus.txt --vocab artifacts/bert/pretrained/vocab.txt

Data: the corpora and flags of examples/pretrain_bert.py: --corpus kjv (a document per chapter, a sentence per
verse; apt-get install diatheke sword-text-kjv), text:PATH (one sentence a line, a blank line between documents),
tweets (the sentiment task's training tweets at --seed), or several joined by +. 5% of the documents are held out.

Tokens: XLNet's own SentencePiece is not built. The recipe uses the WordPiece vocabulary BERT's recipe trains on
the same training documents (or --vocab, e.g. a BERT checkpoint's vocab.txt), so that XLNet and BERT pretrained on
one corpus see the same tokens; its [SEP] / [CLS] play XLNet's <sep> / <cls>.

Each input is A <sep> B <sep> <cls> (two pieces of one document); every step draws a factorisation order per row
(<sep> and <cls> first, the rest uniform) and the model predicts the last 1/K of each order from the query stream
(attnlayers.applications.xlnet.pretraining). The run ends at --steps, --epochs or --minutes (the learning rate warms
up over the first tenth and decays to zero at that end), prints the held-out permutation-LM loss and accuracy
beside the training unigram's, writes OUT/results.json, and saves OUT as a Hugging Face XLNetLMHeadModel
checkpoint with vocab.txt. Training logs go to TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same
command again after an interruption and training resumes.
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
    from attnlayers.applications.core.training.optimizers import add_optimizer_arguments, check_optimizer_arguments
    from attnlayers.applications.xlnet import PRESETS
    from attnlayers.applications.xlnet.pretraining import DEFAULT_PRETRAINED, XLNetPretrainingSettings

    default = XLNetPretrainingSettings()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="kjv",
                        help="kjv | tweets | text:PATH, or several joined by + (default: kjv)")
    parser.add_argument("--vocab", default=None, metavar="PATH",
                        help="a WordPiece vocab.txt to use (default: train one on the training documents, as "
                             "examples/pretrain_bert.py does)")
    parser.add_argument("--vocab-size", type=int, default=default.vocabulary_size,
                        help=f"tokens of the trained vocabulary, special tokens included (default "
                             f"{default.vocabulary_size})")
    parser.add_argument("--config", choices=sorted(PRESETS, key=lambda name: PRESETS[name]), default=default.config,
                        help="XLNet size: " + ", ".join(f"{name} {n} layers d {d}" for name, (n, d, _) in PRESETS.items())
                             + f" (default {default.config})")
    parser.add_argument("--sequence-length", type=int, default=default.sequence_length,
                        help=f"pieces per A <sep> B <sep> <cls> input (default {default.sequence_length})")
    parser.add_argument("--K", "-K", dest="K", type=float, default=default.K,
                        help=f"partial prediction: the last 1/K of each factorisation order is predicted (default "
                             f"{default.K:g})")
    add_optimizer_arguments(parser, default, "inputs")
    parser.add_argument("--held-out", type=float, default=default.held_out,
                        help=f"share of the documents held out for evaluation (default {default.held_out:g})")
    add_budget_arguments(parser, 10, "training inputs")
    parser.add_argument("--steps", type=int, default=None,
                        help="train this many steps (instead of --epochs; --minutes may still stop sooner)")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="split, A | B cuts, shuffling, orders and initialization seed")
    parser.add_argument("--out", default=DEFAULT_PRETRAINED,
                        help=f"the run's folder and the checkpoint's (default {DEFAULT_PRETRAINED})")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    if args.vocab_size < 6:
        parser.error("--vocab-size must be at least 6 (the five special tokens and a piece)")
    check_budget_arguments(parser, args)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.steps is not None and args.epochs is not None:
        parser.error("give --steps or --epochs, not both")
    if args.sequence_length < 5:
        parser.error("--sequence-length must be at least 5 (A <sep> B <sep> <cls>)")
    if not args.K >= 1:
        parser.error("--K must be a number >= 1")
    if not 0 < args.held_out < 1:
        parser.error("--held-out must be between 0 and 1")
    check_optimizer_arguments(parser, args)
    return args


def settings_from_args(args):
    from attnlayers.applications.xlnet.pretraining import XLNetPretrainingSettings

    return XLNetPretrainingSettings(
        config=args.config, vocabulary_size=args.vocab_size, sequence_length=args.sequence_length, K=args.K,
        batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_fraction=args.warmup_fraction,
        weight_decay=args.weight_decay, held_out=args.held_out, minutes=args.minutes, steps=args.steps,
        epochs=args.epochs, backup_every=args.backup_every, seed=args.seed)


def wordpiece_tokenizer(vocabulary_size, vocabulary=None):
    """``make_tokenizer`` of the recipe: BERT's recipe's WordPiece tokenizer (trained on the training documents,
    lower-cased, or read from ``vocabulary``)."""
    from attnlayers.applications.bert.pretraining import pretraining_tokenizer

    return lambda train_documents, path: pretraining_tokenizer(train_documents, vocabulary_size, vocabulary, path)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    from attnlayers.applications.bert.pretraining import read_text_documents
    from attnlayers.applications.bert.tokenizer import read_vocabulary
    from attnlayers.applications.core.runs.replicas import worker_directory
    from attnlayers.applications.xlnet import pretraining

    if args.vocab is not None:
        try:
            read_vocabulary(args.vocab)
        except (OSError, ValueError) as error:
            raise UsageError(f"--vocab {args.vocab}: {usage_error(error)}") from None
    strategy = start_runtime(args)  # before any other TensorFlow op (multi-worker: first)
    documents = load_corpus(args.corpus, read_text_documents, seed=args.seed)
    out = worker_directory(args.out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    result = pretraining.run_pretraining(settings_from_args(args), out, documents=documents,
                                         make_tokenizer=wordpiece_tokenizer(args.vocab_size, args.vocab),
                                         strategy=strategy, verbose=args.verbose, corpus=args.corpus)
    if result["results_path"] is None:  # another worker of a multi-worker run: the chief reports and saves
        return 0
    print(f"results: {result['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
