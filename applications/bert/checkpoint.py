"""Hugging Face BERT checkpoints for :class:`BertBackbone`, and keras-hub's ``BertBackbone`` weights.

    backbone, info = load_hf_checkpoint("path/to/bert")   # config.json + model.safetensors (+ vocab.txt)
    info["vocabulary"], info["do_lower_case"]             # what a WordPiece tokenizer needs
    save_hf_checkpoint(backbone, "out/", vocabulary=info["vocabulary"])   # loads in transformers.BertModel
    copy_keras_hub_weights(keras_hub_backbone, backbone)  # keras_hub.models.BertBackbone -> ours

A Hugging Face ``BertModel`` names its tensors (Linear weights are (out, in), Keras kernels (in, out)):

    embeddings.{word,position,token_type}_embeddings.weight   (V | P | S, d)  -> embeddings/*_embedding/embeddings
    embeddings.LayerNorm.{weight,bias}                        (d,)            -> embeddings_layer_norm/{gamma,beta}
    encoder.layer.{i}.attention.self.{query,key,value}.weight (d, d)  W^T reshaped to (d, N, H) (EinsumDense)
    encoder.layer.{i}.attention.output.dense.weight           (d, d)  W^T reshaped to (N, H, d)
    encoder.layer.{i}.attention.output.LayerNorm              -> self_attention_layer_norm
    encoder.layer.{i}.{intermediate,output}.dense.weight      (f, d), (d, f)  W^T -> feedforward/*_dense/kernel
    encoder.layer.{i}.output.LayerNorm                        -> feedforward_layer_norm
    pooler.dense.{weight,bias}                                (d, d)  -> pooler

Published checkpoints (``BertForPreTraining`` and friends) prefix these with ``bert.``, older ones call the
LayerNorm parameters ``gamma`` / ``beta``, and carry heads (``cls.*``, ``classifier.*``, ``qa_outputs.*``) and
the ``position_ids`` buffer: both layouts load; heads and buffers are skipped and listed in ``info["ignored"]``.

The safetensors files are read and written by :mod:`attnlayers.applications.core.formats.safetensors` (NumPy alone).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from keras import ops

from attnlayers.quantization import check_not_quantized

from ..core.formats import weights as core_weights
from ..core.formats.hf_config import checkpoint_files, hf_config_fields
from ..core.formats.safetensors import read_safetensors, write_safetensors
from ..core.inputs.files import read_json, replace_atomically
from .backbone import BertBackbone
from .config import BertConfig

CONFIG_FILE, WEIGHTS_FILE, VOCABULARY_FILE, TOKENIZER_CONFIG_FILE = (
    "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"
)
# Tensors around the encoder that a backbone does not hold: task heads and non-trainable buffers.
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

# ------------------------------------------------------------------------------------------------------------------
# The name and layout map


@dataclasses.dataclass(frozen=True)
class _Entry:
    hf_name: str  # today's layout: no prefix, LayerNorm weight / bias
    path: str  # the backbone's weight path below the backbone
    in_axes: int = 0  # > 0 for a Linear weight: the kernel's first in_axes axes are the input, the rest the output


def _entries(num_layers):
    """Every tensor of a Hugging Face BertModel, paired with our weight."""
    entries = [
        _Entry("embeddings.word_embeddings.weight", "embeddings/token_embedding/embeddings"),
        _Entry("embeddings.position_embeddings.weight", "embeddings/position_embedding/embeddings"),
        _Entry("embeddings.token_type_embeddings.weight", "embeddings/segment_embedding/embeddings"),
        _Entry("embeddings.LayerNorm.weight", "embeddings_layer_norm/gamma"),
        _Entry("embeddings.LayerNorm.bias", "embeddings_layer_norm/beta"),
    ]
    for i in range(num_layers):
        hf, ours = f"encoder.layer.{i}.", f"encoder/transformerencoderblock_{i}/"
        for name in ("query", "key", "value"):
            entries.append(_Entry(f"{hf}attention.self.{name}.weight", f"{ours}self_attention/{name}/kernel", 1))
            entries.append(_Entry(f"{hf}attention.self.{name}.bias", f"{ours}self_attention/{name}/bias"))
        entries += [
            _Entry(f"{hf}attention.output.dense.weight", f"{ours}self_attention/attention_output/kernel", 2),
            _Entry(f"{hf}attention.output.dense.bias", f"{ours}self_attention/attention_output/bias"),
            _Entry(f"{hf}attention.output.LayerNorm.weight", f"{ours}self_attention_layer_norm/gamma"),
            _Entry(f"{hf}attention.output.LayerNorm.bias", f"{ours}self_attention_layer_norm/beta"),
            _Entry(f"{hf}intermediate.dense.weight", f"{ours}feedforward/intermediate_dense/kernel", 1),
            _Entry(f"{hf}intermediate.dense.bias", f"{ours}feedforward/intermediate_dense/bias"),
            _Entry(f"{hf}output.dense.weight", f"{ours}feedforward/output_dense/kernel", 1),
            _Entry(f"{hf}output.dense.bias", f"{ours}feedforward/output_dense/bias"),
            _Entry(f"{hf}output.LayerNorm.weight", f"{ours}feedforward_layer_norm/gamma"),
            _Entry(f"{hf}output.LayerNorm.bias", f"{ours}feedforward_layer_norm/beta"),
        ]
    entries += [_Entry("pooler.dense.weight", "pooler/kernel", 1), _Entry("pooler.dense.bias", "pooler/bias")]
    return entries


def _hf_shape(entry, shape):
    """The Hugging Face shape of the tensor stored in our weight of ``shape``: (out, in) for a Linear weight,
    (features,) for a bias of an EinsumDense (N, H)."""
    if entry.in_axes:
        return (int(np.prod(shape[entry.in_axes:])), int(np.prod(shape[:entry.in_axes])))
    if entry.hf_name.endswith(".bias"):
        return (int(np.prod(shape)),)
    return tuple(shape)


def _to_keras(entry, tensor, shape):
    return (tensor.T if entry.in_axes else tensor).reshape(shape)


def _to_hf(entry, value):
    if entry.in_axes:
        return value.reshape(int(np.prod(value.shape[:entry.in_axes])), -1).T
    return value.reshape(-1) if entry.hf_name.endswith(".bias") else value


def _built_weights(backbone):
    """Our weights by path below the backbone (building it on a short input if it is not built)."""
    if not backbone.weights:
        length = min(2, backbone.config.max_sequence_length)
        backbone({"token_ids": np.zeros((1, length), "int32"), "padding_mask": np.ones((1, length), bool)})
    # A weight's path starts with the model that first built it: the backbone, or a task model around it
    # ("bert_classifier/embeddings/..."). Below that comes one of the backbone's own layers.
    tops = {layer.name for layer in backbone.layers}

    def relative(path):
        parts = path.split("/")
        first = next((i for i, part in enumerate(parts) if part in tops), 0)
        return "/".join(parts[first:])

    return {relative(w.path): w for w in backbone.weights}


# ------------------------------------------------------------------------------------------------------------------
# Hugging Face config.json <-> BertConfig

_REQUIRED = {"vocab_size": "vocabulary_size", "hidden_size": "hidden_dim", "num_hidden_layers": "num_layers",
             "num_attention_heads": "num_heads", "intermediate_size": "intermediate_dim"}
# HF BertConfig's defaults for the rest.
_OPTIONAL = {"max_position_embeddings": ("max_sequence_length", 512), "type_vocab_size": ("num_segments", 2),
             "layer_norm_eps": ("layer_norm_epsilon", 1e-12), "hidden_dropout_prob": ("dropout", 0.1),
             "attention_probs_dropout_prob": ("attention_dropout", 0.1), "pad_token_id": ("pad_token_id", 0)}


def config_from_hf(hf_config, source="config.json"):
    """Our :class:`BertConfig` from a Hugging Face ``BertConfig`` dict (its ``config.json``).

    Raises:
        ValueError: naming ``source`` and the key, for a missing size, an activation other than "gelu" (the erf
            GELU of ``BertModel``), a position embedding other than "absolute", or a model_type other than "bert".
    """
    checks = (("hidden_act", "gelu", "the erf GELU of BertModel (BertBackbone's activation)"),
              ("position_embedding_type", "absolute", "BertBackbone's learned absolute positions"),
              ("model_type", "bert", "a BertModel checkpoint"))
    fields = hf_config_fields(hf_config, source, required=_REQUIRED, optional=_OPTIONAL, fixed=checks,
                              model="a BERT")
    try:
        return BertConfig(**fields)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def config_to_hf(config):
    """The ``config.json`` dict of today's ``BertModel.save_pretrained`` for our :class:`BertConfig`."""
    return {
        "architectures": ["BertModel"], "model_type": "bert",
        "vocab_size": config.vocabulary_size, "hidden_size": config.hidden_dim,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_dim, "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_sequence_length, "type_vocab_size": config.num_segments,
        "initializer_range": 0.02, "layer_norm_eps": config.layer_norm_epsilon, "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute", "classifier_dropout": None, "use_cache": True, "dtype": "float32",
    }


