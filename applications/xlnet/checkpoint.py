"""Hugging Face XLNet checkpoints for :class:`XLNetBackbone`, and keras-hub's ``XLNetBackbone`` weights both ways.

    backbone, info = load_hf_checkpoint("path/to/xlnet")   # config.json + model.safetensors
    save_hf_checkpoint(backbone, "out/")                   # loads in transformers.XLNetModel
    save_hf_checkpoint(backbone, "out/", architecture="XLNetLMHeadModel")   # "transformer." keys + lm_loss.bias
    copy_keras_hub_weights(keras_hub_backbone, backbone)   # keras_hub.models.XLNetBackbone -> ours
    copy_weights_to_keras_hub(backbone, keras_hub_backbone)   # ours -> keras-hub

One table pairs every weight of ours with its Hugging Face ``XLNetModel`` name and its keras-hub path. Hugging Face
holds the attention projections as (d, N, H) parameters, as our EinsumDense kernels, except the output projection
``o``, which is (d, N, H) there (and in keras-hub) and (N, H, d) here; the feed-forward Linear weights are
(out, in), Keras kernels (in, out):

    word_embedding.weight                      (V, d)     token_embedding/embeddings
    mask_emb                                   (1, 1, d)  mask_embedding/embedding                 (w, query stream)
    layer.{i}.rel_attn.{q,k,v}                 (d, N, H)  block_{i}/two_stream_attention/attention/{query,key,value}
    layer.{i}.rel_attn.o                       (d, N, H)  .../attention/attention_output/kernel (N, H, d)
    layer.{i}.rel_attn.r                       (d, N, H)  .../attention/relative_position/kernel  (W_{k,R})
    layer.{i}.rel_attn.r_w_bias, r_r_bias      (N, H)     .../relative_position/u, v
    layer.{i}.rel_attn.r_s_bias, seg_embed     (N, H), (2, N, H)   block_{i}/segment_bias/bias, encodings
    layer.{i}.rel_attn.layer_norm              (d,)       block_{i}/attention_layer_norm
    layer.{i}.ff.layer_1, layer_2              (f, d), (d, f)      block_{i}/intermediate_dense, output_dense
    layer.{i}.ff.layer_norm                    (d,)       block_{i}/feedforward_layer_norm

An ``XLNetModel`` saves these names bare; ``XLNetLMHeadModel`` and the task models (``XLNetFor...``) prefix them
with ``transformer.`` and add their heads (``lm_loss.bias``, the tied ``lm_loss.weight`` left out;
``sequence_summary.*``, ``logits_proj.*``...): both layouts load; heads are skipped and listed in
``info["ignored"]``. The safetensors files are read and written by
:mod:`attnlayers.applications.core.formats.safetensors` (NumPy alone).
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
from .backbone import XLNetBackbone
from .config import ACTIVATIONS, XLNetConfig

__all__ = ["ARCHITECTURES", "CONFIG_FILE", "PREFIX", "WEIGHTS_FILE", "config_from_hf", "config_to_hf",
           "copy_keras_hub_weights", "copy_weights_to_keras_hub", "from_keras_hub", "load_hf_checkpoint",
           "save_hf_checkpoint"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
PREFIX = "transformer."
ARCHITECTURES = ("XLNetModel", "XLNetLMHeadModel")
# The heads of XLNetLMHeadModel and the XLNetFor... task models, around the encoder.
_HEAD_PREFIXES = ("lm_loss.", "sequence_summary.", "logits_proj.", "classifier.", "qa_outputs.", "start_logits.",
                  "end_logits.", "answer_class.")

# ------------------------------------------------------------------------------------------------------------------
# The name and layout map


@dataclasses.dataclass(frozen=True)
class _Entry:
    path: str  # ours, below the backbone
    hf_name: str  # XLNetModel's (no prefix)
    keras_hub_path: str  # below keras-hub's XLNetBackbone
    # "same": one layout everywhere; "linear": a Hugging Face Linear weight (out, in), our / keras-hub's kernel
    # (in, out); "output": the attention output projection, (d, N, H) in Hugging Face and keras-hub, (N, H, d) here.
    kind: str = "same"


def _entries(num_layers):
    """Every weight of the backbone with its Hugging Face name and keras-hub path."""
    entries = [
        _Entry("token_embedding/embeddings", "word_embedding.weight", "content_query_embedding/word_embedding/embeddings"),
        _Entry("mask_embedding/embedding", "mask_emb", "encoder_block_attn_mask_layer/mask_emb"),
    ]
    for i in range(num_layers):
        ours, hf, hub = f"block_{i}/", f"layer.{i}.", f"xlnet_encoder_{i}/"
        attention = f"{ours}two_stream_attention/attention/"
        entries += [_Entry(f"{attention}{name}/kernel", f"{hf}rel_attn.{short}", f"{hub}rel_attn/{name}/kernel")
                    for name, short in (("query", "q"), ("key", "k"), ("value", "v"))]
        entries += [
            _Entry(f"{attention}attention_output/kernel", f"{hf}rel_attn.o", f"{hub}rel_attn/attention_output/kernel",
                   "output"),
            _Entry(f"{attention}relative_position/kernel", f"{hf}rel_attn.r", f"{hub}rel_attn/encoding/kernel"),
            _Entry(f"{attention}relative_position/u", f"{hf}rel_attn.r_w_bias", f"{hub}content_attention_bias"),
            _Entry(f"{attention}relative_position/v", f"{hf}rel_attn.r_r_bias", f"{hub}positional_attention_bias"),
            _Entry(f"{ours}segment_bias/bias", f"{hf}rel_attn.r_s_bias", f"{hub}segment_attention_bias"),
            _Entry(f"{ours}segment_bias/encodings", f"{hf}rel_attn.seg_embed", f"{hub}segment_encoding"),
            _Entry(f"{ours}attention_layer_norm/gamma", f"{hf}rel_attn.layer_norm.weight", f"{hub}layer_norm_rel_attn/gamma"),
            _Entry(f"{ours}attention_layer_norm/beta", f"{hf}rel_attn.layer_norm.bias", f"{hub}layer_norm_rel_attn/beta"),
            _Entry(f"{ours}intermediate_dense/kernel", f"{hf}ff.layer_1.weight",
                   f"{hub}feedforward_intermediate_dense/kernel", "linear"),
            _Entry(f"{ours}intermediate_dense/bias", f"{hf}ff.layer_1.bias", f"{hub}feedforward_intermediate_dense/bias"),
            _Entry(f"{ours}output_dense/kernel", f"{hf}ff.layer_2.weight", f"{hub}feedforward_output_dense/kernel",
                   "linear"),
            _Entry(f"{ours}output_dense/bias", f"{hf}ff.layer_2.bias", f"{hub}feedforward_output_dense/bias"),
            _Entry(f"{ours}feedforward_layer_norm/gamma", f"{hf}ff.layer_norm.weight", f"{hub}layer_norm_ff/gamma"),
            _Entry(f"{ours}feedforward_layer_norm/beta", f"{hf}ff.layer_norm.bias", f"{hub}layer_norm_ff/beta"),
        ]
    return entries


def _from_theirs(entry, value, hub=False):
    """A Hugging Face (or keras-hub, ``hub``) tensor in our layout."""
    if entry.kind == "linear" and not hub:
        return value.T
    if entry.kind == "output":
        return np.transpose(value, (1, 2, 0))  # (d, N, H) -> (N, H, d)
    return value


def _to_theirs(entry, value, hub=False):
    """Our tensor in Hugging Face's (or keras-hub's, ``hub``) layout."""
    if entry.kind == "linear" and not hub:
        return value.T
    if entry.kind == "output":
        return np.transpose(value, (2, 0, 1))  # (N, H, d) -> (d, N, H)
    return value


def _relative_weights(model):
    """A model's weights by path below it: a weight's path starts with the model that first built it (the model, or
    a task model around it), then one of the model's own layers."""
    tops = {layer.name for layer in model.layers}

    def relative(path):
        parts = path.split("/")
        first = next((i for i, part in enumerate(parts) if part in tops), 0)
        return "/".join(parts[first:])

    return {relative(w.path): w for w in model.weights}


