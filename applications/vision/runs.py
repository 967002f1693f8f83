"""The training run of examples/train_vit.py: a ViT trained from scratch on an image classification task that
works offline, evaluated on its test split, with its attention drawn and a SavedModel exported.

    result = run_training(TrainingSettings(minutes=3), "runs/vit")

The settings (the defaults, measured on the digits: benchmarks/README.md, Vision): AdamW (betas 0.9 / 0.999, weight
decay 0.05 on weight matrices, gradients clipped at norm 1), a linear warm-up over 10 percent of the run and a
cosine to zero at its end (the --minutes budget, else the last epoch); no dropout (0.1 cost 0.6-1.9 points of test
accuracy at both seeds measured); random shifts of one pixel; mean pooling over the patches (the paper's appendix
D.3); the weights of the best validation epoch are kept.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

DEFAULT_OUT = "runs/vit"
SAVED_MODEL_DIR = "saved_model"
DATASETS = ("digits", "scenes", "scenes-shared")
MODELS = ("vit", "cnn")
PATCH_SIZES = {"digits": 2, "scenes": 4, "scenes-shared": 4}  # the default patch size: 16 + 1 or 64 + 1 tokens


@dataclasses.dataclass
class TrainingSettings:
    """A ViT training run.

    Attributes:
        dataset: "digits" (scikit-learn's 8 x 8 digits) or "scenes" (:func:`~.data.triangle_colours`: what colour is
            the triangle, 32 x 32 generated scenes) or "scenes-shared" (:func:`~.data.triangle_colour_shared`: does
            another shape have the triangle's colour).
        train_images: the scenes' training images (generated; the digits have their own 1,257).
        model: "vit", or "cnn" (:class:`~.cnn.ConvNet`, the baseline of about the same size; its ``filters``).
        patch_size (None: :data:`PATCH_SIZES` of the dataset), num_layers, num_heads, hidden_dim, mlp_dim, pooling,
            dropout: the :class:`ViTConfig`.
        shift: random translation in pixels (0: no augmentation).
        batch_size, learning_rate (the peak), warmup_fraction, weight_decay: the optimizer.
        minutes: a wall-clock budget for training, or None. epochs: most passes (None: 100).
        backup_every: back up every this many steps (and at epoch ends); None: every few minutes
            (``core.training.callbacks.BACKUP_SECONDS``).
        jit_compile: XLA-compile the training step.
        seed: the split, the shuffling, the shifts and the initialization.
    """

    dataset: str = "digits"
    train_images: int = 20000
    model: str = "vit"
    filters: tuple = (24, 48, 88)
    patch_size: int | None = None
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 64
    mlp_dim: int = 128
    pooling: str = "mean"
    dropout: float = 0.0
    shift: int = 1
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_fraction: float = 0.1
    weight_decay: float = 0.05
    minutes: float | None = None
    backup_every: int | None = None
    epochs: int | None = None
    jit_compile: bool = True
    seed: int = 0


def load_dataset(name, seed=0, train_images=20000):
    """The :class:`~.data.ImageSplits` of dataset ``name`` (:data:`DATASETS`); ``train_images`` for the scenes."""
    from attnlayers.validation import one_of

    from . import data

    if one_of(name, "dataset", DATASETS) == "scenes":
        return data.triangle_colours(train_images, seed=seed)
    if name == "scenes-shared":
        return data.triangle_colour_shared(train_images, seed=seed)
    return data.digits(seed=seed)


def patch_size(settings):
    """The settings' patch size, else the dataset's default (:data:`PATCH_SIZES`)."""
    return settings.patch_size or PATCH_SIZES[settings.dataset]


def build_model(settings, image_shape, num_classes):
    """A :class:`~.model.ViT` or (``settings.model == "cnn"``) a :class:`~.cnn.ConvNet` for the images."""
    from attnlayers.validation import one_of

    from .model import ViT, ViTConfig

    if one_of(settings.model, "model", MODELS) == "cnn":
        from .cnn import ConvNet, ConvNetConfig

        return ConvNet(ConvNetConfig(image_shape=image_shape, num_classes=num_classes, filters=settings.filters))
    config = ViTConfig(image_shape=image_shape, patch_size=patch_size(settings), num_classes=num_classes,
                       num_layers=settings.num_layers, num_heads=settings.num_heads, hidden_dim=settings.hidden_dim,
                       mlp_dim=settings.mlp_dim, dropout=settings.dropout, pooling=settings.pooling)
    return ViT(config)


def compile_for_training(model, settings):
    """AdamW with the run's settings and a budgeted warm-up + cosine learning rate (returned: a callback)."""
    import keras

    from ..core.training.optimizers import BudgetedCosineLearningRate, decoupled_adamw

    model.compile(optimizer=decoupled_adamw(settings.learning_rate, settings.weight_decay, beta_2=0.999),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  jit_compile=settings.jit_compile)
    seconds = None if settings.minutes is None else settings.minutes * 60.0
    return BudgetedCosineLearningRate(settings.learning_rate, settings.warmup_fraction, seconds=seconds)


def describe_model(model):
    """One line: the model's kind, sizes and weights."""
    c = model.config
    if not hasattr(c, "patch_size"):
        return (f"CNN (stages of {' / '.join(map(str, c.filters))} filters, {c.convolutions_per_stage} convolutions "
                f"each), {c.parameter_count():,} parameters")
    return (f"ViT ({c.num_layers} layers, d {c.hidden_dim}, {c.num_heads} heads, {c.patch_size} x {c.patch_size} "
            f"patches: {c.num_patches} + 1 tokens), {c.parameter_count():,} parameters")


def pooled_attention(model, attention_scores):
    """Where the pooled representation looks, over the patch grid: (rollout (B, gh, gw), per layer and head
    (L, B, heads, gh, gw), who looks). With class-token pooling, the class token's row of the rollout and its raw
    maps; with mean pooling, the mean of the patches' rows (what reaches the patches' mean)."""
    from attnlayers.rollout import attention_rollout, class_token_maps

    c = model.config
    grid = (c.image_shape[0] // c.patch_size, c.image_shape[1] // c.patch_size)
    rollout = attention_rollout(attention_scores)  # (B, 1 + N, 1 + N)
    if c.pooling == "token":
        return rollout[:, 0, 1:].reshape(-1, *grid), class_token_maps(attention_scores, grid), "the class token"
    layers = np.stack([np.asarray(a)[:, :, 1:, 1:].mean(axis=2) for a in attention_scores])  # (L, B, heads, N)
    return (rollout[:, 1:, 1:].mean(axis=1).reshape(-1, *grid), layers.reshape(*layers.shape[:3], *grid),
            "the patches (mean pooling)")


def attention_pictures(model, images, labels, class_names, out_dir, count=4):
    """For ``count`` images: the image, its attention rollout and each layer's map (heads averaged) of what the
    pooled representation reads (:func:`pooled_attention`), one PNG each (``attention_<i>.png``); and every layer
    x head map of the first image (``heads.png``). Returns the paths (none when matplotlib is missing)."""
    import keras

    from .pictures import plot_patch_maps

    c = model.config
    images = images[:count]
    encoded = model.encode(images, return_attention_scores=True)
    scores = [keras.ops.convert_to_numpy(a) for a in encoded["attention_scores"]]
    predicted = keras.ops.convert_to_numpy(model.head(model.pool(encoded["sequence_output"]))).argmax(-1)
    rollout, layers, who = pooled_attention(model, scores)
    paths = []
    for i, image in enumerate(images):
        maps = np.concatenate([rollout[i][None], layers[:, i].mean(axis=1)])
        names = ["rollout"] + [f"layer {l + 1}" for l in range(c.num_layers)]
        title = f"label {class_names[labels[i]]}, predicted {class_names[predicted[i]]}; where {who} look"
        paths.append(plot_patch_maps(image, maps, names, os.path.join(out_dir, f"attention_{i}.png"), title=title))
    names = [f"layer {l + 1} head {h + 1}" for l in range(c.num_layers) for h in range(c.num_heads)]
    paths.append(plot_patch_maps(images[0], layers[:, 0].reshape(-1, *layers.shape[-2:]), names,
                                 os.path.join(out_dir, "heads.png"), columns=c.num_heads, show_image=False,
                                 title=f"where {who} look, per layer and head"))
    return [p for p in paths if p]


def plot_accuracy_curves(history, path):
    """Training and validation accuracy per epoch as a PNG; returns the path (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(6, 4))
    for key, name in (("accuracy", "training"), ("val_accuracy", "validation")):
        if history.get(key):
            axis.plot(range(1, len(history[key]) + 1), history[key], label=name)
    axis.set_xlabel("epoch")
    axis.set_ylabel("accuracy")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def run_training(settings, out_dir, *, splits=None, strategy=None, verbose=1, results_file="results.json",
                 tensorboard=True, backup=True, export=True, callbacks=(), viewer=False):
    """Trains a ViT on ``settings.dataset`` (or ``splits``), evaluates it on the test split, draws its attention
    and exports a SavedModel to ``out_dir/saved_model``.

    Args:
        settings: a :class:`TrainingSettings`.
        out_dir: the run's folder: results_file, curves.png, attention_*.png, heads.png, saved_model/, TensorBoard
            logs/ and the BackupAndRestore backup/.
        splits: :class:`~.data.ImageSplits` to use instead of the named dataset.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        verbose: ``fit``'s verbosity.
        tensorboard, backup: add those callbacks. export: write the SavedModel (TensorFlow backend only).
        callbacks: more callbacks for ``fit``.
        viewer: (the ViT) also write viewer.html, the interactive attention viewer (:mod:`attnlayers.viewer`) of the
            first test image.

    Returns:
        ``run_recipe``'s result with "test" (accuracy, loss, examples) and "export".
    """
    import keras

    from ..core import describe_runtime, run_recipe, standard_callbacks
    from ..core.runs.cli import budget_epochs
    from .data import ShiftedBatches

    if splits is None:
        splits = load_dataset(settings.dataset, seed=settings.seed, train_images=settings.train_images)
    strategy = strategy or _default_strategy()
    keras.utils.set_random_seed(settings.seed)
    with strategy.scope():
        model = build_model(settings, splits.image_shape, len(splits.class_names))
        schedule = compile_for_training(model, settings)
    (x_train, y_train), validation, (x_test, y_test) = splits.train, splits.validation, splits.test
    train = ShiftedBatches(x_train, y_train, settings.batch_size, shift=settings.shift, seed=settings.seed)
    c = model.config
    print(f"data: {settings.dataset}, {len(x_train):,} training / {len(validation[0]):,} validation / "
          f"{len(x_test):,} test images of {c.image_shape}, {len(splits.class_names)} classes; model: "
          f"{describe_model(model)}; {describe_runtime(strategy)}", flush=True)

    def evaluate(model):
        scores = model.evaluate(x_test, y_test, batch_size=256, return_dict=True, verbose=0)
        test = {"accuracy": float(scores["accuracy"]), "loss": float(scores["loss"]), "examples": len(x_test)}
        print(f"test ({test['examples']:,} images): accuracy {test['accuracy']:.4f}, loss {test['loss']:.4f}",
              flush=True)
        return {"test": test}

    def pictures(model, out):
        paths = [plot_accuracy_curves(model.history.history, os.path.join(out, "curves.png"))]
        if settings.model == "vit":
            paths += attention_pictures(model, x_test, y_test, splits.class_names, out)
            if viewer:
                from .viewer import attention_viewer

                paths.append(os.path.join(out, "viewer.html"))
                attention_viewer(model, x_test[0], paths[-1], class_names=splits.class_names)
        paths = [p for p in paths if p]
        for path in paths:
            print(f"wrote {path}")
        return paths

    def export_model(model, out):
        if not export or keras.backend.backend() != "tensorflow":
            return None
        from .export import export_classifier

        path = export_classifier(os.path.join(out, SAVED_MODEL_DIR), model, splits.class_names)
        print(f"exported a SavedModel in {path} (signature classify: uint8 images in, probabilities out)")
        return path

    record = {"task": "image_classification", **dataclasses.asdict(settings), "patch_size": patch_size(settings),
              "train_images": len(x_train),
              "validation_images": len(validation[0]), "test_images": len(x_test),
              "parameters": c.parameter_count(), "runtime": describe_runtime(strategy)}
    fit_callbacks = standard_callbacks(out_dir if (tensorboard or backup) else None, minutes=settings.minutes,
                                       backup_every=settings.backup_every,
                                       best={"monitor": "val_accuracy"}, tensorboard=tensorboard,
                                       backup=backup) + [schedule, *callbacks]
    return run_recipe(model, train, validation=validation, epochs=budget_epochs(settings.epochs, settings.minutes, 100),
                      callbacks=fit_callbacks, evaluate=evaluate, pictures=pictures, export=export_model,
                      out_dir=out_dir, record=record, verbose=verbose, strategy=strategy, results_file=results_file)


def _default_strategy():
    import tensorflow as tf

    return tf.distribute.get_strategy()


__all__ = ["DATASETS", "DEFAULT_OUT", "MODELS", "PATCH_SIZES", "SAVED_MODEL_DIR", "TrainingSettings",
           "attention_pictures", "build_model", "compile_for_training", "describe_model", "load_dataset",
           "patch_size", "plot_accuracy_curves", "pooled_attention", "run_training"]