# ------------------------------------------------------------------------------------------------------------------
# Load and save


def _normalized(name):
    """Today's name of a tensor: LayerNorm ``gamma`` / ``beta`` (TF-converted checkpoints) -> weight / bias."""
    for old, new in ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias")):
        if name.endswith(old):
            return name[:-len(old)] + new
    return name


def load_hf_checkpoint(directory):
    """A :class:`BertBackbone` with the sizes and weights of a Hugging Face BERT checkpoint directory.

    Args:
        directory: holding ``config.json`` and ``model.safetensors`` (``save_pretrained``'s files); optionally
            ``vocab.txt`` and ``tokenizer_config.json``. Either key layout loads: a published checkpoint's
            (``bert.`` prefix, LayerNorm ``gamma`` / ``beta``, task heads) or a ``BertModel``'s (no prefix).

    Returns:
        ``(backbone, info)``: the built backbone (float32 weights) and a dict with
        "config" (our :class:`BertConfig`), "hf_config" (the config.json dict), "vocabulary" (the vocab.txt path,
        or None when absent), "do_lower_case" (tokenizer_config.json's, else True: ``BertTokenizer``'s default),
        "prefix" ("bert." or ""), "ignored" (the task-head and buffer tensors skipped, sorted) and "file".

    Raises:
        ValueError: naming the missing file; or the file and every missing, unexpected and mismatched tensor
            (name, shape in the file, shape expected); or config.json's offending key (see :func:`config_from_hf`).
    """
    config_path, weights_path = checkpoint_files(directory, "BERT")
    hf_config = read_json(config_path, "the model's sizes")
    config = config_from_hf(hf_config, source=config_path)
    tensors, _ = read_safetensors(weights_path)

    prefix = "bert." if any(name.startswith("bert.") for name in tensors) else ""
    by_name, ignored, unexpected = {}, [], []
    for name in tensors:
        short = _normalized(name[len(prefix):])
        if name.startswith(_HEAD_PREFIXES) or name.startswith(prefix) and short in _BUFFERS:
            ignored.append(name)
        elif not name.startswith(prefix):
            unexpected.append(name)
        else:
            by_name[short] = name

    backbone = BertBackbone(config)
    weights = _built_weights(backbone)
    missing, mismatched, assignments = [], [], []
    for entry in _entries(config.num_layers):
        variable = weights[entry.path]
        shape = tuple(variable.shape)
        original = by_name.pop(entry.hf_name, None)
        if original is None:
            missing.append(prefix + entry.hf_name)
            continue
        tensor = tensors[original]
        expected = _hf_shape(entry, shape)
        if tuple(tensor.shape) != expected:
            mismatched.append(f"{original} {tuple(tensor.shape)} (expected {expected})")
        else:
            assignments.append((variable, _to_keras(entry, tensor, shape)))
    unexpected += list(by_name.values())
    if missing or unexpected or mismatched:
        hint = ""
        if all(".pooler." in f".{name}" for name in missing) and missing and not (unexpected or mismatched):
            hint = " (a model saved without its pooler, as BertForMaskedLM is, has no trained pooled_output)"
        raise ValueError(
            f"{weights_path!r} does not fit the BERT of {config_path!r} ({config.num_layers} layers, d "
            f"{config.hidden_dim}, d_ff {config.intermediate_dim}, V {config.vocabulary_size}): "
            f"missing tensors: {missing}{hint}; unexpected tensors: {sorted(unexpected)}; "
            f"shape mismatches: {mismatched}."
        )
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))

    vocabulary = os.path.join(directory, VOCABULARY_FILE)
    tokenizer_config_path = os.path.join(directory, TOKENIZER_CONFIG_FILE)
    tokenizer_config = (read_json(tokenizer_config_path, "the tokenizer's options")
                        if os.path.isfile(tokenizer_config_path) else {})
    info = {
        "config": config, "hf_config": hf_config,
        "vocabulary": vocabulary if os.path.isfile(vocabulary) else None,
        "do_lower_case": bool(tokenizer_config.get("do_lower_case", True)),
        "prefix": prefix, "ignored": sorted(ignored), "file": weights_path,
    }
    return backbone, info


