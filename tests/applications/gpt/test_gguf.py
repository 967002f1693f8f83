"""load_gguf: GGUF files written here with llama.cpp's own writer (gguf.GGUFWriter, gguf.quants.quantize; the Q / K
rows permuted exactly as convert_hf_to_gguf.py does) load into a GPT whose logits equal those of the same
(dequantized) weights imported from a Hugging Face LLaMA directory (load_hf_llama_checkpoint), for F32, F16, BF16,
Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, tied and untied; a file without the permutation gives other logits. The tokenizer
from the metadata equals Hugging Face `tokenizers` (special tokens, isolated digits) and round-trips; ChatML chat
templates; every refused file raises a ValueError naming the file and what is wrong."""

import json

import gguf
import numpy as np
import pytest
from keras import ops

from attnlayers.applications.core.formats.safetensors import write_safetensors  # noqa: E402
from attnlayers.applications.gpt import (  # noqa: E402
    GPTConfig,
    apply_chat_template,
    load_gguf,
    load_hf_llama_checkpoint,
)
from attnlayers.applications.gpt.gguf import SUPPORTED_TYPES, permute_rope_rows, unpermute_rope_rows  # noqa: E402
from attnlayers.applications.gpt.llama_checkpoint import llama_config_to_hf  # noqa: E402
from attnlayers.applications.gpt.tokenizer import BYTE_SYMBOLS  # noqa: E402

Q = gguf.GGMLQuantizationType
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool call.*>"]  # the last: RE2 metacharacters
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "Ġa n", "Ġan d", "o n", "2 2", "Ġ 3"]
MISSING_BYTE = BYTE_SYMBOLS[4]  # the symbol of byte 0x04: left out, as SmolLM2 leaves out 21 control bytes
TOKENS = SPECIAL + [s for s in BYTE_SYMBOLS if s != MISSING_BYTE] + [m.replace(" ", "") for m in MERGES]
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
          "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CONFIG = dict(vocabulary_size=len(TOKENS), max_sequence_length=128, num_layers=2, num_heads=4, hidden_dim=32,
              intermediate_dim=64, layer_norm_epsilon=1e-6, architecture="llama", num_key_value_heads=2,
              rope_theta=500.0, end_token_id=2, pad_token_id=2)
PROMPT = np.array([[1, 70, 80, 90, 100, 2, 5, 200, 260, 12, 40, 41]], "int32")


def _hf_tensors(config, seed=0):
    """Random Hugging Face LlamaForCausalLM tensors (float32, (out, in))."""
    rng = np.random.default_rng(seed)
    d, f, kv = config.hidden_dim, config.intermediate_dim, config.key_value_heads * config.head_dim

    def w(*shape):
        return rng.normal(0, 0.2, shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(config.vocabulary_size, d),
               "model.norm.weight": rng.uniform(0.5, 1.5, d).astype(np.float32)}
    if not config.tie_embeddings:
        tensors["lm_head.weight"] = w(config.vocabulary_size, d)
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        tensors.update({
            f"{p}input_layernorm.weight": rng.uniform(0.5, 1.5, d).astype(np.float32),
            f"{p}post_attention_layernorm.weight": rng.uniform(0.5, 1.5, d).astype(np.float32),
            f"{p}self_attn.q_proj.weight": w(d, d), f"{p}self_attn.k_proj.weight": w(kv, d),
            f"{p}self_attn.v_proj.weight": w(kv, d), f"{p}self_attn.o_proj.weight": w(d, d),
            f"{p}mlp.gate_proj.weight": w(f, d), f"{p}mlp.up_proj.weight": w(f, d), f"{p}mlp.down_proj.weight": w(d, f),
        })
    return tensors


