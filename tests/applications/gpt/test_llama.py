"""The LLaMA-style GPT (GPTConfig(architecture="llama")): the forward pass equals a NumPy LLaMA written from the
papers (RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases), cached steps equal the full forward pass, greedy
generation equals the argmax of teacher-forced logits, configs and .keras files round-trip, the parameter count has
a closed form (LLaMA-2-7B, TinyLlama), bad configs are refused by name. Runs under the TensorFlow and JAX backends."""

import dataclasses

import keras
import numpy as np
import pytest
from attnlayers.applications.gpt import GPT, GPTConfig
from keras import ops
from model_harness import run_model_test

from attnlayers.transformer import FeedForward

CONFIG = GPTConfig(vocabulary_size=29, max_sequence_length=12, num_layers=2, num_heads=4, hidden_dim=16,
                   intermediate_dim=24, layer_norm_epsilon=1e-6, architecture="llama", num_key_value_heads=2,
                   rope_theta=500.0, tie_embeddings=False)
PROMPT = np.array([[5, 9, 3, 7], [7, 4, 0, 0], [11, 0, 0, 0]], "int32")
PROMPT_MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    return GPT(CONFIG)


# ---- NumPy LLaMA from the papers --------------------------------------------------------------------------------


def np_rms_norm(x, gain, eps):
    return x / np.sqrt(np.mean(x**2, -1, keepdims=True) + eps) * gain  # Zhang & Sennrich 2019, eq. 4


def np_silu(x):
    return x / (1.0 + np.exp(-x))  # Swish_1(x) = x sigmoid(x)


def np_swiglu(x, w1, v, w2):
    return (np_silu(x @ w1) * (x @ v)) @ w2  # FFN_SwiGLU(x) = (Swish_1(x W_1) * (x V)) W_2 (Shazeer 2020, eq. 6)


def np_rope(x, theta):
    """RoPE (Su et al. 2021) in the rotate-half layout of LLaMA / GPT-NeoX, x (B, T, N, H) at positions 0..T-1."""
    half = x.shape[-1] // 2
    angles = np.arange(x.shape[1])[:, None, None] * theta ** (-np.arange(half) / half)  # (T, 1, H/2)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * np.cos(angles) - x2 * np.sin(angles), x2 * np.cos(angles) + x1 * np.sin(angles)], -1)


