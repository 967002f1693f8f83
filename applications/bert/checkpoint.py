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

The rest of the BERT family loads and saves the same way, chosen by config.json's ``model_type`` (the backbone's
options: :data:`~.config.FAMILIES`); the prefix of a checkpoint with heads is Hugging Face's base_model_prefix:

    roberta, xlm-roberta   BERT's names (prefix ``roberta.``); heads ``lm_head.*``, ``classifier.*``
    distilbert             embeddings.{word,position}_embeddings, embeddings.LayerNorm;
                           transformer.layer.{i}.attention.{q,k,v,out}_lin, .sa_layer_norm, .ffn.lin{1,2},
                           .output_layer_norm; no pooler (prefix ``distilbert.``)
    albert                 embeddings.* (E wide), encoder.embedding_hidden_mapping_in (-> embedding_projection),
                           encoder.albert_layer_groups.{g}.albert_layers.0.attention.{query,key,value,dense,LayerNorm},
                           .ffn, .ffn_output, .full_layer_layer_norm (block g), pooler (prefix ``albert.``)

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
from .config import FAMILIES, BertConfig

__all__ = ["CONFIG_FILE", "TOKENIZER_CONFIG_FILE", "VOCABULARY_FILE", "WEIGHTS_FILE", "config_from_hf", "config_to_hf",
           "copy_keras_hub_weights", "from_keras_hub", "load_hf_checkpoint", "save_hf_checkpoint"]

CONFIG_FILE, WEIGHTS_FILE, VOCABULARY_FILE, TOKENIZER_CONFIG_FILE = (
    "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"
)
# Tensors around the encoder that a backbone does not hold: task heads (BERT's, RoBERTa's, DistilBERT's, ALBERT's)
# and non-trainable buffers.
_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "lm_head.", "pre_classifier.", "vocab_transform.",
                  "vocab_layer_norm.", "vocab_projector.", "predictions.", "sop_classifier.")
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Per family (config.json's model_type): the prefix of a checkpoint with heads, the bare model's class, its name.
_PREFIXES = {"bert": "bert.", "roberta": "roberta.", "xlm-roberta": "roberta.", "distilbert": "distilbert.",
             "albert": "albert."}
_ARCHITECTURES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
                  "distilbert": "DistilBertModel", "albert": "AlbertModel"}
# Families whose masked-LM checkpoints (RobertaForMaskedLM, AlbertForMaskedLM) are saved without the pooler, which
# their objectives never train: such a file loads as a backbone with pooler=False. BERT's NSP trains its pooler.
_POOLER_OPTIONAL = ("roberta", "xlm-roberta", "albert")
_NAMES = {"bert": "BERT", "roberta": "RoBERTa", "xlm-roberta": "XLM-RoBERTa", "distilbert": "DistilBERT",
          "albert": "ALBERT"}

# ------------------------------------------------------------------------------------------------------------------
# The name and layout map


@dataclasses.dataclass(frozen=True)
class _Entry:
    hf_name: str  # today's layout: no prefix, LayerNorm weight / bias
    path: str  # the backbone's weight path below the backbone
    in_axes: int = 0  # > 0 for a Linear weight: the kernel's first in_axes axes are the input, the rest the output


def _entries(config):
    """Every tensor of the family's Hugging Face model (BertModel, RobertaModel, ...), paired with our weight."""
    entries = [
        _Entry("embeddings.word_embeddings.weight", "embeddings/token_embedding/embeddings"),
        _Entry("embeddings.position_embeddings.weight", "embeddings/position_embedding/embeddings"),
    ]
    if config.num_segments:
        entries.append(_Entry("embeddings.token_type_embeddings.weight", "embeddings/segment_embedding/embeddings"))
    entries += [
        _Entry("embeddings.LayerNorm.weight", "embeddings_layer_norm/gamma"),
        _Entry("embeddings.LayerNorm.bias", "embeddings_layer_norm/beta"),
    ]
    if config.family == "distilbert":
        return entries + _distilbert_layers(config.num_layers)
    if config.family == "albert":
        return entries + _albert_layers(config.layer_groups, config.pooler)
    for i in range(config.num_layers):
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
    if config.pooler:
        entries += [_Entry("pooler.dense.weight", "pooler/kernel", 1), _Entry("pooler.dense.bias", "pooler/bias")]
    return entries


