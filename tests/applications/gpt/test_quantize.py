"""Keras' own ``model.quantize`` on GPT: the tied output projection reads the quantized token table with its scale
(keras' ReversibleEmbedding), so int8 / int4 logits stay close to float32's. Before, the projection multiplied by
the int8 table alone: logits off by ~2,500x their range (tied gpt2 and llama; untied llama was right)."""

import json

import keras
import numpy as np
import pytest
from attnlayers.applications.gpt import GPT, GPTConfig
from attnlayers.layer_walk import nested_layers
from attnlayers.applications.gpt.checkpoint import save_hf_checkpoint
from attnlayers.applications.gpt.llama_checkpoint import save_hf_llama_checkpoint

# Measured at this size: int8 ~0.006-0.009, int4 ~0.09-0.16 of the float logits' range (untied llama, always right,
# the same).
BOUNDS = {"int8": 0.05, "int4": 0.4}


@pytest.mark.parametrize("architecture, padding", [("gpt2", 1), ("llama", 64)])
def test_quantized_logits_stay_near_float(architecture, padding, tmp_path):
    keras.utils.set_random_seed(0)
    config = GPTConfig(architecture=architecture, vocabulary_size=96, hidden_dim=32,
                       num_heads=4, vocabulary_padding=padding)
    model = GPT(config)
    x = np.random.default_rng(0).integers(0, 96, (2, 10)).astype("int32")
    reference = keras.ops.convert_to_numpy(model(x))
    for mode, bound in BOUNDS.items():
        quantized = GPT(config)
        quantized.set_weights(model.get_weights())
        with pytest.warns(UserWarning):  # keras names the layers it leaves in float (Dropout, norms...)
            quantized.quantize(mode)
        logits = keras.ops.convert_to_numpy(quantized(x))
        assert logits.shape == reference.shape
        error = np.abs(logits - reference).max() / np.abs(reference).max()
        assert error < bound, (mode, error)
        if mode == "int8":  # and it decodes: the cached step reads the same quantized table
            tokens = keras.ops.convert_to_numpy(quantized.generate(x[:, :4], max_length=8).tokens)
            assert tokens.shape == (2, 8) and tokens.max() < 96
            save = save_hf_checkpoint if architecture == "gpt2" else save_hf_llama_checkpoint
            with pytest.raises(ValueError, match=r"needs float weights|is int8 \(a quantized model"):  # no unscaled codes
                save(quantized, str(tmp_path))


SERVE = """
import json, sys

import tensorflow as tf
block("keras")  # noqa: F821  (serve_alone's prelude): the SavedModel serves with tensorflow alone
loaded = tf.saved_model.load(sys.argv[1])
prompt = tf.constant(json.loads(sys.argv[2]), tf.int32)
out = loaded.signatures["generate"](token_ids=prompt, padding_mask=tf.ones_like(prompt, tf.bool))
print(json.dumps({"tokens": out["token_ids"].numpy().tolist()}))
"""


