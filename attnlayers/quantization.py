"""Reading weights of a model quantized with Keras' own ``model.quantize("int8" | "int4")``.

Keras quantizes ``Dense``, ``EinsumDense`` and ``Embedding`` (and ``ReversibleEmbedding``) layers: each keeps an
integer kernel or table and a scale, and its ``call`` applies the scale. Their ``kernel`` / ``embeddings`` properties
give the integer values *without* the scale, so code that multiplies by them directly is silently wrong once the
model is quantized. These helpers read a weight through the layer's own call instead, and name quantized layers
where a float weight is required (checkpoints written from the weights).

    rows = float_rows(model.token_embedding)     # (V, d): the table, dequantized when quantized
    check_not_quantized(model, "save_hf_checkpoint")  # ValueError naming the first quantized layer
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.layer_walk import nested_layers


__all__ = ["check_not_quantized", "float_rows", "quantized_layers"]


def quantized_layers(model):
    """``[(layer path, mode)]`` of the layers of ``model`` (itself included) that ``quantize`` converted."""
    layers = [model, *nested_layers(model)]
    return [(layer.path, layer.quantization_mode) for layer in layers
            if getattr(layer, "quantization_mode", None) is not None]


def check_not_quantized(model, action):
    """Raises a ValueError naming the first quantized layer of ``model`` if any: ``action`` needs float weights (it
    would otherwise read the integer values without their scale)."""
    layers = quantized_layers(model)
    if layers:
        path, mode = layers[0]
        raise ValueError(
            f"{action} needs float weights, but the model is quantized ({len(layers)} layer(s), the first {path!r} in "
            f"mode {mode!r}): its `kernel` / `embeddings` are integers whose scale lives apart. Call {action} on the "
            "float model, before `quantize`."
        )


def float_rows(layer):
    """The output projection of ``layer`` as float rows, ``(units, d)``, read through the layer's call so that a
    quantized (or LoRA) layer is right:

    - an ``Embedding`` (or ``ReversibleEmbedding``): its table E (V, d) = the lookup of every id, E[0..V);
    - a ``Dense`` without bias: transpose(W) (units, d) = transpose(I_d W), the layer applied to the identity.

    For a float layer this is the variable itself (``embeddings``, or the transposed ``kernel``), so gradients reach
    it. Quantized, the integer weights are dequantized by Keras' own call (for a Dense the identity's rows quantize
    exactly).
    """
    mode = getattr(layer, "quantization_mode", None)
    if isinstance(layer, keras.layers.Embedding):
        if mode is None:
            return layer.embeddings
        return layer(ops.arange(layer.input_dim, dtype="int32"))  # (V, d): E[v] = q[v] / s[v]
    if isinstance(layer, keras.layers.Dense) and not layer.use_bias:
        if mode is None:
            return ops.transpose(layer.kernel)
        d = layer.input_spec.axes[-1]  # the input dim (the kernel property would unpack an int4 kernel)
        return ops.transpose(layer(ops.eye(d, dtype=layer.compute_dtype)))  # (units, d): I_d W, transposed
    raise ValueError(
        f"float_rows reads an Embedding or a Dense without bias; received {type(layer).__name__} {layer.name!r}."
    )