def _gguf_name(hf_name):
    """convert_hf_to_gguf.py's tensor names for LLaMA."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    layer, rest = hf_name.removeprefix("model.layers.").split(".", 1)
    names = {"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
             "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
             "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down"}
    return f"blk.{layer}.{names[rest]}.weight"


def _metadata(config, tokens=TOKENS):
    """{key: (value, GGUFValueType[, array sub type])}, what convert_hf_to_gguf.py writes for a LLaMA."""
    v = gguf.GGUFValueType
    return {
        "general.architecture": ("llama", v.STRING), "general.name": ("tiny", v.STRING),
        "llama.block_count": (config.num_layers, v.UINT32), "llama.context_length": (config.max_sequence_length,
                                                                                     v.UINT32),
        "llama.embedding_length": (config.hidden_dim, v.UINT32),
        "llama.feed_forward_length": (config.intermediate_dim, v.UINT32),
        "llama.attention.head_count": (config.num_heads, v.UINT32),
        "llama.attention.head_count_kv": (config.key_value_heads, v.UINT32),
        "llama.rope.freq_base": (config.rope_theta, v.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": (config.layer_norm_epsilon, v.FLOAT32),
        "llama.vocab_size": (config.vocabulary_size, v.UINT32),
        "llama.rope.dimension_count": (config.head_dim, v.UINT32),
        "tokenizer.ggml.model": ("gpt2", v.STRING), "tokenizer.ggml.pre": ("smollm", v.STRING),
        "tokenizer.ggml.tokens": (tokens, v.ARRAY, v.STRING),
        "tokenizer.ggml.token_type": ([3 if t in SPECIAL else 1 for t in tokens], v.ARRAY, v.INT32),
        "tokenizer.ggml.merges": (MERGES, v.ARRAY, v.STRING),
        "tokenizer.ggml.bos_token_id": (1, v.UINT32), "tokenizer.ggml.eos_token_id": (2, v.UINT32),
        "tokenizer.ggml.padding_token_id": (2, v.UINT32), "tokenizer.chat_template": (CHATML, v.STRING),
    }


def _quantize(value, qtype):
    """What the file holds for a float32 tensor in ``qtype`` (norms stay F32, as llama.cpp's converter keeps
    1-D tensors), and its dequantized float32 value."""
    if value.ndim == 1 or qtype == Q.F32:
        return value, value
    if qtype == Q.F16:
        return value.astype(np.float16), value.astype(np.float16).astype(np.float32)
    data = gguf.quants.quantize(value, qtype)
    return data, gguf.quants.dequantize(data, qtype).reshape(value.shape)


def write_gguf(path, config, hf_tensors, qtype=Q.F32, *, permute=True, metadata=None, drop=(), extra=None):
    """A LLaMA GGUF file as convert_hf_to_gguf.py writes it; returns the dequantized Hugging Face tensors."""
    metadata = {**_metadata(config), **(metadata or {})}
    writer = gguf.GGUFWriter(path, metadata["general.architecture"][0])
    writer.kv_data[0].pop("general.architecture", None)  # written below with the others
    for key, (value, *types) in metadata.items():
        if key not in drop:
            writer.add_key_value(key, value, *types)
    dequantized = {}
    for name, value in hf_tensors.items():
        if permute and name.endswith("q_proj.weight"):
            value = permute_rope_rows(value, config.num_heads)
        elif permute and name.endswith("k_proj.weight"):
            value = permute_rope_rows(value, config.key_value_heads)
        data, back = _quantize(value, qtype)
        if permute and name.endswith(("q_proj.weight", "k_proj.weight")):  # quantized per row: order commutes
            back = unpermute_rope_rows(back, config.num_heads if "q_proj" in name else config.key_value_heads)
        dequantized[name] = back
        gguf_name = _gguf_name(name)
        if gguf_name not in drop:
            writer.add_tensor(gguf_name, data, raw_dtype=None if data.dtype != np.uint8 else qtype)
    for name, (data, raw_dtype) in (extra or {}).items():
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dequantized


def _hf_logits(tmp_path, config, tensors):
    directory = tmp_path / "hf"
    directory.mkdir(exist_ok=True)
    with open(directory / "config.json", "w") as f:
        json.dump(llama_config_to_hf(config), f)
    write_safetensors(str(directory / "model.safetensors"), tensors)
    model, _ = load_hf_llama_checkpoint(str(directory))
    return ops.convert_to_numpy(model(PROMPT))


def _logits(model):
    return ops.convert_to_numpy(model(PROMPT))


# ---- weights --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype,tied", [(Q.F32, False), (Q.F16, True), (Q.BF16, False), (Q.Q8_0, True),
                                        (Q.Q4_0, False), (Q.Q4_1, True), (Q.Q5_0, True), (Q.Q5_1, False)],
                         ids=lambda v: v.name if isinstance(v, Q) else ("tied" if v else "untied"))
def test_logits_equal_the_hugging_face_import_of_the_dequantized_weights(tmp_path, qtype, tied):
    config = GPTConfig(**CONFIG, tie_embeddings=tied)
    path = str(tmp_path / f"tiny-{qtype.name}.gguf")
    dequantized = write_gguf(path, config, _hf_tensors(config), qtype)
    model, _, metadata = load_gguf(path, with_tokenizer=False)
    assert metadata["config"] == config and model.config.tie_embeddings == tied
    assert (model.lm_head is None) == tied
    expected_types = {"F32"} if qtype == Q.F32 else {"F32", qtype.name}
    assert set(metadata["tensor_types"]) == expected_types
    np.testing.assert_allclose(_logits(model), _hf_logits(tmp_path, config, dequantized), atol=1e-5, rtol=1e-5)


def test_all_supported_types_are_tested():
    tested = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
    assert set(SUPPORTED_TYPES) == tested


def test_rope_permutation_is_llama_cpps_and_is_undone(tmp_path):
    # One head, H = 4: rotate-half pairs (0, 2), (1, 3) become adjacent rows 0, 1 and 2, 3.
    rows = np.arange(8.0)[:, None] * np.ones((1, 3))
    np.testing.assert_array_equal(permute_rope_rows(rows, 2)[:, 0], [0, 2, 1, 3, 4, 6, 5, 7])
    np.testing.assert_array_equal(unpermute_rope_rows(permute_rope_rows(rows, 2), 2), rows)
    # A file written without the converter's permutation loads into another function.
    config = GPTConfig(**CONFIG, tie_embeddings=False)
    tensors = _hf_tensors(config, seed=3)
    path = str(tmp_path / "unpermuted.gguf")
    write_gguf(path, config, tensors, permute=False)
    model, _, _ = load_gguf(path, with_tokenizer=False)
    expected = _hf_logits(tmp_path, config, tensors)
    assert np.abs(_logits(model) - expected).max() > 1e-2
    write_gguf(path, config, tensors, permute=True)
    model, _, _ = load_gguf(path, with_tokenizer=False)
    np.testing.assert_allclose(_logits(model), expected, atol=1e-5, rtol=1e-5)


def test_metadata_defaults(tmp_path):
    config = GPTConfig(**{**CONFIG, "num_key_value_heads": None}, tie_embeddings=True)
    path = str(tmp_path / "defaults.gguf")
    write_gguf(path, config, _hf_tensors(config),
               drop=("llama.attention.head_count_kv", "llama.rope.freq_base", "llama.vocab_size"))
    model, _, metadata = load_gguf(path, with_tokenizer=False, max_sequence_length=16)
    assert model.config.key_value_heads == 4 and model.config.rope_theta == 10000.0
    assert model.config.vocabulary_size == len(TOKENS) and model.config.max_sequence_length == 16
    assert metadata["name"] == "tiny" and metadata["fields"]["llama.block_count"] == 2


# ---- the tokenizer --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gguf")
    config = GPTConfig(**CONFIG, tie_embeddings=True)
    path = str(directory / "tiny.gguf")
    write_gguf(path, config, _hf_tensors(config), Q.Q8_0)
    return load_gguf(path, tokenizer_directory=str(directory / "tokenizer"))


def _hf_tokenizer():
    """The same vocabulary in Hugging Face `tokenizers`, set up as SmolLM2's tokenizer.json: isolated digits,
    then GPT-2's byte-level split; the special tokens as added tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(TOKENS)}, [tuple(m.split(" ")) for m in MERGES]))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIAL)
    return tokenizer


