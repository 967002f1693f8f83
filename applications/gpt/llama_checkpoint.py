"""Hugging Face LLaMA checkpoints for the LLaMA-style :class:`GPT` (``GPTConfig(architecture="llama")``).

    model, info = load_hf_llama_checkpoint("path/to/llama")   # config.json + model.safetensors of LlamaForCausalLM
    save_hf_llama_checkpoint(model, "out/")                    # loadable by LlamaForCausalLM.from_pretrained

A Hugging Face ``LlamaForCausalLM`` names its tensors as below. Its linear layers are ``torch.nn.Linear``s, whose
weights are (out, in): a tensor is our kernel transposed and reshaped. Its RoPE is the rotate-half layout of our
:class:`~attnlayers.positional.RotaryEmbedding` (the Hugging Face conversion already permuted Meta's q / k weights),
so q_proj and k_proj load unchanged.

    model.embed_tokens.weight                       (V, d)          -> token_embedding/embeddings
    model.layers.{i}.input_layernorm.weight         (d,)            -> self_attention_layer_norm/gamma (RMSNorm)
    model.layers.{i}.self_attn.q_proj.weight        (N H, d)        -> self_attention/query/kernel (d, N, H)
    model.layers.{i}.self_attn.{k,v}_proj.weight    (N_kv H, d)     -> self_attention/{key,value}/kernel (d, N_kv, H)
    model.layers.{i}.self_attn.o_proj.weight        (d, N H)        -> self_attention/attention_output/kernel (N, H, d)
    model.layers.{i}.post_attention_layernorm.weight (d,)           -> feedforward_layer_norm/gamma (RMSNorm)
    model.layers.{i}.mlp.gate_proj.weight           (d_ff, d)       -> feedforward/intermediate_dense/kernel: W_1
    model.layers.{i}.mlp.up_proj.weight             (d_ff, d)       -> feedforward/gate_dense/kernel: V
    model.layers.{i}.mlp.down_proj.weight           (d, d_ff)       -> feedforward/output_dense/kernel: W_2
    model.norm.weight                               (d,)            -> decoder/final_layer_norm/gamma
    lm_head.weight                                  (V, d)          -> lm_head/kernel (d, V); absent or equal to
                                                                       embed_tokens when tie_word_embeddings

Rotary ``inv_freq`` buffers of older files are skipped (listed in ``info["ignored"]``). The safetensors files are read
and written by :mod:`attnlayers.applications.core.formats.safetensors` (NumPy alone).
"""

from __future__ import annotations

import json
import os

import numpy as np
from keras import ops

from ..core.formats.hf_config import checkpoint_files, hf_config_fields
from ..core.formats.safetensors import read_safetensors, write_safetensors
from ..core.inputs.files import replace_atomically
from .model import GPT, GPTConfig