def _block_entries(hf, ours, names):
    """One encoder block's tensors: ``names`` gives the Hugging Face module of query, key, value, the attention
    output, its LayerNorm, the two feed-forward Linears and the block's last LayerNorm, in that order."""
    query, key, value, output, attention_norm, intermediate, out, norm = names
    entries = []
    for name, module in (("query", query), ("key", key), ("value", value)):
        entries += [_Entry(f"{hf}{module}.weight", f"{ours}self_attention/{name}/kernel", 1),
                    _Entry(f"{hf}{module}.bias", f"{ours}self_attention/{name}/bias")]
    entries += [_Entry(f"{hf}{output}.weight", f"{ours}self_attention/attention_output/kernel", 2),
                _Entry(f"{hf}{output}.bias", f"{ours}self_attention/attention_output/bias")]
    for module, layer, in_axes in ((attention_norm, "self_attention_layer_norm", None),
                                   (intermediate, "feedforward/intermediate_dense", 1),
                                   (out, "feedforward/output_dense", 1), (norm, "feedforward_layer_norm", None)):
        if in_axes:
            entries += [_Entry(f"{hf}{module}.weight", f"{ours}{layer}/kernel", in_axes),
                        _Entry(f"{hf}{module}.bias", f"{ours}{layer}/bias")]
        else:
            entries += [_Entry(f"{hf}{module}.weight", f"{ours}{layer}/gamma"),
                        _Entry(f"{hf}{module}.bias", f"{ours}{layer}/beta")]
    return entries


def _distilbert_layers(num_layers):
    """DistilBertModel's transformer.layer.{i}: the post-LN block of BERT under other names, no pooler."""
    names = ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
             "ffn.lin1", "ffn.lin2", "output_layer_norm")
    entries = []
    for i in range(num_layers):
        entries += _block_entries(f"transformer.layer.{i}.", f"encoder/transformerencoderblock_{i}/", names)
    return entries


def _albert_layers(num_groups, pooler):
    """AlbertModel's projection E -> d, one block per layer group (inner_group_num = 1) and its pooler."""
    names = ("attention.query", "attention.key", "attention.value", "attention.dense", "attention.LayerNorm", "ffn",
             "ffn_output", "full_layer_layer_norm")
    entries = [_Entry("encoder.embedding_hidden_mapping_in.weight", "embedding_projection/kernel", 1),
               _Entry("encoder.embedding_hidden_mapping_in.bias", "embedding_projection/bias")]
    for g in range(num_groups):
        entries += _block_entries(f"encoder.albert_layer_groups.{g}.albert_layers.0.",
                                  f"encoder/transformerencoderblock_{g}/", names)
    return entries + ([_Entry("pooler.weight", "pooler/kernel", 1), _Entry("pooler.bias", "pooler/bias")]
                      if pooler else [])


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
        length = min(2, backbone.config.max_tokens)
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


# RobertaConfig / XLMRobertaConfig: BERT's keys, <pad> = 1 by default.
_ROBERTA_OPTIONAL = {**_OPTIONAL, "pad_token_id": ("pad_token_id", 1)}
# DistilBertConfig: its own key names (its "hidden_dim" is the feed-forward size); LayerNorm eps fixed at 1e-12.
_DISTILBERT_REQUIRED = {"vocab_size": "vocabulary_size", "dim": "hidden_dim", "n_layers": "num_layers",
                        "n_heads": "num_heads", "hidden_dim": "intermediate_dim"}
_DISTILBERT_OPTIONAL = {"max_position_embeddings": ("max_sequence_length", 512), "dropout": ("dropout", 0.1),
                        "attention_dropout": ("attention_dropout", 0.1), "pad_token_id": ("pad_token_id", 0)}
# AlbertConfig: BERT's keys + embedding_size and num_hidden_groups; no dropout by default.
_ALBERT_REQUIRED = {**_REQUIRED, "embedding_size": "embedding_dim"}
_ALBERT_OPTIONAL = {**_OPTIONAL, "hidden_dropout_prob": ("dropout", 0.0),
                    "attention_probs_dropout_prob": ("attention_dropout", 0.0), "num_hidden_groups": ("num_groups", 1)}
