"""save_gguf: a LLaMA-style GPT written as GGUF reads back through load_gguf with the same logits (F32 to 1e-5, F16
and Q8_0 to their rounding), GQA, tied and untied heads, a padded vocabulary written with its real V; the file passes
the gguf package's reader with llama.cpp's metadata, names, shapes and types; the tokenizer (tokens, types, merges,
special ids, pre-tokenizer) and the chat template survive the round trip, from load_gguf's metadata or from a
tokenizer; LoRA-enabled projections are written merged (by save_hf_llama_checkpoint too); what cannot be written
(gpt2, other types, a mismatched tokenizer, quantized weights) raises, what is written otherwise warns."""

import gguf
import numpy as np
import pytest
from keras import ops

from attnlayers.applications.gpt import (
    GPT,
    GPTConfig,
    load_gguf,
    load_hf_llama_checkpoint,
    save_gguf,
    save_hf_llama_checkpoint,
)
from attnlayers.applications.gpt.llama_checkpoint import _to_hf, tensor_map, to_keras
from attnlayers.applications.gpt.tokenizer import BYTE_SYMBOLS

Q = gguf.GGMLQuantizationType
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "Ġa n", "Ġan d", "2 2"]
TOKENS = SPECIAL + list(BYTE_SYMBOLS) + [m.replace(" ", "") for m in MERGES]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CONFIG = dict(vocabulary_size=len(TOKENS), max_sequence_length=64, num_layers=2, num_heads=4, hidden_dim=32,
              intermediate_dim=64, layer_norm_epsilon=1e-5, architecture="llama", rope_theta=500.0, end_token_id=2,
              pad_token_id=2)
PROMPT = np.array([[1, 70, 80, 90, 100, 2, 5, 200, 260, 12, 40, 41]], "int32")


def _metadata():
    """load_gguf's metadata for a file holding this tokenizer (no recorded value types: they are inferred)."""
    return {
        "fields": {"general.name": "tiny", "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
                   "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
                   "tokenizer.ggml.padding_token_id": 2, "tokenizer.ggml.add_bos_token": False,
                   "tokenizer.chat_template": CHATML,
                   "general.file_type": 3, "llama.context_length": 999},  # not carried: written from the model
        "arrays": {"tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.merges": MERGES,
                   "tokenizer.ggml.token_type": [3 if t in SPECIAL else 1 for t in TOKENS]},
    }


def _model(seed=0, scale=0.2, **fields):
    """A tiny LLaMA-style GPT with N(0, scale) matrices and N(1, 0.5) norm weights."""
    model = GPT(GPTConfig(**{**CONFIG, **fields}))
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        mean, std = (0.0, scale) if len(variable.shape) > 1 else (1.0, 0.5)
        variable.assign(rng.normal(mean, std, variable.shape).astype("float32"))
    return model


def _logits(model):
    return ops.convert_to_numpy(model(PROMPT))


def _fields(path):
    reader = gguf.GGUFReader(path)
    fields = {k: (f.contents(), tuple(t.name for t in f.types)) for k, f in reader.fields.items()
              if not k.startswith("GGUF.")}
    tensors = {t.name: (tuple(int(n) for n in reversed(t.shape)), t.tensor_type.name, bytes(t.data)) for t in
               reader.tensors}
    return fields, tensors, reader


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """An untied GQA model with a padded vocabulary (V 266 -> 384 rows), written F32 with _metadata() and read back."""
    directory = tmp_path_factory.mktemp("save_gguf")
    model = _model(num_key_value_heads=2, tie_embeddings=False, vocabulary_padding=128)
    path = save_gguf(model, str(directory / "tiny.gguf"), metadata=_metadata())
    return model, path, load_gguf(path), directory


