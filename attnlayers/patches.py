"""Images as token sequences for Transformers (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words",
section 3.1): non-overlapping P x P patches, each linearly projected to D (a strided convolution), then a
learned class token put in front of them.

    x_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (eq. 1; N = H W / P^2, E: (P^2 C, D))

:class:`PatchEmbedding` computes the x_p^n E, :class:`ClassToken` prepends x_class, and
:class:`~attnlayers.PositionEmbedding` gives E_pos (the caller adds it).
"""

import keras
from keras import ops

from attnlayers.validation import check_rank, check_tensor, format_shape, positive_int

_IMAGES = "(batch, height, width, channels)"
_SEQUENCE = "(batch, length, dim)"


def _pair(value, name):
    """An int or a pair of positive ints as a (height, width) tuple; else a ValueError naming ``name``."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2:
        raise ValueError(f"`{name}` must be an int or a (height, width) pair; received {value!r}.")
    return tuple(positive_int(v, name) for v in pair)


@keras.saving.register_keras_serializable(package="attnlayers")
class PatchEmbedding(keras.layers.Layer):
    """Splits images into non-overlapping patches and projects each to ``hidden_dim`` (ViT's eq. 1, x_p^n E).

    The projection E of the flattened P x P x C patches is a convolution with kernel and stride P (the same
    linear map, computed without materialising the patches); the (H / P) x (W / P) grid is flattened row by
    row into the sequence.

    Args:
        patch_size: P, an int or a (P_h, P_w) pair.
        hidden_dim: D, the size of each patch's embedding.
        use_bias: a bias in the projection (ViT's: True).
        kernel_initializer, bias_initializer: of the projection.

    Call arguments:
        images: (B, H, W, C), H and W multiples of the patch size (channels last).

    Returns:
        (B, N, D) with N = (H / P_h) (W / P_w).

    Example:
    >>> tokens = PatchEmbedding(patch_size=16, hidden_dim=768)(images)   # (B, 196, 768) for 224 x 224 images
    """

    def __init__(self, patch_size, hidden_dim, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.patch_size = _pair(patch_size, "patch_size")
        self.hidden_dim = positive_int(hidden_dim, "hidden_dim")
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def _check(self, shape):
        check_rank(shape, (4,), "images", _IMAGES)
        for size, patch, axis in zip(shape[1:3], self.patch_size, ("height", "width")):
            if size is not None and size % patch:
                raise ValueError(f"`images` {axis} must be a multiple of the patch size {self.patch_size}; "
                                 f"received images of shape {format_shape(shape)}.")
        if shape[-1] is None:
            raise ValueError(f"`images` must have a known channel count; received shape {format_shape(shape)}.")

    def build(self, images_shape=None):
        check_tensor(images_shape, "images", _IMAGES)
        self._check(images_shape)
        self.projection = keras.layers.Conv2D(
            self.hidden_dim, self.patch_size, strides=self.patch_size, padding="valid", use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer, bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy, name="projection",
        )
        self.projection.build(images_shape)

    def call(self, images):
        check_tensor(images, "images", _IMAGES)
        self._check(images.shape)
        grid = self.projection(images)  # (B, H / P_h, W / P_w, D)
        shape = ops.shape(grid)
        return ops.reshape(grid, (shape[0], shape[1] * shape[2], self.hidden_dim))

    def compute_output_shape(self, images_shape):
        self._check(images_shape)
        b, h, w = images_shape[:3]
        n = None if h is None or w is None else (h // self.patch_size[0]) * (w // self.patch_size[1])
        return (b, n, self.hidden_dim)

    def get_config(self):
        return {
            **super().get_config(), "patch_size": self.patch_size, "hidden_dim": self.hidden_dim,
            "use_bias": self.use_bias, "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class ClassToken(keras.layers.Layer):
    """Prepends a learned token x_class to a sequence (BERT's [CLS]; ViT's eq. 1): its final state is the
    image's representation y (ViT's eq. 4).

    Args:
        initializer: of the (1, 1, D) token (ViT: zeros; keras-hub: random normal).

    Call arguments:
        inputs: (B, N, D).

    Returns:
        (B, N + 1, D), the class token at position 0.

    Example:
    >>> x = ClassToken()(PatchEmbedding(16, 768)(images))      # (B, 197, 768)
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape=None):
        check_tensor(inputs_shape, "inputs", _SEQUENCE)
        check_rank(inputs_shape, (3,), "inputs", _SEQUENCE)
        self.token = self.add_weight(name="token", shape=(1, 1, inputs_shape[-1]), initializer=self.initializer)

    def call(self, inputs):
        check_tensor(inputs, "inputs", _SEQUENCE)
        check_rank(inputs.shape, (3,), "inputs", _SEQUENCE)
        token = ops.cast(self.token, inputs.dtype)
        token = ops.broadcast_to(token, (ops.shape(inputs)[0], 1, self.token.shape[-1]))
        return ops.concatenate([token, inputs], axis=1)

    def compute_output_shape(self, inputs_shape):
        b, n, d = inputs_shape
        return (b, None if n is None else n + 1, d)

    def get_config(self):
        return {**super().get_config(), "initializer": keras.initializers.serialize(self.initializer)}


__all__ = ["ClassToken", "PatchEmbedding"]