# hidden_act -> our activation: the erf GELU, or its tanh approximation.
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate", "gelu_pytorch_tanh": "gelu_approximate"}


def _activation(hf_config, key, default, source, allowed):
    value = hf_config.get(key) or default
    if value not in allowed:
        raise ValueError(
            f"{source}: `{key}` must be {' or '.join(repr(a) for a in allowed)} (the erf GELU"
            f"{'; gelu_new / gelu_pytorch_tanh: its tanh approximation' if len(allowed) > 1 else ''}); "
            f"received {value!r}."
        )
    return _HF_ACTIVATIONS[value]


def config_from_hf(hf_config, source="config.json"):
    """Our :class:`BertConfig` from a Hugging Face config dict (its ``config.json``) of the BERT family, by its
    ``model_type`` (absent: "bert"): BertConfig, RobertaConfig, XLMRobertaConfig, DistilBertConfig, AlbertConfig.

    Raises:
        ValueError: naming ``source`` and the key, for an unknown model_type, a missing size, an activation other
            than "gelu" (the erf GELU of ``BertModel``; ALBERT also "gelu_new", the tanh one), a position embedding
            other than "absolute", DistilBERT's sinusoidal positions or ALBERT's inner_group_num other than 1.
    """
    family = hf_config.get("model_type") or "bert"
    if family not in FAMILIES:
        raise ValueError(
            f"{source}: unknown `model_type` {family!r}; the BERT family reads {list(FAMILIES)} (GPT-2, LLaMA and "
            "XLNet checkpoints load through their own applications)."
        )
    absolute = ("position_embedding_type", "absolute", "learned absolute positions")
    fields = {"family": family}
    if family == "distilbert":
        fields.update(hf_config_fields(
            hf_config, source, required=_DISTILBERT_REQUIRED, optional=_DISTILBERT_OPTIONAL, model="a DistilBERT",
            fixed=(("sinusoidal_pos_embds", False, "a learned position table"),)))
        fields.update(num_segments=0, pooler=False, layer_norm_epsilon=1e-12,
                      activation=_activation(hf_config, "activation", "gelu", source, ("gelu",)))
    elif family == "albert":
        fields.update(hf_config_fields(
            hf_config, source, required=_ALBERT_REQUIRED, optional=_ALBERT_OPTIONAL, model="an ALBERT",
            fixed=(absolute, ("inner_group_num", 1, "one layer per layer group, as the published ALBERTs"))))
        fields["activation"] = _activation(hf_config, "hidden_act", "gelu_new", source, tuple(_HF_ACTIVATIONS))
    else:
        roberta = family != "bert"
        fields.update(hf_config_fields(
            hf_config, source, required=_REQUIRED, optional=_ROBERTA_OPTIONAL if roberta else _OPTIONAL,
            fixed=(absolute,), model=f"a {_NAMES[family]}"))
        fields["activation"] = _activation(hf_config, "hidden_act", "gelu", source, ("gelu",))
        if roberta:  # fairseq's positions: padding_idx + 1 for the first token
            fields["position_offset"] = fields["pad_token_id"] + 1
    try:
        return BertConfig(**fields)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def _check_writable(config):
    """A ValueError naming every option of ``config`` that its family's Hugging Face model cannot hold."""
    family = config.family
    expected = {"position_offset": config.pad_token_id + 1 if family in ("roberta", "xlm-roberta") else 0}
    if family not in _POOLER_OPTIONAL:  # written without it, RoBERTa's and ALBERT's pooler is the MLM models' layout
        expected["pooler"] = family != "distilbert"
    if family == "distilbert":
        expected.update(num_segments=0, layer_norm_epsilon=1e-12, activation="gelu")
    problems = [f"{key}={getattr(config, key)!r} (expected {value!r})" for key, value in expected.items()
                if getattr(config, key) != value]
    if (config.embedding_dim is None) == (family == "albert"):
        problems.append(f"embedding_dim={config.embedding_dim!r} (factorised embeddings are ALBERT's only)")
    if family != "albert" and config.layer_groups != config.num_layers:
        problems.append(f"num_groups={config.num_groups!r} (shared layers are ALBERT's only)")
    if family != "distilbert" and not config.num_segments:
        problems.append("num_segments=0 (DistilBERT's only)")
    if problems:
        raise ValueError(
            f"A {_NAMES[family]} checkpoint ({_ARCHITECTURES[family]}, family={family!r}) cannot hold this "
            f"backbone's {', '.join(problems)}; set `family` to the model these options are, or change them."
        )


