"""Writing a LLaMA-style GPT back as a GGUF file (llama.cpp's format): the inverse of :func:`~.gguf.load_gguf`.

    model, tokenizer, metadata = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    ...                                                      # fine-tune
    save_gguf(model, "smollm2-tuned.Q8_0.gguf", metadata=metadata, dtype="Q8_0")

The file is written by the maintained ``gguf`` package (PyPI; llama.cpp's own writer): ``gguf.GGUFWriter`` for the
header, the metadata and the tensor table, ``gguf.quants.quantize`` for Q8_0. The tensors stream: the table is
written first, then one tensor at a time is converted and written, so memory holds one tensor beside the model.

What llama.cpp's converter (``convert_hf_to_gguf.py``) writes for a LLaMA, and so what is written here:

- tensors: the names and (rows, row length) shapes of :mod:`.gguf`'s table (``token_embd``, ``blk.{i}.attn_q`` /
  ``attn_k`` / ``attn_v`` / ``attn_output``, ``ffn_gate`` / ``ffn_up`` / ``ffn_down``, ``attn_norm``, ``ffn_norm``,
  ``output_norm``, ``output`` unless the embeddings are tied); the rows of attn_q and attn_k in ggml's interleaved
  RoPE order (:func:`~.gguf.permute_rope_rows`, the converter's ``LlamaModel.permute``, which the reader undoes);
  a padded vocabulary (``vocabulary_padding``) as its V real rows (``GPT.vocabulary_view``);
- types: ``dtype`` ("F32", "F16" or "Q8_0") for the 2-D tensors, F32 for the 1-D ones (the RMSNorm weights), as the
  converter does; a Q8_0 tensor whose rows are not a multiple of 32 values is written F16 (the converter's
  fallback), with a warning naming it;
- metadata: ``general.architecture`` "llama", ``general.file_type`` (``gguf.LlamaFileType``),
  ``general.quantization_version``, ``general.alignment`` (32, GGUF's default, written explicitly), and from the
  model's :class:`GPTConfig`: ``llama.context_length``, ``embedding_length``, ``block_count``,
  ``feed_forward_length``, ``attention.head_count``, ``attention.head_count_kv``, ``rope.freq_base``,
  ``rope.dimension_count``, ``attention.layer_norm_rms_epsilon``, ``vocab_size``;
- the tokenizer: every ``general.*`` and ``tokenizer.*`` field of ``metadata`` (:func:`~.gguf.load_gguf`'s: the
  tokens, token types, merges, pre-tokenizer, BOS / EOS / padding ids, chat template, with their GGUF value types),
  or, without those, the ``tokenizer`` given (a :class:`~.tokenizer.GPT2Tokenizer` or load_gguf's
  ``GGUFTokenizer``: ``tokenizer.ggml.model`` "gpt2", its tokens, merges and special tokens as CONTROL tokens,
  ``tokenizer.ggml.pre`` "gpt-2" or, where it isolates digits, "starcoder"). The EOS id is the model's
  ``end_token_id``. Without either, no tokenizer is written (load_gguf(..., with_tokenizer=False) reads the file;
  llama.cpp needs a tokenizer), with a warning.

A LoRA-enabled projection (Keras' ``enable_lora``) is written as the weight it computes with, W + (alpha / r) B A.
Only the LLaMA architecture is written (GPT-2's GGUF layout, with its fused QKV tensor and biases, is not read back
by :func:`~.gguf.load_gguf` either); a model holding quantized (integer) weights is refused.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from ..core.inputs.files import replace_atomically
from .gguf import _gguf_to_hf_names, _import_gguf, permute_rope_rows
from .llama_checkpoint import _to_hf, tensor_map, weight_value
from .model import GPT

__all__ = ["SAVE_TYPES", "save_gguf"]

SAVE_TYPES = ("F32", "F16", "Q8_0")
ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
# Written from the model and the dtype, never carried over from the source file's metadata.
_OWN_KEYS = ("general.architecture", "general.file_type", "general.quantization_version", "general.alignment")
_CARRIED = ("general.", "tokenizer.")
_CONTROL, _NORMAL = 3, 1  # llama.cpp's llama_token_type


def _tensors(model):
    """``[(GGUF name, Hugging Face name, our weight, in_axes, RoPE heads or None)]`` in tensor_map's order."""
    hf_to_gguf = {hf: (name, heads) for name, (hf, heads) in _gguf_to_hf_names(model.config).items()}
    return [(hf_to_gguf[hf][0], hf, variable, in_axes, hf_to_gguf[hf][1])
            for hf, variable, in_axes in tensor_map(model)]


def _value(variable, in_axes, rope_heads, name):
    """Our weight as the GGUF tensor's float32 (rows, row length) array: a Linear's (out, in) weight, the rows of
    attn_q / attn_k permuted into ggml's RoPE order; a LoRA-enabled projection written merged."""
    value = _to_hf(weight_value(variable, name), in_axes)
    if rope_heads is not None:
        value = permute_rope_rows(value, rope_heads)
    return np.ascontiguousarray(value)


