"""The image encoder of the captioners: images -> L = h * w annotation vectors a_i (Xu et al. 2015, section
3.1.1: "the encoder ... extracts L vectors, each a D-dimensional representation of a part of the image").

Default: a small CNN trained from scratch (works offline), optionally with a SAGAN self-attention block on its
last feature map (``self_attention=True``). Options: ``backbone="vit"``, a Vision Transformer over image patches
whose patch tokens are the annotation vectors (Dosovitskiy et al. 2021); ``backbone="hybrid"``, the same
Transformer over patches of the small CNN's feature map (their section 3.1, "Hybrid Architecture"); a
``keras.applications`` backbone by name, with ``weights=None``, ``"imagenet"`` (for users who are online) or a local
weights file, frozen or fine-tuned.

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from attnlayers import PatchEmbedding, PositionEmbedding, SelfAttention2D, TransformerEncoder
from attnlayers.validation import positive_int

__all__ = ["BACKBONES", "HYBRID_ENCODER", "HYBRID_FILTERS", "ImageEncoder", "PACKAGE", "SMALL_FILTERS", "VIT_ENCODER",
           "check_images", "check_pixel_values"]

PACKAGE = "attnlayers.captioning"

# keras.applications backbones this encoder knows how to preprocess: class name -> module of preprocess_input.
BACKBONES = {
    "MobileNet": "mobilenet", "MobileNetV2": "mobilenet_v2", "MobileNetV3Small": "mobilenet_v3",
    "MobileNetV3Large": "mobilenet_v3", "ResNet50": "resnet", "ResNet101": "resnet", "ResNet50V2": "resnet_v2",
    "VGG16": "vgg16", "VGG19": "vgg19", "InceptionV3": "inception_v3", "Xception": "xception",
    "EfficientNetB0": "efficientnet", "EfficientNetB1": "efficientnet", "DenseNet121": "densenet",
    "ConvNeXtTiny": "convnext",
}
# backbone="vit": the patch encoder's sizes (a 64-pixel image gives the small CNN's 8 x 8 grid); ``vit=`` overrides.
VIT_ENCODER = {"patch_size": 8, "num_layers": 2, "num_heads": 4, "hidden_dim": 128, "mlp_dim": 256}
# The small CNN's channels per block: 3 blocks, a 64-pixel image -> an 8 x 8 grid.
SMALL_FILTERS = (32, 64, 128)
# backbone="hybrid": the ViT's sizes over 2 x 2 patches of a 2-block CNN's map (64 pixels: 16 x 16 -> 8 x 8 tokens).
HYBRID_FILTERS = (32, 64)
HYBRID_ENCODER = {**VIT_ENCODER, "patch_size": 2}


def check_images(images, name="images"):
    """``images`` as a tensor of shape (B, H, W, 3) (uint8 0..255 or float); else a ValueError."""
    x = ops.convert_to_tensor(images)
    if len(x.shape) != 4 or x.shape[-1] != 3:
        raise ValueError(
            f"`{name}` must be RGB images of shape (batch, height, width, 3); received shape {tuple(x.shape)}."
        )
    return x


def check_pixel_values(images, name="images"):
    """Eager images checked against the captioners' pixel rule; returns them as a NumPy array.

    The captioners read pixel values in 0..255 (the encoder divides by 255 or applies the backbone's
    ``preprocess_input``). The rule, over the whole batch:

    - uint8: taken as they are;
    - another integer dtype: taken (as uint8) when every value is in 0..255, else refused;
    - float: taken as pixel values when every value is finite and in [0, 255], except that a batch whose
      values all lie in [0, 1] (and not all 0) is refused: it is almost surely images scaled to [0, 1], which
      would caption as black images; multiply them by 255 (or pass uint8);
    - anything else (bool, strings, complex) is refused.

    An empty batch and inputs that are not rank-4 images (precomputed features) are returned unchecked (the
    model checks their shapes). Only for eager values (NumPy arrays, lists, eager tensors): inside a traced
    function the values are unknown.

    Raises:
        ValueError: naming ``name``, the dtype and value range received and what is expected.
    """
    x = np.asarray(images)
    if x.ndim != 4 or x.size == 0 or x.dtype == np.uint8:
        return x
    expected = "pixel values in 0..255 (uint8, or integers / floats in that range)"
    if x.dtype.kind in "iu":
        low, high = int(x.min()), int(x.max())
        if low < 0 or high > 255:
            raise ValueError(f"`{name}` must hold {expected}; received {x.dtype} values in [{low}, {high}]. "
                             "Rescale or clip them to 0..255 first.")
        return x.astype(np.uint8)
    if x.dtype.kind != "f":
        raise ValueError(f"`{name}` must hold {expected}; received dtype {x.dtype}.")
    if not np.isfinite(x).all():
        raise ValueError(f"`{name}` must hold {expected}; received {x.dtype} values that are not finite (NaN or inf).")
    low, high = float(x.min()), float(x.max())
    if low < 0.0 or high > 255.0:
        raise ValueError(f"`{name}` must hold {expected}; received {x.dtype} values in [{low:g}, {high:g}].")
    if 0.0 < high <= 1.0:
        raise ValueError(f"`{name}` must hold {expected}; received {x.dtype} values all within [0, 1] "
                         f"([{low:g}, {high:g}]): images scaled to [0, 1]? Multiply them by 255 (or pass uint8).")
    return x


@keras.saving.register_keras_serializable(package=PACKAGE)
class ImageEncoder(keras.layers.Layer):
    """CNN feature map -> annotation vectors: (B, S, S, 3) images -> (B, L, D), L = h * w.

    Args:
        image_size: S, the side of the square input images (the pipeline and the export resize to it).
        backbone: "small" (default: ``len(filters)`` blocks of two 3x3 ReLU convolutions and a 2x2 max-pool,
            trained from scratch; a 64-pixel image gives an 8 x 8 grid of ``filters[-1]`` features), "vit" (a
            Vision Transformer trained from scratch: P x P patches embedded, learned positions, pre-LN
            Transformer layers; the (S / P)^2 patch tokens are the annotation vectors; sizes :data:`VIT_ENCODER`),
            "hybrid" (the same Transformer over P x P patches of the small CNN's last feature map, Dosovitskiy
            et al. section 3.1; sizes :data:`HYBRID_ENCODER`; with its filters (32, 64) a 64-pixel image gives
            16 x 16 features that each see ~16 pixels, then an 8 x 8 grid of tokens) or the class name of a
            ``keras.applications`` model (a key of :data:`BACKBONES`), used without its top.
        filters: the small CNN's channels per block; None: :data:`SMALL_FILTERS`, or :data:`HYBRID_FILTERS` for
            "hybrid".
        self_attention: (small CNN) a SAGAN block (:class:`attnlayers.SelfAttention2D`, Zhang et al. 2019) on the
            last feature map, so every annotation vector can take in the whole image (gamma starts at 0).
        vit: (backbone "vit" / "hybrid") overrides of :data:`VIT_ENCODER` / :data:`HYBRID_ENCODER`:
            ``patch_size``, ``num_layers``, ``num_heads``, ``hidden_dim``, ``mlp_dim``.
        weights: the backbone's weights: None (random), "imagenet" (downloads: online users only) or the path
            of a local weights file. Ignored by the small CNN.
        fine_tune: train the backbone's weights (False: frozen, a fixed feature extractor).
        position_embedding: add a learned embedding of the grid position to every a_i. The small CNN's
            features carry little absolute position, which a caption that orders objects left to right needs;
            a deep backbone's padding effects carry some.

    Call arguments:
        images: (B, S, S, 3), uint8 0..255 or float in the same range; or, for a frozen keras.applications
            backbone, its precomputed features (B, L, D) (:meth:`extract`, cached on disk by
            ``captioning.features.cache_features``), to which only the position embedding is added.
        training: dropout / batch-norm mode of the backbone.

    Returns:
        (B, L, D) annotation vectors a_1 .. a_L, row-major over the (h, w) grid (:attr:`grid_shape`).
    """

    def __init__(self, image_size=64, backbone="small", filters=None, weights=None, fine_tune=False,
                 position_embedding=True, self_attention=False, vit=None, **kwargs):
        super().__init__(**kwargs)
        self.image_size = positive_int(image_size, "image_size")
        self.backbone_name, self.weights_source, self.fine_tune = backbone, weights, bool(fine_tune)
        if filters is None:
            filters = HYBRID_FILTERS if backbone == "hybrid" else SMALL_FILTERS
        self.filters = tuple(positive_int(f, "filters") for f in filters)
        self.use_position_embedding = bool(position_embedding)
        self.self_attention = bool(self_attention)
        if self.self_attention and backbone != "small":
            raise ValueError(f"`self_attention` adds a SAGAN block to the small CNN; received backbone={backbone!r}.")
        transformer = backbone in ("vit", "hybrid")
        if vit is not None and not transformer:
            raise ValueError(f"`vit` sizes the backbones 'vit' and 'hybrid'; received backbone={backbone!r}.")
        self.vit = None
        if backbone not in ("small", "vit", "hybrid") and backbone not in BACKBONES:
            raise ValueError(f"Unknown backbone {backbone!r}; expected 'small', 'vit', 'hybrid' or one of "
                             f"{sorted(BACKBONES)}.")
        policy = self.dtype_policy  # the sublayers compute in the encoder's (mixed) precision
        self.layers_, self.preprocess = [], None
        if backbone in ("small", "hybrid"):
            if image_size % 2 ** len(self.filters):
                raise ValueError(f"`image_size` ({image_size}) must be divisible by 2**len(filters) "
                                 f"({2 ** len(self.filters)}) for the small CNN.")
            for i, f in enumerate(self.filters):
                self.layers_ += [
                    keras.layers.Conv2D(f, 3, padding="same", activation="relu", dtype=policy, name=f"conv{i}a"),
                    keras.layers.Conv2D(f, 3, padding="same", activation="relu", dtype=policy, name=f"conv{i}b"),
                    keras.layers.MaxPooling2D(2, dtype=policy, name=f"pool{i}")]
            if self.self_attention:
                self.layers_.append(SelfAttention2D(dtype=policy, name="self_attention"))
        if transformer:
            defaults = VIT_ENCODER if backbone == "vit" else HYBRID_ENCODER
            unknown = sorted(set(vit or {}) - set(defaults))
            if unknown:
                raise ValueError(f"Unknown `vit` sizes {unknown}; expected some of {sorted(defaults)}.")
            self.vit = {k: positive_int(v, f"vit's {k}") for k, v in {**defaults, **(vit or {})}.items()}
            side = image_size if backbone == "vit" else image_size // 2 ** len(self.filters)  # the patched map
            if side % self.vit["patch_size"]:
                what = "`image_size`" if backbone == "vit" else "the CNN's feature map"
                raise ValueError(f"{what} ({side}) must be divisible by the ViT's patch_size "
                                 f"({self.vit['patch_size']}).")
            if self.vit["hidden_dim"] % self.vit["num_heads"]:
                raise ValueError(f"the ViT's hidden_dim ({self.vit['hidden_dim']}) must be a multiple of its "
                                 f"num_heads ({self.vit['num_heads']}).")
            v = self.vit
            self.layers_ += [
                PatchEmbedding(v["patch_size"], v["hidden_dim"], dtype=policy, name="patch_embedding"),
                _PatchPositions((side // v["patch_size"]) ** 2, dtype=policy, name="patch_positions"),
                TransformerEncoder(v["num_layers"], v["num_heads"], v["mlp_dim"], activation="gelu",
                                   normalize_first=True, layer_norm_epsilon=1e-6, dtype=policy, name="transformer"),
            ]
        if backbone in BACKBONES:
            model = getattr(keras.applications, backbone)(include_top=False, weights=weights,
                                                          input_shape=(image_size, image_size, 3))
            model.trainable = self.fine_tune
            self.layers_ = [model]
            self.preprocess = getattr(keras.applications, BACKBONES[backbone]).preprocess_input
        self.position_embedding, self._grid = None, None

    @property
    def frozen(self):
        """True for a keras.applications backbone that is not fine-tuned: a fixed function of the image, whose
        features can be computed once (:meth:`extract`) and fed instead of the images."""
        return self.preprocess is not None and not self.fine_tune

    @property
    def grid_shape(self):
        """(h, w) of the feature map (None before the layer is built)."""
        return self._grid

    def build(self, images_shape=None):
        shape = (None, self.image_size, self.image_size, 3)
        for layer in self.layers_:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        if self.vit is not None:  # (B, N, D) patch tokens over the (side / P) x (side / P) grid
            side = self.image_size if self.backbone_name == "vit" else self.image_size // 2 ** len(self.filters)
            side //= self.vit["patch_size"]
            shape = (None, side, side, shape[-1])
        self._grid, self.feature_dim = (int(shape[1]), int(shape[2])), int(shape[3])
        if self.use_position_embedding:
            self.position_embedding = PositionEmbedding(self._grid[0] * self._grid[1], dtype=self.dtype_policy,
                                                        name="grid_position")
            self.position_embedding.build((None, self._grid[0] * self._grid[1], self.feature_dim))

    def check_input(self, inputs, name="images"):
        """``inputs`` as a tensor: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.

        Args:
            inputs: (B, S, S, 3) images, or (B, L, D) precomputed features (frozen backbone only).
            name: the argument's name in the errors.

        Returns:
            The tensor, (B, S, S, 3) or (B, L, D).

        Raises:
            ValueError: features of the wrong shape, features given to a fine-tuned backbone, images that are not
                (B, H, W, 3), or a static empty batch.
        """
        x = ops.convert_to_tensor(inputs)
        if len(x.shape) == 3 and self.frozen:
            if not self.built:
                self.build()
            if tuple(x.shape[1:]) != (self._grid[0] * self._grid[1], self.feature_dim):
                raise ValueError(f"Precomputed `{name}` features must have shape (batch, "
                                 f"{self._grid[0] * self._grid[1]}, {self.feature_dim}) for this backbone; "
                                 f"received shape {tuple(x.shape)}.")
            return x
        if len(x.shape) == 3 and self.preprocess is not None:
            raise ValueError(f"Precomputed features (rank 3, shape {tuple(x.shape)}) are accepted only by a frozen "
                             "backbone (fine_tune=False); pass images of shape (batch, height, width, 3).")
        x = check_images(x, name)
        if x.shape[0] == 0:  # a static empty batch: refused here, not by a shape error deep in the CNN
            raise ValueError(f"`{name}` is an empty batch (shape {tuple(x.shape)}); pass at least one image "
                             "(predict.caption_images returns [] for no images; the SavedModel serves empty batches).")
        return x

    def extract(self, images, training=None):
        """The backbone alone, before the position embedding.

        Args:
            images: (B, S, S, 3) pixel values 0..255, S = ``image_size``.
            training: whether dropout / batch-norm training is active (a frozen backbone stays in inference).

        Returns:
            (B, L, D) features, L = the grid's positions.

        Raises:
            ValueError: ``images`` are not (B, H, W, 3) or not ``image_size`` x ``image_size``.
        """
        x = check_images(images)
        if x.shape[1] is not None and (x.shape[1], x.shape[2]) != (self.image_size, self.image_size):
            raise ValueError(f"`images` must be {self.image_size} x {self.image_size} (resize them first); "
                             f"received shape {tuple(x.shape)}.")
        x = ops.cast(x, self.compute_dtype)
        x = x / 255.0 if self.preprocess is None else self.preprocess(x)
        for layer in self.layers_:
            x = layer(x, training=training and self.fine_tune if self.preprocess is not None else training)
        return ops.reshape(x, (ops.shape(x)[0], self._grid[0] * self._grid[1], self.feature_dim))  # (B, L, D)

    def call(self, images, training=None):
        x = self.check_input(images)
        a = ops.cast(x, self.compute_dtype) if len(x.shape) == 3 else self.extract(x, training=training)
        if self.position_embedding is not None:
            a = a + ops.cast(self.position_embedding(a), a.dtype)
        return a

    def compute_output_shape(self, images_shape):  # images or features: (B, L, D)
        return (images_shape[0], self._grid[0] * self._grid[1], self.feature_dim)

    def get_config(self):
        return {**super().get_config(), "image_size": self.image_size, "backbone": self.backbone_name,
                "filters": list(self.filters), "weights": self.weights_source, "fine_tune": self.fine_tune,
                "position_embedding": self.use_position_embedding, "self_attention": self.self_attention,
                "vit": self.vit}


@keras.saving.register_keras_serializable(package=PACKAGE)
class _PatchPositions(keras.layers.Layer):
    """x + E_pos: the ViT's learned patch positions (eq. 1; no class token), (B, N, D) -> (B, N, D)."""

    def __init__(self, num_patches, **kwargs):
        super().__init__(**kwargs)
        self.num_patches = positive_int(num_patches, "num_patches")
        self.positions = PositionEmbedding(num_patches, initializer=keras.initializers.RandomNormal(stddev=0.02),
                                           dtype=self.dtype_policy, name="positions")

    def build(self, inputs_shape):
        self.positions.build(inputs_shape)

    def call(self, inputs):
        return inputs + self.positions(inputs)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {**super().get_config(), "num_patches": self.num_patches}
