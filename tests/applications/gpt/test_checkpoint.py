"""Hugging Face GPT-2 checkpoints and GPT-2's sizes: tiny random checkpoints written here in both key layouts
(published: no prefix, ``attn.bias`` / ``attn.masked_bias`` buffers; today's ``GPT2LMHeadModel.save_pretrained``:
``transformer.`` prefix, perhaps ``lm_head.weight``) load into a GPT whose logits equal a NumPy forward pass of
GPT-2 written from the raw tensors; save -> load round-trips; missing files, tensors and config keys are refused by
name; the presets' closed-form parameter counts equal ``count_params()`` and the published GPT-2 counts. No torch
or transformers: ``benchmarks/gpt_hf_equivalence.py`` compares with them. Runs under TensorFlow and JAX."""

import json
import math
import os

import numpy as np
import pytest
from attnlayers.applications.core.formats.safetensors import read_safetensors
from attnlayers.applications.gpt import GPT, GPT_PRESETS, GPTConfig, load_hf_checkpoint, save_hf_checkpoint
from attnlayers.applications.gpt.checkpoint import config_from_hf
from keras import ops
from safetensors_reference import write_safetensors

HF_CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 40, "n_positions": 16, "n_embd": 12,
    "n_layer": 2, "n_head": 3, "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
    "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "bos_token_id": 39,
    "eos_token_id": 39, "tie_word_embeddings": True,
}
TOKENS = np.array([[5, 7, 11, 5, 9, 3, 4], [2, 8, 3, 6, 39, 39, 39], [30, 1, 39, 39, 39, 39, 39]], "int32")
MASK = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], bool)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


# ------------------------------------------------------------------------------------------------------------------
# Checkpoints written from the format's documentation, independently of the module under test.


def _random_tensors(config=HF_CONFIG, seed=0):
    """A GPT2Model's tensors (no prefix; Conv1D weights (in, out)), all random (LayerNorm scales around 1)."""
    rng = np.random.default_rng(seed)
    d, layers = config["n_embd"], config["n_layer"]
    f = config["n_inner"] or 4 * d

    def normal(*shape, scale=0.3, center=0.0):
        return (center + scale * rng.standard_normal(shape)).astype("float32")

    def conv1d(name, in_dim, out_dim):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(in_dim, out_dim), normal(out_dim, scale=0.1)

    def layer_norm(name):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(d, scale=0.1, center=1.0), normal(d, scale=0.1)

    tensors = {"wte.weight": normal(config["vocab_size"], d), "wpe.weight": normal(config["n_positions"], d)}
    for i in range(layers):
        layer_norm(f"h.{i}.ln_1")
        conv1d(f"h.{i}.attn.c_attn", d, 3 * d)
        conv1d(f"h.{i}.attn.c_proj", d, d)
        layer_norm(f"h.{i}.ln_2")
        conv1d(f"h.{i}.mlp.c_fc", d, f)
        conv1d(f"h.{i}.mlp.c_proj", f, d)
    layer_norm("ln_f")
    return tensors


def _buffers(config=HF_CONFIG):
    """The published files' causal-mask buffers: h.{i}.attn.bias (1, 1, P, P) and h.{i}.attn.masked_bias ()."""
    p = config["n_positions"]
    buffers = {}
    for i in range(config["n_layer"]):
        buffers[f"h.{i}.attn.bias"] = np.tril(np.ones((p, p), "float32"))[None, None]
        buffers[f"h.{i}.attn.masked_bias"] = np.array(-1e4, "float32")
    return buffers


def _write_checkpoint(directory, tensors, config=HF_CONFIG):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    return str(directory)


def _save_pretrained_layout(tensors, lm_head=True):
    """Today's GPT2LMHeadModel.save_pretrained names: ``transformer.`` prefix (and the tied lm_head)."""
    out = {"transformer." + name: value for name, value in tensors.items()}
    if lm_head:
        out["lm_head.weight"] = tensors["wte.weight"].copy()
    return out


