"""Weights from keras-hub: a ``keras_hub.models.GPT2Backbone`` has the architecture of :class:`GPT`, so copying
its weights gives the same function (the same logits, up to float rounding).

    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=..., num_layers=..., ...)
    model = from_keras_hub(backbone)                # a GPT with the backbone's sizes and weights
    copy_keras_hub_weights(backbone, model)         # or into a GPT built beforehand

keras_hub is imported by the caller, not here: this module is GPT's table for the shared copier
(``core.formats.weights``).
"""

from ..core.formats import weights
from .model import GPT, GPTConfig


__all__ = ["TABLE", "copy_keras_hub_weights", "from_keras_hub"]


def _sizes(backbone):
    return dict(
        vocabulary_size=backbone.vocabulary_size, max_sequence_length=backbone.max_sequence_length,
        num_layers=backbone.num_layers, num_heads=backbone.num_heads, hidden_dim=backbone.hidden_dim,
        intermediate_dim=backbone.intermediate_dim, dropout=backbone.dropout,
    )


def _relative(weight, layer_name):
    """The path of ``weight`` below the layer named ``layer_name`` (e.g. "token_embedding/embeddings")."""
    parts = weight.path.split("/")
    return "/".join(parts[parts.index(layer_name) + 1:]) if layer_name in parts else weight.path


def _targets(model):
    """Our weights by path below the embedding / decoder; a padded token table as its V real rows."""
    targets = {_relative(w, model.embedding.name): model.vocabulary_view(w) for w in model.embedding.weights}
    targets.update({_relative(w, model.decoder.name): w for w in model.decoder.weights})
    return targets


# keras-hub's paths -> ours, relative to the backbone and to our embedding / decoder layers.
TABLE = weights.KerasHubTable(
    renames=(
        ("transformer_layer_", "transformerdecoderblock_"),
        ("feedforward_intermediate_dense", "feedforward/intermediate_dense"),
        ("feedforward_output_dense", "feedforward/output_dense"),
        ("^layer_norm/", "final_layer_norm/"),  # the final LayerNorm
    ),
    sizes=_sizes,
    targets=_targets,
)


def from_keras_hub(backbone, **config):
    """A :class:`GPT` with the sizes and the weights of a keras-hub ``GPT2Backbone``.

    Args:
        backbone: a ``keras_hub.models.GPT2Backbone``.
        **config: other :class:`GPTConfig` fields (``end_token_id``, ``pad_token_id``, ``dropout``...).

    Returns:
        The :class:`GPT`.
    """
    return weights.from_keras_hub(backbone, lambda fields: GPT(GPTConfig(**fields)), TABLE, **config)


def copy_keras_hub_weights(backbone, model):
    """Copies every weight of a keras-hub ``GPT2Backbone`` into a :class:`GPT` of the same sizes.

    Args:
        backbone: a ``keras_hub.models.GPT2Backbone``.
        model: a :class:`GPT` with the same vocabulary, sequence length, layers, heads and sizes.

    Returns:
        ``model``, whose logits are then ``backbone(...)["sequence_output"] E^T``: keras-hub's
        ``GPT2CausalLM`` logits.

    Raises:
        ValueError: naming the weights that are missing on either side or whose shapes differ.
    """
    return weights.copy_keras_hub_weights(backbone, model, TABLE)
