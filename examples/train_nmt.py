"""Train, evaluate and export a translation model from attnlayers.applications.nmt.

    python examples/train_nmt.py --model bahdanau --data synthetic --epochs 10
    python examples/train_nmt.py --model transformer --data de-en --minutes 20        # until the budget ends
    python examples/train_nmt.py --model luong --data tsv:pairs.tsv --epochs 20 --strategy mirrored

Data: "synthetic" (generated, with gold alignments; nothing to install), "de-en" (German-English sentence
pairs of the Debian package trans-de-en: apt-get install trans-de-en), or "tsv:PATH" (a file of
`source<TAB>target` lines). The data is split once with a fixed seed (the test set is never seen in training
or when the SentencePiece vocabulary is learned).

Each model trains with its best measured recipe unless --variant names another (docs/results/nmt.md has the
measurements): --model transformer is the pre-LN 2+2-layer Transformer whose learning rate warms up and
decays to zero over the run's budget (--minutes, else --epochs) ("budgeted", the best model on
German-English); the RNN models use "base".

At the end the script restores the recipe's best weights, prints a BLEU table (greedy and beam search on the
test set), writes an alignment heatmap (per-layer, per-head cross-attention maps for the Transformer),
exports a `translate` SavedModel (strings in, strings out) that loads with tensorflow + tensorflow_text only,
and says how long each phase took and whether --minutes stopped training. Training logs go to TensorBoard
(`tensorboard --logdir OUT/logs`) and checkpoints to OUT/backup: run the same command again after an
interruption and training resumes where it stopped (core.BackupAndRestore).
"""

import argparse
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and SavedModel export

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, add_budget_arguments, budget_epochs, check_budget_arguments, run_script, start_runtime, usage_error,
)

MODELS = ("seq2seq", "bahdanau", "luong", "local", "transformer")
PROG = os.path.basename(__file__)
DEFAULT_EPOCHS = 10
HELD_OUT = 1000  # --num-validation / --num-test default (SYNTHETIC_HELD_OUT on synthetic data)
SYNTHETIC_HELD_OUT = 500
HELD_OUT_FRACTION = 0.1  # each held-out split takes at most this share of the pairs
TINY_TRAINING = 1000  # fewer training pairs than this (tsv / de-en) get a warning