def _built_weights(backbone):
    """Our weights by path below the backbone (building it on a short input if it is not built)."""
    if not backbone.weights or not backbone.built:
        backbone({"token_ids": np.zeros((1, 2), "int32"), "segment_ids": np.zeros((1, 2), "int32")})
    return _relative_weights(backbone)


# ------------------------------------------------------------------------------------------------------------------
# Hugging Face config.json <-> XLNetConfig

_REQUIRED = {"vocab_size": "vocabulary_size", "d_model": "hidden_dim", "n_layer": "num_layers",
             "n_head": "num_heads", "d_inner": "intermediate_dim"}
# HF XLNetConfig's defaults for the rest.
_OPTIONAL = {"layer_norm_eps": ("layer_norm_epsilon", 1e-12), "dropout": ("dropout", 0.1),
             "ff_activation": ("activation", "gelu"), "pad_token_id": ("pad_token_id", 5),
             "clamp_len": ("clamp_length", -1)}


def config_from_hf(hf_config, source="config.json"):
    """Our :class:`XLNetConfig` from a Hugging Face ``XLNetConfig`` dict (its ``config.json``).

    Memory settings (``mem_len``, ``reuse_len``, ``use_mems_*``) do not change one call's outputs and are not
    read; ``same_length`` only matters with ``attn_type="uni"``, which is refused.

    Raises:
        ValueError: naming ``source`` and the key, for a missing size, an ``attn_type`` other than "bi" (the
            bidirectional encoder), ``bi_data`` (doubled relative encodings of the original pretraining), an
            ``ff_activation`` other than "gelu" / "relu", a ``d_head`` other than d_model / n_head, or a
            model_type other than "xlnet".
    """
    checks = (("attn_type", "bi", "the bidirectional encoder: XLNetBackbone has no causal 'uni' mode"),
              ("bi_data", False, "one relative encoding per batch; bi_data doubles it for pretraining"),
              ("model_type", "xlnet", "an XLNet checkpoint"))
    fields = hf_config_fields(hf_config, source, required=_REQUIRED, optional=_OPTIONAL, fixed=checks,
                              model="an XLNet")
    if fields["activation"] not in ACTIVATIONS:
        raise ValueError(f"{source}: `ff_activation` must be one of {list(ACTIVATIONS)} (the same function in "
                         f"Keras); received {fields['activation']!r}.")
    d_head = hf_config.get("d_head")
    if d_head is not None and fields["num_heads"] * d_head != fields["hidden_dim"]:
        raise ValueError(f"{source}: `d_head` must be d_model / n_head = {fields['hidden_dim']} / "
                         f"{fields['num_heads']}; received {d_head!r}.")
    fields["clamp_length"] = fields["clamp_length"] if fields["clamp_length"] > 0 else None
    try:
        return XLNetConfig(**fields)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def config_to_hf(config, architecture="XLNetModel"):
    """The ``config.json`` dict of ``XLNetModel`` / ``XLNetLMHeadModel.save_pretrained`` for our
    :class:`XLNetConfig` (no memory kept between calls: ``mem_len`` null)."""
    return {
        "architectures": [architecture], "model_type": "xlnet",
        "vocab_size": config.vocabulary_size, "d_model": config.hidden_dim, "n_layer": config.num_layers,
        "n_head": config.num_heads, "d_head": config.head_dim, "d_inner": config.intermediate_dim,
        "ff_activation": config.activation, "attn_type": "bi", "bi_data": False,
        "clamp_len": -1 if config.clamp_length is None else config.clamp_length, "same_length": False,
        "mem_len": None, "reuse_len": None, "dropout": config.dropout, "layer_norm_eps": config.layer_norm_epsilon,
        "initializer_range": 0.02, "pad_token_id": config.pad_token_id, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": True, "dtype": "float32",
    }


