"""A small convolutional classifier: the baseline the ViT is compared with at about the same number of weights.

    images (B, H, W, C)
      -> per stage s (filters F_s): [3 x 3 convolution (no bias) -> BatchNorm -> ReLU] x 2 -> 2 x 2 max pooling
      -> global average pooling -> Dense head
    logits (B, classes)

The default ``ConvNetConfig`` (filters 24 / 48 / 88) has 146,373 weights (BatchNorm's moving statistics included),
the default ViT on 32 x 32 x 3 images with 4 x 4 patches and 5 classes 141,701.
"""

from __future__ import annotations

import dataclasses

import keras

from attnlayers.validation import positive_int

from .serialization import DataclassConfigMixin


@dataclasses.dataclass
class ConvNetConfig:
    """The sizes of a :class:`ConvNet`.

    Attributes:
        image_shape: (H, W, C); H and W divisible by 2 ** len(filters).
        num_classes: the head's outputs.
        filters: F_s, the convolutions' channels per stage (each stage halves H and W).
        convolutions_per_stage: 3 x 3 convolutions before each pooling.
    """

    image_shape: tuple = (32, 32, 3)
    num_classes: int = 10
    filters: tuple = (24, 48, 88)
    convolutions_per_stage: int = 2

    def __post_init__(self):
        self.image_shape, self.filters = tuple(self.image_shape), tuple(self.filters)
        if len(self.image_shape) != 3:
            raise ValueError(f"`image_shape` must be (height, width, channels); received {self.image_shape!r}.")
        for i, name in enumerate(("height", "width", "channels")):
            positive_int(self.image_shape[i], f"image_shape's {name}")
        if not self.filters:
            raise ValueError("`filters` must name at least one stage.")
        for f in self.filters:
            positive_int(f, "filters")
        positive_int(self.num_classes, "num_classes")
        positive_int(self.convolutions_per_stage, "convolutions_per_stage")
        factor = 2 ** len(self.filters)
        if self.image_shape[0] % factor or self.image_shape[1] % factor:
            raise ValueError(f"`image_shape` {self.image_shape} must have a height and width divisible by "
                             f"2 ** len(filters) = {factor}.")

    def parameter_count(self):
        """Weights in closed form: per convolution 9 C_in F (no bias) + 4 F (BatchNorm: gamma, beta and the two
        moving statistics); head F_last K + K."""
        total, channels = 0, self.image_shape[2]
        for f in self.filters:
            for _ in range(self.convolutions_per_stage):
                total += 9 * channels * f + 4 * f
                channels = f
        return total + channels * self.num_classes + self.num_classes


@keras.saving.register_keras_serializable(package="attnlayers.vision")
class ConvNet(DataclassConfigMixin, keras.Model):
    """A small CNN image classifier (see the module docstring).

    Args:
        config: a :class:`ConvNetConfig`, a dict of its fields, or None (the default sizes).

    Call arguments:
        images: float (B, H, W, C) of the config's image shape. training: BatchNorm's batch statistics.

    Returns:
        logits (B, num_classes).
    """

    def __init__(self, config=None, **kwargs):
        super().__init__(**kwargs)
        if config is None:
            config = ConvNetConfig()
        elif isinstance(config, dict):
            config = ConvNetConfig(**config)
        elif not isinstance(config, ConvNetConfig):
            raise ValueError(f"`config` must be a ConvNetConfig, a dict of its fields or None; received {config!r}.")
        self.config = c = config
        self.stages = []
        for s, f in enumerate(c.filters):
            for i in range(c.convolutions_per_stage):
                self.stages += [
                    keras.layers.Conv2D(f, 3, padding="same", use_bias=False, name=f"stage{s + 1}_conv{i + 1}",
                                        dtype=self.dtype_policy),
                    keras.layers.BatchNormalization(name=f"stage{s + 1}_norm{i + 1}", dtype=self.dtype_policy),
                    keras.layers.ReLU(dtype=self.dtype_policy),
                ]
            self.stages.append(keras.layers.MaxPooling2D(2, name=f"stage{s + 1}_pool", dtype=self.dtype_policy))
        self.pooling = keras.layers.GlobalAveragePooling2D(dtype=self.dtype_policy)
        self.head = keras.layers.Dense(c.num_classes, name="head", dtype=self.dtype_policy)
        self.build((None, *c.image_shape))

    def build(self, images_shape):
        shape = tuple(images_shape)
        for layer in self.stages:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        self.head.build((None, shape[-1]))
        self.built = True

    def call(self, images, training=None):
        x = images
        for layer in self.stages:
            x = layer(x, training=training) if isinstance(layer, keras.layers.BatchNormalization) else layer(x)
        return self.head(self.pooling(x))

    def compute_output_shape(self, images_shape):
        return (images_shape[0], self.config.num_classes)


__all__ = ["ConvNet", "ConvNetConfig"]
