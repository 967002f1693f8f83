"""NMT quality bars on the German-English test set: every model trains for the same wall-clock budget
on this machine, then translates the 1000 held-out test sentences with greedy and beam search (k = 4), and
corpus BLEU (sacrebleu) is compared in one table.

Models: the attnlayers translators (seq2seq without attention, bahdanau, luong, local, transformer) and the
keras.io-style keras-hub translator ("English-to-Spanish translation with KerasHub": one keras_hub
TransformerEncoder + one TransformerDecoder over keras_hub TokenAndPositionEmbedding, d 256, d_ff 2048, 8 heads,
dropout 0.5 before the softmax layer, RMSprop, greedy decoding by recomputing the whole prefix each step).
All share the split (seed 0: 14,795 / 1,000 / 1,000 pairs), the SentencePiece vocabulary (4000 pieces, trained on
the training split only) and the length limit, so only model and training differ.

The attnlayers models train with the recipes of `attnlayers.applications.nmt.variants` (as examples/train_nmt.py
does; `--variant` picks one, default each model's best) through the shared train -> evaluate -> pictures recipe
(`attnlayers.applications.core.run_recipe`). One model per process (so each gets the whole machine), results as
JSON, then a table:

    python benchmarks/nmt_quality.py --model transformer --minutes 20            # the budgeted recipe
    python benchmarks/nmt_quality.py --model transformer --variant base --minutes 20
    python benchmarks/nmt_quality.py --model keras_hub --minutes 20
    ...
    python benchmarks/nmt_quality.py --table
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time

import measure

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "nmt"
CHOICES = ("seq2seq", "bahdanau", "luong", "local", "transformer", "keras_hub")
MAX_LENGTH = 48  # tokens per side (covers the 99th percentile, ~30 pieces)
VOCABULARY = 4000
# The attnlayers models train with the recipes of attnlayers.applications.nmt.variants (the ones
# examples/train_nmt.py uses): --variant picks one; the default is each model's best measured recipe.
LEXICON_SENTENCE_COPIES, LEXICON_EPOCH_STEPS = 4, 400


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=CHOICES, help="which model to train and evaluate")
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock training budget (default 20)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="split, shuffle and initialization seed")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    parser.add_argument("--jit-compile", action="store_true", help="train under XLA (default: graph mode)")
    parser.add_argument("--variant", default=None,
                        help="the recipe of attnlayers.applications.nmt.variants (default: the model's best "
                             "measured one, budgeted for the Transformer, base for the RNNs); results go to "
                             "MODEL-VARIANT.json for the Transformer")
    parser.add_argument("--lexicon", type=int, default=0, metavar="N",
                        help="add N word/phrase pairs of the dictionary (nmt.load_de_en_lexicon, lines of "
                             "validation and test sentences excluded) to the training sentences; results go to "
                             "NAME+lexicon.json (default 0: the sentences only)")
    args = parser.parse_args(argv)
    if not args.table and args.model is None:
        parser.error("--model is required (or --table)")
    if args.model not in (None, "keras_hub"):
        from attnlayers.applications.nmt import variants

        table = variants.variants(args.model)
        if args.variant is not None and args.variant not in table:
            parser.error(f"--variant must be one of {sorted(table)} for --model {args.model}")
        args.variant = variants.get_variant(args.model, args.variant).name
    return args


def keras_hub_translator(vocabulary_size):
    """The keras.io KerasHub translation model, with the attnlayers.nmt model contract (for decoding)."""
    import keras
    import keras_hub
    from keras import ops

    from attnlayers.applications.core import MaskedAccuracy, MaskedCrossEntropy
    from attnlayers.applications.nmt.model import Translator, _split_inputs

    class KerasHubTranslator(Translator):
        def __init__(self):
            super().__init__(name="keras_hub")
            self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_LENGTH, 256,
                                                                               mask_zero=True)
            self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_LENGTH, 256,
                                                                               mask_zero=True)
            self.encoder = keras_hub.layers.TransformerEncoder(intermediate_dim=2048, num_heads=8)
            self.decoder = keras_hub.layers.TransformerDecoder(intermediate_dim=2048, num_heads=8)
            self.dropout = keras.layers.Dropout(0.5)
            self.output_layer = keras.layers.Dense(vocabulary_size)

        def encode(self, source_ids, training=None):
            mask = ops.not_equal(source_ids, 0)
            return self.encoder(self.source_embedding(source_ids), padding_mask=mask, training=training), mask

        def call(self, inputs, training=None):
            source_ids, target_in = _split_inputs(inputs)
            memory, mask = self.encode(source_ids, training)
            h = self.decoder(self.target_embedding(target_in), memory, decoder_padding_mask=target_in != 0,
                             encoder_padding_mask=mask, training=training)
            return self.output_layer(self.dropout(h, training=training))

        def initial_cache(self, source_ids, max_length=None):
            memory, mask = self.encode(source_ids)
            return {"memory": memory, "mask": mask}

        def next(self, tokens, cache, index):  # keras.io decodes by recomputing the prefix every step
            h = self.decoder(self.target_embedding(tokens), cache["memory"], encoder_padding_mask=cache["mask"])
            return self.output_layer(ops.take(h, index - 1, axis=1)), cache

        @property
        def max_generation_length(self):  # the position tables
            return MAX_LENGTH

    model = KerasHubTranslator()
    model.compile(optimizer=keras.optimizers.RMSprop(), loss=MaskedCrossEntropy(), metrics=[MaskedAccuracy()])
    return model


def shared_tokenizers(splits, results, seed):
    """The shared German-English SentencePiece tokenizers of ``splits`` at seed ``seed``: learned once, saved in
    ``results`` (a Path) and read back by every later run of the same seed."""
    from attnlayers.applications import nmt

    path = results / f"spm{VOCABULARY}_seed{seed}.model"
    results.mkdir(parents=True, exist_ok=True)
    if path.exists():
        tokenizer = nmt.SubwordTokenizer.load(path)
        return nmt.Tokenizers(tokenizer, tokenizer)
    tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=VOCABULARY, shared=True)
    tokenizers.source.save(path)
    return tokenizers


def run(args):
    import keras

    from attnlayers.applications import core, nmt
    from attnlayers.applications.nmt import evaluate, variants
    from attnlayers.decoding import BeamSearch

    keras.utils.set_random_seed(args.seed)
    splits = nmt.split_pairs(nmt.load_de_en(), seed=args.seed)
    train_pairs = splits.train
    if args.lexicon:
        lexicon = nmt.load_de_en_lexicon(held_out=[splits.validation, splits.test])
        chosen = random.Random(args.seed).sample(range(len(lexicon)), min(args.lexicon, len(lexicon)))
        lexicon = lexicon.select(chosen)
        # The sentences are what is tested: each is repeated LEXICON_SENTENCE_COPIES times among the entries.
        train_pairs = nmt.Pairs(train_pairs.source * LEXICON_SENTENCE_COPIES + lexicon.source,
                                train_pairs.target * LEXICON_SENTENCE_COPIES + lexicon.target)
    tokenizers = shared_tokenizers(splits, args.results, args.seed)
    lengths = dict(max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH)
    train = nmt.make_dataset(train_pairs, tokenizers, batch_size=args.batch_size, seed=args.seed, **lengths)
    validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=200, shuffle=False, **lengths)
    vocabulary = tokenizers.target.vocabulary_size
    if args.model == "keras_hub":
        model, recipe_callbacks = keras_hub_translator(vocabulary), [core.BestWeights("val_loss")]
    else:
        model, recipe_callbacks = variants.build_recipe(args.model, vocabulary, vocabulary, args.variant,
                                                       max_length=MAX_LENGTH, shared_embeddings=True,
                                                       minutes=args.minutes)
    run_name = f"transformer-{args.variant}" if args.model == "transformer" else args.model
    if args.lexicon:
        run_name += "+lexicon"
    if args.jit_compile:
        model.jit_compile = True

    def evaluate_model(model):
        result = {}
        for label, search in (("greedy", "greedy"), ("beam4", BeamSearch(4, alpha=0.6))):
            start = time.perf_counter()
            bleu, hypotheses = evaluate.evaluate_bleu(model, tokenizers, splits.test, search=search,
                                                      max_source_length=MAX_LENGTH, max_length=MAX_LENGTH)
            result[f"bleu_{label}"] = round(bleu, 2)
            result[f"decode_seconds_{label}"] = round(time.perf_counter() - start, 1)
            result[f"examples_{label}"] = [
                {"source": s, "reference": r, "hypothesis": h}
                for s, r, h in list(zip(splits.test.source, splits.test.target, hypotheses))[:5]
            ]
            print(f"{run_name}: {label} BLEU {bleu:.2f} ({result[f'decode_seconds_{label}']} s)", flush=True)
        return result

    def pictures(model, out):
        source, target = splits.test.source[1], splits.test.target[1]
        paths = evaluate.plot_alignment(model, tokenizers, source, target, out / f"{run_name}.png")
        print("alignment:", ", ".join(paths))
        return paths

    # With a lexicon an epoch is long: validate (and keep / average weights) every LEXICON_EPOCH_STEPS instead.
    fit_kwargs = dict(steps_per_epoch=LEXICON_EPOCH_STEPS) if args.lexicon else {}
    record = {
        "model": run_name, "minutes": args.minutes, "lexicon_pairs": args.lexicon, "train_pairs": len(train_pairs),
        "batch_size": args.batch_size,
        "machine": measure.machine(),
    }
    return core.run_recipe(
        model, train.repeat() if args.lexicon else train, validation=validation, epochs=10_000,
        callbacks=[core.TimeBudget(args.minutes * 60), *recipe_callbacks], evaluate=evaluate_model,
        pictures=None if args.model in ("keras_hub", "seq2seq") else pictures, out_dir=args.results,
        record=record, fit_kwargs=fit_kwargs, verbose=2, results_file=f"{run_name}.json",
    )


def table(results_dir):
    order = {name: i for i, name in enumerate(CHOICES)}
    rows = [json.loads(p.read_text()) for p in results_dir.glob("*.json")]
    rows = [r for r in rows if isinstance(r, dict) and "bleu_greedy" in r]  # not alignment.json
    rows.sort(key=lambda r: (order.get(r["model"].split("-")[0], len(order)), r["model"]))
    print("| model | params | trained (s) | epochs | steps | weights of | BLEU greedy | BLEU beam 4 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        training, weights = r["training"], r["weights"] or {"monitor": "last epoch", "kept_epochs": []}
        kept = weights["kept_epochs"]  # 1-based
        chosen = ("the last epoch" if not kept else f"epoch {kept[0]}" if len(kept) == 1
                  else "mean of epochs " + ", ".join(map(str, sorted(kept))))
        print(f"| {r['model']} | {r['parameters']:,} | {training['seconds']} | {training['epochs']} | "
              f"{training['steps']} | {chosen} ({weights['monitor']}) | {r['bleu_greedy']:.2f} | "
              f"{r['bleu_beam4']:.2f} |")


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        table(args.results)
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
