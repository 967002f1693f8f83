"""Train, evaluate and export an image captioner from attnlayers.applications.captioning.

    python examples/train_captioning.py --attention soft --data scenes --minutes 10
    python examples/train_captioning.py --attention hard --data scenes --epochs 20
    python examples/train_captioning.py --attention none --data flickr8k:~/Flickr8k --encoder MobileNetV2 \
        --encoder-weights imagenet --image-size 224

Models: soft / hard attention (Show, Attend and Tell; hard attention trained with Gumbel straight-through, or
with the paper's REINFORCE with --estimator reinforce), "none" (the same encoder and LSTM without attention) and
"transformer" (the same encoder under the library's Transformer decoder). Data:
"scenes" (generated images of shapes with known object boxes; nothing to install), "scenes:NUM_TRAIN",
"flickr8k:DIR" or "coco:DIR" (see docs/guides/captioning-data.md).

At the end the script restores the epoch of lowest validation loss, prints BLEU-1..4, CIDEr, exact match and
(on scenes, for models with attention) the share of object words whose attention peak lies inside the
object's box, writes the paper's attention picture for a few test images, exports a `caption` SavedModel
(uint8 images in, strings out) that loads with TensorFlow only, and says how long each phase took. Training
logs go to TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same command again after an
interruption and training resumes (core.BackupAndRestore).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.data, tf.distribute and SavedModel export

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    UsageError, add_budget_arguments, budget_epochs, check_budget_arguments, run_script, start_runtime, usage_error,
)

PROG = os.path.basename(__file__)
ATTENTIONS = ("soft", "hard", "none", "transformer")
DEFAULT_EPOCHS = 30


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", choices=ATTENTIONS, default="soft",
                        help="soft / hard attention (Show, Attend and Tell), none (the same encoder and LSTM "
                             "without attention) or transformer (the library's Transformer decoder over the grid) "
                             "(default: soft)")
    parser.add_argument("--estimator", choices=("reinforce", "gumbel"), default=None,
                        help="hard attention's gradient estimator: gumbel (straight-through Gumbel-softmax, the "
                             "default: it learns the scenes in the budget measured) or reinforce (the paper's)")
    parser.add_argument("--query", choices=("previous", "current"), default=None,
                        help="soft / hard attention's query: current (h_t after reading the previous word, Lu "
                             "et al. 2017; the default, the better one measured) or previous (h_{t-1}, Xu et al.)")
    parser.add_argument("--data", default="scenes", help="scenes | scenes:NUM_TRAIN | flickr8k:DIR | coco:DIR")
    parser.add_argument("--encoder", default="small",
                        help="small (a CNN trained from scratch, default), vit (a Vision Transformer trained from "
                             "scratch: 8 x 8 patches, 2 layers, d 128; its patch tokens are the annotation vectors), "
                             "hybrid (the same Transformer over 2 x 2 patches of a 2-block CNN's map) or a "
                             "keras.applications class name, e.g. MobileNetV2")
    parser.add_argument("--self-attention", action="store_true",
                        help="a SAGAN self-attention block on the small CNN's last feature map")
    parser.add_argument("--encoder-weights", default=None,
                        help="the backbone's weights: imagenet (downloads) or a local weights file (default: "
                             "random)")
    parser.add_argument("--fine-tune", action="store_true", help="train the backbone too (default: frozen)")
    parser.add_argument("--feature-cache", default=os.path.join("artifacts", "captioning", "features"),
                        help="where a frozen keras.applications backbone's features are kept: computed once per "
                             "backbone, weights and image set, then read instead of the images; 'none' runs the "
                             "backbone every step (default artifacts/captioning/features)")
    parser.add_argument("--image-size", type=int, default=64, help="images are resized to this square side")
    add_budget_arguments(parser, DEFAULT_EPOCHS, "training captions")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=20, help="longest caption in tokens, [start] / [end] "
                                                                   "included; longer captions are cut and counted")
    parser.add_argument("--beam-size", type=int, default=3, help="k of the beam search (default 3; 1 = greedy)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--doubly-stochastic-steps", type=int, default=None,
                        help="soft / hard attention: fade Xu et al.'s doubly stochastic penalty (eq. 14) linearly to "
                             "0 over this many training steps; 0 keeps it constant (the paper's); default: the "
                             "recipe's (1000)")
    sampling_flags.add_scheduled_sampling_arguments(parser)
    parser.add_argument("--num-test", type=int, default=1000, help="held-out test images (default 1000)")
    parser.add_argument("--num-validation", type=int, default=500, help="validation images (default 500)")
    parser.add_argument("--min-count", type=int, default=None,
                        help="words seen fewer times become <unk> (default: 1 on scenes, 5 otherwise)")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="data, shuffling and initialization seed")
    parser.add_argument("--out", default=None, help="output directory (default artifacts/captioning/ATTENTION-DATA)")
    parser.add_argument("--no-export", action="store_true", help="skip the SavedModel export")
    parser.add_argument("--viewer", action="store_true",
                        help="also write OUT/viewer.html, the interactive attention viewer of the first test image "
                             "(the image with each word's map; one self-contained page: open it in a browser)")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    check_budget_arguments(parser, args)
    sampling_flags.check_scheduled_sampling_arguments(
        parser, args, supported=args.attention in ("soft", "hard"), why="--attention soft and hard (the attention "
        f"LSTM), not --attention {args.attention}")
    args.epochs = budget_epochs(args.epochs, args.minutes, DEFAULT_EPOCHS)  # --minutes alone: until it ends
    if args.doubly_stochastic_steps is not None and args.doubly_stochastic_steps < 0:
        parser.error("--doubly-stochastic-steps must be >= 0 (0: a constant penalty)")
    for flag in ("batch_size", "beam_size", "image_size", "num_test", "num_validation"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_length < 3:
        parser.error("--max-length must be at least 3 ([start], a word, [end])")
    return args


def load_data(args):
    """Reads or generates and splits the data; problems the user can fix raise UsageError (one line)."""
    from attnlayers.applications.captioning import data

    try:
        if args.data.startswith("scenes"):  # generated at the model's size, so that the boxes match
            scheme, _, count = args.data.partition(":")
            if scheme != "scenes" or (count and not count.isdigit()):
                raise UsageError(f"--data {args.data}: expected scenes or scenes:NUM_TRAIN")
            splits = data.load_scenes(int(count or 8000), args.num_validation, args.num_test,
                                      image_size=args.image_size, seed=args.seed)
        else:
            splits = data.parse_data_argument(os.path.expanduser(args.data), num_test=args.num_test,
                                              num_validation=args.num_validation, seed=args.seed)
        min_count = args.min_count or (1 if args.data.startswith("scenes") else 5)
        vocabulary = data.CaptionVocabulary.build(splits.train, min_count=min_count)
    except (OSError, ValueError) as error:
        raise usage_error(error) from None
    return splits, vocabulary


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    import keras

    from attnlayers import BeamSearch
    from attnlayers.applications import core
    from attnlayers.applications.captioning import data, predict
    from attnlayers.applications.captioning.builders import build_captioner
    from attnlayers.applications.captioning.export import export_captioner
    from attnlayers.applications.core.runs import scheduled_sampling_flags as sampling_flags
    from attnlayers.applications.core.runs.replicas import held_out_batch_size

    strategy = start_runtime(args)  # before any other TensorFlow op (a multi-worker strategy must come first)
    splits, vocabulary = load_data(args)
    name = f"{args.attention}-{args.data.split(':')[0]}"
    name += "-ss" if args.scheduled_sampling else ""  # its own folder: a backup of the other run is not resumed
    out = args.out or os.path.join("artifacts", "captioning", name)
    out = core.worker_directory(out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    cut = data.count_truncated(splits.train, vocabulary, max_length=args.max_length)
    print(f"data: {args.data}, {len(splits.train)} train / {len(splits.validation)} validation / "
          f"{len(splits.test)} test images; {vocabulary.vocabulary_size} tokens; {cut['captions']} of "
          f"{cut['total']} training captions cut at --max-length {args.max_length}")
    test = splits.test if splits.test.images is not None else predict.load_images(splits.test, args.image_size)

    encoder = dict(image_size=args.image_size, backbone=args.encoder, backbone_weights=args.encoder_weights,
                   fine_tune=args.fine_tune, self_attention=args.self_attention)
    with strategy.scope():
        try:
            model = build_captioner(args.attention, vocabulary.vocabulary_size, estimator=args.estimator,
                                    query=args.query, seed=args.seed, learning_rate=args.learning_rate,
                                    max_length=args.max_length, doubly_stochastic_steps=args.doubly_stochastic_steps,
                                    scheduled_sampling=sampling_flags.model_argument(args), **encoder)
        except ValueError as error:
            raise UsageError(str(error)) from None
    options = dict(batch_size=args.batch_size, image_size=args.image_size, max_length=args.max_length)
    features = {}
    # The cache is read through tf.numpy_function, which a TPU host cannot run: under TPUStrategy images are read.
    # (Under JAX, tf.data runs on the host anyway and prefetches: the cache is used.)
    tpu = core.static_shapes(strategy) and keras.backend.backend() == "tensorflow"
    if model.encoder.frozen and args.feature_cache != "none" and not tpu:
        from attnlayers.applications.captioning.features import cache_features

        for split in ("train", "validation"):
            print(f"{split} features of the frozen {args.encoder} -> {args.feature_cache}")
            features[split] = cache_features(model.encoder, getattr(splits, split), args.feature_cache)
    options["drop_remainder"] = core.static_shapes(strategy)  # TPU / XLA under JAX: static batches only
    train = data.make_dataset(splits.train, vocabulary, seed=args.seed, features=features.get("train"), **options)
    if options["drop_remainder"]:  # a validation set smaller than one batch still gives one
        options["batch_size"] = held_out_batch_size(strategy, args.batch_size, len(splits.validation))
    validation = data.make_dataset(splits.validation, vocabulary, shuffle=False, features=features.get("validation"),
                                   **options)
    with strategy.scope():
        model(next(iter(train))[0])  # built before fit: BackupAndRestore restores into existing variables
    print(f"model: {args.attention} attention, encoder {args.encoder} (grid {model.grid_shape}); "
          f"{model.count_params():,} parameters; {core.describe_runtime(strategy)}")
    callbacks = (sampling_flags.logger_callbacks(model)  # before TensorBoard: eps_i in its logs
                 + core.standard_callbacks(out, minutes=args.minutes, backup_every=args.backup_every, best=core.BestWeights("val_loss")))
    decoding = "greedy" if args.beam_size == 1 else BeamSearch(args.beam_size)

    def evaluate_model(model):
        metrics = predict.evaluate_captioner(model, test, vocabulary, search=decoding,
                                             max_length=args.max_length)
        scores = {k: v for k, v in metrics.items() if k != "captions"}
        print("\n| model | " + " | ".join(scores) + " |\n|---|" + "---|" * len(scores))
        print(f"| {args.attention} | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                                  for v in scores.values()) + " |")
        for caption, references in list(zip(metrics["captions"], test.captions))[:3]:
            print(f"\n  reference: {references[0]}\n  model:     {caption}")
        return metrics

    def pictures(model, out):
        paths = [predict.plot_captions(model, test, vocabulary, os.path.join(out, f"attention_{i}.png"), index=i,
                                       search=decoding, max_length=args.max_length) for i in range(3)]
        paths = [p for p in paths if p]
        if args.viewer:
            from attnlayers.applications.captioning.viewer import attention_viewer

            path = os.path.join(out, "viewer.html")
            attention_viewer(model, test, vocabulary, path, search=decoding, max_length=args.max_length)
            paths.append(path)
        if paths:
            print("wrote " + ", ".join(paths))
        return paths

    def export(model, out):
        path = os.path.join(out, "captioner")
        export_captioner(path, model, vocabulary, search=decoding, max_length=args.max_length)
        print(f"exported {path}: tf.saved_model.load(path).caption(uint8 images)")
        return path

    query = getattr(getattr(model, "decoder", None), "query", None)  # the recipe's when --query is not given
    estimator = getattr(model, "estimator", None) if args.attention == "hard" else None  # the recipe's by default
    record = {"attention": args.attention, "estimator": estimator, "query": query, "data": args.data,
              "doubly_stochastic_steps": getattr(model, "doubly_stochastic_steps", None),
              "seed": args.seed,
              "encoder": args.encoder, "self_attention": args.self_attention, "image_size": args.image_size,
              "batch_size": args.batch_size,
              "scheduled_sampling": args.scheduled_sampling and f"{args.scheduled_sampling} "
                                    f"({args.scheduled_sampling_prediction})",
              "runtime": core.describe_runtime(strategy)}
    result = core.run_recipe(
        model, train, validation=validation, epochs=args.epochs,  # resolved by parse_args
        callbacks=callbacks, evaluate=evaluate_model,
        pictures=None if args.attention == "none" else pictures,
        export=None if args.no_export else core.saved_model_export(export, "captioner.weights.h5"),
        out_dir=out, record=record, verbose=args.verbose, strategy=strategy,
    )
    if result["results_path"] is not None:  # else another worker of a multi-worker run: the chief reports
        print(f"results: {result['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
