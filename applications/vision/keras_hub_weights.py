"""Weights from keras-hub: a ``keras_hub.models.ViTBackbone`` has the architecture of :class:`ViT`'s encoder, so
copying its weights gives the same final states (up to float rounding).

    backbone = keras_hub.models.ViTBackbone(image_shape=..., patch_size=..., num_layers=..., ...)
    model = from_keras_hub(backbone, num_classes=10)   # a ViT with the backbone's sizes and weights (a new head)
    copy_keras_hub_weights(backbone, model)             # or into a ViT built beforehand

keras_hub is imported by the caller, not here: this module is ViT's table for the shared copier
(``core.formats.weights``).
"""

from ..core.formats import weights
from .model import ViT, ViTConfig


__all__ = ["TABLE", "copy_keras_hub_weights", "from_keras_hub"]


def _sizes(backbone):
    if not backbone.use_class_token or backbone.data_format != "channels_last":
        raise ValueError("`backbone` must use a class token and channels-last images (ViT's layout); received "
                         f"use_class_token={backbone.use_class_token}, data_format={backbone.data_format!r}.")
    patch = backbone.patch_size
    if patch[0] != patch[1]:
        raise ValueError(f"`backbone` must have square patches; received patch_size={patch}.")
    return dict(
        image_shape=tuple(backbone.image_shape), patch_size=patch[0], num_layers=backbone.num_layers,
        num_heads=backbone.num_heads, hidden_dim=backbone.hidden_dim, mlp_dim=backbone.mlp_dim,
        dropout=backbone.dropout_rate, attention_dropout=backbone.attention_dropout,
        layer_norm_epsilon=backbone.layer_norm_epsilon,
    )


# keras-hub's paths -> ours (block numbers: keras-hub counts from 1, ours from 0).
TABLE = weights.KerasHubTable(
    renames=(
        (r"^vit_encoder/transformer_block_(\d+)/",
         lambda m: f"encoder/transformerencoderblock_{int(m.group(1)) - 1}/"),
        ("vit_patching_and_embedding/class_token", "class_token/token"),
        ("vit_patching_and_embedding/patch_embedding/", "patch_embedding/projection/"),
        ("vit_patching_and_embedding/position_embedding/", "position_embedding/"),
        ("vit_encoder/ln/", "encoder/final_layer_norm/"),
        ("/mha/", "/self_attention/"),
        ("/ln_1/", "/self_attention_layer_norm/"),
        ("/ln_2/", "/feedforward_layer_norm/"),
        ("/mlp/dense_1/", "/feedforward/intermediate_dense/"),
        ("/mlp/dense_2/", "/feedforward/output_dense/"),
    ),
    sizes=_sizes,
    targets=lambda model: {w.path: w for w in model.weights if not w.path.startswith(model.head.name + "/")},
)


def from_keras_hub(backbone, num_classes=1000, **config):
    """A :class:`ViT` with the sizes and encoder weights of a keras-hub ``ViTBackbone`` (and a fresh head).

    Args:
        backbone: a ``keras_hub.models.ViTBackbone`` (channels last, with its class token).
        num_classes: the new head's outputs.
        **config: other :class:`ViTConfig` fields (``pooling``...).
    """
    return weights.from_keras_hub(backbone, lambda fields: ViT(ViTConfig(**fields)), TABLE, num_classes=num_classes,
                                  **config)


def copy_keras_hub_weights(backbone, model):
    """Copies every weight of a keras-hub ``ViTBackbone`` into a :class:`ViT` of the same sizes (all but the head).

    Args:
        backbone: a keras-hub ``ViTBackbone``.
        model: a :class:`ViT` of the same sizes.

    Returns:
        ``model``, whose ``encode(images)["sequence_output"]`` is then ``backbone(images)``.

    Raises:
        ValueError: naming the weights that are missing on either side or whose shapes differ.
    """
    return weights.copy_keras_hub_weights(backbone, model, TABLE)
