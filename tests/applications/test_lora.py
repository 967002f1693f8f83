"""LoRA (attnlayers.lora) on every Transformer application model: the output unchanged at enable time, only the
adapters trainable, the base weights untouched by training, adapters saved and loaded alone, merged into the kernels,
cached generation and the compiled (fused-projection) path under adapters."""

import keras
import numpy as np
import pytest
from attnlayers import lora
from attnlayers.layer_walk import nested_layers
from attnlayers.applications.bert.backbone import BertBackbone, BertConfig
from attnlayers.applications.bert.heads import BertClassifier
from attnlayers.applications.gpt.model import GPT, GPTConfig
from attnlayers.applications.nmt.model import TransformerTranslator
from attnlayers.applications.vision.model import ViT, ViTConfig
from keras import ops

LLAMA = GPTConfig(architecture="llama", vocabulary_size=40, max_sequence_length=16, num_layers=2, num_heads=4,
                  num_key_value_heads=2, hidden_dim=16, intermediate_dim=24, tie_embeddings=True)
IDS = np.array([[3, 7, 11, 5, 9, 2], [4, 8, 1, 6, 12, 30]], "int32")


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _adapters_only(model):
    paths = [w.path for w in model.trainable_weights]
    return bool(paths) and all(p.endswith(("/lora_kernel_a", "/lora_kernel_b")) for p in paths)


def _move_adapters(model, seed=0):
    """B = 0 leaves the model as it was: random B so that the adapters count."""
    rng = np.random.default_rng(seed)
    for layer in lora.lora_layers(model).values():
        layer.lora_kernel_b.assign(rng.normal(0, 0.3, layer.lora_kernel_b.shape).astype("float32"))


def _fresh_llama(like):
    keras.utils.set_random_seed(1)
    model = GPT(LLAMA)
    base = [w for w in like.weights if not w.path.endswith(("/lora_kernel_a", "/lora_kernel_b"))]
    for weight, value in zip(model.weights, base):
        weight.assign(value)
    return model


def test_llama_lora_trains_adapters_only_and_saves_loads_merges(tmp_path):
    keras.utils.set_random_seed(0)
    model = GPT(LLAMA)
    before = _np(model(IDS))
    with pytest.raises(ValueError, match="'query', 'key', 'value', 'output'"):
        model.enable_lora(2, target=("query", "attention"))
    keys = model.enable_lora(2, target=("query", "value", "mlp"))
    assert len(keys) == 2 * 5 and keys == list(lora.lora_layers(model))
    # B = 0: h = W x (to rounding: under JAX the fused QKV projection, one matmul, steps aside for three)
    np.testing.assert_allclose(_np(model(IDS)), before, rtol=0, atol=1e-6)
    assert _adapters_only(model) and len(model.trainable_weights) == 2 * 2 * 5  # embeddings, norms frozen
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)

    base = {w.path: _np(w) for w in model.weights if "lora" not in w.path}
    # The cheapest steps: eager under TensorFlow (no graph to trace), compiled under JAX (slow op by op).
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.SparseCategoricalCrossentropy(True),
                  run_eagerly=keras.backend.backend() == "tensorflow")
    model.fit(IDS[:, :-1], IDS[:, 1:], epochs=3, verbose=0)
    for weight in model.weights:
        if weight.path in base:
            np.testing.assert_array_equal(_np(weight), base[weight.path], err_msg=weight.path)
    assert np.abs(_np(model(IDS)) - before).max() > 1e-3
    _move_adapters(model)  # adapters that change the answers
    tuned = _np(model(IDS))

    # The KV cache under adapters: prefill, then one cached step a position = the full forward pass's logits; cached
    # greedy generation = greedy by full recomputation.
    cache = model.initial_cache(IDS[:, :4], max_length=8)
    for index in range(5, IDS.shape[1] + 1):
        logits, cache = model.next(IDS, cache, index)
        np.testing.assert_allclose(_np(logits), tuned[:, index - 1], atol=1e-4)
    prompt, steps = IDS[:, :3], 4
    cached = _np(model.generate(prompt, max_length=3 + steps, search="greedy").tokens)
    tokens = prompt
    for _ in range(steps):
        tokens = np.concatenate([tokens, _np(model(tokens))[:, -1:].argmax(-1).astype("int32")], axis=1)
    np.testing.assert_array_equal(cached[:, :3 + steps], tokens)

    path = tmp_path / "adapters.npz"
    model.save_lora_weights(path)
    assert lora.read_lora_config(path) == {"rank": 2, "alpha": 2, "target": [
        "query", "value", "ffn_intermediate", "ffn_gate", "ffn_output"]}
    fresh = _fresh_llama(model)
    fresh.load_lora_weights(path)  # enables LoRA as saved, then loads
    np.testing.assert_array_equal(_np(fresh(IDS)), tuned)
    assert _adapters_only(fresh)

    other = _fresh_llama(model)
    other.enable_lora(4, target=("query", "value", "mlp"))
    with pytest.raises(ValueError, match="rank 2 .* rank 4"):
        other.load_lora_weights(path)
    deeper = GPT(GPTConfig(**{**vars(LLAMA), "num_layers": 3}))
    with pytest.raises(ValueError, match="does not match the model's adapters"):
        deeper.load_lora_weights(path)
    assert not lora.lora_layers(deeper)  # checked before the model is changed

    # Compiled with XLA (where the fused QKV projection runs, but steps aside while adapters are on) = eager.
    model.compile(jit_compile=True)
    np.testing.assert_allclose(_np(model.predict_on_batch(IDS)), tuned, atol=1e-5)
    # Merged: W + (alpha / r) A B in the kernels, no adapters, the same logits.
    assert model.merge_lora() == keys
    assert not lora.lora_layers(model) and not [w for w in model.weights if "lora" in w.path]
    np.testing.assert_allclose(_np(model(IDS)), tuned, atol=1e-5)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        model.merge_lora()


