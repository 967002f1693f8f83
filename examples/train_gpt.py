"""Train a GPT-2-style language model from scratch on the King James Bible (or a text of your own), report its
held-out perplexity beside a unigram baseline, and save it as a Hugging Face GPT-2 checkpoint.

    python examples/train_gpt.py --minutes 15                          # the recommended run: 2 CPU cores
    python examples/train_gpt.py --config small --epochs 3 --strategy mirrored --precision mixed_bfloat16
    python examples/train_gpt.py --corpus text:my_corpus.txt --vocab-size 8000 --minutes 60
    KERAS_BACKEND=jax python examples/train_gpt.py --config small --sequence-length 1024 --dropout 0.1 \
        --strategy data-parallel --precision mixed_bfloat16 --batch-size 16 --minutes 60   # GPUs (README)

Data: --corpus kjv (the King James Bible, a document per chapter and a line per verse, from the Debian packages
diatheke and sword-text-kjv: apt-get install diatheke sword-text-kjv), or text:PATH (a UTF-8 text file, a blank
line between documents). 5 percent of the documents are held out (--held-out). A byte-level BPE (GPT-2's) is
trained on the training documents (or read from --vocab DIR: vocab.json + merges.txt). The documents become one
stream, <|endoftext|> between them, cut into windows of --sequence-length + 1 tokens.

The model is a GPT of a named size (--config, default tiny: 2 layers, d 128, ~0.9M weights with a 4,096-token
vocabulary; on 2 CPU cores a training step of 16 x 128 tokens takes ~0.1-0.15 s, and a 10-minute run with its
held-out evaluation and backups made ~1,400 steps, 3 passes over the KJV: docs/results/gpt.md), GPT-2's initialization (the residual projections scaled by 1 / sqrt(2 n_layer)), trained with AdamW
(betas 0.9 / 0.95, weight decay on weight matrices only, gradients clipped to global norm 1) whose learning rate
warms up over the first --warmup share of the run and decays with a cosine to zero at its end (the --minutes
budget, else the last epoch). Each epoch ends with the held-out perplexity, and the weights of the epoch where it was
lowest are the ones kept when training ends (core.BestWeights): what is reported, drawn and saved below. With
--minutes, the progress lines say the step and the training time against the budget ("step 1,234, 1:05 of 2:00
budget").

At the end the script prints the kept model's held-out perplexity (token-weighted, exact) beside the unigram
baseline (training token frequencies on the same held-out tokens), a few sampled continuations of held-out prompts,
draws the perplexity per epoch (OUT/curves.png, the kept epoch marked), and saves the model in OUT/checkpoint
(config.json, model.safetensors, vocab.json, merges.txt: transformers.GPT2LMHeadModel.from_pretrained and
examples/generate.py load it). OUT is artifacts/gpt/CORPUS unless --out says otherwise: artifacts/gpt/kjv,
artifacts/gpt/tweets, or for text:PATH the file's stem (text:my_corpus.txt -> artifacts/gpt/my_corpus). --export DIR
also writes a SavedModel (TensorFlow backend only: under JAX, export OUT/checkpoint afterwards with
examples/generate.py --export). --position transformer_xl trains a Transformer-XL of the same size instead
(applications/gpt/transformer_xl.py: relative positions, a memory of --memory-length steps carried from batch to batch
over the stateful data order), reports its held-out perplexity also with memories of 0, 1x and 4x the segment, and
saves OUT/model.keras. Training logs go to TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same
command again after an interruption and training resumes (core.BackupAndRestore).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and the tokenizer's ops

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, add_budget_arguments, check_budget_arguments, load_corpus, run_script, start_runtime,
)

PROG = os.path.basename(__file__)


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.core.training.optimizers import add_optimizer_arguments, check_optimizer_arguments
    from attnlayers.applications.gpt import GPT_PRESETS
    from attnlayers.applications.gpt.runs import TrainingSettings, default_out

    default = TrainingSettings()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=list(GPT_PRESETS), default=default.config,
                        help="GPT size: " + ", ".join(f"{name} {n} layers d {d}" for name, (n, d, _) in
                                                      GPT_PRESETS.items()) + f" (default {default.config})")
    parser.add_argument("--corpus", default="kjv",
                        help="kjv | tweets | text:PATH, or several joined by + (kjv+tweets: their documents together; "
                             "tweets: the sentiment task's training tweets at --seed) (default: kjv)")
    parser.add_argument("--vocab", default=None, metavar="DIR",
                        help="a directory with vocab.json and merges.txt to use (default: train a byte-level BPE on "
                             "the training documents)")
    parser.add_argument("--vocab-size", type=int, default=default.vocabulary_size,
                        help=f"most tokens of the trained BPE (default {default.vocabulary_size})")
    parser.add_argument("--sequence-length", type=int, default=default.sequence_length,
                        help=f"tokens per window, the model's positions (default {default.sequence_length})")
    parser.add_argument("--position", choices=("learned", "transformer_xl"), default=default.position,
                        help="learned: GPT (default); transformer_xl: a Transformer-XL of the same size (relative "
                             "positions, a memory of the previous segments carried from batch to batch, the stateful "
                             "data order; evaluated also with memories of 0, 1x and 4x the segment; saved as "
                             "OUT/model.keras)")
    parser.add_argument("--memory-length", type=int, default=None, metavar="M",
                        help="--position transformer_xl: the training memory (default: --sequence-length)")
    add_optimizer_arguments(parser, default, "windows")
    parser.add_argument("--dropout", type=float, default=default.dropout,
                        help=f"dropout rate (default {default.dropout:g})")
    parser.add_argument("--held-out", type=float, default=default.held_out,
                        help=f"share of the documents held out for evaluation (default {default.held_out:g})")
    add_budget_arguments(parser, 10, "training windows")
    parser.add_argument("--no-jit", dest="jit_compile", action="store_false",
                        help="do not compile the training step with XLA")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="split, shuffling, initialization and sampling seed")
    parser.add_argument("--out", default=None,
                        help="the run's folder; the checkpoint goes to OUT/checkpoint (default artifacts/gpt/CORPUS: "
                             f"{default_out('kjv')} for kjv, artifacts/gpt/notes for text:~/notes.txt)")
    parser.add_argument("--export", default=None, metavar="DIR", help="also export a SavedModel to DIR")
    parser.add_argument("--viewer", action="store_true",
                        help="also write OUT/viewer.html, the interactive attention viewer (every layer and head) of "
                             "a held-out prompt and its greedy continuation (one self-contained page)")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch; with "
                             "--minutes, lines of the step and the time against the budget instead (1: every "
                             "30 s, 2: one per epoch)")
    args = parser.parse_args(argv)
    for flag in ("vocab_size", "sequence_length"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.vocab is None and args.vocab_size < 257:
        parser.error("--vocab-size must be at least 257 (the 256 byte symbols and <|endoftext|>)")
    check_budget_arguments(parser, args)
    if not 0 < args.held_out < 1:
        parser.error("--held-out must be between 0 and 1")
    check_optimizer_arguments(parser, args)
    if args.memory_length is not None and (args.position != "transformer_xl" or args.memory_length < 0):
        parser.error("--memory-length needs --position transformer_xl and a value >= 0")
    if args.position == "transformer_xl" and (args.viewer or args.export):
        parser.error("--position transformer_xl saves OUT/model.keras; --viewer and --export are GPT's")
    if not 0 <= args.dropout < 1:
        parser.error("--dropout must be in [0, 1)")
    if args.out is None:
        args.out = default_out(args.corpus)
    return args


def load_documents(corpus, seed=0):
    """The corpus' documents; problems the user can fix raise UsageError (one line)."""
    from attnlayers.applications.gpt import data

    return load_corpus(corpus, data.read_text_documents, seed=seed)