def _columns(text):
    """--columns SOURCE,TARGET (1-based field numbers) -> the 0-based pair read_tsv takes."""
    try:
        source, target = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SOURCE,TARGET field numbers such as 1,2; received {text!r}")
    if source < 1 or target < 1 or source == target:
        raise argparse.ArgumentTypeError(f"expected two different field numbers counted from 1, such as 1,2 or "
                                         f"2,1; received {text!r}")
    return source - 1, target - 1


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags
    from attnlayers.applications.nmt import variants

    def listing(table):
        return "; ".join(f"{name}: {variant.description}" for name, variant in table.items())

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="bahdanau",
                        help="seq2seq: RNN encoder-decoder without attention; bahdanau: additive attention; luong: "
                             "global attention (general score / sqrt(d)) with input feeding; local: Luong local-p; "
                             "transformer: the Transformer, by default its best measured recipe 'budgeted' "
                             "(default: bahdanau)")
    variant_names = sorted(set(variants.TRANSFORMER_VARIANTS) | set(variants.RNN_VARIANTS))
    parser.add_argument("--variant", choices=variant_names, default=None,
                        help="the training recipe (default: the model's best measured one: budgeted for the "
                             f"Transformer, base for the RNNs). Transformer: {listing(variants.TRANSFORMER_VARIANTS)}. "
                             f"RNN models: {listing(variants.RNN_VARIANTS)}")
    parser.add_argument("--size", choices=("tiny", "base"), default=None,
                        help="older name of the recipe: tiny = --variant tiny, base = the model's default recipe")
    parser.add_argument("--data", default="synthetic",
                        help="synthetic | de-en | tsv:PATH (default: synthetic)")
    parser.add_argument("--header", choices=("auto", "yes", "no"), default=None,
                        help="--data tsv:PATH only: is the file's first line a header row? auto (default): skip it "
                             "when both fields look like column names (source / target, src / tgt, input / output, "
                             "language names such as English / French, language codes such as en / de) and say "
                             "so; yes: always skip it; no: it is a pair")
    parser.add_argument("--columns", type=_columns, default=None, metavar="SOURCE,TARGET",
                        help="--data tsv:PATH only: which tab-separated fields are the source and the target, "
                             "counted from 1, e.g. 1,2 for the first two fields of a three-column Tatoeba / Anki "
                             "file (english<TAB>french<TAB>attribution) or 2,1 to translate the other way; lines "
                             "need at least that many fields (default: lines of exactly two fields)")
    add_budget_arguments(parser, DEFAULT_EPOCHS, "training split")
    parser.add_argument("--batch-size", type=int, default=64, help="sentence pairs per batch (default 64)")
    core.add_runtime_arguments(parser)
    parser.add_argument("--vocabulary-size", type=int, default=None,
                        help="SentencePiece vocabulary, shared by both sides (default: 4000; word-level for "
                             "synthetic data)")
    parser.add_argument("--max-length", type=int, default=48,
                        help="longest source / target in pieces; longer pairs are truncated and counted "
                             "(default 48)")
    parser.add_argument("--beam-size", type=int, default=4, help="k of the beam search evaluation (default 4)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="Adam learning rate (default: the recipe's: 1e-3 for the RNNs, the warm-up schedule "
                             "for the Transformer)")
    sampling_flags.add_scheduled_sampling_arguments(parser)
    held_out = (f"each held-out split gets min(asked, {HELD_OUT_FRACTION:.0%} of the pairs), at least 1 pair, so "
                f"training keeps the majority (at least {1 - 2 * HELD_OUT_FRACTION:.0%} of 10 pairs or more)").replace("%", "%%")  # argparse
    parser.add_argument("--num-validation", type=int, default=None,
                        help=f"validation pairs (default {HELD_OUT}; {SYNTHETIC_HELD_OUT} on synthetic data); "
                             f"{held_out}")
    parser.add_argument("--num-test", type=int, default=None,
                        help=f"held-out test pairs (default {HELD_OUT}; {SYNTHETIC_HELD_OUT} on synthetic data); "
                             f"{held_out}")
    parser.add_argument("--seed", type=int, default=0, help="data split, shuffling and initialization seed")
    parser.add_argument("--out", default=None,
                        help="output directory, created once the data is read (default artifacts/nmt/MODEL-DATA)")
    parser.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    parser.add_argument("--viewer", action="store_true",
                        help="also write OUT/viewer.html, the interactive attention viewer of the first test pair "
                             "translated (one self-contained page: open it in a browser)")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    if not (args.data in ("synthetic", "de-en") or args.data.startswith("tsv:")):
        parser.error(f"--data must be synthetic, de-en or tsv:PATH; received {args.data!r}")
    if args.data == "tsv:":
        parser.error("--data tsv:PATH needs a file name after 'tsv:'")
    if not args.data.startswith("tsv:"):
        for flag in ("header", "columns"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag} applies to --data tsv:PATH only; received --data {args.data}")
    check_budget_arguments(parser, args)
    sampling_flags.check_scheduled_sampling_arguments(
        parser, args, supported=args.model != "seq2seq", why="the models with attention (bahdanau, luong, local, "
        "transformer), not --model seq2seq")
    args.epochs = budget_epochs(args.epochs, args.minutes, DEFAULT_EPOCHS)  # --minutes alone: until it ends
    for flag in ("batch_size", "max_length", "beam_size", "num_test", "num_validation"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_length < 2:
        parser.error("--max-length must be at least 2 ([START] / [END] take one place)")
    if args.vocabulary_size is not None and args.vocabulary_size <= 4:
        parser.error("--vocabulary-size must exceed the 4 reserved tokens")
    if args.variant is None and args.size == "tiny":
        args.variant = "tiny"
    table = variants.variants(args.model)
    if args.variant is not None and args.variant not in table:
        parser.error(f"--variant {args.variant} is not a recipe of --model {args.model}; choose from "
                     f"{', '.join(sorted(table))}")
    args.variant = variants.get_variant(args.model, args.variant).name
    return args


def _read_tsv(path, args):
    """The pairs of --data tsv:PATH with --header / --columns; a line without those fields is a UsageError naming
    the flag that reads it."""
    from attnlayers.applications.nmt import data

    header = args.header or "auto"
    try:
        pairs, skipped = data.read_tsv_with_header(path, columns=args.columns, header=header)
    except data.TsvFieldError as error:
        if error.exact and error.field_count > 2:
            raise UsageError(
                f"{path}, line {error.line_number}: this line has {error.field_count} tab-separated fields: pass "
                f"--columns 1,2 to take the first two (or --columns SOURCE,TARGET to choose which), "
                f"{error.malformed} of {error.total} lines do not have exactly 2 fields") from None
        if not error.exact:
            columns = ",".join(str(c + 1) for c in args.columns)
            raise UsageError(
                f"{path}, line {error.line_number}: this line has {error.field_count} tab-separated "
                f"field{'s' if error.field_count != 1 else ''}; --columns {columns} needs at least {error.needed} "
                f"({error.malformed} of {error.total} lines have fewer)") from None
        raise
    if skipped is not None and header == "auto":
        print(f"{path}: skipped the header row {chr(9).join(skipped)!r} (--header no reads it as a pair)")
    return pairs


def load_data(args):
    """Reads, splits and tokenizes the data; problems the user can fix raise UsageError (one line).

    Each held-out split gets min(--num-validation / --num-test, 10% of the pairs), at least one pair
    (`nmt.data.held_out_sizes`); the sizes are printed when that cap applied. Fewer than 1,000 training pairs
    (tsv / de-en) get a one-line warning on stderr."""
    from attnlayers.applications import nmt
    from attnlayers.applications.nmt.data import held_out_sizes

    try:
        default = HELD_OUT
        if args.data == "synthetic":
            pairs = nmt.synthetic_pairs(6000, seed=args.seed, max_length=min(14, args.max_length - 2))
            default = SYNTHETIC_HELD_OUT
        elif args.data == "de-en":
            if not os.path.exists(nmt.DE_EN_PATH):
                raise UsageError(f"{nmt.DE_EN_PATH}: the German-English pairs are not installed "
                                 "(apt-get install trans-de-en)")
            pairs = nmt.load_de_en()
        else:
            path = args.data[4:]
            if not os.path.isfile(path):
                raise UsageError(f"{path}: no such file (--data tsv:PATH needs a file of source<TAB>target lines)")
            pairs = _read_tsv(path, args)
            if len(pairs) == 0:
                raise UsageError(f"{path}: no source<TAB>target pairs in the file")
        asked = {"num_test": args.num_test or default, "num_validation": args.num_validation or default}
        sizes = held_out_sizes(len(pairs), fraction=HELD_OUT_FRACTION, **asked)
        if sizes != asked:
            print(f"held out {sizes['num_validation']:,} validation / {sizes['num_test']:,} test pairs of "
                  f"{len(pairs):,}: each held-out split takes at most {HELD_OUT_FRACTION:.0%} of the pairs "
                  f"(asked: --num-validation {asked['num_validation']}, --num-test {asked['num_test']})")
        splits = nmt.split_pairs(pairs, **sizes, seed=args.seed)
        if args.data != "synthetic" and len(splits.train) < TINY_TRAINING:
            print(f"warning: only {len(splits.train):,} training pairs: expect a model that memorises them, BLEU "
                  f"near 0 on the test set; translation needs thousands of pairs (--data de-en has 14,795)",
                  file=sys.stderr)
        if args.data == "synthetic":
            tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=300, target_vocabulary_size=300,
                                              model_type="word")
        else:
            tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=args.vocabulary_size or 4000,
                                              shared=True)
    except (OSError, UnicodeError, ValueError) as error:
        raise usage_error(error) from None
    return splits, tokenizers


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    from attnlayers import BeamSearch
    from attnlayers.applications import core, nmt
    from attnlayers.applications.nmt import evaluate, variants
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags
    from attnlayers.applications.core.runs.replicas import held_out_batch_size
    from attnlayers.applications.nmt.export import export_translator

    from attnlayers.applications.nmt import sharding

    layout = sharding.layout_map if args.model == "transformer" else None  # model-parallel: the Transformer only
    strategy = start_runtime(args, layout=layout)  # before any other TensorFlow op (multi-worker: first)
    splits, tokenizers = load_data(args)
    default = args.variant == variants.DEFAULT_VARIANTS[args.model]
    name = args.model if default else f"{args.model}-{args.variant}"
    name += "-ss" if args.scheduled_sampling else ""  # its own folder: a backup of the other run is not resumed
    out = args.out or os.path.join("artifacts", "nmt", f"{name}-{args.data.replace(':', '_').replace('/', '_')}")
    out = core.worker_directory(out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run

    print(f"data: {args.data}, {len(splits.train)} train / {len(splits.validation)} validation / "
          f"{len(splits.test)} test pairs; vocabulary {tokenizers.source.vocabulary_size} / "
          f"{tokenizers.target.vocabulary_size}{' (shared)' if tokenizers.shared else ''}")
    asked = None if args.data == "synthetic" else (args.vocabulary_size or 4000)
    if asked is not None and tokenizers.source.vocabulary_size < asked:
        print(core.runs.recipe.describe_vocabulary(tokenizers.source.vocabulary_size, asked, "SentencePiece",
                                              "--vocabulary-size"))
    lengths = dict(max_source_length=args.max_length, max_target_length=args.max_length)
    truncated = {split: nmt.count_truncated(getattr(splits, split), tokenizers, **lengths)
                 for split in ("train", "validation", "test")}
    cut = truncated["train"]
    print(f"truncated at --max-length {args.max_length}: {cut['pairs']} of {cut['total']} training pairs "
          f"({cut['sources']} sources, {cut['targets']} targets); validation {truncated['validation']['pairs']}, "
          f"test sources {truncated['test']['sources']} (BLEU is computed on the truncated sources)")
    with warnings.catch_warnings():  # make_dataset's truncation warning: counted above
        warnings.filterwarnings("ignore", message=r".*are truncated", category=UserWarning)
        # A TPU, and XLA under JAX, compile static shapes only (else one compilation per padded length)
        static = dict(pad_to_max_length=True, drop_remainder=True) if core.static_shapes(strategy) else {}
        train = nmt.make_dataset(splits.train, tokenizers, batch_size=args.batch_size, seed=args.seed, **lengths,
                                 **static)
        size = held_out_batch_size(strategy, args.batch_size, len(splits.validation)) if static else args.batch_size
        validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=size, shuffle=False, **lengths,
                                      **static)

    with strategy.scope():
        model, recipe_callbacks = variants.build_recipe(
            args.model, tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size, args.variant,
            max_length=args.max_length, shared_embeddings=tokenizers.shared, learning_rate=args.learning_rate,
            minutes=args.minutes, scheduled_sampling=sampling_flags.model_argument(args),
        )
        model(next(iter(train))[0])  # built before fit: BackupAndRestore restores into existing variables
    variant = variants.get_variant(args.model, args.variant)
    print(f"model: {args.model}, recipe {variant.name} ({variant.description}); {model.count_params():,} "
          f"parameters; {core.describe_runtime(strategy)}")
    callbacks = (sampling_flags.logger_callbacks(model)  # before TensorBoard: eps_i in its logs
                 + core.standard_callbacks(out, minutes=args.minutes, backup_every=args.backup_every) + recipe_callbacks)

    decoding = {"greedy": "greedy", f"beam (k={args.beam_size})": BeamSearch(args.beam_size, alpha=0.6)}

    def evaluate_model(model):
        table = {}
        for label, how in decoding.items():
            table[label], hypotheses = evaluate.evaluate_bleu(
                model, tokenizers, splits.test, search=how, max_source_length=args.max_length,
                max_length=args.max_length,
            )
        print(f"\n| model | data | test pairs | {' | '.join(f'BLEU {k}' for k in table)} |")
        print(f"|---|---|---|{'---|' * len(table)}")
        print(f"| {args.model} | {args.data} | {len(splits.test)} | "
              f"{' | '.join(f'{v:.2f}' for v in table.values())} |")
        for source, reference, hypothesis in list(zip(splits.test.source, splits.test.target, hypotheses))[:3]:
            print(f"\n  {source}\n    reference: {reference}\n    model:     {hypothesis}")
        result = {"bleu": table}
        if splits.test.alignments is not None and args.model != "seq2seq":
            result["alignment_accuracy"] = evaluate.alignment_accuracy(model, tokenizers, splits.test)
            print(f"\nalignment accuracy (argmax of attention on the gold source word): "
                  f"{result['alignment_accuracy']}")
        return result

    def pictures(model, out):
        paths = evaluate.plot_alignment(model, tokenizers, splits.test.source[0], splits.test.target[0],
                                        os.path.join(out, "alignment.png"), max_length=args.max_length)
        if args.viewer:
            from attnlayers.applications.nmt.viewer import attention_viewer

            path = os.path.join(out, "viewer.html")
            attention_viewer(model, tokenizers, splits.test.source[0], path, max_length=args.max_length)
            paths.append(path)
        print("wrote " + ", ".join(paths))
        return paths

    def export(model, out):
        path = os.path.join(out, "translator")
        export_translator(path, model, tokenizers, search=BeamSearch(args.beam_size, alpha=0.6),
                          max_source_length=args.max_length, max_length=args.max_length)
        print(f"exported {path}: tf.saved_model.load(path).translate(tf.constant([...]))")
        return path

    record = {"model": args.model, "variant": args.variant, "data": args.data, "seed": args.seed,
              "max_length": args.max_length, "batch_size": args.batch_size, "truncated": truncated,
              "scheduled_sampling": args.scheduled_sampling and f"{args.scheduled_sampling} "
                                    f"({args.scheduled_sampling_prediction})",
              "runtime": core.describe_runtime(strategy)}
    result = core.run_recipe(
        model, train, validation=validation, epochs=args.epochs,  # resolved by parse_args
        callbacks=callbacks, evaluate=evaluate_model,
        pictures=None if args.model == "seq2seq" else pictures,
        export=None if args.no_export else core.saved_model_export(export, "translator.weights.h5"),
        out_dir=out, record=record, verbose=args.verbose, strategy=strategy,
    )
    if result["results_path"] is not None:  # else another worker of a multi-worker run: the chief reports
        print(f"results: {result['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