def _bert_inputs():
    return {"token_ids": IDS, "segment_ids": np.zeros_like(IDS), "padding_mask": IDS != 0}


@pytest.mark.parametrize("family", ["gpt2", "bert", "bert_classifier", "vit", "translator"])
def test_every_application_model(family):
    keras.utils.set_random_seed(0)
    if family == "gpt2":
        model, inputs = GPT(GPTConfig(vocabulary_size=40, max_sequence_length=8, hidden_dim=16)), IDS
    elif family.startswith("bert"):
        config = BertConfig(vocabulary_size=40, max_sequence_length=8, num_layers=1, num_heads=2, hidden_dim=8,
                            intermediate_dim=16)
        model, inputs = BertBackbone(config), _bert_inputs()
        if family == "bert_classifier":
            model = BertClassifier(model, num_classes=3)
    elif family == "vit":
        config = ViTConfig(image_shape=(8, 8, 1), patch_size=4, num_classes=3, num_layers=1, num_heads=2,
                           hidden_dim=8, mlp_dim=16)
        model, inputs = ViT(config), np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    else:
        model = TransformerTranslator(40, 41, num_layers=1, d_model=8, num_heads=2, intermediate_dim=16, max_length=8)
        inputs = (IDS, IDS[:, :4])
    before = _np(model(inputs)["pooled_output"] if family == "bert" else model(inputs))
    keys = model.enable_lora(2, target=("query", "key", "value", "output"))
    out = lambda: _np(model(inputs)["pooled_output"] if family == "bert" else model(inputs))  # noqa: E731
    np.testing.assert_allclose(out(), before, rtol=0, atol=1e-6)
    trainable = [w.path for w in model.trainable_weights]
    if family == "bert_classifier":  # the task's head stays trainable, as with keras-hub's backbone.enable_lora
        assert {p for p in trainable if "lora" not in p} == {"logits/kernel", "logits/bias"}
    else:
        assert _adapters_only(model)
    # The translator's decoder has self- and cross-attention: 3 attention layers, 4 projections each.
    assert len(keys) == {"translator": 12}.get(family, 4 * (2 if family == "gpt2" else 1))
    _move_adapters(model)
    tuned = out()
    assert np.abs(tuned - before).max() > 1e-4
    model.merge_lora()
    np.testing.assert_allclose(out(), tuned, atol=1e-5)