def settings_from_args(args):
    from attnlayers.applications.gpt.runs import TrainingSettings

    return TrainingSettings(
        config=args.config, vocabulary_size=args.vocab_size, sequence_length=args.sequence_length,
        batch_size=args.batch_size, learning_rate=args.learning_rate, warmup_fraction=args.warmup_fraction,
        weight_decay=args.weight_decay, dropout=args.dropout, held_out=args.held_out, minutes=args.minutes, backup_every=args.backup_every,
        epochs=args.epochs, jit_compile=args.jit_compile, seed=args.seed, position=args.position,
        memory_length=args.memory_length)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    import keras

    from attnlayers.applications.core.runs.replicas import worker_directory
    from attnlayers.applications.gpt import runs

    if args.vocab is not None:
        for name in ("vocab.json", "merges.txt"):
            if not os.path.isfile(os.path.join(args.vocab, name)):
                raise UsageError(f"--vocab {args.vocab}: no {name} there (a GPT-2 tokenizer directory holds vocab.json "
                                 "and merges.txt)")
    if args.export is not None and keras.backend.backend() != "tensorflow":
        raise UsageError(f"--export writes a TensorFlow SavedModel, which needs KERAS_BACKEND=tensorflow (this run: "
                         f"{keras.backend.backend()}); train without it, then: KERAS_BACKEND=tensorflow python "
                         f"examples/generate.py --checkpoint {os.path.join(args.out, runs.CHECKPOINT_DIR)} --export "
                         f"{args.export}")
    from attnlayers.applications.gpt import sharding

    strategy = start_runtime(args, layout=sharding.layout_map)  # before any other TensorFlow op (multi-worker: first)
    documents = load_documents(args.corpus, args.seed)
    out = worker_directory(args.out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    result = runs.run_training(settings_from_args(args), out, documents=documents, vocabulary=args.vocab,
                                  strategy=strategy, verbose=args.verbose, corpus=args.corpus, export_dir=args.export,
                                  viewer=args.viewer)
    if result["results_path"] is None:  # another worker of a multi-worker run: the chief reports and saves
        return 0
    print(f"results: {result['results_path']}")
    if args.position == "transformer_xl":
        print(f"load it: keras.saving.load_model({os.path.join(out, 'model.keras')!r})")
        return 0
    checkpoint = os.path.join(out, runs.CHECKPOINT_DIR)
    print(f"load it: attnlayers.applications.gpt.load_hf_checkpoint({checkpoint!r}) or "
          f"transformers.GPT2LMHeadModel.from_pretrained({checkpoint!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
