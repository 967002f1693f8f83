"""Captioning quality bars on the generated scenes: every model trains for the same wall-clock budget on this
machine, then captions the 1000 held-out test scenes with beam search (k = 3), and BLEU-1..4, CIDEr-D, exact
match and attention localization are compared in one table, on all test scenes and on those with 3 or more
objects (where one vector must summarise many things).

Models: the attnlayers captioners of `attnlayers.applications.captioning.builders` (soft and hard attention,
"none", "transformer") and the keras.io-style captioner ("Image Captioning" on keras.io, KerasHub layers: the
CNN's grid through one keras_hub TransformerEncoder (1 head) and one keras_hub TransformerDecoder (2 heads) over
keras_hub TokenAndPositionEmbedding, d 512, d_ff 512, dropout 0.5 before the output layer, Adam at 1e-4 after a
linear warm-up over 1/15 of its 30 epochs, i.e. 2 epochs; greedy decoding by recomputing the prefix each step). keras.io
uses an ImageNet EfficientNetB0, which cannot be downloaded here: every model, the peer's included, gets the
same small CNN trained from scratch, so only the captioner differs. All share the data (seed 0: 8000 / 500 /
1000 scenes, 64 x 64), the vocabulary and the caption length.

    python benchmarks/captioning_quality.py --model soft --minutes 10
    python benchmarks/captioning_quality.py --model keras_io --minutes 10
    python benchmarks/captioning_quality.py --table
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import runs

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "captioning"
CHOICES = ("soft", "hard", "none", "transformer", "keras_io")
MAX_LENGTH, IMAGE_SIZE = 20, 64


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=CHOICES, help="which model to train and evaluate")
    parser.add_argument("--query", choices=("previous", "current"), default=None,
                        help="soft / hard attention's query: current (h_t after reading the previous word, Lu et al. "
                             "2017) or previous (h_{t-1}, Xu et al.); default: the recipe's")
    parser.add_argument("--estimator", choices=("reinforce", "gumbel"), default=None,
                        help="hard attention's gradient estimator; default: the recipe's (gumbel)")
    parser.add_argument("--doubly-stochastic", type=float, default=1.0,
                        help="soft / hard attention's lambda of the doubly stochastic penalty (Xu et al. eq. 14)")
    parser.add_argument("--doubly-stochastic-steps", type=int, default=None,
                        help="fade the doubly stochastic penalty linearly to 0 over this many steps; 0: constant (the "
                             "paper's); default: the recipe's (1000)")
    parser.add_argument("--filters", type=lambda text: tuple(int(f) for f in text.split(",")), default=None,
                        help="the small CNN's channels per block for the attnlayers models, e.g. 32,64 (a 16 x 16 "
                             "grid); default: the encoder's 32,64,128 (8 x 8)")
    parser.add_argument("--encoder", choices=("small", "vit", "hybrid"), default="small",
                        help="the attnlayers models' image encoder: the small CNN (default), a ViT over 8 x 8 "
                             "patches, or a hybrid ViT over 2 x 2 patches of a 2-block CNN's map (each the same 8 x 8 "
                             "grid)")
    parser.add_argument("--self-attention", action="store_true",
                        help="a SAGAN self-attention block on the small CNN's last feature map")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock training budget (default 10)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="data, shuffle and initialization seed")
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="where JSON results are written")
    parser.add_argument("--table", action="store_true", help="print the table of all results and exit")
    args = parser.parse_args(argv)
    if not args.table and args.model is None:
        parser.error("--model is required (or --table)")
    return args


def keras_io_captioner(vocabulary_size, warmup_steps):
    """The keras.io CNN + KerasHub Transformer captioner, with the captioning generation contract."""
    import keras
    import keras_hub
    from keras import ops

    from attnlayers.applications.captioning.encoder import ImageEncoder, check_images
    from attnlayers.applications.core import MaskedAccuracy, MaskedCrossEntropy, Seq2SeqGenerator

    class KerasIOCaptioner(Seq2SeqGenerator):
        default_max_length = MAX_LENGTH

        def __init__(self):
            super().__init__(pad_token_id=0, start_token_id=1, end_token_id=2, name="keras_io")
            self.cnn = ImageEncoder(IMAGE_SIZE, position_embedding=False)  # the same CNN as every model
            self.project = keras.layers.Dense(512, activation="relu")
            self.encoder = keras_hub.layers.TransformerEncoder(intermediate_dim=512, num_heads=1)
            self.embedding = keras_hub.layers.TokenAndPositionEmbedding(vocabulary_size, MAX_LENGTH, 512,
                                                                        mask_zero=True)
            self.decoder = keras_hub.layers.TransformerDecoder(intermediate_dim=512, num_heads=2, dropout=0.1)
            self.dropout = keras.layers.Dropout(0.5)
            self.output_layer = keras.layers.Dense(vocabulary_size)

        def check_source(self, inputs):
            return check_images(inputs)

        def encode(self, images, training=None):
            return self.encoder(self.project(self.cnn(images, training=training)), training=training)

        def call(self, inputs, training=None):
            images, caption_in = inputs
            memory = self.encode(images, training)
            h = self.decoder(self.embedding(caption_in), memory, decoder_padding_mask=caption_in != 0,
                             training=training)
            return self.output_layer(self.dropout(h, training=training))

        def initial_cache(self, images, max_length=None):
            return {"memory": self.encode(images)}

        def next(self, tokens, cache, index):  # keras.io decodes by recomputing the prefix every step
            h = self.decoder(self.embedding(tokens), cache["memory"])
            return self.output_layer(ops.take(h, index - 1, axis=1)), cache

        @property
        def max_generation_length(self):
            return MAX_LENGTH

        @property
        def grid_shape(self):
            return self.cnn.grid_shape

        def attention_maps(self, images, caption_in):
            return None

    class WarmUp(keras.optimizers.schedules.LearningRateSchedule):  # keras.io's LRSchedule
        def __call__(self, step):
            return 1e-4 * ops.minimum(ops.cast(step + 1, "float32") / warmup_steps, 1.0)

    model = KerasIOCaptioner()
    model.compile(optimizer=keras.optimizers.Adam(WarmUp()), loss=MaskedCrossEntropy(),
                  metrics=[MaskedAccuracy()])
    return model


def _subset_metrics(captions, caption_set, min_objects=3):
    from attnlayers.applications.captioning import evaluate

    keep = [i for i, objects in enumerate(caption_set.objects) if len(objects) >= min_objects]
    hypotheses = [captions[i] for i in keep]
    references = [caption_set.captions[i] for i in keep]
    metrics = evaluate.caption_metrics(hypotheses, references)
    return {"images": len(keep), "BLEU-4": metrics["BLEU-4"], "CIDEr": metrics["CIDEr"],
            "exact_match": evaluate.exact_match(hypotheses, references)}


def run(args):
    import keras

    from attnlayers.applications import core
    from attnlayers.applications.captioning import data, predict
    from attnlayers.applications.captioning.builders import DEFAULT_QUERY, build_captioner
    from attnlayers.decoding import BeamSearch

    if args.model in DEFAULT_QUERY and args.query is None:
        args.query = DEFAULT_QUERY[args.model]
    keras.utils.set_random_seed(args.seed)
    splits = data.load_scenes(8000, 500, 1000, image_size=IMAGE_SIZE, seed=args.seed)
    vocabulary = data.CaptionVocabulary.build(splits.train)
    options = dict(batch_size=args.batch_size, image_size=IMAGE_SIZE, max_length=MAX_LENGTH)
    train = data.make_dataset(splits.train, vocabulary, seed=args.seed, **options)
    validation = data.make_dataset(splits.validation, vocabulary, shuffle=False, **options)
    if args.model == "keras_io":
        steps_per_epoch = -(-len(splits.train) // args.batch_size)
        model = keras_io_captioner(vocabulary.vocabulary_size, warmup_steps=2 * steps_per_epoch)
        decoding = "greedy"
    else:
        model = build_captioner(args.model, vocabulary.vocabulary_size, seed=args.seed, image_size=IMAGE_SIZE,
                                max_length=MAX_LENGTH, query=args.query, estimator=args.estimator,
                                doubly_stochastic=args.doubly_stochastic,
                                doubly_stochastic_steps=args.doubly_stochastic_steps,
                                backbone=args.encoder,
                                self_attention=args.self_attention,
                                **({} if args.filters is None else {"filters": args.filters}))
        decoding = BeamSearch(args.beam_size)

    def evaluate_model(model):
        metrics = predict.evaluate_captioner(model, splits.test, vocabulary, search=decoding,
                                             max_length=MAX_LENGTH)
        metrics["three_or_more_objects"] = _subset_metrics(metrics["captions"], splits.test)
        metrics["captions"] = metrics["captions"][:10]
        print({k: v for k, v in metrics.items() if k != "captions"}, flush=True)
        return metrics

    def pictures(model, out):
        path = predict.plot_captions(model, splits.test, vocabulary, out / f"{args.model}_attention.png", index=1,
                                     search=decoding, max_length=MAX_LENGTH)
        return [path] if path else []

    attends = args.model in ("soft", "hard")
    estimator = model.estimator if args.model == "hard" else None  # the recipe's when the flag is not given
    gumbel = estimator == "gumbel"
    label = args.model + ("-gumbel" if gumbel else "") + (f"-{args.query}" if attends else "")
    label += f"-lambda{args.doubly_stochastic:g}" if attends and args.doubly_stochastic != 1.0 else ""
    fade = getattr(model, "doubly_stochastic_steps", None)  # the recipe's when the flag is not given
    label += f"-fade{fade}" if attends and fade else ""
    label += "-filters" + "_".join(map(str, args.filters)) if args.filters and args.model != "keras_io" else ""
    label += f"-{args.encoder}" if args.encoder != "small" and args.model != "keras_io" else ""
    label += "-sagan" if args.self_attention and args.model != "keras_io" else ""
    record = {"model": args.model, "query": args.query if attends else None,
              "doubly_stochastic": args.doubly_stochastic if attends else None,
              "doubly_stochastic_steps": fade if attends else None,
              "estimator": estimator, "minutes": args.minutes,
              "seed": args.seed, "batch_size": args.batch_size,
              "decoding": "greedy" if decoding == "greedy" else f"beam {args.beam_size}",
              **runs.machine_record(),
              "filters": list((model.cnn if args.model == "keras_io" else model.encoder).filters),
              "encoder": "small" if args.model == "keras_io" else args.encoder,
              "self_attention": args.self_attention and args.model != "keras_io"}
    result = core.run_recipe(
        model, train, validation=validation, epochs=10_000,
        callbacks=[core.TimeBudget(args.minutes * 60), core.BestWeights("val_loss")], evaluate=evaluate_model,
        pictures=pictures, out_dir=args.results, record=record, verbose=2,
        results_file=f"{label}_seed{args.seed}_{args.minutes:g}min.json",
    )
    model.save_weights(args.results / f"{label}_seed{args.seed}_{args.minutes:g}min.weights.h5")  # for analysis
    return result


def table(results_dir):
    rows = [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]
    rows = [r for r in rows if isinstance(r, dict) and "BLEU-4" in r]
    rows.sort(key=lambda r: (r["minutes"], r["seed"], CHOICES.index(r["model"]), r.get("query") or ""))
    print("| model | seed | minutes | cores | steps | decoding | BLEU-1 | BLEU-4 | CIDEr | exact | localization | "
          "pointing game | 3+ objects: BLEU-4 | 3+: exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        local, pointing = r.get("localization"), r.get("pointing_game")
        three = r["three_or_more_objects"]
        model = r["model"] + (" gumbel" if r.get("estimator") == "gumbel" else "") + (
            f" ({r['query']} query)" if r.get("query") else "") + (
            f", lambda {r['doubly_stochastic']:g}" if r.get("doubly_stochastic") not in (None, 1.0) else "") + (
            f", eq. 14 fading over {r['doubly_stochastic_steps']} steps" if r.get("doubly_stochastic_steps") else "") + (
            f", {IMAGE_SIZE >> len(r['filters'])}x{IMAGE_SIZE >> len(r['filters'])} grid" if r.get("filters") else "")
        model += {"vit": ", ViT encoder", "hybrid": ", hybrid ViT encoder"}.get(r.get("encoder"), "") + (
            ", SAGAN block" if r.get("self_attention") else "")
        print(f"| {model} | {r['seed']} | {r['minutes']:g} | {r.get('cores', '?')} | {r['training']['steps']} | "
              f"{r['decoding']} | "
              f"{r['BLEU-1']:.1f} | {r['BLEU-4']:.1f} | {r['CIDEr']:.2f} | {r['exact_match']:.3f} | "
              f"{'-' if local is None else f'{local:.3f}'} | {'-' if pointing is None else f'{pointing:.3f}'} | "
              f"{three['BLEU-4']:.1f} | {three['exact_match']:.3f} |")


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        table(args.results)
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
