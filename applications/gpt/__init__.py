"""GPT: a GPT-2-style decoder-only language model built from attnlayers' layers.

    from attnlayers.applications import gpt

    model = gpt.GPT(gpt.GPTConfig(vocabulary_size=1000, max_sequence_length=128))
    logits = model(token_ids)                                    # (B, T, 1000)
    result = model.generate(prompt_ids, max_length=128, search="top_p", seed=1)

Modules: `model` (GPTConfig, GPT: call, initial_cache / next / generation_inputs / generate, a core
GenerativeModel, so `attnlayers.applications.core.formats.export.export_generator` exports it as a SavedModel),
`keras_hub_weights` (a GPT from a keras-hub GPT2Backbone: same sizes, same weights), `checkpoint`
(load_hf_checkpoint / save_hf_checkpoint: Hugging Face GPT-2 directories, config.json + model.safetensors),
`llama_checkpoint` (the same for the LLaMA-style GPT and LlamaForCausalLM files), `tokenizer` (GPT2Tokenizer,
GPT-2's byte-level BPE, and train_byte_level_bpe; TensorFlow, imported on first use), `data` (documents -> token
stream -> windows of L + 1 tokens -> (x, y, padding-mask weight) batches; the unigram baseline) and `runs`
(TrainingSettings, run_training: the training run of examples/train_gpt.py; import them as modules).
GPTConfig.preset("small" | "medium" | "large" | "xl") gives GPT-2's sizes (GPT_PRESETS, plus a "tiny" test size);
config.parameter_count() their closed-form parameter count. `transformer_xl` (TransformerXL, TransformerXLConfig:
Transformer-XL, relative positions and a memory kept between batches; docs/guides/transformer-xl.md).
"""

from ..core.lazy import lazy_attributes
from .checkpoint import load_hf_checkpoint, save_hf_checkpoint
from .keras_hub_weights import copy_keras_hub_weights, from_keras_hub
from .llama_checkpoint import load_hf_llama_checkpoint, save_hf_llama_checkpoint
from .model import GPT, GPT_PRESETS, GPTConfig, gelu_approximate
from .transformer_xl import TransformerXL, TransformerXLConfig

# `tokenizer` (GPT2Tokenizer: GPT-2's byte-level BPE in TensorFlow ops; train_byte_level_bpe) needs TensorFlow:
# imported on first use, so the model imports without TensorFlow (the JAX backend on GPUs).
_TOKENIZER_NAMES = ("END_OF_TEXT", "GPT2Tokenizer", "pretokenize", "train_byte_level_bpe")
# Text generation (`generation`: generate_text with stop strings) and its SavedModel (`export`: export_gpt, strings
# in, text out, sampling settings as inputs, served by TensorFlow alone): TensorFlow too, imported on first use.
_LAZY = {"generate_text": "generation", "export_gpt": "export", **dict.fromkeys(_TOKENIZER_NAMES, "tokenizer"),
         "load_gguf": "gguf", "save_gguf": "gguf_writer", "apply_chat_template": "gguf", "generate_chat": "gguf",
         "export_chat": "export"}

__all__ = [
    "GPT", "GPT_PRESETS", "GPTConfig", "copy_keras_hub_weights", "from_keras_hub", "gelu_approximate",
    "load_hf_checkpoint", "save_hf_checkpoint", "load_hf_llama_checkpoint", "save_hf_llama_checkpoint",
    "TransformerXL", "TransformerXLConfig", *_LAZY,
]

# Each module of the package is an attribute too (gpt.viewer, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__, _LAZY)