TEXTS = ["the and an in on", "<|im_start|>user\nthe 2024 answer: 42<|im_end|>\n<|im_start|>assistant\n",
         "  leading and trailing  ", "日本語 😀 naïve\ttab", "", "<|endoftext|><|im_end|>x<|im_start|>",
         "a1b22 333 x22", "x<tool call.*>y <tool call>"]


def test_tokenizer_equals_hugging_face_and_round_trips(loaded):
    _, tokenizer, metadata = loaded
    reference = _hf_tokenizer()
    ids = tokenizer.tokenize(TEXTS).to_list()
    for text, row in zip(TEXTS, ids):
        assert row == reference.encode(text).ids, text
    assert tokenizer.tokenize("<|im_start|>").numpy().tolist() == [1]
    back = [t.decode("utf-8") for t in tokenizer.detokenize(tokenizer.tokenize(TEXTS)).numpy()]
    assert back == TEXTS
    assert tokenizer.vocabulary_size == len(TOKENS) and tokenizer.get_vocabulary() == TOKENS
    assert metadata["special_tokens"] == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<tool call.*>": 3}
    assert tokenizer.tokenize("x<tool call.*>").numpy().tolist()[1:] == [3] and not metadata["add_bos_token"]
    assert (metadata["bos_token_id"], metadata["eos_token_id"], metadata["padding_token_id"]) == (1, 2, 2)
    assert metadata["chat_template"] == CHATML and metadata["tokenizer_pre"] == "smollm"