def config_to_hf(config):
    """The ``config.json`` dict of today's ``save_pretrained`` of the family's model (``BertModel``,
    ``RobertaModel``, ``XLMRobertaModel``, ``DistilBertModel``, ``AlbertModel``) for our :class:`BertConfig`."""
    family = config.family
    hidden_act = "gelu" if config.activation == "gelu" else "gelu_new"
    if family == "distilbert":
        return {
            "architectures": ["DistilBertModel"], "model_type": "distilbert",
            "vocab_size": config.vocabulary_size, "dim": config.hidden_dim, "n_layers": config.num_layers,
            "n_heads": config.num_heads, "hidden_dim": config.intermediate_dim, "activation": hidden_act,
            "dropout": config.dropout, "attention_dropout": config.attention_dropout,
            "max_position_embeddings": config.max_sequence_length, "sinusoidal_pos_embds": False,
            "initializer_range": 0.02, "pad_token_id": config.pad_token_id, "qa_dropout": 0.1,
            "seq_classif_dropout": 0.2, "dtype": "float32",
        }
    hf = {
        "architectures": [_ARCHITECTURES[family]], "model_type": family,
        "vocab_size": config.vocabulary_size, "hidden_size": config.hidden_dim,
        "num_hidden_layers": config.num_layers, "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_dim, "hidden_act": hidden_act,
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_sequence_length, "type_vocab_size": config.num_segments,
        "initializer_range": 0.02, "layer_norm_eps": config.layer_norm_epsilon, "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute", "classifier_dropout": None, "use_cache": True, "dtype": "float32",
    }
    if family == "albert":
        del hf["use_cache"], hf["classifier_dropout"]
        hf.update(embedding_size=config.embedding_dim, num_hidden_groups=config.layer_groups, inner_group_num=1,
                  classifier_dropout_prob=0.1)
    return hf


# ------------------------------------------------------------------------------------------------------------------
# Load and save


def _normalized(name):
    """Today's name of a tensor: LayerNorm ``gamma`` / ``beta`` (TF-converted checkpoints) -> weight / bias."""
    for old, new in ((".LayerNorm.gamma", ".LayerNorm.weight"), (".LayerNorm.beta", ".LayerNorm.bias")):
        if name.endswith(old):
            return name[:-len(old)] + new
    return name


