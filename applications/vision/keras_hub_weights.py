"""Weights from keras-hub: a ``keras_hub.models.ViTBackbone`` has the architecture of :class:`ViT`'s encoder, so
copying its weights gives the same final states (up to float rounding).

    backbone = keras_hub.models.ViTBackbone(image_shape=..., patch_size=..., num_layers=..., ...)
    model = from_keras_hub(backbone, num_classes=10)   # a ViT with the backbone's sizes and weights (a new head)
    copy_keras_hub_weights(backbone, model)             # or into a ViT built beforehand

keras_hub is imported by the caller, not here: this module only reads the backbone's attributes and weights.
"""

import re

from ..core.weights import copy_weights_by_path, renamed
from .model import ViT, ViTConfig

# keras-hub's paths -> ours (block numbers: keras-hub counts from 1, ours from 0; see _rename).
_RENAMES = (
    ("vit_patching_and_embedding/class_token", "class_token/token"),
    ("vit_patching_and_embedding/patch_embedding/", "patch_embedding/projection/"),
    ("vit_patching_and_embedding/position_embedding/", "position_embedding/"),
    ("vit_encoder/ln/", "encoder/final_layer_norm/"),
    ("/mha/", "/self_attention/"),
    ("/ln_1/", "/self_attention_layer_norm/"),
    ("/ln_2/", "/feedforward_layer_norm/"),
    ("/mlp/dense_1/", "/feedforward/intermediate_dense/"),
    ("/mlp/dense_2/", "/feedforward/output_dense/"),
)
_BLOCK = re.compile(r"^vit_encoder/transformer_block_(\d+)/")


def _rename(path):
    path = _BLOCK.sub(lambda m: f"encoder/transformerencoderblock_{int(m.group(1)) - 1}/", path)
    return renamed(path, _RENAMES)


def from_keras_hub(backbone, num_classes=1000, **config):
    """A :class:`ViT` with the sizes and encoder weights of a keras-hub ``ViTBackbone`` (and a fresh head).

    Args:
        backbone: a ``keras_hub.models.ViTBackbone`` (channels last, with its class token).
        num_classes: the new head's outputs.
        **config: other :class:`ViTConfig` fields (``pooling``...).
    """
    if not backbone.use_class_token or backbone.data_format != "channels_last":
        raise ValueError("`backbone` must use a class token and channels-last images (ViT's layout); received "
                         f"use_class_token={backbone.use_class_token}, data_format={backbone.data_format!r}.")
    patch = backbone.patch_size
    if patch[0] != patch[1]:
        raise ValueError(f"`backbone` must have square patches; received patch_size={patch}.")
    sizes = dict(
        image_shape=tuple(backbone.image_shape), patch_size=patch[0], num_classes=num_classes,
        num_layers=backbone.num_layers, num_heads=backbone.num_heads, hidden_dim=backbone.hidden_dim,
        mlp_dim=backbone.mlp_dim, dropout=backbone.dropout_rate, attention_dropout=backbone.attention_dropout,
        layer_norm_epsilon=backbone.layer_norm_epsilon,
    )
    return copy_keras_hub_weights(backbone, ViT(ViTConfig(**{**sizes, **config})))


def copy_keras_hub_weights(backbone, model):
    """Copies every weight of a keras-hub ``ViTBackbone`` into a :class:`ViT` of the same sizes (all but the head).

    Returns:
        ``model``, whose ``encode(images)["sequence_output"]`` is then ``backbone(images)``.

    Raises:
        ValueError: naming the weights that are missing on either side or whose shapes differ.
    """
    targets = {w.path: w for w in model.weights if not w.path.startswith(model.head.name + "/")}
    copy_weights_by_path(backbone.weights, targets, _rename, source_name="backbone", target_name="model")
    return model