def test_gpt2_pre_tokenizer_keeps_digit_runs(tmp_path):
    from tokenizers import pre_tokenizers

    config = GPTConfig(**CONFIG, tie_embeddings=True)
    path = str(tmp_path / "gpt2pre.gguf")
    write_gguf(path, config, _hf_tensors(config),
               metadata={"tokenizer.ggml.pre": ("gpt-2", gguf.GGUFValueType.STRING)})
    _, tokenizer, _ = load_gguf(path)
    reference = _hf_tokenizer()
    reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for text in TEXTS:
        assert tokenizer.tokenize(text).numpy().tolist() == reference.encode(text).ids, text


def test_a_byte_missing_from_the_vocabulary_is_dropped(loaded):
    _, tokenizer, _ = loaded
    with_byte = tokenizer.tokenize("a\x04b the").numpy().tolist()
    assert with_byte == tokenizer.tokenize("ab the").numpy().tolist()
    assert max(with_byte) < len(TOKENS)


def test_tokenizer_files(loaded):
    _, _, metadata = loaded
    vocabulary_path, merges_path = metadata["tokenizer_files"]
    with open(vocabulary_path, encoding="utf-8") as f:
        assert json.load(f) == {t: i for i, t in enumerate(TOKENS)}
    with open(merges_path, encoding="utf-8") as f:
        assert f.read().splitlines()[1:] == MERGES


