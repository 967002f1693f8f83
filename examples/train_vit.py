"""Train a Vision Transformer from scratch on scikit-learn's handwritten digits (or generated scenes), report its
test accuracy, draw where it looks (attention rollout and each layer's map), and export a SavedModel.

    python examples/train_vit.py                            # about 1.5 minutes on 2 CPU cores, ~98% test accuracy
    python examples/train_vit.py --minutes 1 --out runs/vit-quick
    python examples/train_vit.py --hidden-dim 128 --num-layers 6 --epochs 200 --strategy mirrored
    python examples/train_vit.py --dataset scenes --minutes 15            # "what colour is the triangle?"
    python examples/train_vit.py --dataset scenes --minutes 15 --model cnn   # the CNN baseline of the same size

Data: the 1,797 8 x 8 gray digits of scikit-learn (``pip install scikit-learn``; shipped inside the package, no
download), split at random by --seed into 70 / 10 / 20 percent training / validation / test images. --dataset
scenes: 32 x 32 generated scenes of 2 to 4 coloured shapes, exactly one a triangle, labelled with the triangle's
colour (5 classes; --train-images of them, 1,000 validation and 2,000 test images, drawn in a few seconds);
--dataset scenes-shared: the same scenes and "does another shape have the triangle's colour?" (yes / no).

The model is a ViT (attnlayers.applications.vision: patch embedding by a strided convolution, a class token, learned
positions, pre-LN Transformer encoder, final LayerNorm, linear head), by default 2 x 2 patches (16 tokens + the
class token), 4 layers, d 64, 4 heads, mean pooling over the patches, ~136k weights; trained with AdamW (weight
decay 0.05 on matrices), a warm-up then cosine learning rate, no dropout and random one-pixel shifts. The weights
of the best validation epoch are kept.

At the end the script prints the test accuracy, draws the accuracy per epoch (OUT/curves.png), the attention rollout
(Abnar & Zuidema 2020) and each layer's map of what the pooled representation reads (the patches' attention, averaged
over them, for mean pooling; the class token's for --pooling token) over four test images (OUT/attention_<i>.png)
and every layer x head map of the first one (OUT/heads.png), and exports a SavedModel (OUT/saved_model: signature
classify, uint8 images of any size in, probabilities and class names out; it serves without attnlayers). Logs go to
TensorBoard (OUT/logs) and checkpoints to OUT/backup: run the same command again after an interruption and training
resumes.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")  # TensorFlow's start-up lines (attnlayers.startup)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # tf.distribute and the SavedModel export

from attnlayers.applications.core.runs.cli import (  # noqa: E402
    add_budget_arguments, check_budget_arguments, run_script, start_runtime,
)

PROG = os.path.basename(__file__)


def parse_args(argv=None):
    from attnlayers.applications import core
    from attnlayers.applications.core.training.optimizers import add_optimizer_arguments, check_optimizer_arguments
    from attnlayers.applications.vision.model import POOLING
    from attnlayers.applications.vision.runs import DATASETS, DEFAULT_OUT, MODELS, PATCH_SIZES, TrainingSettings

    default = TrainingSettings()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=DATASETS, default=default.dataset, help="the images (default digits)")
    parser.add_argument("--train-images", type=int, default=default.train_images,
                        help=f"training images of --dataset scenes (default {default.train_images})")
    parser.add_argument("--model", choices=MODELS, default=default.model,
                        help="vit, or cnn: the convolutional baseline of about the same size (default vit)")
    parser.add_argument("--filters", default=",".join(map(str, default.filters)),
                        help="the CNN's channels per stage, comma-separated (default %(default)s)")
    parser.add_argument("--patch-size", type=int, default=None,
                        help="P of the P x P patches (default: " + ", ".join(
                            f"{p} for {d}" for d, p in PATCH_SIZES.items()) + ")")
    parser.add_argument("--num-layers", type=int, default=default.num_layers,
                        help=f"Transformer layers (default {default.num_layers})")
    parser.add_argument("--num-heads", type=int, default=default.num_heads,
                        help=f"attention heads (default {default.num_heads})")
    parser.add_argument("--hidden-dim", type=int, default=default.hidden_dim,
                        help=f"d_model (default {default.hidden_dim})")
    parser.add_argument("--mlp-dim", type=int, default=default.mlp_dim,
                        help=f"the MLP's hidden size (default {default.mlp_dim})")
    parser.add_argument("--pooling", choices=POOLING, default=default.pooling,
                        help=f"token (the class token) or mean (over the patches) (default {default.pooling})")
    parser.add_argument("--dropout", type=float, default=default.dropout,
                        help=f"dropout rate (default {default.dropout:g})")
    parser.add_argument("--shift", type=int, default=default.shift,
                        help=f"random translation in pixels, 0 for none (default {default.shift})")
    add_optimizer_arguments(parser, default, "images")
    add_budget_arguments(parser, 100, "training images")
    parser.add_argument("--no-jit", dest="jit_compile", action="store_false",
                        help="do not compile the training step with XLA")
    core.add_runtime_arguments(parser)
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="split, shuffling, augmentation and initialization seed")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"the run's folder (default {DEFAULT_OUT})")
    parser.add_argument("--no-export", dest="export", action="store_false", help="do not write the SavedModel")
    parser.add_argument("--viewer", action="store_true",
                        help="also write OUT/viewer.html (--model vit), the interactive attention viewer of the first "
                             "test image: hover a patch to see where it attends (one self-contained page)")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="keras fit verbosity: 1 = progress bar (default), 2 = one line per epoch")
    args = parser.parse_args(argv)
    if args.patch_size is not None and args.patch_size < 1:
        parser.error("--patch-size must be at least 1")
    try:
        args.filters = tuple(int(f) for f in args.filters.split(","))
    except ValueError:
        parser.error(f"--filters must be comma-separated integers; received {args.filters!r}")
    if min(args.filters) < 1:
        parser.error("--filters must all be at least 1")
    if args.train_images < 1:
        parser.error("--train-images must be at least 1")
    for flag in ("num_layers", "num_heads", "hidden_dim", "mlp_dim"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.hidden_dim % args.num_heads:
        parser.error(f"--hidden-dim {args.hidden_dim} must be a multiple of --num-heads {args.num_heads}")
    if args.shift < 0:
        parser.error("--shift must be at least 0")
    check_budget_arguments(parser, args)
    check_optimizer_arguments(parser, args)
    if not 0 <= args.dropout < 1:
        parser.error("--dropout must be in [0, 1)")
    return args


def settings_from_args(args):
    from attnlayers.applications.vision.runs import TrainingSettings

    return TrainingSettings(
        dataset=args.dataset, train_images=args.train_images, model=args.model, filters=args.filters,
        patch_size=args.patch_size, num_layers=args.num_layers, num_heads=args.num_heads,
        hidden_dim=args.hidden_dim, mlp_dim=args.mlp_dim, pooling=args.pooling, dropout=args.dropout,
        shift=args.shift, batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_fraction=args.warmup_fraction, weight_decay=args.weight_decay, minutes=args.minutes, backup_every=args.backup_every,
        epochs=args.epochs, jit_compile=args.jit_compile, seed=args.seed)


def main(argv=None):
    return run_script(PROG, parse_args, run, argv)


def run(args):
    from attnlayers.applications.core.runs.cli import UsageError
    from attnlayers.applications.core.runs.replicas import worker_directory
    from attnlayers.applications.vision import runs

    from attnlayers.applications.vision import sharding

    layout = sharding.layout_map if args.model == "vit" else None  # model-parallel: the ViT only
    strategy = start_runtime(args, layout=layout)  # before any other TensorFlow op (multi-worker: first)
    settings = settings_from_args(args)
    try:
        splits = runs.load_dataset(settings.dataset, seed=settings.seed, train_images=settings.train_images)
    except ImportError as error:
        raise UsageError(str(error)) from error
    image_size = splits.image_shape[:2]
    patch = runs.patch_size(settings)
    if settings.model == "vit" and (image_size[0] % patch or image_size[1] % patch):
        raise UsageError(f"--patch-size {patch} must divide the images' size {image_size}")
    if settings.model == "cnn" and (image_size[0] % 2 ** len(settings.filters)
                                    or image_size[1] % 2 ** len(settings.filters)):
        raise UsageError(f"the images' size {image_size} must be divisible by 2 ** (number of --filters) = "
                         f"{2 ** len(settings.filters)}")
    out = worker_directory(args.out, strategy)  # OUT/worker-{i} for the other workers of a multi-worker run
    result = runs.run_training(settings, out, splits=splits, strategy=strategy, verbose=args.verbose,
                                  export=args.export, viewer=args.viewer)
    if result["results_path"] is None:  # another worker of a multi-worker run: the chief reports and saves
        return 0
    print(f"results: {result['results_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