# ------------------------------------------------------------------------------------------------------------------
# GPT-2 in NumPy, from the equations and the raw tensors


def _layer_norm(x, tensors, name, epsilon):
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * tensors[f"{name}.weight"] + tensors[f"{name}.bias"]


def _gelu_tanh(x):
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _conv1d(x, tensors, name):
    return x @ tensors[f"{name}.weight"] + tensors[f"{name}.bias"]  # Conv1D: x W + b, W (in, out)


def _attention(h, tensors, name, num_heads, mask):
    """Causal multi-head self-attention (Vaswani et al. 2017, eq. 1) over keys that are real tokens."""
    b, t, d = h.shape
    q, k, v = np.split(_conv1d(h, tensors, f"{name}.c_attn"), 3, axis=-1)  # [Q | K | V]
    q, k, v = (x.reshape(b, t, num_heads, d // num_heads).transpose(0, 2, 1, 3) for x in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // num_heads)  # (B, N, T, T)
    visible = np.tril(np.ones((t, t), bool))[None, None] & mask[:, None, None, :]
    scores = np.where(visible, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return _conv1d(context, tensors, f"{name}.c_proj")


def _reference_logits(tensors, config, ids, mask):
    """GPT-2's logits (B, T, V) at the real tokens (right padding), in float64 from GPT2Model's tensors."""
    tensors = {name: value.astype(np.float64) for name, value in tensors.items()}
    epsilon, heads = config["layer_norm_epsilon"], config["n_head"]
    x = tensors["wte.weight"][ids] + tensors["wpe.weight"][np.arange(ids.shape[1])]  # token + position embedding
    for i in range(config["n_layer"]):  # pre-LN blocks
        x = x + _attention(_layer_norm(x, tensors, f"h.{i}.ln_1", epsilon), tensors, f"h.{i}.attn", heads, mask)
        hidden = _gelu_tanh(_conv1d(_layer_norm(x, tensors, f"h.{i}.ln_2", epsilon), tensors, f"h.{i}.mlp.c_fc"))
        x = x + _conv1d(hidden, tensors, f"h.{i}.mlp.c_proj")
    return _layer_norm(x, tensors, "ln_f", epsilon) @ tensors["wte.weight"].T  # tied: logits = h E^T


def _assert_matches_reference(model, tensors, config=HF_CONFIG, atol=1e-5):
    logits = _np(model(TOKENS, padding_mask=MASK))
    reference = _reference_logits(tensors, config, TOKENS, MASK)
    np.testing.assert_allclose(logits[MASK], reference[MASK], atol=atol)


# ------------------------------------------------------------------------------------------------------------------
# Sizes


PUBLISHED = {"small": 124_439_808, "medium": 354_823_168, "large": 774_030_080, "xl": 1_557_611_200}


def test_parameter_count_equals_count_params():
    config = GPTConfig(vocabulary_size=37, max_sequence_length=9, num_layers=3, num_heads=2, hidden_dim=8,
                       intermediate_dim=20)
    assert config.parameter_count() == GPT(config).count_params()
    tiny = GPTConfig.preset("tiny", vocabulary_size=100, max_sequence_length=32)
    assert tiny.parameter_count() == GPT(tiny).count_params()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_have_gpt2_sizes_and_published_counts(name):
    config = GPTConfig.preset(name)
    layers, hidden, heads = GPT_PRESETS[name]
    assert (config.num_layers, config.hidden_dim, config.num_heads) == (layers, hidden, heads)
    assert (config.vocabulary_size, config.max_sequence_length, config.intermediate_dim) == (50257, 1024, 4 * hidden)
    assert (config.layer_norm_epsilon, config.end_token_id, config.pad_token_id) == (1e-5, 50256, 50256)
    # Hugging Face's GPT2LMHeadModel(GPT2Config(n_layer, n_embd, n_head)).num_parameters() (the head tied).
    assert config.parameter_count() == PUBLISHED[name]


def test_preset_overrides_and_bad_names():
    config = GPTConfig.preset("small", vocabulary_size=50304, dropout=0.0)
    assert (config.vocabulary_size, config.dropout, config.end_token_id) == (50304, 0.0, 50303)
    assert GPT("tiny").config == GPTConfig.preset("tiny")
    with pytest.raises(ValueError, match=r"Unknown GPT preset 'huge'.*'tiny', 'small', 'medium', 'large', 'xl'"):
        GPTConfig.preset("huge")
    with pytest.raises(ValueError, match=r"Unknown GPTConfig fields \['hidden_size'\]"):
        GPTConfig.preset("small", hidden_size=10)


# ------------------------------------------------------------------------------------------------------------------
# Loading both layouts


def test_published_layout_loads_and_matches_numpy_gpt2(tmp_path):
    tensors = _random_tensors()
    directory = _write_checkpoint(tmp_path, {**tensors, **_buffers()})
    model, info = load_hf_checkpoint(directory)
    _assert_matches_reference(model, tensors)
    config = info["config"]
    assert (config.num_layers, config.hidden_dim, config.num_heads, config.intermediate_dim) == (2, 12, 3, 48)
    assert (config.vocabulary_size, config.max_sequence_length, config.end_token_id) == (40, 16, 39)
    assert info["prefix"] == ""
    assert info["ignored"] == sorted(_buffers())
    assert (info["vocabulary"], info["merges"]) == (None, None)
    assert info["file"] == os.path.join(directory, "model.safetensors")


def test_save_pretrained_layout_loads_with_lm_head_and_heads_ignored(tmp_path):
    tensors = _random_tensors(seed=1)
    score = np.ones((2, 12), "float32")  # GPT2ForSequenceClassification's head: not GPT's
    directory = _write_checkpoint(tmp_path, {**_save_pretrained_layout(tensors), "score.weight": score})
    model, info = load_hf_checkpoint(directory)
    _assert_matches_reference(model, tensors)
    assert info["prefix"] == "transformer."
    assert info["ignored"] == ["score.weight"]


def test_float16_tensors_and_explicit_n_inner_load(tmp_path):
    config = {**HF_CONFIG, "n_inner": 20, "activation_function": "gelu_pytorch_tanh", "reorder_and_upcast_attn": True}
    tensors = {name: value.astype("float16") for name, value in _random_tensors(config, seed=2).items()}
    model, info = load_hf_checkpoint(_write_checkpoint(tmp_path, _save_pretrained_layout(tensors, False), config))
    assert info["config"].intermediate_dim == 20
    _assert_matches_reference(model, tensors, config)


def test_published_layout_written_by_hand_from_our_weights(tmp_path):
    """Our GPT's weights rearranged by hand into the published names (c_attn = [W_Q | W_K | W_V] side by side,
    kernels flattened to Conv1D's (in, out)), with the buffers: loading gives our logits back."""
    config = GPTConfig(vocabulary_size=40, max_sequence_length=16, num_layers=2, num_heads=3, hidden_dim=12,
                       intermediate_dim=48)
    ours = GPT(config)
    for weight in ours.weights:  # LayerNorm 1 / 0 and zero biases would hide a swapped tensor
        noise = np.random.default_rng(len(weight.path)).standard_normal(weight.shape)
        weight.assign((_np(weight.value) + 0.1 * noise).astype("float32"))
    w = {weight.path.split("/", 1)[1] if weight.path.startswith(ours.name + "/") else weight.path: _np(weight.value)
         for weight in ours.weights}
    tensors = {"wte.weight": w["embedding/token_embedding/embeddings"],
               "wpe.weight": w["embedding/position_embedding/embeddings"]}
    for i in range(2):
        block = f"decoder/transformerdecoderblock_{i}/"
        attention = block + "self_attention/"
        tensors[f"h.{i}.ln_1.weight"] = w[block + "self_attention_layer_norm/gamma"]
        tensors[f"h.{i}.ln_1.bias"] = w[block + "self_attention_layer_norm/beta"]
        tensors[f"h.{i}.attn.c_attn.weight"] = np.concatenate(
            [w[f"{attention}{n}/kernel"].reshape(12, 12) for n in ("query", "key", "value")], axis=1)
        tensors[f"h.{i}.attn.c_attn.bias"] = np.concatenate(
            [w[f"{attention}{n}/bias"].reshape(12) for n in ("query", "key", "value")])
        tensors[f"h.{i}.attn.c_proj.weight"] = w[attention + "attention_output/kernel"].reshape(12, 12)
        tensors[f"h.{i}.attn.c_proj.bias"] = w[attention + "attention_output/bias"]
        tensors[f"h.{i}.ln_2.weight"] = w[block + "feedforward_layer_norm/gamma"]
        tensors[f"h.{i}.ln_2.bias"] = w[block + "feedforward_layer_norm/beta"]
        for hf, keras_name in (("c_fc", "intermediate_dense"), ("c_proj", "output_dense")):
            tensors[f"h.{i}.mlp.{hf}.weight"] = w[f"{block}feedforward/{keras_name}/kernel"]
            tensors[f"h.{i}.mlp.{hf}.bias"] = w[f"{block}feedforward/{keras_name}/bias"]
    tensors["ln_f.weight"] = w["decoder/final_layer_norm/gamma"]
    tensors["ln_f.bias"] = w["decoder/final_layer_norm/beta"]
    tensors = {name: np.asarray(value, "float32") for name, value in tensors.items()}
    loaded, info = load_hf_checkpoint(_write_checkpoint(tmp_path, {**tensors, **_buffers()}))
    np.testing.assert_allclose(_np(loaded(TOKENS, padding_mask=MASK)), _np(ours(TOKENS, padding_mask=MASK)), atol=1e-6)
    _assert_matches_reference(ours, tensors)
    assert len(info["ignored"]) == 4


# ------------------------------------------------------------------------------------------------------------------
# Saving


def test_save_then_load_round_trips(tmp_path):
    model = GPT(GPTConfig(vocabulary_size=40, max_sequence_length=16, num_layers=2, num_heads=3,
                                     hidden_dim=12, intermediate_dim=20, end_token_id=3, pad_token_id=0))
    for weight in model.weights:
        weight.assign(_np(weight.value) + 0.05)
    source = tmp_path / "tokenizer"
    source.mkdir()
    (source / "vocab.json").write_text(json.dumps({f"t{i}": i for i in range(40)}))
    (source / "merges.txt").write_text("#version: 0.2\nt 1\n")
    directory = str(tmp_path / "saved")
    assert save_hf_checkpoint(model, directory, vocabulary=str(source / "vocab.json"),
                              merges=str(source / "merges.txt")) == directory
    assert sorted(os.listdir(directory)) == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]

    tensors, metadata = read_safetensors(os.path.join(directory, "model.safetensors"))
    assert metadata == {"format": "pt"}
    assert all(name.startswith("transformer.") and value.dtype == np.float32 for name, value in tensors.items())
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (12, 36)
    assert len(tensors) == 2 + 12 * 2 + 2  # wte, wpe, 12 per block, ln_f; no lm_head (tied), no buffers
    with open(os.path.join(directory, "config.json")) as f:
        hf_config = json.load(f)
    assert (hf_config["n_inner"], hf_config["eos_token_id"], hf_config["pad_token_id"]) == (20, 3, 0)
    assert hf_config["architectures"] == ["GPT2LMHeadModel"] and hf_config["activation_function"] == "gelu_new"

    loaded, info = load_hf_checkpoint(directory)
    assert info["config"] == model.config
    assert info["vocabulary"] == os.path.join(directory, "vocab.json")
    assert info["merges"] == os.path.join(directory, "merges.txt")
    with open(info["merges"]) as f:
        assert f.read() == (source / "merges.txt").read_text()
    expected = _np(model(TOKENS, padding_mask=MASK))
    np.testing.assert_array_equal(_np(loaded(TOKENS, padding_mask=MASK)), expected)
    # And the file's arrays through the NumPy GPT-2 give the same logits.
    plain = {name.removeprefix("transformer."): value for name, value in tensors.items()}
    _assert_matches_reference(loaded, plain, hf_config)

    # Saving again over it (from the loaded model, into the same directory) leaves no temporary file.
    save_hf_checkpoint(loaded, directory, vocabulary=info["vocabulary"], merges=info["merges"])
    assert sorted(os.listdir(directory)) == ["config.json", "merges.txt", "model.safetensors", "vocab.json"]


def test_save_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="`model` must be a GPT; received str"):
        save_hf_checkpoint("gpt2", str(tmp_path))
    model = GPT(GPTConfig(vocabulary_size=20, max_sequence_length=8, num_layers=1, hidden_dim=8, intermediate_dim=8))
    with pytest.raises(ValueError, match="`merges` must be the path of a file; received '.*nowhere.txt'"):
        save_hf_checkpoint(model, str(tmp_path / "out"), merges=str(tmp_path / "nowhere.txt"))
    assert not (tmp_path / "out").exists()  # refused before anything was written


# ------------------------------------------------------------------------------------------------------------------
# Bad input, named


def test_missing_files_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"has no config\.json"):
        load_hf_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    with pytest.raises(ValueError, match=r"has no model\.safetensors .*safe_serialization"):
        load_hf_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    write_safetensors(str(tmp_path / "model.safetensors"), _random_tensors())
    with pytest.raises(ValueError, match=r"config\.json.*is not valid JSON"):
        load_hf_checkpoint(str(tmp_path))