def _type_of(shape, dtype, gguf):
    """The GGML type a tensor of ``shape`` is written in: F32 for 1-D tensors; F16 for Q8_0 rows that are not whole
    blocks."""
    quant = gguf.GGMLQuantizationType
    if len(shape) == 1 or dtype == "F32":
        return quant.F32
    if dtype == "F16":
        return quant.F16
    block, _ = gguf.GGML_QUANT_SIZES[quant.Q8_0]
    return quant.Q8_0 if shape[-1] % block == 0 else quant.F16


def _encode(value, qtype, gguf):
    quant = gguf.GGMLQuantizationType
    if qtype == quant.F32:
        return value
    if qtype == quant.F16:
        return value.astype(np.float16)
    return gguf.quants.quantize(value, qtype)


def _inferred_type(key, value, gguf):
    """(GGUFValueType, sub type) for a metadata value without a recorded type."""
    v = gguf.GGUFValueType

    def scalar(x):
        if isinstance(x, (bool, np.bool_)):
            return v.BOOL
        if isinstance(x, (int, np.integer)):
            return v.UINT32 if 0 <= x < 2**32 else v.INT64
        if isinstance(x, (float, np.floating)):
            return v.FLOAT32
        if isinstance(x, str):
            return v.STRING
        raise ValueError(f"`metadata`: the value of {key!r} ({type(x).__name__}) is not a GGUF value (bool, int, "
                         f"float, str or a list of them).")

    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        sub = scalar(items[0]) if items else v.STRING
        if sub == v.UINT32 and key.endswith("token_type"):
            sub = v.INT32  # llama.cpp reads token_type as int32
        return v.ARRAY, sub
    return scalar(value), None


