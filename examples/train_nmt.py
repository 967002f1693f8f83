"""Train, evaluate and export a translation model from attnlayers.applications.nmt.

    python examples/train_nmt.py --model bahdanau --data synthetic --epochs 10
    python examples/train_nmt.py --model transformer --data de-en --minutes 20 --beam-size 4
    python examples/train_nmt.py --model luong --data tsv:pairs.tsv --epochs 20 --strategy mirrored

Data: "synthetic" (generated, with gold alignments; nothing to install), "de-en" (German-English sentence
pairs of the Debian package trans-de-en: apt-get install trans-de-en), or "tsv:PATH" (a file of
`source<TAB>target` lines). The data is split once with a fixed seed (the test set is never seen in training
or when the SentencePiece vocabulary is learned).

At the end the script prints a BLEU table (greedy and beam search on the test set), writes an alignment
heatmap (per-layer, per-head cross-attention maps for the Transformer) and exports a `translate` SavedModel
(strings in, strings out) that loads with tensorflow + tensorflow_text only. Training logs go to TensorBoard
(`tensorboard --logdir OUT/logs`) and checkpoints to OUT/backup: run the same command again after an
interruption and training resumes where it stopped (keras.callbacks.BackupAndRestore).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and SavedModel export

MODELS = ("seq2seq", "bahdanau", "luong", "local", "transformer")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="bahdanau",
                        help="seq2seq: RNN encoder-decoder without attention; bahdanau: additive attention; luong: "
                             "global attention (general score / sqrt(d)) with input feeding; local: Luong local-p; "
                             "transformer: the Transformer (default: bahdanau)")
    parser.add_argument("--data", default="synthetic",
                        help="synthetic | de-en | tsv:PATH (default: synthetic)")
    parser.add_argument("--epochs", type=int, default=10, help="passes over the training split (default 10)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="also stop training after this many minutes of wall-clock time")
    parser.add_argument("--batch-size", type=int, default=64, help="sentence pairs per batch (default 64)")
    parser.add_argument("--strategy", choices=("default", "mirrored"), default="default",
                        help="tf.distribute strategy: default (one device) or mirrored (all local GPUs, or the CPU)")
    parser.add_argument("--vocabulary-size", type=int, default=None,
                        help="SentencePiece vocabulary, shared by both sides (default: 4000; word-level for "
                             "synthetic data)")
    parser.add_argument("--max-length", type=int, default=48, help="longest source / target in pieces (default 48)")
    parser.add_argument("--size", choices=("tiny", "base"), default="base",
                        help="model size: tiny for smoke runs, base for real data (default base)")
    parser.add_argument("--beam-size", type=int, default=4, help="k of the beam search evaluation (default 4)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="Adam learning rate (default: 1e-3 for the RNNs, the warm-up schedule for the "
                             "Transformer)")
    parser.add_argument("--num-test", type=int, default=1000, help="held-out test pairs (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="data split, shuffling and initialization seed")
    parser.add_argument("--out", default=None, help="output directory (default artifacts/nmt/MODEL-DATA)")
    parser.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    if not (args.data in ("synthetic", "de-en") or args.data.startswith("tsv:")):
        parser.error(f"--data must be synthetic, de-en or tsv:PATH; received {args.data!r}")
    for flag in ("epochs", "batch_size", "max_length", "beam_size", "num_test"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def load_data(args):
    from attnlayers.applications import nmt

    if args.data == "synthetic":
        pairs = nmt.synthetic_pairs(6000, seed=args.seed, max_length=min(14, args.max_length - 2))
        num_test = min(args.num_test, 500)
    elif args.data == "de-en":
        if not os.path.exists(nmt.DE_EN_PATH):
            sys.exit(f"The German-English pairs are not installed ({nmt.DE_EN_PATH}): apt-get install trans-de-en")
        pairs, num_test = nmt.load_de_en(), args.num_test
    else:
        pairs, num_test = nmt.read_tsv(args.data[4:]), args.num_test
    if len(pairs) < num_test * 3:
        num_test = max(1, len(pairs) // 10)
    splits = nmt.split_pairs(pairs, num_test=num_test, num_validation=num_test, seed=args.seed)
    if args.data == "synthetic":
        tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=300, target_vocabulary_size=300,
                                          model_type="word")
    else:
        tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=args.vocabulary_size or 4000, shared=True)
    return splits, tokenizers


def build(args, tokenizers):
    from attnlayers.applications.nmt import model as nmt_model

    source, target = tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size
    tiny = args.size == "tiny"
    if args.model == "transformer":
        model = nmt_model.TransformerTranslator(
            source, target, num_layers=1 if tiny else 3, d_model=64 if tiny else 256, num_heads=4,
            intermediate_dim=128 if tiny else 1024, dropout=0.1 if tiny else 0.2, max_length=args.max_length,
            shared_embeddings=tokenizers.shared, name="transformer",
        )
        model.compile_for_translation(learning_rate=args.learning_rate, warmup_steps=200 if tiny else 1000)
    else:
        model = nmt_model.build_model(args.model, source, target, embedding_dim=64 if tiny else 256,
                                      units=128 if tiny else 512, dropout=0.1 if tiny else 0.3)
        model.compile_for_translation(args.learning_rate or 1e-3)
    return model


def main(argv=None):
    args = parse_args(argv)
    import keras
    import tensorflow as tf

    from attnlayers import BeamSearch
    from attnlayers.applications import nmt
    from attnlayers.applications.nmt import evaluate, training
    from attnlayers.applications.nmt.export import export_translator

    keras.utils.set_random_seed(args.seed)
    out = args.out or os.path.join("artifacts", "nmt", f"{args.model}-{args.data.replace(':', '_').replace('/', '_')}")
    os.makedirs(out, exist_ok=True)
    splits, tokenizers = load_data(args)
    print(f"data: {args.data}, {len(splits.train)} train / {len(splits.validation)} validation / "
          f"{len(splits.test)} test pairs; vocabulary {tokenizers.source.vocabulary_size} / "
          f"{tokenizers.target.vocabulary_size}{' (shared)' if tokenizers.shared else ''}")
    lengths = dict(max_source_length=args.max_length, max_target_length=args.max_length)
    train = nmt.make_dataset(splits.train, tokenizers, batch_size=args.batch_size, seed=args.seed, **lengths)
    validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=args.batch_size, shuffle=False,
                                  **lengths)

    strategy = tf.distribute.MirroredStrategy() if args.strategy == "mirrored" else tf.distribute.get_strategy()
    with strategy.scope():
        model = build(args, tokenizers)
        model(next(iter(train))[0])  # built before fit: BackupAndRestore restores into existing variables
    print(f"model: {args.model}, replicas: {strategy.num_replicas_in_sync}")
    callbacks = [
        keras.callbacks.TensorBoard(os.path.join(out, "logs")),
        keras.callbacks.BackupAndRestore(os.path.join(out, "backup")),
        training.BestWeights(),
    ]
    if args.minutes:
        callbacks.append(training.TimeBudget(args.minutes * 60))
    model.fit(train, validation_data=validation, epochs=args.epochs, callbacks=callbacks, verbose=args.verbose)
    model.summary()

    table = {}
    decoding = {"greedy": "greedy", f"beam (k={args.beam_size})": BeamSearch(args.beam_size, alpha=0.6)}
    for label, how in decoding.items():
        table[label], hypotheses = evaluate.evaluate_bleu(
            model, tokenizers, splits.test, strategy=how, max_source_length=args.max_length,
            max_length=args.max_length,
        )
    print(f"\n| model | data | test pairs | {' | '.join(f'BLEU {k}' for k in table)} |")
    print(f"|---|---|---|{'---|' * len(table)}")
    print(f"| {args.model} | {args.data} | {len(splits.test)} | {' | '.join(f'{v:.2f}' for v in table.values())} |")
    for source, reference, hypothesis in list(zip(splits.test.source, splits.test.target, hypotheses))[:3]:
        print(f"\n  {source}\n    reference: {reference}\n    model:     {hypothesis}")
    result = {"model": args.model, "data": args.data, "bleu": table}
    if splits.test.alignments is not None and args.model != "seq2seq":
        result["alignment_accuracy"] = evaluate.alignment_accuracy(model, tokenizers, splits.test)
        print(f"\nalignment accuracy (argmax of attention on the gold source word): {result['alignment_accuracy']}")
    if args.model != "seq2seq":
        paths = evaluate.plot_alignment(model, tokenizers, splits.test.source[0], splits.test.target[0],
                                        os.path.join(out, "alignment.png"), max_length=args.max_length)
        print("wrote " + ", ".join(paths))
    if not args.no_export:
        path = os.path.join(out, "translator")
        export_translator(path, model, tokenizers, strategy=BeamSearch(args.beam_size, alpha=0.6),
                          max_source_length=args.max_length, max_length=args.max_length)
        print(f"exported {path}: tf.saved_model.load(path).translate(tf.constant([...]))")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