def np_gqa(x, wq, wk, wv, wo, theta):
    """Causal grouped-query attention (Ainslie et al. 2023): query head n reads K/V head n // (N / N_kv)."""
    q = np_rope(np.einsum("btd,dnh->btnh", x, wq), theta)
    k = np_rope(np.einsum("btd,dnh->btnh", x, wk), theta)
    v = np.einsum("btd,dnh->btnh", x, wv)
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, 2), np.repeat(v, groups, 2)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(np.tril(np.ones((x.shape[1], x.shape[1]), bool)), logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh,nhd->btd", weights, v, wo)


def np_llama(model, token_ids):
    c = model.config
    x = _np(model.token_embedding.embeddings)[token_ids]
    for block in model.decoder.blocks:
        attention, ffn = block.self_attention, block.feedforward
        h = np_rms_norm(x, _np(block.self_attention_layer_norm.gamma), c.layer_norm_epsilon)
        x = x + np_gqa(h, *(_np(layer.kernel) for layer in (attention.query_dense, attention.key_dense,
                                                            attention.value_dense, attention.output_dense)),
                       c.rope_theta)
        h = np_rms_norm(x, _np(block.feedforward_layer_norm.gamma), c.layer_norm_epsilon)
        x = x + np_swiglu(h, *(_np(layer.kernel) for layer in (ffn.intermediate_dense, ffn.gate_dense,
                                                               ffn.output_dense)))
    x = np_rms_norm(x, _np(model.decoder.final_layer_norm.gamma), c.layer_norm_epsilon)
    return x @ _np(model.lm_head.kernel)


# ---- tests ------------------------------------------------------------------------------------------------------


def test_swiglu_equals_numpy(rng):
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    ffn = FeedForward(12, activation="swiglu", use_bias=False)
    y = _np(ffn(x))
    assert [tuple(w.shape) for w in ffn.get_weights()] == [(8, 12), (8, 12), (12, 8)]  # W_1, V, W_2; no biases
    expected = np_swiglu(x, *(_np(layer.kernel) for layer in (ffn.intermediate_dense, ffn.gate_dense,
                                                              ffn.output_dense)))
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_forward_equals_numpy_llama(model):
    rng = np.random.default_rng(1)
    for weight in model.decoder.weights:  # RMSNorm gains away from 1, so a swapped gain shows
        if weight.path.endswith("gamma"):
            weight.assign(rng.uniform(0.5, 1.5, size=weight.shape).astype("float32"))
    tokens = rng.integers(0, 29, size=(2, 9))
    np.testing.assert_allclose(_np(model(tokens.astype("int32"))), np_llama(model, tokens), atol=1e-4)


def test_weights_and_shapes(model):
    assert tuple(model(PROMPT, padding_mask=PROMPT_MASK).shape) == (3, 4, 29)
    paths = [w.path for w in model.weights]
    assert not any("bias" in p or "beta" in p or "position" in p for p in paths)  # no biases, no position table
    assert sum(tuple(w.shape) == (29, 16) for w in model.weights) == 1 and tuple(model.lm_head.kernel.shape) == (16, 29)
    assert tuple(model.decoder.blocks[0].self_attention.key_dense.kernel.shape) == (16, 2, 4)  # N_kv = 2 of N = 4
    tied = GPT(dataclasses.replace(CONFIG, tie_embeddings=True))
    assert tied.lm_head is None and sum(tuple(w.shape) == (29, 16) for w in tied.weights) == 1
    assert len(tied.weights) == len(model.weights) - 1


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_cached_next_equals_full_recomputation(tie_embeddings):
    keras.utils.set_random_seed(3)
    model = GPT(dataclasses.replace(CONFIG, tie_embeddings=tie_embeddings))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 29, size=(3, 12)).astype("int32")
    tokens[:, :4] = np.where(PROMPT_MASK, PROMPT, tokens[:, :4])
    full = _np(model(tokens))  # (B, L, V): position i scores token i + 1
    cache = model.initial_cache(PROMPT, PROMPT_MASK, max_length=12)
    assert tuple(cache.shape) == (3, 2, 2, 12, 2, 4)  # (B, layers, K/V, L, N_kv, H): only the K/V heads
    for index in range(1, 12):
        logits, cache = model.next(tokens, cache, ops.convert_to_tensor(index, "int32"))
        np.testing.assert_allclose(_np(logits), full[:, index - 1], atol=1e-5, err_msg=f"index {index}")


def test_greedy_generate_is_the_argmax_of_teacher_forced_logits(model):
    result = model.generate(PROMPT, max_length=12, padding_mask=PROMPT_MASK, stop_token_ids=None)
    tokens = _np(result.tokens).astype("int32")
    np.testing.assert_array_equal(tokens[:, :4][PROMPT_MASK], PROMPT[PROMPT_MASK])
    predicted = _np(ops.argmax(model(tokens), axis=-1))
    for row, start in enumerate(PROMPT_MASK.sum(1)):
        np.testing.assert_array_equal(tokens[row, start:], predicted[row, start - 1:-1])


def _llama_config(loaded, _):
    assert loaded.config == CONFIG


def test_passes_the_model_harness(model, tmp_path):
    """Config and .keras round trips of the LLaMA architecture: its config and logits."""
    assert GPTConfig(**dataclasses.asdict(CONFIG)) == CONFIG
    run_model_test(lambda: model, PROMPT, tmp_path, check_loaded=_llama_config)
    assert GPT.from_config(model.get_config()).config == CONFIG


def test_defaults_keep_gpt2():
    config = GPTConfig()
    assert (config.architecture, config.num_key_value_heads, config.tie_embeddings) == ("gpt2", None, True)
    gpt2 = GPT(GPTConfig(vocabulary_size=29, max_sequence_length=12, hidden_dim=16, intermediate_dim=32))
    assert any("position_embedding" in w.path for w in gpt2.weights) and any("bias" in w.path for w in gpt2.weights)


@pytest.mark.parametrize("tie_embeddings", [False, True])
@pytest.mark.parametrize("num_key_value_heads", [None, 2, 1])
def test_parameter_count_closed_form(num_key_value_heads, tie_embeddings):
    config = dataclasses.replace(CONFIG, num_key_value_heads=num_key_value_heads, tie_embeddings=tie_embeddings)
    assert GPT(config).count_params() == config.parameter_count()


