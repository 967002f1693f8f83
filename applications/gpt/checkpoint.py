"""Hugging Face GPT-2 checkpoints for :class:`GPT`.

    model, info = load_hf_checkpoint("path/to/gpt2")     # config.json + model.safetensors (+ vocab.json, merges.txt)
    info["vocabulary"], info["merges"]                   # the byte-level BPE files' paths, when present
    save_hf_checkpoint(model, "out/", vocabulary=info["vocabulary"], merges=info["merges"])  # GPT2LMHeadModel

A Hugging Face ``GPT2Model`` names its tensors as below. Its linear layers are ``Conv1D``s, whose weights are
already (in, out) like Keras kernels: a tensor is our weight reshaped (and c_attn is Q, K and V side by side).

    wte.weight, wpe.weight                      (V, d), (P, d)   -> embedding/{token,position}_embedding/embeddings
    h.{i}.ln_1.{weight,bias}                    (d,)             -> self_attention_layer_norm/{gamma,beta}
    h.{i}.attn.c_attn.{weight,bias}             (d, 3d), (3d,)   -> self_attention/{query,key,value}: (d, N, H), (N, H)
    h.{i}.attn.c_proj.{weight,bias}             (d, d), (d,)     -> self_attention/attention_output: (N, H, d), (d,)
    h.{i}.ln_2.{weight,bias}                    (d,)             -> feedforward_layer_norm/{gamma,beta}
    h.{i}.mlp.c_fc.{weight,bias}                (d, f), (f,)     -> feedforward/intermediate_dense
    h.{i}.mlp.c_proj.{weight,bias}              (f, d), (d,)     -> feedforward/output_dense
    ln_f.{weight,bias}                          (d,)             -> decoder/final_layer_norm/{gamma,beta}

Two layouts are met: the published GPT-2 files (these names without a prefix, plus the causal-mask buffers
``h.{i}.attn.bias`` and ``h.{i}.attn.masked_bias``) and today's ``GPT2LMHeadModel.save_pretrained`` (a
``transformer.`` prefix, sometimes ``lm_head.weight``, which must equal wte: GPT ties its output projection).
Both load; buffers and task heads are skipped and listed in ``info["ignored"]``. :func:`save_hf_checkpoint` writes
today's ``GPT2LMHeadModel`` layout (``transformer.`` prefix, the tied lm_head left out, float32).

The safetensors files are read and written by :mod:`attnlayers.applications.core.formats.safetensors` (NumPy alone).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import warnings

import numpy as np
from keras import ops

from attnlayers.quantization import check_not_quantized

from ..core.formats.hf_config import checkpoint_files, hf_config_fields
from ..core.formats.safetensors import read_safetensors, write_safetensors
from ..core.inputs.files import read_json, replace_atomically
from .model import GPT, GPTConfig

__all__ = ["CONFIG_FILE", "LM_HEAD", "MERGES_FILE", "PREFIX", "VOCABULARY_FILE", "WEIGHTS_FILE", "config_from_hf",
           "config_to_hf", "load_hf_checkpoint", "save_hf_checkpoint"]

CONFIG_FILE, WEIGHTS_FILE, VOCABULARY_FILE, MERGES_FILE = "config.json", "model.safetensors", "vocab.json", "merges.txt"
PREFIX = "transformer."  # GPT2LMHeadModel's (and the other task models') name for the GPT2Model inside
LM_HEAD = "lm_head.weight"
# Tensors around the GPT2Model that GPT does not hold: task heads, and the causal-mask buffers of the published files.
_HEAD_PREFIXES = ("score.", "multiple_choice_head.", "classifier.", "qa_outputs.")
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")

# ------------------------------------------------------------------------------------------------------------------
# The name and layout map


@dataclasses.dataclass(frozen=True)
class _Entry:
    hf_name: str  # GPT2Model's name (no prefix)
    paths: tuple  # our weight paths (below the model); several are side by side along the tensor's last axis
    in_axes: int = 0  # > 0 for a kernel: its first in_axes axes are Conv1D's input axis, the rest its output axis


def _entries(num_layers):
    """Every tensor of a Hugging Face GPT2Model, paired with our weights."""
    entries = [_Entry("wte.weight", ("embedding/token_embedding/embeddings",), 1),
               _Entry("wpe.weight", ("embedding/position_embedding/embeddings",), 1)]
    for i in range(num_layers):
        hf, ours = f"h.{i}.", f"decoder/transformerdecoderblock_{i}/"
        attention = f"{ours}self_attention/"
        qkv = tuple(f"{attention}{name}/" for name in ("query", "key", "value"))
        entries += [
            _Entry(f"{hf}ln_1.weight", (f"{ours}self_attention_layer_norm/gamma",)),
            _Entry(f"{hf}ln_1.bias", (f"{ours}self_attention_layer_norm/beta",)),
            _Entry(f"{hf}attn.c_attn.weight", tuple(p + "kernel" for p in qkv), 1),  # [W_Q | W_K | W_V]
            _Entry(f"{hf}attn.c_attn.bias", tuple(p + "bias" for p in qkv)),
            _Entry(f"{hf}attn.c_proj.weight", (f"{attention}attention_output/kernel",), 2),
            _Entry(f"{hf}attn.c_proj.bias", (f"{attention}attention_output/bias",)),
            _Entry(f"{hf}ln_2.weight", (f"{ours}feedforward_layer_norm/gamma",)),
            _Entry(f"{hf}ln_2.bias", (f"{ours}feedforward_layer_norm/beta",)),
            _Entry(f"{hf}mlp.c_fc.weight", (f"{ours}feedforward/intermediate_dense/kernel",), 1),
            _Entry(f"{hf}mlp.c_fc.bias", (f"{ours}feedforward/intermediate_dense/bias",)),
            _Entry(f"{hf}mlp.c_proj.weight", (f"{ours}feedforward/output_dense/kernel",), 1),
            _Entry(f"{hf}mlp.c_proj.bias", (f"{ours}feedforward/output_dense/bias",)),
        ]
    entries += [_Entry("ln_f.weight", ("decoder/final_layer_norm/gamma",)),
                _Entry("ln_f.bias", ("decoder/final_layer_norm/beta",))]
    return entries


def _hf_part_shape(entry, shape):
    """The part of the Hugging Face tensor held by our weight of ``shape``: (in, out) for a kernel, (features,)
    for a bias or LayerNorm parameter (an attention bias is (N, H) here)."""
    if entry.in_axes:
        return (int(np.prod(shape[:entry.in_axes])), int(np.prod(shape[entry.in_axes:])))
    return (int(np.prod(shape)),)


def _hf_shape(entry, shapes):
    """The Hugging Face shape of ``entry``: its parts side by side along the last axis."""
    parts = [_hf_part_shape(entry, shape) for shape in shapes]
    return (*parts[0][:-1], sum(part[-1] for part in parts))


def _to_keras(entry, tensor, shapes):
    """``tensor`` split along its last axis into our weights' values of ``shapes``."""
    sizes = [_hf_part_shape(entry, shape)[-1] for shape in shapes]
    parts = np.split(tensor, np.cumsum(sizes)[:-1], axis=-1)
    return [part.reshape(shape) for part, shape in zip(parts, shapes, strict=True)]