def load_hf_checkpoint(directory):
    """A :class:`BertBackbone` with the sizes and weights of a Hugging Face checkpoint directory of the BERT
    family: BERT, RoBERTa, XLM-RoBERTa, DistilBERT or ALBERT, by config.json's ``model_type``.

    Args:
        directory: holding ``config.json`` and ``model.safetensors`` (``save_pretrained``'s files); optionally
            ``vocab.txt`` and ``tokenizer_config.json``. Either key layout loads: a published checkpoint's
            (the family's prefix, ``bert.`` / ``roberta.`` / ``distilbert.`` / ``albert.``, LayerNorm ``gamma`` /
            ``beta``, task heads) or a bare model's (``BertModel``, ``RobertaModel``...: no prefix).

    Returns:
        ``(backbone, info)``: the built backbone (float32 weights) and a dict with
        "config" (our :class:`BertConfig`; ``pooler=False`` for a RoBERTa, XLM-RoBERTa or ALBERT file without
        pooler tensors, as their masked-LM models save: the backbone then returns no "pooled_output"),
        "hf_config" (the config.json dict), "family" (its model_type),
        "vocabulary" (the vocab.txt path, or None when absent), "do_lower_case" (tokenizer_config.json's, else True:
        ``BertTokenizer``'s default), "prefix" (the family's, e.g. "bert.", or ""), "ignored" (the task-head and
        buffer tensors skipped, sorted) and "file".

    Raises:
        ValueError: naming the missing file; or the file and every missing, unexpected and mismatched tensor
            (name, shape in the file, shape expected); or config.json's offending key, an unknown model_type among
            them (see :func:`config_from_hf`).
    """
    config_path, weights_path = checkpoint_files(directory, "BERT")
    hf_config = read_json(config_path, "the model's sizes")
    config = config_from_hf(hf_config, source=config_path)
    tensors, _ = read_safetensors(weights_path)

    family_prefix = _PREFIXES[config.family]
    prefix = family_prefix if any(name.startswith(family_prefix) for name in tensors) else ""
    by_name, ignored, unexpected = {}, [], []
    for name in tensors:
        short = _normalized(name[len(prefix):])
        if name.startswith(_HEAD_PREFIXES) or name.startswith(prefix) and short in _BUFFERS:
            ignored.append(name)
        elif not name.startswith(prefix):
            unexpected.append(name)
        else:
            by_name[short] = name

    pooler = [entry.hf_name for entry in _entries(config) if entry.path.startswith("pooler/")]
    if config.family in _POOLER_OPTIONAL and not any(name in by_name for name in pooler):
        config = dataclasses.replace(config, pooler=False)  # an MLM model's file: RoBERTa and ALBERT train no pooler
    backbone = BertBackbone(config)
    weights = _built_weights(backbone)
    missing, mismatched, assignments = [], [], []
    for entry in _entries(config):
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
            f"{weights_path!r} does not fit the {_NAMES[config.family]} of {config_path!r} ({config.num_layers} "
            f"layers, d {config.hidden_dim}, d_ff {config.intermediate_dim}, V {config.vocabulary_size}): "
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
        "config": config, "hf_config": hf_config, "family": config.family,
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


def save_hf_checkpoint(backbone, directory, vocabulary=None, prefixed=False):
    """Writes a :class:`BertBackbone` as a Hugging Face checkpoint of its family (``config.family``: a
    ``BertModel``, ``RobertaModel``, ``XLMRobertaModel``, ``DistilBertModel`` or ``AlbertModel``; today's
    ``save_pretrained`` layout: LayerNorm ``weight`` / ``bias``, float32), loadable by that class's
    ``from_pretrained`` and by :func:`load_hf_checkpoint`.

    Args:
        backbone: a :class:`BertBackbone` (built here on a short input if it is not built yet).
        directory: created if missing; ``config.json``, ``model.safetensors`` (and ``vocab.txt``) in it are
            replaced, each written to a temporary name and renamed into place, the config last.
        vocabulary: optional: a vocab.txt path or a sequence of ``vocabulary_size`` tokens, written as vocab.txt
            (BERT's and DistilBERT's WordPiece vocabulary; the other families' tokenizer files are not vocab.txt).
        prefixed: name the tensors with the family's prefix (``bert.``, ``roberta.``, ``distilbert.``,
            ``albert.``) as a checkpoint with heads does; False (the default): the bare model's names.

    Returns:
        ``directory``.

    Raises:
        ValueError: when ``backbone`` is not a BertBackbone, ``vocabulary`` has the wrong number of tokens or
            belongs to no vocab.txt family, or the backbone's options do not fit its family's model (naming them).
    """
    if not isinstance(backbone, BertBackbone):
        raise ValueError(f"`backbone` must be a BertBackbone; received {type(backbone).__name__}.")
    check_not_quantized(backbone, "save_hf_checkpoint")  # its kernels would be integer codes without their scales
    config = backbone.config
    _check_writable(config)
    if vocabulary is not None and config.family not in ("bert", "distilbert"):
        raise ValueError(
            f"`vocabulary` writes vocab.txt, the WordPiece vocabulary of BERT and DistilBERT; a {config.family} "
            "checkpoint's tokenizer files are its own (copy them beside the weights)."
        )
    vocabulary_text = None if vocabulary is None else _vocabulary_lines(vocabulary, config.vocabulary_size)
    weights = _built_weights(backbone)
    prefix = _PREFIXES[config.family] if prefixed else ""
    tensors = {
        prefix + entry.hf_name: _to_hf(entry, np.asarray(ops.convert_to_numpy(weights[entry.path].value), np.float32))
        for entry in _entries(config)
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