def _load_error(tmp_path, tensors, config=HF_CONFIG):
    with pytest.raises(ValueError) as error:
        load_hf_checkpoint(_write_checkpoint(tmp_path, tensors, config))
    message = str(error.value)
    assert "model.safetensors" in message
    return message


def test_missing_unexpected_and_misshapen_tensors_are_named(tmp_path):
    tensors = _random_tensors()
    del tensors["h.1.mlp.c_fc.bias"]
    tensors["h.2.ln_1.weight"] = np.ones(12, "float32")  # a third layer the config does not have
    tensors["h.0.attn.c_attn.weight"] = np.zeros((12, 24), "float32")  # K and V only
    message = _load_error(tmp_path, tensors)
    assert "missing tensors: ['h.1.mlp.c_fc.bias']" in message
    assert "unexpected tensors: ['h.2.ln_1.weight']" in message
    assert "h.0.attn.c_attn.weight (12, 24) (expected (12, 36))" in message


def test_n_inner_that_disagrees_with_the_tensors_is_named(tmp_path):
    message = _load_error(tmp_path, _random_tensors(), {**HF_CONFIG, "n_inner": 30})
    assert "d_ff 30" in message and "h.0.mlp.c_fc.weight (12, 48) (expected (12, 30))" in message


def test_prefix_mismatch_and_untied_lm_head_are_named(tmp_path):
    tensors = _save_pretrained_layout(_random_tensors())
    tensors["wpe.weight"] = tensors.pop("transformer.wpe.weight")  # one tensor without the prefix
    message = _load_error(tmp_path / "mixed", tensors)
    assert "missing tensors: ['transformer.wpe.weight']" in message and "unexpected tensors: ['wpe.weight']" in message

    tensors = _save_pretrained_layout(_random_tensors())
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1.0
    message = _load_error(tmp_path / "untied", tensors)
    assert "'lm_head.weight' differs from transformer.wte.weight" in message and "untied" in message