def test_f32_round_trip_metadata_shapes_and_tokenizer(written):
    model, path, (loaded, tokenizer, metadata), directory = written
    np.testing.assert_allclose(_logits(loaded), _logits(model), atol=1e-5, rtol=1e-5)
    fields, tensors, reader = _fields(path)
    V, d, f = len(TOKENS), 32, 64
    expected = {
        "general.architecture": ("llama", ("STRING",)), "general.file_type": (0, ("UINT32",)),
        "general.alignment": (32, ("UINT32",)), "general.quantization_version": (2, ("UINT32",)),
        "general.name": ("tiny", ("STRING",)),
        "llama.context_length": (64, ("UINT32",)), "llama.embedding_length": (d, ("UINT32",)),
        "llama.block_count": (2, ("UINT32",)), "llama.feed_forward_length": (f, ("UINT32",)),
        "llama.attention.head_count": (4, ("UINT32",)), "llama.attention.head_count_kv": (2, ("UINT32",)),
        "llama.rope.freq_base": (500.0, ("FLOAT32",)), "llama.rope.dimension_count": (8, ("UINT32",)),
        "llama.vocab_size": (V, ("UINT32",)),
        "tokenizer.ggml.model": ("gpt2", ("STRING",)), "tokenizer.ggml.pre": ("smollm", ("STRING",)),
        "tokenizer.ggml.tokens": (TOKENS, ("ARRAY", "STRING")), "tokenizer.ggml.merges": (MERGES, ("ARRAY", "STRING")),
        "tokenizer.ggml.token_type": ([3, 3, 3] + [1] * (V - 3), ("ARRAY", "INT32")),
        "tokenizer.ggml.bos_token_id": (1, ("UINT32",)), "tokenizer.ggml.eos_token_id": (2, ("UINT32",)),
        "tokenizer.ggml.padding_token_id": (2, ("UINT32",)), "tokenizer.ggml.add_bos_token": (False, ("BOOL",)),
        "tokenizer.chat_template": (CHATML, ("STRING",)),
    }
    eps = fields.pop("llama.attention.layer_norm_rms_epsilon")
    assert eps[1] == ("FLOAT32",) and abs(eps[0] - 1e-5) < 1e-11
    assert fields == expected and reader.alignment == 32
    shapes = {"token_embd.weight": (V, d), "output.weight": (V, d), "output_norm.weight": (d,)}
    for i in range(2):
        shapes.update({f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.ffn_norm.weight": (d,),
                       f"blk.{i}.attn_q.weight": (d, d), f"blk.{i}.attn_k.weight": (16, d),
                       f"blk.{i}.attn_v.weight": (16, d), f"blk.{i}.attn_output.weight": (d, d),
                       f"blk.{i}.ffn_gate.weight": (f, d), f"blk.{i}.ffn_up.weight": (f, d),
                       f"blk.{i}.ffn_down.weight": (d, f)})
    assert {name: (shape, kind) for name, (shape, kind, _) in tensors.items()} == {
        name: (shape, "F32") for name, shape in shapes.items()}
    # The tokenizer (what fixes its ids: tokens, merges, special tokens, digit splitting) and the chat template.
    assert tokenizer.get_vocabulary() == TOKENS and list(tokenizer.bpe.merges) == MERGES
    assert metadata["special_tokens"] == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    assert tokenizer.split_digits and metadata["chat_template"] == CHATML
    assert (metadata["bos_token_id"], metadata["eos_token_id"], metadata["padding_token_id"]) == (1, 2, 2)
    assert loaded.config == GPTConfig(**{**CONFIG, "num_key_value_heads": 2, "tie_embeddings": False})
    # load_gguf's metadata (now with value types) written again: the same file.
    again = save_gguf(loaded, str(directory / "again.gguf"), metadata=metadata, tokenizer=tokenizer)
    assert _fields(again)[:2] == (_fields(path)[0], tensors)


@pytest.mark.parametrize("dtype,tied", [("F16", True), ("Q8_0", False), ("Q8_0", True)])
def test_f16_and_q8_0_round_trip(tmp_path, dtype, tied):
    # Matrices of 0.02 (GPT's initializer; random nets of larger weights amplify rounding: 1-3% of the logits'
    # range for Q8_0 at 0.05-0.2, though the file holds exactly the rounded weights, checked below).
    model = _model(seed=1, scale=0.02, num_key_value_heads=1, tie_embeddings=tied)
    path = save_gguf(model, str(tmp_path / "tiny.gguf"), metadata=_metadata(), dtype=dtype)
    fields, tensors, _ = _fields(path)
    assert fields["general.file_type"][0] == {"F16": 1, "Q8_0": 7}[dtype]
    assert ("output.weight" in tensors) != tied
    assert {name: kind for name, (shape, kind, _) in tensors.items()} == {
        name: (dtype if len(shape) == 2 else "F32") for name, (shape, _, _) in tensors.items()}
    loaded, _, _ = load_gguf(path, with_tokenizer=False)
    expected, logits = _logits(model), _logits(loaded)
    error = np.abs(logits - expected).max() / (expected.max() - expected.min())
    assert 1e-7 < error < (1e-3 if dtype == "F16" else 1e-2), error  # rounded, within the bar
    # Exactly the rounded weights: the model with each matrix rounded as the file's type gives the loaded logits.
    qtype = Q[dtype]
    for name, variable, in_axes in tensor_map(model):
        if len(variable.shape) > 1:
            value = _to_hf(ops.convert_to_numpy(variable.value), in_axes)
            rounded = gguf.quants.dequantize(gguf.quants.quantize(value, qtype), qtype).reshape(value.shape)
            variable.assign(to_keras(rounded, variable.shape, in_axes))
    np.testing.assert_allclose(_logits(model), logits, atol=1e-5, rtol=1e-5)