def test_chat_template_and_generation(loaded):
    model, tokenizer, metadata = loaded
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "the end"}]
    system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    turns = ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
             "<|im_start|>user\nthe end<|im_end|>\n")
    assert apply_chat_template(messages, metadata) == system + turns + "<|im_start|>assistant\n"
    own = [{"role": "system", "content": "Be brief."}, messages[0]]
    assert apply_chat_template(own, metadata, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n")
    with pytest.raises(ValueError, match="not ChatML"):
        apply_chat_template(messages, {"chat_template": "{% for m in messages %}[INST] {{ m['content'] }} [/INST]"})
    with pytest.raises(ValueError, match="no chat template"):
        apply_chat_template(messages, {"chat_template": None, "file": "x.gguf"})
    with pytest.raises(ValueError, match="messages"):
        apply_chat_template([{"role": "user"}], metadata)
    from attnlayers.applications.gpt import generate_text

    text = generate_text(model, tokenizer, [apply_chat_template(messages[:1], metadata)], max_new_tokens=3)
    assert isinstance(text[0], str)


# ---- refused files --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("good") / "good.gguf")
    config = GPTConfig(**CONFIG, tie_embeddings=True)
    write_gguf(path, config, _hf_tensors(config), Q.Q4_0)
    return path, config


def test_architecture_and_missing_field_errors(tmp_path, good_file):
    _, config = good_file
    tensors = _hf_tensors(config)
    path = str(tmp_path / "falcon.gguf")
    write_gguf(path, config, tensors, metadata={"general.architecture": ("falcon", gguf.GGUFValueType.STRING)})
    with pytest.raises(ValueError, match=r"falcon\.gguf.*general\.architecture is 'falcon'"):
        load_gguf(path)
    for key in ("llama.block_count", "llama.attention.layer_norm_rms_epsilon", "llama.context_length",
                "general.architecture"):
        path = str(tmp_path / "missing.gguf")
        write_gguf(path, config, tensors, drop=(key,))
        with pytest.raises(ValueError, match=rf"missing\.gguf.*lacks the required field '{key}'"):
            load_gguf(path)


def test_unsupported_type_error(tmp_path, good_file):
    _, config = good_file
    path = str(tmp_path / "kquant.gguf")
    k_quant = np.zeros((config.intermediate_dim, 144), np.uint8)  # Q4_K: 144 bytes per 256 values
    write_gguf(path, config, _hf_tensors(config), drop=("blk.1.ffn_up.weight",),
               extra={"blk.1.ffn_up.weight": (k_quant, Q.Q4_K)})
    with pytest.raises(ValueError, match=r"kquant\.gguf.*unsupported tensor type: blk\.1\.ffn_up\.weight \(Q4_K\)"):
        load_gguf(path)


def test_tensor_errors(tmp_path, good_file):
    _, config = good_file
    path = str(tmp_path / "tensors.gguf")
    write_gguf(path, config, _hf_tensors(config), drop=("blk.0.attn_v.weight",),
               extra={"rope_freqs.weight": (np.ones(4, np.float32), None)})
    with pytest.raises(ValueError, match="rope_freqs"):
        load_gguf(path)
    write_gguf(path, config, _hf_tensors(config), drop=("blk.0.attn_v.weight",))
    with pytest.raises(ValueError, match=r"tensors\.gguf.*missing tensors: \['blk\.0\.attn_v\.weight'\]"):
        load_gguf(path)
    write_gguf(path, config, _hf_tensors(config), metadata={
        "llama.feed_forward_length": (48, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ValueError, match=r"tensors\.gguf.*shapes do not fit.*mlp\.gate_proj\.weight \(64, 32\)"):
        load_gguf(path)


def test_truncated_and_missing_files(tmp_path, good_file):
    path, _ = good_file
    with open(path, "rb") as f:
        data = f.read()
    for size in (0, 3, 20, 300, len(data) // 2, len(data) - 7):
        cut = str(tmp_path / f"cut{size}.gguf")
        with open(cut, "wb") as f:
            f.write(data[:size])
        with pytest.raises(ValueError, match=rf"cut{size}\.gguf.*not a readable GGUF file \(truncated or corrupt"):
            load_gguf(cut)
    with pytest.raises(ValueError, match="does not exist"):
        load_gguf(str(tmp_path / "absent.gguf"))


def test_tokenizer_errors(tmp_path, good_file):
    _, config = good_file
    path = str(tmp_path / "spm.gguf")
    write_gguf(path, config, _hf_tensors(config),
               metadata={"tokenizer.ggml.model": ("llama", gguf.GGUFValueType.STRING)})
    with pytest.raises(ValueError, match=r"spm\.gguf.*tokenizer\.ggml\.model is 'llama'"):
        load_gguf(path)
    model, tokenizer, _ = load_gguf(path, with_tokenizer=False)  # the model alone still loads
    assert tokenizer is None and model.config.vocabulary_size == len(TOKENS)
    write_gguf(path, config, _hf_tensors(config),
               metadata={"tokenizer.ggml.pre": ("llama-bpe", gguf.GGUFValueType.STRING)})
    with pytest.raises(ValueError, match=r"tokenizer\.ggml\.pre is 'llama-bpe'"):
        load_gguf(path)
    write_gguf(path, config, _hf_tensors(config), drop=("tokenizer.ggml.merges",))
    with pytest.raises(ValueError, match=r"lacks the required field 'tokenizer\.ggml\.merges'"):
        load_gguf(path)