def test_published_parameter_counts():
    """Hugging Face's LlamaForCausalLM(...).num_parameters() for LLaMA-2-7B and TinyLlama-1.1B (GQA, 4 K/V heads)."""
    llama2_7b = GPTConfig(vocabulary_size=32000, max_sequence_length=4096, num_layers=32, num_heads=32,
                          hidden_dim=4096, intermediate_dim=11008, architecture="llama", tie_embeddings=False)
    tinyllama = GPTConfig(vocabulary_size=32000, max_sequence_length=2048, num_layers=22, num_heads=32,
                          hidden_dim=2048, intermediate_dim=5632, architecture="llama", num_key_value_heads=4,
                          tie_embeddings=False)
    assert llama2_7b.parameter_count() == 6_738_415_616
    assert tinyllama.parameter_count() == 1_100_048_384


def test_mixed_precision():
    keras.utils.set_random_seed(11)
    model = GPT(CONFIG, dtype="mixed_bfloat16")
    logits = model(PROMPT, padding_mask=PROMPT_MASK)
    assert keras.backend.standardize_dtype(logits.dtype) == "bfloat16"
    assert np.all(np.isfinite(_np(logits)))


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"architecture": "bert"}, "architecture"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"rope_theta": 0}, "rope_theta"),
        ({"tie_embeddings": "yes"}, "tie_embeddings"),
        ({"num_heads": 16, "num_key_value_heads": None}, "RoPE"),  # head size 16 / 16 = 1: odd
        ({"architecture": "gpt2", "num_key_value_heads": 2}, "num_key_value_heads"),
        ({"architecture": "gpt2", "num_key_value_heads": None}, "tie_embeddings"),
    ],
)
def test_bad_config(overrides, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**{**dataclasses.asdict(CONFIG), **overrides})


def test_hf_llama_checkpoint_round_trip(model, tmp_path):
    """save_hf_llama_checkpoint -> load_hf_llama_checkpoint gives the same model; LlamaForCausalLM's names and (out, in)
    layouts; a file that does not fit is refused by tensor name. (benchmarks/gpt_llama_hf_equivalence.py checks the
    files against transformers' LlamaForCausalLM.)"""
    import json

    from attnlayers.applications.core.formats.safetensors import read_safetensors, write_safetensors
    from attnlayers.applications.gpt import load_hf_llama_checkpoint, save_hf_llama_checkpoint

    directory = save_hf_llama_checkpoint(model, str(tmp_path / "llama"))
    tensors, _ = read_safetensors(str(tmp_path / "llama" / "model.safetensors"))
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (8, 16)  # (N_kv H, d)
    assert tensors["model.layers.1.mlp.down_proj.weight"].shape == (16, 24) and "lm_head.weight" in tensors
    loaded, info = load_hf_llama_checkpoint(directory)
    assert info["config"] == CONFIG
    np.testing.assert_allclose(_np(loaded(PROMPT)), _np(model(PROMPT)), atol=1e-6)
    del tensors["model.norm.weight"]
    write_safetensors(str(tmp_path / "llama" / "model.safetensors"), tensors)
    with pytest.raises(ValueError, match="model.norm.weight"):
        load_hf_llama_checkpoint(directory)
    with open(tmp_path / "llama" / "config.json") as f:
        hf_config = json.load(f)
    with open(tmp_path / "llama" / "config.json", "w") as f:
        json.dump({**hf_config, "hidden_act": "gelu"}, f)
    with pytest.raises(ValueError, match="hidden_act"):
        load_hf_llama_checkpoint(directory)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModel export is TensorFlow-only")
def test_exports_as_a_saved_model(model, tmp_path):
    """The shared export path (core.export.export_generator) serves the LLaMA variant's cached greedy decoding."""
    import tensorflow as tf
    from attnlayers.applications.core.formats.export import export_generator

    expected = model.generate(PROMPT, 10, padding_mask=PROMPT_MASK)
    export_generator(str(tmp_path / "llama"), model, 10, "greedy")
    generate = tf.saved_model.load(str(tmp_path / "llama")).signatures["generate"]
    out = generate(token_ids=tf.constant(PROMPT), padding_mask=tf.constant(PROMPT_MASK))
    np.testing.assert_array_equal(out["token_ids"].numpy(), _np(expected.tokens).astype("int32"))