# ------------------------------------------------------------------------------------------------------------------
# Load and save


def _sort_names(tensors):
    """``(prefix, {XLNetModel name: file name}, ignored, unexpected)``."""
    prefix = PREFIX if any(name.startswith(PREFIX) for name in tensors) else ""
    by_name, ignored, unexpected = {}, [], []
    for name in tensors:
        if name.startswith(_HEAD_PREFIXES):
            ignored.append(name)
        elif name.startswith(prefix):
            by_name[name[len(prefix):]] = name
        else:
            unexpected.append(name)
    return prefix, by_name, ignored, unexpected


def load_hf_checkpoint(directory):
    """An :class:`XLNetBackbone` with the sizes and weights of a Hugging Face XLNet checkpoint directory.

    Args:
        directory: holding ``config.json`` and ``model.safetensors`` (``save_pretrained``'s files) of an
            ``XLNetModel`` (bare names) or an ``XLNetLMHeadModel`` / ``XLNetFor...`` model (``transformer.``
            prefix, heads).

    Returns:
        ``(backbone, info)``: the built backbone (float32 weights) and a dict with "config" (our
        :class:`XLNetConfig`), "hf_config" (the config.json dict), "prefix" ("transformer." or ""), "ignored" (the
        head tensors skipped, sorted) and "file".

    Raises:
        ValueError: naming the missing file; or the file and every missing, unexpected and mismatched tensor
            (name, shape in the file, shape expected); or config.json's offending key (see :func:`config_from_hf`).
    """
    config_path, weights_path = checkpoint_files(directory, "XLNet")
    hf_config = read_json(config_path, "the model's sizes")
    config = config_from_hf(hf_config, source=config_path)
    tensors, _ = read_safetensors(weights_path)
    prefix, by_name, ignored, unexpected = _sort_names(tensors)

    backbone = XLNetBackbone(config)
    weights = _built_weights(backbone)
    missing, mismatched, assignments = [], [], []
    for entry in _entries(config.num_layers):
        variable = weights[entry.path]
        original = by_name.pop(entry.hf_name, None)
        if original is None:
            missing.append(prefix + entry.hf_name)
            continue
        expected = tuple(_to_theirs(entry, np.empty(variable.shape, "float32")).shape)
        if tuple(tensors[original].shape) != expected:
            mismatched.append(f"{original} {tuple(tensors[original].shape)} (expected {expected})")
        else:
            assignments.append((variable, _from_theirs(entry, tensors[original])))
    unexpected += list(by_name.values())
    if missing or unexpected or mismatched:
        raise ValueError(
            f"{weights_path!r} does not fit the XLNet of {config_path!r} ({config.num_layers} layers, d "
            f"{config.hidden_dim}, {config.num_heads} heads, d_ff {config.intermediate_dim}, V "
            f"{config.vocabulary_size}): missing tensors: {missing}; unexpected tensors: {sorted(unexpected)}; "
            f"shape mismatches: {mismatched}."
        )
    for variable, value in assignments:
        variable.assign(np.ascontiguousarray(value).astype(variable.dtype))
    info = {"config": config, "hf_config": hf_config, "prefix": prefix, "ignored": sorted(ignored),
            "file": weights_path}
    return backbone, info