def _carried_fields(metadata, gguf):
    """{key: (value, type, sub type)}: the ``general.*`` and ``tokenizer.*`` fields of load_gguf's metadata."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or "fields" not in metadata:
        keys = f" with keys {sorted(metadata)}" if isinstance(metadata, dict) else ""
        raise ValueError("`metadata` must be load_gguf's metadata (a dict with 'fields' and 'arrays'); received "
                         f"{type(metadata).__name__}{keys}.")
    v = gguf.GGUFValueType
    types = metadata.get("field_types", {})
    carried = {}
    for key, value in {**metadata["fields"], **metadata.get("arrays", {})}.items():
        if not key.startswith(_CARRIED) or key in _OWN_KEYS:
            continue
        if key in types:
            kind, *sub = (v[name] for name in types[key])
            carried[key] = (value, kind, sub[0] if sub else None)
        else:
            carried[key] = (value, *_inferred_type(key, value, gguf))
    return carried


def _tokenizer_fields(tokenizer, gguf):
    """The tokenizer.ggml.* fields of a GPT2Tokenizer / GGUFTokenizer."""
    v = gguf.GGUFValueType
    tokens = tokenizer.get_vocabulary()
    special = set(getattr(tokenizer, "special_tokens", {})) | {tokens[tokenizer.end_token_id]}
    pre = "starcoder" if getattr(tokenizer, "split_digits", False) else "gpt-2"
    return {
        "tokenizer.ggml.model": ("gpt2", v.STRING, None),
        "tokenizer.ggml.pre": (pre, v.STRING, None),
        "tokenizer.ggml.tokens": (tokens, v.ARRAY, v.STRING),
        "tokenizer.ggml.token_type": ([_CONTROL if t in special else _NORMAL for t in tokens], v.ARRAY, v.INT32),
        "tokenizer.ggml.merges": (list(tokenizer.bpe.merges), v.ARRAY, v.STRING),
        "tokenizer.ggml.bos_token_id": (int(tokenizer.start_token_id), v.UINT32, None),
    }


def _model_fields(config, file_type, gguf):
    v = gguf.GGUFValueType
    u32, f32 = v.UINT32, v.FLOAT32
    return {
        "general.architecture": ("llama", v.STRING, None),
        "general.file_type": (int(file_type), u32, None),
        "general.quantization_version": (gguf.GGML_QUANT_VERSION, u32, None),
        "general.alignment": (ALIGNMENT, u32, None),
        "llama.context_length": (config.max_sequence_length, u32, None),
        "llama.embedding_length": (config.hidden_dim, u32, None),
        "llama.block_count": (config.num_layers, u32, None),
        "llama.feed_forward_length": (config.intermediate_dim, u32, None),
        "llama.attention.head_count": (config.num_heads, u32, None),
        "llama.attention.head_count_kv": (config.key_value_heads, u32, None),
        "llama.rope.freq_base": (float(config.rope_theta), f32, None),
        "llama.rope.dimension_count": (config.head_dim, u32, None),
        "llama.attention.layer_norm_rms_epsilon": (float(config.layer_norm_epsilon), f32, None),
        "llama.vocab_size": (config.vocabulary_size, u32, None),
    }


def save_gguf(model, path, *, tokenizer=None, metadata=None, dtype="F32"):
    """Writes a LLaMA-style :class:`GPT` as a GGUF file that :func:`~.gguf.load_gguf` and llama.cpp read.

    Args:
        model: a GPT with ``architecture="llama"`` (float weights; a padded vocabulary is written as its V rows).
        path: the ``.gguf`` file to write (replaced atomically).
        tokenizer: a :class:`~.tokenizer.GPT2Tokenizer` or load_gguf's tokenizer, written as the file's
            tokenizer where ``metadata`` holds none.
        metadata: :func:`~.gguf.load_gguf`'s metadata: its ``general.*`` and ``tokenizer.*`` fields (name, tokens,
            token types, merges, pre-tokenizer, special ids, chat template) are carried over with their types;
            edit ``metadata["fields"]`` (e.g. "general.name") to change them.
        dtype: "F32", "F16" or "Q8_0": the type of the 2-D tensors (1-D tensors are F32).

    Returns:
        ``path``.

    Raises:
        ValueError: for a model that is not a LLaMA-style GPT (GPT-2's GGUF layout is not written), a ``dtype``
            outside :data:`SAVE_TYPES`, integer (quantized) weights, ``metadata`` that is not load_gguf's, or a
            tokenizer whose number of tokens differs from the model's vocabulary_size.
    """
    gguf = _import_gguf()
    if not isinstance(model, GPT):
        raise ValueError(f"`model` must be a GPT with architecture='llama'; received {type(model).__name__}.")
    if model.config.architecture != "llama":
        raise ValueError(f"`model` has architecture={model.config.architecture!r}; save_gguf writes 'llama' only "
                         f"(GPT-2's GGUF layout is not written: save_hf_checkpoint writes GPT-2 for Hugging Face).")
    name = str(dtype).upper()
    if name not in SAVE_TYPES:
        raise ValueError(f"`dtype` must be one of {SAVE_TYPES}; received {dtype!r}.")
    config = model.config
    file_type = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                 "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[name]
    fields = _carried_fields(metadata, gguf)
    if "tokenizer.ggml.tokens" not in fields and tokenizer is not None:
        fields = {**_tokenizer_fields(tokenizer, gguf), **fields}
    if "tokenizer.ggml.tokens" in fields:
        tokens = fields["tokenizer.ggml.tokens"][0]
        if len(tokens) != config.vocabulary_size:
            raise ValueError(f"the tokenizer holds {len(tokens)} tokens but the model's vocabulary_size is "
                             f"{config.vocabulary_size}; llama.cpp needs one token per embedding row.")
        u32 = gguf.GGUFValueType.UINT32
        if config.end_token_id is not None:
            fields["tokenizer.ggml.eos_token_id"] = (int(config.end_token_id), u32, None)
        if "tokenizer.ggml.padding_token_id" not in fields and config.pad_token_id is not None:
            fields["tokenizer.ggml.padding_token_id"] = (int(config.pad_token_id), u32, None)
    else:
        warnings.warn("save_gguf: no tokenizer written (neither `metadata` from load_gguf nor `tokenizer` given); "
                      "load_gguf(..., with_tokenizer=False) reads the file, llama.cpp needs a tokenizer.",
                      stacklevel=2)
    fields.update(_model_fields(config, file_type, gguf))

    tensors = _tensors(model)
    types, fallback = [], []
    for gguf_name, _, variable, in_axes, _ in tensors:
        shape = tuple(int(n) for n in variable.shape)
        shape = shape if not in_axes else (int(np.prod(shape[in_axes:])), int(np.prod(shape[:in_axes])))
        qtype = _type_of(shape, name, gguf)
        if name == "Q8_0" and len(shape) == 2 and qtype != gguf.GGMLQuantizationType.Q8_0:
            fallback.append(gguf_name)
        types.append((shape, qtype))
    if fallback:
        warnings.warn(f"save_gguf: {len(fallback)} tensors have rows that are not a multiple of Q8_0's 32-value "
                      f"blocks and are written F16: {fallback[:5]}{' ...' if len(fallback) > 5 else ''}.",
                      stacklevel=2)

    def write(target):
        writer = gguf.GGUFWriter(target, "llama")
        writer.kv_data[0].clear()  # general.architecture is written with the others, in their order
        writer.data_alignment = ALIGNMENT
        for key, (value, kind, sub) in fields.items():
            writer.add_key_value(key, value, kind, sub)
        for (gguf_name, *_), (shape, qtype) in zip(tensors, types):
            nbytes = int(np.prod(gguf.quant_shape_to_byte_shape(shape, qtype)))
            writer.add_tensor_info(gguf_name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for (gguf_name, _, variable, in_axes, heads), (_, qtype) in zip(tensors, types):  # one tensor at a time
                writer.write_tensor_data(_encode(_value(variable, in_axes, heads, gguf_name), qtype, gguf))
        finally:
            writer.close()

    path = os.fspath(path)
    replace_atomically(path, write)
    return path
