"""ViT: the Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words") from attnlayers' layers.

    images (B, H, W, C), pixel values as the caller scaled them (the data and the export use [0, 1])
      -> PatchEmbedding: P x P patches, each projected to D (a strided convolution)       x_p^n E
      -> ClassToken: x_class in front;  + PositionEmbedding (learned, N + 1 rows)           z_0  (eq. 1)
      -> Dropout
      -> TransformerEncoder(normalize_first=True): L pre-LN blocks                           z_1 .. z_L
           z' = MSA(LN(z)) + z;  z = MLP(LN(z')) + z'  (GELU)                            (eqs. 2, 3)
         then the final LayerNorm                                                         y = LN(z_L^0)  (eq. 4)
      -> pooling: the class token's state (ViT) or the mean over the patches ("mean")
      -> Dense head
    logits (B, classes)

Sizes: ``ViTConfig.preset("ti16" | "s16" | "b16" | "l16")`` (ViT-Ti/S/B/L at 16 x 16 patches, 224 x 224, 1,000
classes: 5,717,416 / 22,050,664 / 86,567,656 / 304,326,632 weights, the published 5.7M / 22M / 86.6M / 307M);
``config.parameter_count()`` in closed form; the default ``ViTConfig()`` is a tiny model for 32 x 32 images.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from attnlayers import ClassToken, PatchEmbedding, PositionEmbedding, TransformerEncoder, lora
from attnlayers.validation import one_of, positive_int, rate_in_unit_interval

from .serialization import DataclassConfigMixin

# name -> (layers, hidden_dim, heads, mlp_dim): Dosovitskiy et al. 2021 table 1; Ti and S from Touvron et al. 2021.
VIT_PRESETS = {
    "ti16": (12, 192, 3, 768),
    "s16": (12, 384, 6, 1536),
    "b16": (12, 768, 12, 3072),
    "l16": (24, 1024, 16, 4096),
}
POOLING = ("token", "mean")


@dataclasses.dataclass
class ViTConfig:
    """The sizes of a :class:`ViT` (keras-hub ``ViTBackbone``'s argument names).

    Attributes:
        image_shape: (H, W, C), H and W multiples of ``patch_size``.
        patch_size: P (an int: square patches).
        num_classes: the head's outputs.
        num_layers, num_heads, hidden_dim: L, heads, D; mlp_dim: the MLP's hidden size (4 D in ViT).
        dropout: on the embeddings and each residual branch; attention_dropout: on the attention weights.
        layer_norm_epsilon: 1e-6 in ViT.
        pooling: "token" (the class token's final state, ViT's eq. 4) or "mean" (the patches' mean; the paper's
            appendix D.3: as good, with its own learning rate). The class token exists either way.
    """

    image_shape: tuple = (32, 32, 3)
    patch_size: int = 4
    num_classes: int = 10
    num_layers: int = 4
    num_heads: int = 4
    hidden_dim: int = 64
    mlp_dim: int = 128
    dropout: float = 0.0
    attention_dropout: float = 0.0
    layer_norm_epsilon: float = 1e-6
    pooling: str = "token"

    def __post_init__(self):
        self.image_shape = tuple(self.image_shape)
        if len(self.image_shape) != 3:
            raise ValueError(f"`image_shape` must be (height, width, channels); received {self.image_shape!r}.")
        for i, name in enumerate(("height", "width", "channels")):
            positive_int(self.image_shape[i], f"image_shape's {name}")
        for name in ("patch_size", "num_classes", "num_layers", "num_heads", "hidden_dim", "mlp_dim"):
            positive_int(getattr(self, name), name)
        for size in self.image_shape[:2]:
            if size % self.patch_size:
                raise ValueError(f"`image_shape` {self.image_shape} must have a height and width that are multiples "
                                 f"of `patch_size`={self.patch_size}.")
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"`hidden_dim`={self.hidden_dim} must be a multiple of `num_heads`={self.num_heads}.")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        self.attention_dropout = rate_in_unit_interval(self.attention_dropout, "attention_dropout")
        one_of(self.pooling, "pooling", POOLING)

    @property
    def num_patches(self):
        """N = H W / P^2."""
        return (self.image_shape[0] // self.patch_size) * (self.image_shape[1] // self.patch_size)

    @classmethod
    def preset(cls, name, **overrides):
        """ViT size ``name`` of :data:`VIT_PRESETS` at 16 x 16 patches on 224 x 224 x 3 images with 1,000 classes
        (ImageNet's), unless ``overrides`` (other ViTConfig fields) say otherwise.

        Args:
            name: a key of :data:`VIT_PRESETS`.
            **overrides: ViTConfig fields that replace the preset's.

        Returns:
            A :class:`ViTConfig`.

        Raises:
            ValueError: an unknown preset, or overrides that are not ViTConfig fields.
        """
        one_of(name, "preset", tuple(VIT_PRESETS))
        layers, hidden, heads, mlp = VIT_PRESETS[name]
        sizes = {"image_shape": (224, 224, 3), "patch_size": 16, "num_classes": 1000, "num_layers": layers,
                 "num_heads": heads, "hidden_dim": hidden, "mlp_dim": mlp}
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"Unknown ViTConfig fields {unknown} in the overrides of preset {name!r}.")
        return cls(**{**sizes, **overrides})

    def parameter_count(self):
        """The number of weights of a :class:`ViT` of these sizes, in closed form:

        patch projection: P^2 C D + D; class token: D; positions: (N + 1) D;
        each block: 2 D (LN) + 4 (D^2 + D) (Q, K, V, output) + 2 D (LN) + D D_mlp + D_mlp + D_mlp D + D
                    = 4 D^2 + 2 D D_mlp + D_mlp + 9 D;
        final LayerNorm: 2 D; head: D K + K.
        """
        p, c, d, f, k = self.patch_size, self.image_shape[2], self.hidden_dim, self.mlp_dim, self.num_classes
        block = 4 * d * d + 2 * d * f + f + 9 * d
        embedding = p * p * c * d + d + d + (self.num_patches + 1) * d
        return embedding + self.num_layers * block + 2 * d + d * k + k


def _as_config(config):
    if config is None:
        return ViTConfig()
    if isinstance(config, str):
        return ViTConfig.preset(config)
    if isinstance(config, dict):
        return ViTConfig(**config)
    if isinstance(config, ViTConfig):
        return config
    raise ValueError(f"`config` must be a ViTConfig, a dict, a preset name of {list(VIT_PRESETS)} or None; "
                     f"received config={config!r}.")


@keras.saving.register_keras_serializable(package="attnlayers.vision")
class ViT(DataclassConfigMixin, keras.Model):
    """A Vision Transformer image classifier (see the module docstring).

    Args:
        config: a :class:`ViTConfig`, a dict of its fields, a preset name of :data:`VIT_PRESETS`, or None (the
            tiny default).

    Call arguments:
        images: float (B, H, W, C) of the config's image shape.
        training: enables dropout.

    Returns:
        logits (B, num_classes).

    :meth:`encode` returns the final states and, on request, every layer's attention weights (B, heads, N + 1,
    N + 1), what attention rollout (:func:`attnlayers.rollout.attention_rollout`) reads.

    Example:
    >>> model = ViT(ViTConfig(image_shape=(32, 32, 3), patch_size=4, num_classes=10))
    >>> logits = model(images)                                         # (B, 10)
    >>> maps = model.encode(images, return_attention_scores=True)["attention_scores"]   # 4 x (B, 4, 65, 65)
    """

    # LoRA (attnlayers.lora): model.enable_lora(rank, target, alpha), save_lora_weights(path), load_lora_weights(path),
    # merge_lora(), as keras-hub's backbones have them
    enable_lora, merge_lora = lora.enable_lora, lora.merge_lora
    save_lora_weights, load_lora_weights = lora.save_lora_weights, lora.load_lora_weights

    def __init__(self, config=None, **kwargs):
        super().__init__(**kwargs)
        self.config = c = _as_config(config)
        self.patch_embedding = PatchEmbedding(c.patch_size, c.hidden_dim, name="patch_embedding",
                                              dtype=self.dtype_policy)
        self.class_token = ClassToken(name="class_token", dtype=self.dtype_policy)
        self.position_embedding = PositionEmbedding(
            c.num_patches + 1, initializer=keras.initializers.RandomNormal(stddev=0.02), name="position_embedding",
            dtype=self.dtype_policy,
        )
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        self.encoder = TransformerEncoder(
            c.num_layers, c.num_heads, c.mlp_dim, dropout=c.dropout, activation="gelu",
            layer_norm_epsilon=c.layer_norm_epsilon, normalize_first=True,
            attention_kwargs={"dropout": c.attention_dropout},  # the weights' own rate, as keras-hub's ViT
            name="encoder", dtype=self.dtype_policy,
        )
        self.head = keras.layers.Dense(c.num_classes, name="head", dtype=self.dtype_policy)
        images = (None, *c.image_shape)
        sequence = (None, c.num_patches + 1, c.hidden_dim)
        self.patch_embedding.build(images)
        self.class_token.build((None, c.num_patches, c.hidden_dim))
        self.position_embedding.build(sequence)
        self.encoder.build(sequence)
        self.head.build((None, c.hidden_dim))
        self.built = True

    def _check_images(self, images):
        shape = tuple(images.shape)
        if len(shape) != 4 or any(s is not None and s != e for s, e in zip(shape[1:], self.config.image_shape)):
            raise ValueError(f"`images` must have shape (batch, {', '.join(map(str, self.config.image_shape))}) "
                             f"(the config's image_shape); received shape {shape}.")

    def encode(self, images, return_attention_scores=False, training=None):
        """The encoder's final states y (position 0: the class token).

        Args:
            images: (B, H, W, C) images of the config's ``image_shape``.
            return_attention_scores: also return every layer's attention weights.
            training: whether dropout is active.

        Returns:
            ``{"sequence_output": (B, N + 1, D)}``; with ``return_attention_scores``, also ``"attention_scores"``:
            L tensors (B, heads, N + 1, N + 1).

        Raises:
            ValueError: ``images`` do not have the config's ``image_shape`` (after the batch axis).
        """
        images = ops.convert_to_tensor(images, dtype=self.compute_dtype)
        self._check_images(images)
        x = self.class_token(self.patch_embedding(images))
        x = self.embedding_dropout(x + self.position_embedding(x), training=training)  # eq. 1
        out = self.encoder(x, return_attention_scores=return_attention_scores, training=training)
        return out if return_attention_scores else {"sequence_output": out}

    def pool(self, sequence_output):
        """The image's representation: the class token's state (eq. 4) or the patches' mean (``pooling="mean"``).

        Args:
            sequence_output: (B, N + 1, D) encoder states, as :meth:`encode` returns them.

        Returns:
            (B, D).
        """
        if self.config.pooling == "mean":
            return ops.mean(sequence_output[:, 1:], axis=1)
        return sequence_output[:, 0]

    def call(self, images, training=None):
        return self.head(self.pool(self.encode(images, training=training)["sequence_output"]))

    def compute_output_shape(self, images_shape):
        return (images_shape[0], self.config.num_classes)


__all__ = ["POOLING", "VIT_PRESETS", "ViT", "ViTConfig"]