def test_tokenizer_without_metadata(written, tmp_path):
    model, _, (_, tokenizer, _), _ = written
    path = save_gguf(model, str(tmp_path / "from_tokenizer.gguf"), tokenizer=tokenizer)
    fields, _, _ = _fields(path)
    assert fields["tokenizer.ggml.pre"][0] == "starcoder"  # the tokenizer isolates digits
    assert fields["tokenizer.ggml.token_type"][0][:4] == [3, 3, 3, 1]
    _, reloaded, metadata = load_gguf(path)
    assert reloaded.get_vocabulary() == TOKENS and list(reloaded.bpe.merges) == MERGES
    assert metadata["special_tokens"] == tokenizer.special_tokens and reloaded.split_digits
    assert (metadata["bos_token_id"], metadata["eos_token_id"], metadata["padding_token_id"]) == (0, 2, 2)


def test_refused_and_warned(tmp_path):
    path = str(tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="architecture='gpt2'.*'llama' only"):
        save_gguf(GPT(GPTConfig.preset("tiny")), path)
    model = _model(hidden_dim=48, intermediate_dim=64)
    with pytest.raises(ValueError, match=r"`dtype` must be one of \('F32', 'F16', 'Q8_0'\); received 'Q4_0'"):
        save_gguf(model, path, dtype="Q4_0")
    with pytest.raises(ValueError, match=f"holds 3 tokens but the model's vocabulary_size is {len(TOKENS)}"):
        save_gguf(model, path, metadata={"fields": {}, "arrays": {"tokenizer.ggml.tokens": SPECIAL}})
    with pytest.raises(ValueError, match="load_gguf's metadata"):
        save_gguf(model, path, metadata={"general.name": "x"})
    with pytest.warns(UserWarning, match="no tokenizer written"):
        with pytest.warns(UserWarning, match=r"not a multiple of Q8_0's 32-value blocks and are written F16"):
            save_gguf(model, path, dtype="Q8_0")
    _, tensors, _ = _fields(path)
    assert tensors["blk.0.attn_q.weight"][1] == "F16" and tensors["blk.0.ffn_down.weight"][1] == "Q8_0"
    loaded, _, _ = load_gguf(path, with_tokenizer=False)
    expected = _logits(model)
    assert np.abs(_logits(loaded) - expected).max() < 1e-2 * (expected.max() - expected.min())


def test_lora_is_written_merged_and_quantized_models_are_refused(tmp_path):
    # Both writers (GGUF, Hugging Face): a LoRA-enabled projection is written as the weight it computes with,
    # W + (alpha / r) B A; an int8 model's integer codes are refused, not written as floats.
    model = _model(num_key_value_heads=2, tie_embeddings=False)
    before = _logits(model)
    query = model.decoder.blocks[0].self_attention.query_dense
    query.enable_lora(2)
    for variable in query.trainable_weights:
        variable.assign(np.random.default_rng(2).normal(0, 0.3, variable.shape).astype("float32"))
    expected = _logits(model)
    assert np.abs(expected - before).max() > 1.0
    loaded, _, _ = load_gguf(save_gguf(model, str(tmp_path / "lora.gguf"), metadata=_metadata()),
                             with_tokenizer=False)
    np.testing.assert_allclose(_logits(loaded), expected, atol=1e-5, rtol=1e-5)
    loaded, _ = load_hf_llama_checkpoint(save_hf_llama_checkpoint(model, str(tmp_path / "lora_hf")))
    np.testing.assert_allclose(_logits(loaded), expected, atol=1e-5, rtol=1e-5)
    model.decoder.blocks[1].feedforward.output_dense.quantize("int8")  # one layer: model.quantize takes ~10 s
    with pytest.raises(ValueError, match=r"'blk\.1\.ffn_down\.weight' is int8 \(a quantized model\?\)"):
        save_gguf(model, str(tmp_path / "int8.gguf"), metadata=_metadata())
    assert not list(tmp_path.glob("int8.gguf*"))
    with pytest.raises(ValueError, match=r"'model\.layers\.1\.mlp\.down_proj\.weight' is int8 \(a quantized"):
        save_hf_llama_checkpoint(model, str(tmp_path / "int8_hf"))
