"""Keras' own ``model.quantize`` on GPT: the tied output projection reads the quantized token table with its scale
(keras' ReversibleEmbedding), so int8 / int4 logits stay close to float32's. Before, the projection multiplied by
the int8 table alone: logits off by ~2,500x their range (tied gpt2 and llama; untied llama was right)."""

import keras
import numpy as np
import pytest

from attnlayers.applications.gpt import GPT, GPTConfig

# Measured at this size: int8 ~0.006-0.009, int4 ~0.09-0.16 of the float logits' range (untied llama, always right,
# the same).
BOUNDS = {"int8": 0.05, "int4": 0.4}


@pytest.mark.parametrize("architecture, padding", [("gpt2", 1), ("llama", 64)])
def test_quantized_logits_stay_near_float(architecture, padding):
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