def test_quantized_llama_trains_decodes_compiles_and_exports(tmp_path):
    """int8 (the tied LLaMA of SmolLM2): the chunked training loss reads the table dequantized (GPT.output_matrix: it
    read the int8 table, a loss of ~1,000 instead of ~4.5); cached greedy decoding is the argmax of a full
    recompute; under XLA (where the fused QKV projection runs for a float model) the logits are the eager ones; and
    the generate SavedModel, its int8 variables in it, serves alone with generate's tokens."""
    from attnlayers.applications.core.training.losses import ChunkedCrossEntropy

    keras.utils.set_random_seed(0)
    config = GPTConfig(architecture="llama", vocabulary_size=96, hidden_dim=32, num_heads=4, num_layers=2,
                       intermediate_dim=64, max_sequence_length=12, vocabulary_padding=64)
    model = GPT(config)
    with pytest.warns(UserWarning):
        model.quantize("int8")
    x = np.random.default_rng(1).integers(0, 96, (2, 9)).astype("int32")
    model.compile(loss=ChunkedCrossEntropy())
    hidden = model.hidden_states(x[:, :-1])
    chunked = float(keras.ops.convert_to_numpy(model.compute_loss(x[:, :-1], x[:, 1:], hidden, training=True)))
    full = float(keras.ops.convert_to_numpy(
        keras.losses.SparseCategoricalCrossentropy(from_logits=True)(x[:, 1:], model(x[:, :-1]))))
    assert abs(chunked - full) < 1e-3 * full, (chunked, full)  # the logits' path also quantizes h (per token)

    tokens = keras.ops.convert_to_numpy(model.generate(x[:, :4], max_length=10, stop_token_ids=None).tokens)
    recomputed = keras.ops.convert_to_numpy(model(tokens[:, :-1]))  # (B, 9, V), no cache
    np.testing.assert_array_equal(recomputed[:, 3:].argmax(-1), tokens[:, 4:])
    if keras.backend.backend() != "tensorflow":
        return  # JAX: the fused projection's route is the eager one above; the SavedModel is TensorFlow's
    import tensorflow as tf
    from attnlayers.applications.core.formats.export import export_generator
    from model_harness import serve_alone

    eager = keras.ops.convert_to_numpy(model(x))
    np.testing.assert_allclose(tf.function(model, jit_compile=True)(x).numpy(), eager, rtol=1e-5, atol=1e-5)
    path = str(tmp_path / "int8")
    export_generator(path, model, 10, "greedy")
    served = serve_alone(SERVE, path, json.dumps(x[:, :4].tolist()))
    expected = keras.ops.convert_to_numpy(model.generate(x[:, :4], max_length=10).tokens)  # stops at end_token_id
    np.testing.assert_array_equal(served["tokens"], expected)


@pytest.mark.parametrize("architecture, mode", [("gpt2", "gptq"), ("llama", "gptq"), ("llama", "awq")])
def test_gptq_and_awq_quantize_every_block_and_nothing_else(architecture, mode):
    """model.quantize("gptq" | "awq") through GPT.get_quantization_layer_structure (without it Keras refuses both
    modes): every projection of every block becomes a GPTQ / AWQ int4 layer, nothing outside the blocks is quantized
    (the token table, positions, final norm stay float), and the logits stay near float32's. AWQ's scales come from
    the calibration activations, which Keras 3.15 alone never reads (GPT.quantize routes them; the same route gives
    GPTQ its Hessians). (On random weights and inputs the layers' Hessians are near-diagonal and GPTQ's error
    correction has little to correct: its gain over rounding is measured on SmolLM2 by
    benchmarks/quantize_smollm2.py.)"""
    config = GPTConfig(vocabulary_size=96, max_sequence_length=32, num_layers=1, num_heads=4, hidden_dim=64,
                       intermediate_dim=128, architecture=architecture, tie_embeddings=True,
                       **({"num_key_value_heads": 2} if architecture == "llama" else {}))
    model = GPT(config)
    ids = np.random.default_rng(0).integers(0, 96, (4, 32)).astype("int32")
    float_logits = keras.ops.convert_to_numpy(model(ids))
    method = {"gptq": keras.quantizers.GPTQConfig, "awq": keras.quantizers.AWQConfig}[mode]
    model.quantize(mode, config=method(
        dataset=[ids.reshape(-1)], tokenizer=object(), weight_bits=4, group_size=32, num_samples=4,
        sequence_length=32))
    in_blocks = [layer for block in model.decoder.blocks for layer in nested_layers(block)
                 if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))]
    assert len(in_blocks) == (7 if architecture == "llama" else 6)  # Q, K, V, O + the MLP's 3 (SwiGLU) or 2
    assert all(layer.quantization_mode == mode for layer in in_blocks)
    if mode == "awq":  # the scale search saw the calibration activations (GPT.quantize: Keras 3.15 alone, all 1)
        scales = [keras.ops.convert_to_numpy(layer.awq_scales) for layer in in_blocks]
        assert all(layer.is_awq_calibrated for layer in in_blocks)
        assert not all(np.allclose(s, 1) for s in scales), scales
    block_ids = {id(layer) for layer in in_blocks}
    outside = [layer.name for layer in nested_layers(model)
               if getattr(layer, "quantization_mode", None) is not None and id(layer) not in block_ids]
    assert outside == []
    error = np.abs(keras.ops.convert_to_numpy(model(ids)) - float_logits).max() / np.abs(float_logits).max()
    assert 0 < error < 0.2, error