def save_hf_checkpoint(backbone, directory, architecture="XLNetModel", lm_bias=None):
    """Writes an :class:`XLNetBackbone` as a Hugging Face checkpoint (float32), loadable by
    ``from_pretrained`` of ``architecture`` and by :func:`load_hf_checkpoint`.

    Args:
        backbone: an :class:`XLNetBackbone` (built here on a short input if it is not built yet).
        directory: created if missing; ``config.json`` and ``model.safetensors`` in it are replaced, each written to
            a temporary name and renamed into place, the config last.
        architecture: "XLNetModel" (bare names) or "XLNetLMHeadModel" (``transformer.`` prefix, plus
            ``lm_loss.bias``; the LM head's weight is the tied token embedding, left out as ``save_pretrained``
            does).
        lm_bias: with "XLNetLMHeadModel": the (V,) output bias of the LM head; None writes zeros (an untrained
            bias). Refused with "XLNetModel", which has no head.

    Returns:
        ``directory``.

    Raises:
        ValueError: when ``backbone`` is not an XLNetBackbone, ``architecture`` is unknown, or ``lm_bias`` does not
            fit.
    """
    if not isinstance(backbone, XLNetBackbone):
        raise ValueError(f"`backbone` must be an XLNetBackbone; received {type(backbone).__name__}.")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"Unknown `architecture` {architecture!r}; expected one of {list(ARCHITECTURES)}.")
    check_not_quantized(backbone, "save_hf_checkpoint")  # its kernels would be integer codes without their scales
    config = backbone.config
    if architecture == "XLNetModel" and lm_bias is not None:
        raise ValueError("`lm_bias` is the LM head's bias: pass architecture='XLNetLMHeadModel' to write it (an "
                         "XLNetModel has no head).")
    weights = _built_weights(backbone)
    prefix = PREFIX if architecture == "XLNetLMHeadModel" else ""
    tensors = {
        prefix + entry.hf_name: np.ascontiguousarray(
            _to_theirs(entry, np.asarray(ops.convert_to_numpy(weights[entry.path].value), np.float32)))
        for entry in _entries(config.num_layers)
    }
    if architecture == "XLNetLMHeadModel":
        bias = np.zeros(config.vocabulary_size, "float32") if lm_bias is None else np.asarray(
            ops.convert_to_numpy(lm_bias), np.float32)
        if bias.shape != (config.vocabulary_size,):
            raise ValueError(f"`lm_bias` must have shape ({config.vocabulary_size},) (vocabulary_size); received "
                             f"{bias.shape}.")
        tensors["lm_loss.bias"] = bias
    os.makedirs(directory, exist_ok=True)

    def write_config(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(config_to_hf(config, architecture), indent=2, sort_keys=True) + "\n")

    replace_atomically(os.path.join(directory, WEIGHTS_FILE),
                       lambda path: write_safetensors(path, tensors, metadata={"format": "pt"}))
    replace_atomically(os.path.join(directory, CONFIG_FILE), write_config)
    return directory