def test_rank_8_share_of_smollm2():
    """Rank-8 query / value adapters on SmolLM2-135M's sizes: <= 2% of its weights (counted on one block with its
    sizes; the blocks are alike)."""
    smollm2 = dict(architecture="llama", vocabulary_size=49152, max_sequence_length=2048, num_layers=30, num_heads=9,
                   num_key_value_heads=3, hidden_dim=576, intermediate_dim=1536, tie_embeddings=True)
    one_block = GPT(GPTConfig(**{**smollm2, "num_layers": 1, "vocabulary_size": 8}))
    lora.enable_lora(one_block, 8)
    adapters = sum(int(np.prod(w.shape)) for w in one_block.trainable_weights) * smollm2["num_layers"]
    share = adapters / GPTConfig(**smollm2).parameter_count()
    assert adapters == 30 * (576 * 9 * 8 + 8 * 64 + 576 * 3 * 8 + 8 * 64)  # A (d, heads, r), B (r, head size)
    assert share <= 0.02, share


def test_errors_name_what_was_wrong(tmp_path):
    unbuilt = TransformerTranslator(10, 10, num_layers=1, d_model=8, num_heads=2, intermediate_dim=8)
    with pytest.raises(ValueError, match="not built"):
        unbuilt.enable_lora(2)
    model = GPT(LLAMA)
    with pytest.raises(ValueError, match="no LoRA adapters to save"):
        model.save_lora_weights(tmp_path / "none.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a LoRA adapter file"):
        model.load_lora_weights(tmp_path / "other.npz")


def test_compiled_generation_is_traced_again_when_adapters_come_or_go():
    """generate_text(jit_compile=True) keeps compiled programs per model; a tf.function traced before enable_lora
    would run the model without its adapters: they are dropped when the model's variables change."""
    from attnlayers.applications.gpt import generation

    model = GPT(LLAMA)
    programs = generation._programs(model)
    programs["traced"] = "before"
    assert generation._programs(model) is programs
    model.enable_lora(2)
    assert generation._programs(model) == {}
    generation._programs(model)["traced"] = "with adapters"
    model.merge_lora()
    assert generation._programs(model) == {}


def test_chat_example_loads_adapters_and_quantizes(tmp_path, capsys):
    """examples/chat.py --lora-adapters: the rank read from the file, the adapters merged: the chat's model computes
    the logits of the model the adapters were saved from; with --quantize int8-weights, quantized after the merge."""
    import importlib.util
    import pathlib

    from attnlayers.applications.gpt import load_gguf

    def load_module(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    root = pathlib.Path(__file__).resolve().parents[2]
    gguf_tests = load_module("gguf_test_helpers", root / "tests/applications/gpt/test_gguf.py")
    script = load_module("chat_example", root / "examples/chat.py")
    gguf_file = str(tmp_path / "tiny-chat.gguf")
    config = GPTConfig(**gguf_tests.CONFIG, tie_embeddings=True)
    gguf_tests.write_gguf(gguf_file, config, gguf_tests._hf_tensors(config, seed=3), gguf_tests.Q.Q8_0)
    model = load_gguf(gguf_file, with_tokenizer=False)[0]
    model.enable_lora(3)
    _move_adapters(model)
    model.save_lora_weights(tmp_path / "chat.npz")

    args = script.parse_args(["--gguf", gguf_file, "--lora-adapters", str(tmp_path / "chat.npz")])
    chat_model = script.load(args)[0]
    assert "merged LoRA adapters of rank 3 (alpha 3, query, value: 4 projections)" in capsys.readouterr().err
    assert not lora.lora_layers(chat_model)
    np.testing.assert_allclose(_np(chat_model(IDS)), _np(model(IDS)), atol=1e-5)

    # --quantize after the merge: every projection int8 (the tied table too), the logits within 2% of their range
    args = script.parse_args(["--gguf", gguf_file, "--lora-adapters", str(tmp_path / "chat.npz"),
                              "--quantize", "int8-weights"])
    quantized = script.load(args)[0]
    assert "quantized: int8-weights (" in capsys.readouterr().err
    modes = {getattr(layer, "quantization_mode", None) for layer in nested_layers(quantized)
             if isinstance(layer, (keras.layers.EinsumDense, keras.layers.Dense, keras.layers.Embedding))}
    assert modes == {"int8"}, modes
    expected = _np(model(IDS))
    assert np.max(np.abs(_np(quantized(IDS)) - expected)) <= 0.02 * np.ptp(expected)