@pytest.mark.parametrize("key, value, match", [
    ("activation_function", "relu", r"`activation_function` must be one of \['gelu_new', 'gelu_pytorch_tanh'\]"),
    ("scale_attn_by_inverse_layer_idx", True, r"`scale_attn_by_inverse_layer_idx` must be False"),
    ("scale_attn_weights", False, r"`scale_attn_weights` must be True"),
    ("add_cross_attention", True, r"`add_cross_attention` must be False"),
    ("model_type", "gpt_neo", r"`model_type` must be 'gpt2'.*'gpt_neo'"),
    ("n_layer", None, r"missing \['n_layer'\]"),
    ("eos_token_id", 50256, r"`end_token_id` must be a token id in \[0, vocabulary_size=40\).*eos_token_id"),
    ("eos_token_id", [3, 4], r"`eos_token_id` must be one token id"),
    ("n_head", 5, r"`hidden_dim` .*divisible"),
])
def test_config_gpt_cannot_represent_is_named(tmp_path, key, value, match):
    config = {**HF_CONFIG, key: value}
    if value is None:
        del config[key]
    directory = _write_checkpoint(tmp_path, _random_tensors(), config)
    with pytest.raises(ValueError, match=match) as error:
        load_hf_checkpoint(directory)
    assert "config.json" in str(error.value)