def _vocabulary_lines(vocabulary, size):
    if isinstance(vocabulary, (str, os.PathLike)):
        with open(vocabulary, encoding="utf-8") as f:
            tokens = f.read().splitlines()
    else:
        tokens = [str(token) for token in vocabulary]
    if len(tokens) != size:
        raise ValueError(
            f"`vocabulary` must have the backbone's vocabulary_size={size} tokens; received {len(tokens)}."
        )
    if any("\n" in token for token in tokens):
        raise ValueError("`vocabulary` tokens must not contain newlines (vocab.txt has one token a line).")
    return "".join(token + "\n" for token in tokens)


def save_hf_checkpoint(backbone, directory, vocabulary=None):
    """Writes a :class:`BertBackbone` as a Hugging Face ``BertModel`` checkpoint (today's ``save_pretrained``
    layout: no prefix, LayerNorm ``weight`` / ``bias``, float32), loadable by ``BertModel.from_pretrained`` and by
    :func:`load_hf_checkpoint`.

    Args:
        backbone: a :class:`BertBackbone` (built here on a short input if it is not built yet).
        directory: created if missing; ``config.json``, ``model.safetensors`` (and ``vocab.txt``) in it are
            replaced, each written to a temporary name and renamed into place, the config last.
        vocabulary: optional: a vocab.txt path or a sequence of ``vocabulary_size`` tokens, written as vocab.txt.

    Returns:
        ``directory``.

    Raises:
        ValueError: when ``backbone`` is not a BertBackbone or ``vocabulary`` has the wrong number of tokens.
    """
    if not isinstance(backbone, BertBackbone):
        raise ValueError(f"`backbone` must be a BertBackbone; received {type(backbone).__name__}.")
    check_not_quantized(backbone, "save_hf_checkpoint")  # its kernels would be integer codes without their scales
    config = backbone.config
    vocabulary_text = None if vocabulary is None else _vocabulary_lines(vocabulary, config.vocabulary_size)
    weights = _built_weights(backbone)
    tensors = {
        entry.hf_name: _to_hf(entry, np.asarray(ops.convert_to_numpy(weights[entry.path].value), np.float32))
        for entry in _entries(config.num_layers)
    }
    os.makedirs(directory, exist_ok=True)

    def write_text(text):
        def write(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return write

    replace_atomically(os.path.join(directory, WEIGHTS_FILE),
                        lambda path: write_safetensors(path, tensors, metadata={"format": "pt"}))
    if vocabulary_text is not None:
        replace_atomically(os.path.join(directory, VOCABULARY_FILE), write_text(vocabulary_text))
    replace_atomically(os.path.join(directory, CONFIG_FILE),
                        write_text(json.dumps(config_to_hf(config), indent=2, sort_keys=True) + "\n"))
    return directory


# ------------------------------------------------------------------------------------------------------------------
# keras-hub

def _keras_hub_sizes(keras_hub_backbone):
    return dict(
        vocabulary_size=keras_hub_backbone.vocabulary_size, max_sequence_length=keras_hub_backbone.max_sequence_length,
        num_segments=keras_hub_backbone.num_segments, num_layers=keras_hub_backbone.num_layers,
        num_heads=keras_hub_backbone.num_heads, hidden_dim=keras_hub_backbone.hidden_dim,
        intermediate_dim=keras_hub_backbone.intermediate_dim, dropout=keras_hub_backbone.dropout,
    )


# keras-hub's BertBackbone paths -> ours, below the backbone.
_KERAS_HUB_TABLE = core_weights.KerasHubTable(
    renames=(
        ("token_embedding/", "embeddings/token_embedding/"),
        ("position_embedding/", "embeddings/position_embedding/"),
        ("segment_embedding/", "embeddings/segment_embedding/"),
        ("pooled_dense/", "pooler/"),
        ("transformer_layer_", "encoder/transformerencoderblock_"),
        ("/self_attention_layer/", "/self_attention/"),
        ("feedforward_intermediate_dense", "feedforward/intermediate_dense"),
        ("feedforward_output_dense", "feedforward/output_dense"),
    ),
    sizes=_keras_hub_sizes,
    targets=_built_weights,
)


def from_keras_hub(keras_hub_backbone, **config):
    """A :class:`BertBackbone` with the sizes and weights of a ``keras_hub.models.BertBackbone``.

    Args:
        keras_hub_backbone: the keras-hub backbone (keras_hub is imported by the caller, not here).
        **config: other :class:`BertConfig` fields (``pad_token_id``, ``layer_norm_epsilon``...).

    Returns:
        The backbone; see :func:`copy_keras_hub_weights` for how its outputs compare.
    """
    return core_weights.from_keras_hub(keras_hub_backbone, lambda fields: BertBackbone(BertConfig(**fields)),
                                       _KERAS_HUB_TABLE, source_name="keras_hub_backbone", target_name="backbone",
                                       **config)


def copy_keras_hub_weights(keras_hub_backbone, backbone):
    """Copies every weight of a ``keras_hub.models.BertBackbone`` into a :class:`BertBackbone` of the same sizes.

    keras-hub's feed-forward uses the tanh approximation of GELU (as Google's original BERT code); ours is the
    erf GELU of Hugging Face's ``BertModel``. The outputs therefore agree to float rounding when keras-hub's
    blocks run the erf GELU too, and otherwise differ by about 1e-3 (what the approximation changes).

    Args:
        keras_hub_backbone: a ``keras_hub.models.BertBackbone``.
        backbone: a :class:`BertBackbone` with the same vocabulary, positions, segments, layers, heads and sizes
            (built here if it is not).

    Returns:
        ``backbone``.

    Raises:
        ValueError: naming the weights missing on either side and those whose shapes differ.
    """
    return core_weights.copy_keras_hub_weights(keras_hub_backbone, backbone, _KERAS_HUB_TABLE,
                                               source_name="keras_hub_backbone", target_name="backbone")
