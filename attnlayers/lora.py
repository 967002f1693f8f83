"""LoRA: low-rank adapters on the projections of a Transformer (Hu et al. 2021), through Keras' own adapters of
``Dense`` and ``EinsumDense`` (``layer.enable_lora``):

    h = W x + (alpha / r) B A x          (Hu et al. 2021, eq. 3; W frozen, A random, B = 0 at the start)

so the model computes what it did until B moves, and only A and B train. Keras' ``EinsumDense`` adapter keeps the
kernel's leading axes: for a query / key / value kernel (d_model, heads, head_size) A is (d_model, heads, r) and B
is (r, head_size) (each head's update A_n B has rank <= r; keras-hub's adapters, the same); for the attention output
(heads, head_size, d_model) and for ``Dense`` kernels (d_in, d_out) it is the paper's single rank-r product.

Targets, by name (:data:`TARGETS`):

- ``"query"``, ``"key"``, ``"value"``: W^Q, W^K, W^V of every multi-head attention (self- and cross-attention);
- ``"output"``: the attention output projection W^O;
- ``"ffn_intermediate"``, ``"ffn_gate"``, ``"ffn_output"``: the feed-forward's W_1, its gate V (SwiGLU / GeGLU
  only) and W_2 (:class:`~attnlayers.feed_forward.FeedForward`); ``"ffn"`` (alias ``"mlp"``): the three.

    >>> keys = enable_lora(model, rank=8)                  # query and value, alpha = rank
    >>> model.fit(...)                                     # trains the adapters only
    >>> save_lora_weights(model, "adapters.npz")           # the adapters alone (rank, alpha, targets inside)
    >>> load_lora_weights(fresh_model, "adapters.npz")     # enables LoRA as saved, then loads
    >>> merge_lora(model)                                  # W <- W + (alpha / r) B A; adapters dropped
"""

from __future__ import annotations

import gc
import json

import keras
import numpy as np
from keras import ops

from attnlayers.feed_forward import FeedForward
from attnlayers.layer_walk import nested_layers
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.validation import positive_int

TARGETS = {
    "query": "W^Q of every multi-head attention (self- and cross-attention)",
    "key": "W^K of every multi-head attention",
    "value": "W^V of every multi-head attention",
    "output": "W^O, the attention output projection",
    "ffn_intermediate": "the feed-forward's first projection W_1",
    "ffn_gate": "the gated feed-forward's V (SwiGLU / GeGLU)",
    "ffn_output": "the feed-forward's second projection W_2",
    "ffn": "ffn_intermediate, ffn_gate and ffn_output",
    "mlp": "an alias of ffn",
}
_GROUPS = {"ffn": ("ffn_intermediate", "ffn_gate", "ffn_output")}
_GROUPS["mlp"] = _GROUPS["ffn"]
_ATTENTION = {"query": "query_dense", "key": "key_dense", "value": "value_dense", "output": "output_dense"}
_FEED_FORWARD = {"ffn_intermediate": "intermediate_dense", "ffn_gate": "gate_dense", "ffn_output": "output_dense"}
_CONFIG_KEY = "__lora_config__"
_ADAPTERS = ("lora_kernel_a", "lora_kernel_b")


def _target_names(target):
    """``target`` (a name or a sequence of names of :data:`TARGETS`) -> the projection names, groups expanded."""
    names = (target,) if isinstance(target, str) else tuple(target)
    unknown = [name for name in names if name not in TARGETS]
    if unknown or not names:
        raise ValueError(f"`target` must name projections among {list(TARGETS)}; received target={target!r}.")
    expanded = []
    for name in names:
        for part in _GROUPS.get(name, (name,)):
            if part not in expanded:
                expanded.append(part)
    return tuple(expanded)


def _key(layer):
    """A projection's name inside its model: its weights' path less the weight name
    ("decoder/transformerdecoderblock_0/self_attention/query"), the same in every model built from one config."""
    weight = layer.lora_kernel_a if getattr(layer, "lora_enabled", False) else layer.kernel
    return weight.path.rsplit("/", 1)[0]