def test_overrides_fix_an_eos_token_outside_the_vocabulary(tmp_path):
    """transformers' GPT2Config keeps eos_token_id 50256 whatever vocab_size is: end_token_id chooses another."""
    tensors = _random_tensors()
    model, _ = load_hf_checkpoint(_write_checkpoint(tmp_path, tensors, {**HF_CONFIG, "eos_token_id": 50256}),
                                  end_token_id=0)
    assert (model.end_token_id, model.pad_token_id) == (0, 0)
    _assert_matches_reference(model, tensors)
    assert config_from_hf({**HF_CONFIG, "eos_token_id": [7]}).end_token_id == 7


def test_attention_dropout_is_its_own_rate():
    """attn_pdrop sets the attention weights' dropout, resid_pdrop the residual branches' and the embeddings' (a
    different embd_pdrop warns); both written back; None means dropout's rate (configs saved before the field)."""
    import warnings

    from attnlayers.applications.gpt.checkpoint import config_to_hf
    from attnlayers.applications.gpt.llama_checkpoint import llama_config_from_hf, llama_config_to_hf

    config = config_from_hf({**HF_CONFIG, "attn_pdrop": 0.0, "resid_pdrop": 0.2, "embd_pdrop": 0.2})
    assert (config.dropout, config.attention_dropout) == (0.2, 0.0)
    model = GPT(config)
    blocks = model.decoder.blocks
    assert [b.self_attention.dropout for b in blocks] == [0.0] * len(blocks) and blocks[0].dropout == 0.2
    assert model.embedding_dropout.rate == 0.2
    hf = config_to_hf(config)
    assert (hf["attn_pdrop"], hf["resid_pdrop"], hf["embd_pdrop"]) == (0.0, 0.2, 0.2)
    with pytest.warns(UserWarning, match="embd_pdrop=0.3 differs from resid_pdrop=0.2"):
        config_from_hf({**HF_CONFIG, "resid_pdrop": 0.2, "embd_pdrop": 0.3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config_from_hf(HF_CONFIG).attention_dropout == 0.1  # GPT2Config's defaults: 0.1 each
    assert GPTConfig(dropout=0.1).attention_dropout == 0.1 and GPTConfig(dropout=0.1, attention_dropout=0.0)
    llama = llama_config_from_hf({"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
                                  "num_hidden_layers": 1, "num_attention_heads": 2, "attention_dropout": 0.25})
    assert (llama.dropout, llama.attention_dropout) == (0.0, 0.25)  # LLaMA: no residual dropout
    assert GPT(llama).decoder.blocks[0].self_attention.dropout == 0.25
    assert llama_config_to_hf(llama)["attention_dropout"] == 0.25