__all__ = ["CONFIG_FILE", "EMBEDDING", "LM_HEAD", "WEIGHTS_FILE", "hf_shape", "llama_config_from_hf",
           "llama_config_to_hf", "load_hf_llama_checkpoint", "save_hf_llama_checkpoint", "tensor_map", "to_keras",
           "weight_value"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
LM_HEAD, EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"
_BUFFER_SUFFIX = ".rotary_emb.inv_freq"

# ------------------------------------------------------------------------------------------------------------------
# The name map


def tensor_map(model):
    """``[(Hugging Face name, our variable, in_axes)]`` for every weight of a LLaMA-style GPT. ``in_axes`` > 0 for a
    kernel: its first in_axes axes are the Linear's input axis, the rest its output axis; 0: the same layout. A padded
    vocabulary table (``vocabulary_padding``) is its V real rows / columns (``GPT.vocabulary_view``)."""
    pairs = [(EMBEDDING, model.vocabulary_view(model.token_embedding.embeddings), 0)]
    for i, block in enumerate(model.decoder.blocks):
        hf, attention, ffn = f"model.layers.{i}.", block.self_attention, block.feedforward
        pairs += [
            (f"{hf}input_layernorm.weight", block.self_attention_layer_norm.gamma, 0),
            (f"{hf}self_attn.q_proj.weight", attention.query_dense.kernel, 1),
            (f"{hf}self_attn.k_proj.weight", attention.key_dense.kernel, 1),
            (f"{hf}self_attn.v_proj.weight", attention.value_dense.kernel, 1),
            (f"{hf}self_attn.o_proj.weight", attention.output_dense.kernel, 2),
            (f"{hf}post_attention_layernorm.weight", block.feedforward_layer_norm.gamma, 0),
            (f"{hf}mlp.gate_proj.weight", ffn.intermediate_dense.kernel, 1),  # W_1, under Swish
            (f"{hf}mlp.up_proj.weight", ffn.gate_dense.kernel, 1),  # V
            (f"{hf}mlp.down_proj.weight", ffn.output_dense.kernel, 1),  # W_2
        ]
    pairs.append(("model.norm.weight", model.decoder.final_layer_norm.gamma, 0))
    if model.lm_head is not None:
        pairs.append((LM_HEAD, model.vocabulary_view(model.lm_head.kernel), 1))
    return pairs


def hf_shape(shape, in_axes):
    """(out, in) of a Linear for a kernel of ``shape``; the shape itself otherwise."""
    if not in_axes:
        return tuple(shape)
    return (int(np.prod(shape[in_axes:])), int(np.prod(shape[:in_axes])))


def to_keras(tensor, shape, in_axes):
    """A Hugging Face tensor in our variable's layout: a Linear's (out, in) weight transposed, then reshaped to
    ``shape``."""
    return (tensor.T if in_axes else tensor).reshape(shape)


def _to_hf(value, in_axes):
    if not in_axes:
        return value
    return value.reshape(int(np.prod(value.shape[:in_axes])), -1).T


def weight_value(weight, name):
    """A weight of :func:`tensor_map` as a float32 NumPy array: a variable's value, or the tensor that a LoRA-enabled
    projection's ``kernel`` is (W + (alpha / r) B A, the weight it computes with). Integer (quantized) weights are
    refused: written as floats they would be the integer codes without their scales."""
    value = ops.convert_to_numpy(getattr(weight, "value", weight))
    if not np.issubdtype(value.dtype, np.floating):
        raise ValueError(f"`model`: the weight for {name!r} is {value.dtype} (a quantized model?); checkpoints are "
                         f"written from float weights: save before `quantize`, or from the float model.")
    return np.asarray(value, np.float32)


# ------------------------------------------------------------------------------------------------------------------
# config.json <-> GPTConfig

_REQUIRED = {"vocab_size": "vocabulary_size", "hidden_size": "hidden_dim", "intermediate_size": "intermediate_dim",
             "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads"}
# LlamaConfig's defaults for the rest.
_OPTIONAL = {"num_key_value_heads": ("num_key_value_heads", None),
             "max_position_embeddings": ("max_sequence_length", 2048), "rms_norm_eps": ("layer_norm_epsilon", 1e-6),
             "tie_word_embeddings": ("tie_embeddings", False),
             "attention_dropout": ("attention_dropout", 0.0), "eos_token_id": ("end_token_id", 2),
             "pad_token_id": ("pad_token_id", None)}
# Keys whose other values change the function computed: (key, the value GPT computes, meaning).
_FIXED = (
    ("model_type", "llama", "a LLaMA checkpoint"),
    ("hidden_act", "silu", "GPT's SwiGLU uses Swish_1 = SiLU"),
    ("attention_bias", False, "GPT's LLaMA attention has no biases"),
    ("mlp_bias", False, "GPT's LLaMA feed-forward has no biases"),
    ("rope_scaling", None, "GPT's RoPE has no frequency scaling"),
)


def _rope_theta(hf_config, source):
    """rope_theta from transformers 5's ``rope_parameters`` or 4's ``rope_theta``; only the default RoPE."""
    parameters = hf_config.get("rope_parameters") or {}
    rope_type = parameters.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"{source}: `rope_parameters.rope_type` must be 'default' (GPT's RoPE has no scaling); "
                         f"received {rope_type!r}.")
    return parameters.get("rope_theta", hf_config.get("rope_theta", 10000.0))


def llama_config_from_hf(hf_config, source="config.json", **overrides):
    """Our :class:`GPTConfig` (architecture "llama") from a Hugging Face ``LlamaConfig`` dict (its config.json).

    Raises:
        ValueError: naming ``source`` and the key, for a missing size, an activation other than SiLU, biases, RoPE
            scaling, a ``head_dim`` other than hidden_size / num_attention_heads, or sizes GPTConfig refuses.
    """
    fields = hf_config_fields(hf_config, source, required=_REQUIRED, optional=_OPTIONAL, fixed=_FIXED,
                              model="a LLaMA")
    if isinstance(fields["end_token_id"], list) and len(fields["end_token_id"]) == 1:
        fields["end_token_id"] = fields["end_token_id"][0]
    head_dim = hf_config.get("head_dim")
    if head_dim is not None and head_dim * fields["num_heads"] != fields["hidden_dim"]:
        raise ValueError(f"{source}: `head_dim` must be hidden_size / num_attention_heads = "
                         f"{fields['hidden_dim']} / {fields['num_heads']} for GPT; received head_dim={head_dim}.")
    fields.update(architecture="llama", rope_theta=_rope_theta(hf_config, source), **overrides)
    try:
        return GPTConfig(**fields)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source}: {error}") from None