def target_layers(model, target=("query", "value")):
    """The projections ``target`` names in ``model``: ``{key: layer}`` (``Dense`` / ``EinsumDense`` layers), keyed by
    their path inside the model, in the order of ``model.weights`` (block 0 first).

    Args:
        model: a Keras model or layer holding attnlayers' (or Keras') ``MultiHeadAttention`` and / or
            :class:`~attnlayers.feed_forward.FeedForward` layers, built.
        target: names of :data:`TARGETS`.
    """
    names = _target_names(target)
    if not model.built:
        raise ValueError(
            f"`model` ({type(model).__name__}) is not built: call it once (or build it) before adding adapters, "
            "whose shapes are its projections'."
        )
    found = {}
    for layer in nested_layers(model):
        if isinstance(layer, (MultiHeadAttention, keras.layers.MultiHeadAttention)):
            projections = [getattr(layer, _ATTENTION[name]) for name in names if name in _ATTENTION]
        elif isinstance(layer, FeedForward):
            projections = [getattr(layer, _FEED_FORWARD[name], None) for name in names if name in _FEED_FORWARD]
        else:
            continue
        for projection in projections:
            if projection is not None:
                found[_key(projection)] = projection
    return _in_weight_order(model, found)


def _in_weight_order(model, layers):
    """``layers`` ({key: layer}) in the order of ``model.weights`` (block 0 first)."""
    order = {}
    for i, weight in enumerate(model.weights):
        order.setdefault(weight.path.rsplit("/", 1)[0], i)
    return dict(sorted(layers.items(), key=lambda item: order[item[0]]))


def lora_layers(model):
    """The projections of ``model`` that carry adapters: ``{key: layer}``."""
    return _in_weight_order(
        model, {_key(layer): layer for layer in nested_layers(model) if getattr(layer, "lora_enabled", False)}
    )


def enable_lora(model, rank, target=("query", "value"), alpha=None):
    """Adds rank-``rank`` adapters to the ``target`` projections of ``model`` and freezes every other weight: after
    it, ``model.trainable_weights`` are the adapters alone (embeddings, norms, biases, kernels, heads frozen). The
    model's outputs are unchanged until training moves B (B = 0).

    Args:
        model: a built model (GPT, BertBackbone, ViT, TransformerTranslator, ...) or layer.
        rank: r, a positive int.
        target: names of :data:`TARGETS` (default: query and value, as keras-hub and Hu et al. section 7.1).
        alpha: the scale's numerator, h = W x + (alpha / r) B A x; None: r (scale 1, Keras' default).

    Returns:
        The keys of the projections that got adapters (:func:`target_layers`).

    Raises:
        ValueError: an unknown target name (the known ones listed), no such projection in ``model``, or LoRA
            already enabled on one of them.
    """
    rank = positive_int(rank, "rank")
    names = _target_names(target)
    layers = target_layers(model, names)
    if not layers:
        raise ValueError(
            f"`model` ({type(model).__name__}) has no projection named by target={target!r}: LoRA finds the "
            "projections of MultiHeadAttention and FeedForward layers."
        )
    enabled = [key for key, layer in layers.items() if layer.lora_enabled]
    if enabled:
        raise ValueError(f"LoRA is already enabled on {enabled[:3]}{' ...' if len(enabled) > 3 else ''}.")
    for weight in model.trainable_weights:
        weight.trainable = False
    for layer in layers.values():
        layer.enable_lora(rank, lora_alpha=alpha)
    return list(layers)


def _config(layers):
    """The (rank, alpha) every adapter of ``layers`` shares (ValueError if they differ)."""
    pairs = {(layer.lora_rank, layer.lora_alpha) for layer in layers.values()}
    if len(pairs) != 1:
        raise ValueError(
            f"The adapters of one model must share rank and alpha; found (rank, alpha) in {sorted(pairs)}."
        )
    return pairs.pop()


def _targets_of(model, layers):
    """The names of :data:`TARGETS` whose projections in ``model`` are exactly ``layers``' parts."""
    names = [name for name in _target_names("query key value output ffn".split())
             if set(target_layers(model, name)) & set(layers)]
    return names


def save_lora_weights(model, path):
    """Writes the adapters of ``model`` alone (a NumPy ``.npz``: each projection's A and B under its key, and the
    rank, alpha and targets), a small file for :func:`load_lora_weights`.

    Args:
        model: a model after :func:`enable_lora`.
        path: the ``.npz`` file to write.

    Raises:
        ValueError: ``model`` has no adapters.
    """
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"`model` ({type(model).__name__}) has no LoRA adapters to save: call enable_lora first.")
    rank, alpha = _config(layers)
    config = {"rank": rank, "alpha": alpha, "target": _targets_of(model, layers)}
    arrays = {_CONFIG_KEY: np.frombuffer(json.dumps(config).encode(), dtype=np.uint8)}
    for key, layer in layers.items():
        for name in _ADAPTERS:
            arrays[f"{key}/{name}"] = ops.convert_to_numpy(getattr(layer, name))
    with open(path, "wb") as file:
        np.savez(file, **arrays)


