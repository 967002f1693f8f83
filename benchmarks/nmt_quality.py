"""NMT quality bars on the German-English test set (issue 5): every model trains for the same wall-clock budget
on this machine, then translates the 1000 held-out test sentences with greedy and beam search (k = 4), and
corpus BLEU (sacrebleu) is compared in one table.

Models: the attnlayers translators (seq2seq without attention, bahdanau, luong, local, transformer) and the
keras.io-style keras-hub translator ("English-to-Spanish translation with KerasHub": one keras_hub
TransformerEncoder + one TransformerDecoder over keras_hub TokenAndPositionEmbedding, d 256, d_ff 2048, 8 heads,
dropout 0.5 before the softmax layer, RMSprop, greedy decoding by recomputing the whole prefix each step).
All share the split (seed 0: 14,795 / 1,000 / 1,000 pairs), the SentencePiece vocabulary (4000 pieces, trained on
the training split only) and the length limit, so only model and training differ.

One model per process (so each gets the whole machine), results as JSON, then a table:

    python benchmarks/nmt_quality.py --model transformer --minutes 20
    python benchmarks/nmt_quality.py --model keras_hub --minutes 20
    ...
    python benchmarks/nmt_quality.py --table
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import sys
import time

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "nmt"
CHOICES = ("seq2seq", "bahdanau", "luong", "local", "transformer", "keras_hub")
MAX_LENGTH = 48  # tokens per side (covers the 99th percentile, ~30 pieces)
VOCABULARY = 4000
# Transformer settings tried (each a separate 20-minute run; the table keeps every one of them).
TRANSFORMERS = {
    # Paper-style: post-LN, 3 + 3 layers, d_ff 1024, linear warm-up over 1000 steps to (d * 1000)^-0.5 = 2.0e-3,
    # dropout 0.2.
    "base": dict(num_layers=3, intermediate_dim=1024, normalize_first=False, dropout=0.2, warmup_steps=1000,
                 scale=1.0),
    # For a budget of a few thousand steps: pre-LN (Xiong et al. 2020: no long warm-up needed), 2 + 2 layers,
    # d_ff 512 (about half the cost per step, so twice the steps), 400 warm-up steps to 1.6e-3, dropout 0.1.
    "small": dict(num_layers=2, intermediate_dim=512, normalize_first=True, dropout=0.1, warmup_steps=400,
                  scale=0.5),
    # "small" with the weights of its 3 epochs of best validation accuracy averaged (Vaswani et al. 2017,
    # sec. 6.1): its validation loss rose from epoch 8 while validation accuracy still crept up.
    "small-avg": dict(num_layers=2, intermediate_dim=512, normalize_first=True, dropout=0.1, warmup_steps=400,
                      scale=0.5, monitor="val_accuracy", average=3),
    # "small" overfitted 15k pairs (train accuracy 0.56, validation 0.40): "small-avg" with dropout 0.3.
    "lowres": dict(num_layers=2, intermediate_dim=512, normalize_first=True, dropout=0.3, warmup_steps=400,
                   scale=0.5, monitor="val_accuracy", average=3),
}
LEXICON_SENTENCE_COPIES, LEXICON_EPOCH_STEPS = 4, 400
# How the weights to evaluate are chosen, unless a variant says otherwise: the epoch of lowest val_loss.
SELECTION = dict(monitor="val_loss", average=1)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=CHOICES, help="which model to train and evaluate")
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-clock training budget (default 20)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="split, shuffle and initialization seed")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    parser.add_argument("--jit-compile", action="store_true", help="train under XLA (default: graph mode)")
    parser.add_argument("--variant", choices=sorted(TRANSFORMERS), default="base",
                        help="Transformer settings (see TRANSFORMERS); results go to transformer-VARIANT.json")
    parser.add_argument("--lexicon", type=int, default=0, metavar="N",
                        help="add N word/phrase pairs of the dictionary (nmt.load_de_en_lexicon, lines of "
                             "validation and test sentences excluded) to the training sentences; results go to "
                             "NAME+lexicon.json (default 0: sentences only, the task as the issue states it)")
    args = parser.parse_args(argv)
    if not args.table and args.model is None:
        parser.error("--model is required (or --table)")
    return args


def keras_hub_translator(vocabulary_size):
    """The keras.io KerasHub translation model, with the attnlayers.nmt model contract (for decoding)."""
    import keras
    import keras_hub
    from keras import ops

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

        def initial_cache(self, source_ids):
            memory, mask = self.encode(source_ids)
            return {"memory": memory, "mask": mask}

        def next(self, tokens, cache, index):  # keras.io decodes by recomputing the prefix every step
            h = self.decoder(self.target_embedding(tokens), cache["memory"], encoder_padding_mask=cache["mask"])
            return self.output_layer(ops.take(h, index - 1, axis=1)), cache

        def generate(self, source_ids, max_length=MAX_LENGTH, strategy="greedy", seed=None):
            return super().generate(source_ids, min(max_length, MAX_LENGTH), strategy, seed)

    model = KerasHubTranslator()
    model.compile(optimizer=keras.optimizers.RMSprop(), loss=_loss(0.0), metrics=[_accuracy()])
    return model


def _loss(smoothing):
    from attnlayers.applications.nmt.model import MaskedCrossEntropy

    return MaskedCrossEntropy(smoothing)


def _accuracy():
    from attnlayers.applications.nmt.model import MaskedAccuracy

    return MaskedAccuracy()


def build(name, vocabulary_size, variant="base"):
    from attnlayers.applications.nmt import model as nmt_model

    if name == "keras_hub":
        return keras_hub_translator(vocabulary_size)
    if name == "transformer":
        config = TRANSFORMERS[variant]
        model = nmt_model.TransformerTranslator(
            vocabulary_size, vocabulary_size, num_layers=config["num_layers"], d_model=256, num_heads=4,
            intermediate_dim=config["intermediate_dim"], dropout=config["dropout"], max_length=MAX_LENGTH,
            shared_embeddings=True, normalize_first=config["normalize_first"], name="transformer",
        )
        schedule = nmt_model.TransformerSchedule(256, config["warmup_steps"], config["scale"])
        model.compile_for_translation(learning_rate=schedule, label_smoothing=0.1)
        return model
    model = nmt_model.build_model(name, vocabulary_size, vocabulary_size, embedding_dim=256, units=512, dropout=0.3)
    model.compile_for_translation(1e-3)
    return model


def run(args):
    import keras
    import numpy as np

    from attnlayers.applications import nmt
    from attnlayers.applications.nmt import evaluate, training
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
    tokenizer_path = args.results / f"spm{VOCABULARY}_seed{args.seed}.model"
    args.results.mkdir(parents=True, exist_ok=True)
    if tokenizer_path.exists():
        tokenizer = nmt.SubwordTokenizer.load(tokenizer_path)
        tokenizers = nmt.Tokenizers(tokenizer, tokenizer)
    else:
        tokenizers = nmt.build_tokenizers(splits, source_vocabulary_size=VOCABULARY, shared=True)
        tokenizers.source.save(tokenizer_path)
    lengths = dict(max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH)
    train = nmt.make_dataset(train_pairs, tokenizers, batch_size=args.batch_size, seed=args.seed, **lengths)
    validation = nmt.make_dataset(splits.validation, tokenizers, batch_size=200, shuffle=False, **lengths)
    model = build(args.model, tokenizers.target.vocabulary_size, args.variant)
    run_name = f"transformer-{args.variant}" if args.model == "transformer" else args.model
    if args.lexicon:
        run_name += "+lexicon"
    if args.jit_compile:
        model.jit_compile = True
    config = TRANSFORMERS[args.variant] if args.model == "transformer" else {}
    selection = {key: config.get(key, default) for key, default in SELECTION.items()}
    budget, best = training.TimeBudget(args.minutes * 60), training.BestWeights(**selection)
    # With a lexicon an epoch is long: validate (and keep / average weights) every LEXICON_EPOCH_STEPS instead.
    steps = dict(steps_per_epoch=LEXICON_EPOCH_STEPS) if args.lexicon else {}
    history = model.fit(train.repeat() if args.lexicon else train, validation_data=validation, epochs=10_000,
                        callbacks=[budget, best], verbose=2, **steps)
    result = {
        "model": run_name, "minutes": args.minutes, "trained_seconds": round(budget.elapsed, 1),
        "steps": budget.steps, "lexicon_pairs": args.lexicon, "train_pairs": len(train_pairs),
        "epochs": len(history.history["loss"]), "best_epoch": best.best_epoch,
        "selection": {**selection, "kept_epochs": best.kept_epochs}, "best_monitored": best.best,
        "parameters": model.count_params(), "batch_size": args.batch_size,
        **{key: history.history.get(key) for key in ("accuracy", "val_accuracy", "val_loss")},
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
    }
    for label, strategy in (("greedy", "greedy"), ("beam4", BeamSearch(4, alpha=0.6))):
        start = time.perf_counter()
        bleu, hypotheses = evaluate.evaluate_bleu(model, tokenizers, splits.test, strategy=strategy,
                                                  max_source_length=MAX_LENGTH, max_length=MAX_LENGTH)
        result[f"bleu_{label}"] = round(bleu, 2)
        result[f"decode_seconds_{label}"] = round(time.perf_counter() - start, 1)
        result[f"examples_{label}"] = [
            {"source": s, "reference": r, "hypothesis": h}
            for s, r, h in list(zip(splits.test.source, splits.test.target, hypotheses))[:5]
        ]
        print(f"{run_name}: {label} BLEU {bleu:.2f} ({result[f'decode_seconds_{label}']} s)", flush=True)
    (args.results / f"{run_name}.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    if args.model != "keras_hub" and args.model != "seq2seq":
        source, target = splits.test.source[1], splits.test.target[1]
        paths = evaluate.plot_alignment(model, tokenizers, source, target, args.results / f"{run_name}.png")
        print("alignment:", ", ".join(paths))
    return result


def table(results_dir):
    order = {name: i for i, name in enumerate(CHOICES)}
    rows = [json.loads(p.read_text()) for p in results_dir.glob("*.json")]
    rows = [r for r in rows if isinstance(r, dict) and "bleu_greedy" in r]  # not alignment.json
    rows.sort(key=lambda r: (order.get(r["model"].split("-")[0], len(order)), r["model"]))
    print("| model | params | trained (s) | epochs | steps | weights of | BLEU greedy | BLEU beam 4 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        selection = r.get("selection", {"monitor": "val_loss", "average": 1})
        kept = [e + 1 for e in selection.get("kept_epochs", [r["best_epoch"]])]
        chosen = f"epoch {kept[0]}" if len(kept) == 1 else "mean of epochs " + ", ".join(map(str, sorted(kept)))
        print(f"| {r['model']} | {r['parameters']:,} | {r['trained_seconds']} | {r['epochs']} | {r['steps']} | "
              f"{chosen} ({selection['monitor']}) | {r['bleu_greedy']:.2f} | {r['bleu_beam4']:.2f} |")


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        table(args.results)
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