def _to_hf(entry, values):
    """Our weights' ``values`` as the Hugging Face tensor of ``entry``."""
    return np.concatenate([value.reshape(_hf_part_shape(entry, value.shape)) for value in values], axis=-1)


def _weights(model):
    """Our weights by path below the model: "embedding/..." and "decoder/..." (whatever the model's own name); a
    padded token table as its V real rows (``GPT.vocabulary_view``)."""
    weights = {}
    for layer in (model.embedding, model.decoder):
        for weight in layer.weights:
            parts = weight.path.split("/")
            below = parts[parts.index(layer.name) + 1:] if layer.name in parts else parts
            weights["/".join([layer.name, *below])] = model.vocabulary_view(weight)
    return weights


# ------------------------------------------------------------------------------------------------------------------
# Hugging Face config.json <-> GPTConfig

_REQUIRED = {"vocab_size": "vocabulary_size", "n_embd": "hidden_dim", "n_layer": "num_layers", "n_head": "num_heads"}
# GPT2Config's defaults for the rest (n_inner None: 4 n_embd).
_OPTIONAL = {"n_positions": ("max_sequence_length", 1024), "layer_norm_epsilon": ("layer_norm_epsilon", 1e-5),
             "resid_pdrop": ("dropout", 0.1), "attn_pdrop": ("attention_dropout", 0.1),
             "pad_token_id": ("pad_token_id", None)}