# ------------------------------------------------------------------------------------------------------------------
# keras-hub, both ways


@dataclasses.dataclass(frozen=True)
class _View:
    """A weight's path and its value in the receiving model's layout: what ``core_weights.copy_weights_by_path``
    reads of a source weight."""

    path: str
    value: np.ndarray

    @property
    def shape(self):
        return self.value.shape


def _copy(source, target, source_path, target_path, to_target, source_name, target_name):
    """Copies every weight of ``source`` into ``target`` through the table (``source_path`` / ``target_path`` of
    each entry, ``to_target(entry, value)`` its layout); one error lists every difference, nothing is copied then."""
    source_weights = _built_weights(source) if isinstance(source, XLNetBackbone) else _relative_weights(source)
    target_weights = _built_weights(target) if isinstance(target, XLNetBackbone) else _relative_weights(target)
    num_layers = (source if isinstance(source, XLNetBackbone) else target).config.num_layers
    entries = {source_path(entry): entry for entry in _entries(num_layers)}
    views = []
    for path, weight in source_weights.items():
        value = np.asarray(ops.convert_to_numpy(weight.value))
        views.append(_View(path, to_target(entries[path], value) if path in entries else value))
    core_weights.copy_weights_by_path(
        views, target_weights, lambda path: target_path(entries[path]) if path in entries else path,
        source_name=source_name, target_name=target_name)
    return target


def copy_keras_hub_weights(keras_hub_backbone, backbone):
    """Copies every weight of a ``keras_hub.models.XLNetBackbone`` into an :class:`XLNetBackbone` of the same sizes
    (built here if it is not); returns ``backbone``. The two then compute the same function.

    Args:
        keras_hub_backbone: a ``keras_hub.models.XLNetBackbone``.
        backbone: an :class:`XLNetBackbone` of the same sizes.

    Raises:
        ValueError: naming the weights missing on either side and those whose shapes differ; nothing is copied then.
    """
    return _copy(keras_hub_backbone, backbone, lambda entry: entry.keras_hub_path, lambda entry: entry.path,
                 lambda entry, value: _from_theirs(entry, value, hub=True), "keras_hub_backbone", "backbone")


def copy_weights_to_keras_hub(backbone, keras_hub_backbone):
    """Copies every weight of an :class:`XLNetBackbone` into a ``keras_hub.models.XLNetBackbone`` of the same sizes
    (the reverse of :func:`copy_keras_hub_weights`); returns ``keras_hub_backbone``.

    Args:
        backbone: an :class:`XLNetBackbone`.
        keras_hub_backbone: a ``keras_hub.models.XLNetBackbone`` of the same sizes.

    Raises:
        ValueError: naming the weights missing on either side and those whose shapes differ; nothing is copied then.
    """
    return _copy(backbone, keras_hub_backbone, lambda entry: entry.path, lambda entry: entry.keras_hub_path,
                 lambda entry, value: _to_theirs(entry, value, hub=True), "backbone", "keras_hub_backbone")


def _keras_hub_config(keras_hub_backbone, **config):
    fields = dict(vocabulary_size=keras_hub_backbone.vocabulary_size, num_layers=keras_hub_backbone.num_layers,
                  num_heads=keras_hub_backbone.num_heads, hidden_dim=keras_hub_backbone.hidden_dim,
                  intermediate_dim=keras_hub_backbone.intermediate_dim, dropout=keras_hub_backbone.dropout,
                  activation=keras_hub_backbone.activation)
    return XLNetConfig(**{**fields, **config})


def from_keras_hub(keras_hub_backbone, **config):
    """An :class:`XLNetBackbone` with the sizes and weights of a ``keras_hub.models.XLNetBackbone``; ``config``:
    other :class:`XLNetConfig` fields (``pad_token_id``, ``clamp_length``...). keras_hub is imported by the caller.

    Args:
        keras_hub_backbone: a ``keras_hub.models.XLNetBackbone``.
        **config: other :class:`XLNetConfig` fields.
    """
    return copy_keras_hub_weights(keras_hub_backbone, XLNetBackbone(_keras_hub_config(keras_hub_backbone, **config)))