def llama_config_to_hf(config):
    """The config.json dict of a ``LlamaForCausalLM`` for our LLaMA-style :class:`GPTConfig`."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": config.vocabulary_size, "hidden_size": config.hidden_dim,
        "intermediate_size": config.intermediate_dim, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.key_value_heads,
        "head_dim": config.head_dim, "max_position_embeddings": config.max_sequence_length,
        "rms_norm_eps": config.layer_norm_epsilon, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "rope_theta": config.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_embeddings, "attention_dropout": config.attention_dropout,
        "initializer_range": 0.02,
        "eos_token_id": config.end_token_id, "pad_token_id": config.pad_token_id, "use_cache": True,
        "dtype": "float32",
    }


# ------------------------------------------------------------------------------------------------------------------
# Load and save


def _check_tied_head(tensors, config, weights_path):
    """With tied embeddings a file's ``lm_head.weight``, where present, must equal embed_tokens."""
    if not config.tie_embeddings or LM_HEAD not in tensors or EMBEDDING not in tensors:
        return
    if tensors[LM_HEAD].shape != tensors[EMBEDDING].shape or not np.array_equal(tensors[LM_HEAD], tensors[EMBEDDING]):
        raise ValueError(f"{weights_path!r}: {LM_HEAD!r} differs from {EMBEDDING!r} but config.json says "
                         f"tie_word_embeddings=True.")


def load_hf_llama_checkpoint(directory, **overrides):
    """A LLaMA-style :class:`GPT` with the sizes and weights of a Hugging Face ``LlamaForCausalLM`` directory.

    Args:
        directory: holding ``config.json`` and ``model.safetensors`` (``save_pretrained``'s files, one shard).
        **overrides: GPTConfig fields replacing config.json's (``end_token_id``, ``pad_token_id``, ``dropout``).

    Returns:
        ``(model, info)``: the model (float32 weights) and a dict with "config" (our GPTConfig), "hf_config",
        "ignored" (skipped buffers, sorted) and "file" (the weights file).

    Raises:
        ValueError: naming the missing file; or the file and every missing, unexpected and misshapen tensor; or
            config.json's offending key (see :func:`llama_config_from_hf`).
    """
    config_path, weights_path = checkpoint_files(directory, "LLaMA")
    with open(config_path, encoding="utf-8") as f:
        hf_config = json.load(f)
    config = llama_config_from_hf(hf_config, source=config_path, **overrides)
    tensors, _ = read_safetensors(weights_path)
    _check_tied_head(tensors, config, weights_path)
    model = GPT(config)
    remaining = {name for name in tensors if not (config.tie_embeddings and name == LM_HEAD)}
    ignored = sorted(name for name in remaining if name.endswith(_BUFFER_SUFFIX))
    remaining -= set(ignored)
    missing, mismatched, assignments = [], [], []
    for name, variable, in_axes in tensor_map(model):
        if name not in tensors:
            missing.append(name)
            continue
        remaining.discard(name)
        expected = hf_shape(variable.shape, in_axes)
        if tuple(tensors[name].shape) != expected:
            mismatched.append(f"{name} {tuple(tensors[name].shape)} (expected {expected})")
        else:
            assignments.append((variable, to_keras(tensors[name], variable.shape, in_axes)))
    if missing or remaining or mismatched:
        raise ValueError(
            f"{weights_path!r} does not fit the LLaMA-style GPT of {config_path!r}: missing tensors: {missing}; "
            f"unexpected tensors: {sorted(remaining)}; shape mismatches: {mismatched}."
        )
    for variable, value in assignments:  # only once every tensor fits
        variable.assign(value.astype(variable.dtype))
    return model, {"config": config, "hf_config": hf_config, "ignored": ignored, "file": weights_path}


def save_hf_llama_checkpoint(model, directory):
    """Writes a LLaMA-style :class:`GPT` as a Hugging Face ``LlamaForCausalLM`` checkpoint (config.json and
    model.safetensors, float32; no lm_head.weight when tied), loadable by ``LlamaForCausalLM.from_pretrained`` and
    :func:`load_hf_llama_checkpoint`. Returns ``directory``.

    Args:
        model: a LLaMA-style :class:`GPT`.
        directory: the folder to write (created if missing).
    """
    if not (isinstance(model, GPT) and model.config.architecture == "llama"):
        raise ValueError(f"`model` must be a GPT with architecture='llama'; received {model!r}.")
    tensors = {
        name: np.ascontiguousarray(_to_hf(weight_value(variable, name), in_axes))
        for name, variable, in_axes in tensor_map(model)
    }
    os.makedirs(directory, exist_ok=True)
    replace_atomically(os.path.join(directory, WEIGHTS_FILE),
                       lambda path: write_safetensors(path, tensors, metadata={"format": "pt"}))
    text = json.dumps(llama_config_to_hf(model.config), indent=2, sort_keys=True) + "\n"

    def write_config(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    replace_atomically(os.path.join(directory, CONFIG_FILE), write_config)
    return directory