# The tanh GELU of GPT-2 under its two names in transformers' ACT2FN (the same function).
_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")
# Keys whose other values change the function computed: (key, GPT2Config's default = what GPT computes, meaning).
_FIXED = (
    ("model_type", "gpt2", "a GPT-2 checkpoint"),
    ("scale_attn_weights", True, "GPT scales attention scores by 1 / sqrt(head_dim)"),
    ("scale_attn_by_inverse_layer_idx", False, "GPT does not scale scores by 1 / (layer index + 1)"),
    ("add_cross_attention", False, "GPT is decoder-only, without cross-attention"),
)


def _end_token_id(hf_config, source):
    """config.json's eos_token_id (an int, a one-element list or None) as GPTConfig's end_token_id."""
    value = hf_config.get("eos_token_id")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is not None and not isinstance(value, int):
        raise ValueError(
            f"{source}: `eos_token_id` must be one token id for GPT's end_token_id; received {value!r} (pass "
            f"end_token_id=... to load_hf_checkpoint, and stop_token_ids=[...] to generate for several)."
        )
    return value


def config_from_hf(hf_config, source="config.json", **overrides):
    """Our :class:`GPTConfig` from a Hugging Face ``GPT2Config`` dict (its ``config.json``).

    n_positions, n_inner (None: 4 n_embd), layer_norm_epsilon, eos_token_id and pad_token_id take GPT2Config's
    defaults when absent; dropout is resid_pdrop's rate (the embeddings' too: embd_pdrop, GPT2Config's default
    0.1 as resid_pdrop's, has no field of its own: a different embd_pdrop gives a warning), attention_dropout
    attn_pdrop's (only training reads them).
    ``reorder_and_upcast_attn`` is accepted: it computes the same attention, with its scores in float32 under
    mixed precision (GPT's softmax runs in float32 there too).

    Args:
        hf_config: the config.json dict.
        source: what the errors name (the file).
        **overrides: GPTConfig fields that replace config.json's (e.g. ``end_token_id`` where config.json's
            eos_token_id is not a token of the vocabulary, as in a GPT2Config with a small vocab_size).

    Raises:
        ValueError: naming ``source`` and the key, for a missing size, an activation other than GPT-2's tanh GELU
            (gelu_new), unscaled or layer-scaled attention, cross-attention, a model_type other than "gpt2", or
            sizes and token ids that GPTConfig refuses.
    """
    activation = hf_config.get("activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"{source}: `activation_function` must be one of {list(_ACTIVATIONS)} (GPT-2's tanh GELU, GPT's "
            f"activation); received {activation!r}."
        )
    fields = hf_config_fields(hf_config, source, required=_REQUIRED, optional=_OPTIONAL, fixed=_FIXED,
                              model="a GPT-2")
    n_inner = hf_config.get("n_inner")
    fields["intermediate_dim"] = 4 * fields["hidden_dim"] if n_inner is None else n_inner
    fields["end_token_id"] = _end_token_id(hf_config, source)
    embedding_dropout = hf_config.get("embd_pdrop", 0.1)
    if embedding_dropout != fields["dropout"] and "dropout" not in overrides:
        warnings.warn(f"{source}: embd_pdrop={embedding_dropout} differs from resid_pdrop={fields['dropout']}; GPT has "
                      f"one rate for both (GPTConfig.dropout) and trains with {fields['dropout']} on the embeddings "
                      "too.", stacklevel=2)
    fields.update(overrides)
    try:
        return GPTConfig(**fields)
    except (ValueError, TypeError) as error:
        hint = ""
        if "end_token_id" in str(error) and "end_token_id" not in overrides:
            hint = " (config.json's `eos_token_id`; pass end_token_id=... to load_hf_checkpoint to choose another)"
        raise ValueError(f"{source}: {error}{hint}") from None


def config_to_hf(config):
    """The ``config.json`` dict of today's ``GPT2LMHeadModel.save_pretrained`` for our :class:`GPTConfig`."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": config.vocabulary_size, "n_positions": config.max_sequence_length,
        "n_embd": config.hidden_dim, "n_layer": config.num_layers, "n_head": config.num_heads,
        "n_inner": config.intermediate_dim, "activation_function": "gelu_new",
        "resid_pdrop": config.dropout, "embd_pdrop": config.dropout, "attn_pdrop": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_epsilon, "initializer_range": 0.02,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "add_cross_attention": False, "tie_word_embeddings": True, "use_cache": True,
        "bos_token_id": config.end_token_id, "eos_token_id": config.end_token_id,
        "pad_token_id": config.pad_token_id, "dtype": "float32",
    }


# ------------------------------------------------------------------------------------------------------------------
# Load


def _sort_names(tensors):
    """Splits the file's tensor names: ``(prefix, {GPT2Model name: file name}, ignored, unexpected)``."""
    prefix = PREFIX if any(name.startswith(PREFIX) for name in tensors) else ""
    by_name, ignored, unexpected = {}, [], []
    for name in tensors:
        short = name[len(prefix):]
        if name == LM_HEAD:
            continue  # checked against wte by _check_lm_head
        if name.startswith(_HEAD_PREFIXES) or name.startswith(prefix) and short.endswith(_BUFFER_SUFFIXES):
            ignored.append(name)
        elif not name.startswith(prefix):
            unexpected.append(name)
        else:
            by_name[short] = name
    return prefix, by_name, ignored, unexpected


def _check_lm_head(tensors, prefix, weights_path):
    """``lm_head.weight``, where present, must be wte: GPT's output projection is the token embedding."""
    if LM_HEAD not in tensors or prefix + "wte.weight" not in tensors:
        return
    head, wte = tensors[LM_HEAD], tensors[prefix + "wte.weight"]
    if head.shape != wte.shape or not np.array_equal(head, wte):
        difference = np.abs(head - wte).max() if head.shape == wte.shape else f"shape {head.shape} vs {wte.shape}"
        raise ValueError(
            f"{weights_path!r}: tensor {LM_HEAD!r} differs from {prefix}wte.weight (max |diff| {difference}): an "
            f"untied output projection, which GPT (logits = h E^T with the token embedding E) cannot hold."
        )


def load_hf_checkpoint(directory, **overrides):
    """A :class:`GPT` with the sizes and weights of a Hugging Face GPT-2 checkpoint directory.

    Args:
        directory: holding ``config.json`` and ``model.safetensors`` (``save_pretrained``'s files); optionally
            the tokenizer's ``vocab.json`` and ``merges.txt`` (recorded, not read). Either key layout loads: the
            published GPT-2 files' (no prefix, ``attn.bias`` / ``attn.masked_bias`` buffers) or a
            ``GPT2LMHeadModel``'s (``transformer.`` prefix, perhaps ``lm_head.weight`` equal to wte).
        **overrides: GPTConfig fields replacing config.json's (``end_token_id``, ``pad_token_id``, ``dropout``).

    Returns:
        ``(model, info)``: the built model (float32 weights) and a dict with "config" (our :class:`GPTConfig`),
        "hf_config" (the config.json dict), "vocabulary" and "merges" (the vocab.json / merges.txt paths, or None
        when absent), "prefix" ("transformer." or ""), "ignored" (the buffer and task-head tensors skipped, sorted;
        a tied ``lm_head.weight`` is not listed) and "file" (the weights file).

    Raises:
        ValueError: naming the missing file; or the file and every missing, unexpected and misshapen tensor
            (name, shape in the file, shape expected); or an ``lm_head.weight`` other than wte; or config.json's
            offending key (see :func:`config_from_hf`).
    """
    config_path, weights_path = checkpoint_files(directory, "GPT-2")
    hf_config = read_json(config_path, "the model's sizes")
    if not isinstance(hf_config, dict):
        raise ValueError(f"{config_path!r} must hold a JSON object (GPT2Config's fields); received {hf_config!r}.")
    config = config_from_hf(hf_config, source=config_path, **overrides)
    tensors, _ = read_safetensors(weights_path)
    prefix, by_name, ignored, unexpected = _sort_names(tensors)

    model = GPT(config)
    weights = _weights(model)
    missing, mismatched, assignments = [], [], []
    for entry in _entries(config.num_layers):
        variables = [weights[path] for path in entry.paths]
        shapes = [tuple(variable.shape) for variable in variables]
        original = by_name.pop(entry.hf_name, None)
        if original is None:
            missing.append(prefix + entry.hf_name)
            continue
        tensor, expected = tensors[original], _hf_shape(entry, shapes)
        if tuple(tensor.shape) != expected:
            mismatched.append(f"{original} {tuple(tensor.shape)} (expected {expected})")
        else:
            assignments += zip(variables, _to_keras(entry, tensor, shapes), strict=True)
    unexpected += list(by_name.values())
    if missing or unexpected or mismatched:
        raise ValueError(
            f"{weights_path!r} does not fit the GPT of {config_path!r} ({config.num_layers} layers, d "
            f"{config.hidden_dim}, heads {config.num_heads}, d_ff {config.intermediate_dim}, V "
            f"{config.vocabulary_size}, P {config.max_sequence_length}): missing tensors: {missing}; unexpected "
            f"tensors: {sorted(unexpected)}; shape mismatches: {mismatched}."
        )
    _check_lm_head(tensors, prefix, weights_path)
    for variable, value in assignments:  # only once every tensor fits
        variable.assign(value.astype(variable.dtype))

    def present(name):
        path = os.path.join(directory, name)
        return path if os.path.isfile(path) else None

    info = {
        "config": config, "hf_config": hf_config, "vocabulary": present(VOCABULARY_FILE),
        "merges": present(MERGES_FILE), "prefix": prefix, "ignored": sorted(ignored), "file": weights_path,
    }
    return model, info


# ------------------------------------------------------------------------------------------------------------------
# Save


def _copy_to(source):
    def write(path):
        shutil.copyfile(source, path)
    return write


def _write_text(text):
    def write(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return write


def save_hf_checkpoint(model, directory, vocabulary=None, merges=None):
    """Writes a :class:`GPT` as a Hugging Face ``GPT2LMHeadModel`` checkpoint (today's ``save_pretrained``
    layout: ``transformer.`` prefix, the tied ``lm_head.weight`` left out, float32), loadable by
    ``GPT2LMHeadModel.from_pretrained`` (and ``GPT2Model``) and by :func:`load_hf_checkpoint`.

    Args:
        model: a :class:`GPT`.
        directory: created if missing; ``config.json``, ``model.safetensors`` (and ``vocab.json`` /
            ``merges.txt``) in it are replaced, each written to a temporary name and renamed into place, the
            config last.
        vocabulary, merges: optional paths of the byte-level BPE tokenizer's vocab.json and merges.txt, copied
            (e.g. ``info["vocabulary"]`` and ``info["merges"]`` of :func:`load_hf_checkpoint`).

    Returns:
        ``directory``.

    Raises:
        ValueError: when ``model`` is not a GPT, or ``vocabulary`` / ``merges`` is not a file.
    """
    if not isinstance(model, GPT):
        raise ValueError(f"`model` must be a GPT; received {type(model).__name__}.")
    check_not_quantized(model, "save_hf_checkpoint")  # its kernels would be integer codes without their scales
    for name, path in (("vocabulary", vocabulary), ("merges", merges)):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"`{name}` must be the path of a file; received {path!r}, which is not one.")
    config, weights = model.config, _weights(model)
    tensors = {
        PREFIX + entry.hf_name: _to_hf(entry, [
            np.asarray(ops.convert_to_numpy(weights[path].value), np.float32) for path in entry.paths
        ])
        for entry in _entries(config.num_layers)
    }
    os.makedirs(directory, exist_ok=True)
    replace_atomically(os.path.join(directory, WEIGHTS_FILE),
                       lambda path: write_safetensors(path, tensors, metadata={"format": "pt"}))
    for source, name in ((vocabulary, VOCABULARY_FILE), (merges, MERGES_FILE)):
        target = os.path.join(directory, name)
        if source is not None and os.path.abspath(source) != os.path.abspath(target):
            replace_atomically(target, _copy_to(source))
    replace_atomically(os.path.join(directory, CONFIG_FILE),
                       _write_text(json.dumps(config_to_hf(config), indent=2, sort_keys=True) + "\n"))
    return directory