def read_lora_config(path):
    """The ``{"rank", "alpha", "target"}`` an adapter file of :func:`save_lora_weights` was written with."""
    with np.load(path, allow_pickle=False) as data:
        if _CONFIG_KEY not in data:
            raise ValueError(f"{path!r} is not a LoRA adapter file of save_lora_weights (no {_CONFIG_KEY!r} entry).")
        return json.loads(data[_CONFIG_KEY].tobytes().decode())


def _adapter_shapes(layer, rank):
    """The shapes of ``layer``'s adapters (A, B): its own, or, before ``enable_lora``, those Keras gives a kernel
    (..., d_out): A (..., r), B (r, d_out)."""
    if layer.lora_enabled:
        return tuple(layer.lora_kernel_a.shape), tuple(layer.lora_kernel_b.shape)
    kernel = tuple(layer.kernel.shape)
    return kernel[:-1] + (rank,), (rank, kernel[-1])


def load_lora_weights(model, path):
    """Reads the adapters :func:`save_lora_weights` wrote into ``model``: a model without adapters gets them (as
    :func:`enable_lora` with the file's rank, alpha and targets); one with adapters must have those of the file.
    Everything is checked before the model is changed.

    Args:
        model: the model the adapters were trained on (same architecture), with or without adapters.
        path: the ``.npz`` file :func:`save_lora_weights` wrote.

    Raises:
        ValueError: the file's projections, ranks or shapes do not match the model's (the first differences named).
    """
    config = read_lora_config(path)
    layers = lora_layers(model)
    if layers:
        rank, alpha = _config(layers)
        if (rank, alpha) != (config["rank"], config["alpha"]):
            raise ValueError(
                f"{path!r} holds adapters of rank {config['rank']} (alpha {config['alpha']}); the model's have rank "
                f"{rank} (alpha {alpha})."
            )
    else:
        layers = target_layers(model, config["target"])
    with np.load(path, allow_pickle=False) as data:
        saved = {name.rsplit("/", 1)[0] for name in data.files if name != _CONFIG_KEY}
        missing, extra = sorted(set(layers) - saved), sorted(saved - set(layers))
        if missing or extra:
            raise ValueError(
                f"{path!r} does not match the model's adapters: not in the file {missing[:3]}, not in the model "
                f"{extra[:3]} ({len(missing)} and {len(extra)} projections)."
            )
        values = {}
        for key, layer in layers.items():
            for name, shape in zip(_ADAPTERS, _adapter_shapes(layer, config["rank"])):
                value = values[key, name] = data[f"{key}/{name}"]
                if tuple(value.shape) != shape:
                    raise ValueError(
                        f"{path!r} does not match the model's adapters: {key}/{name} has shape "
                        f"{tuple(value.shape)}; the model's is {shape}."
                    )
    if not lora_layers(model):
        enable_lora(model, config["rank"], target=config["target"], alpha=config["alpha"])
    for (key, name), value in values.items():
        getattr(layers[key], name).assign(value)


def merge_lora(model):
    """Folds each adapter into its kernel, W <- W + (alpha / r) B A (eq. 3), and drops the adapters: the model
    computes the same outputs without them (for export, quantization, checkpoint writers). The weights stay as
    :func:`enable_lora` left them, frozen (``model.trainable = True`` unfreezes them).

    Args:
        model: a model after :func:`enable_lora`.

    Returns:
        The keys of the merged projections.

    Raises:
        ValueError: ``model`` has no adapters.
    """
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"`model` ({type(model).__name__}) has no LoRA adapters to merge.")
    # Keras' Layer.__delattr__ untracks a variable, then runs gc.collect(): ~0.2 s each with TensorFlow's objects
    # alive, unless those are frozen (gc.freeze: left out of the collections until gc.unfreeze; a process that
    # froze objects itself keeps them so).
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    try:
        for layer in layers.values():
            merged = ops.convert_to_numpy(layer.kernel)  # W + (alpha / r) A B in Keras' layout
            del layer.lora_kernel_a, layer.lora_kernel_b
            layer.lora_enabled = False
            layer.lora_rank = layer.lora_alpha = None
            layer.kernel.assign(merged)
    finally:
        if froze:
            gc.unfreeze()
    return list(layers)


__all__ = [
    "TARGETS",
    "enable_lora",
    "load_lora_weights",
    "lora_layers",
    "merge_lora",
    "read_lora_config",
    "save_lora_weights",
    "target_layers",
]
