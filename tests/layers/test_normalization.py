"""RMSNorm (Zhang & Sennrich 2019): harness, NumPy reference from eq. 4, mixed precision (float32 statistics, the
compute dtype out), bad input; and the Transformer blocks' ``normalization="rms"`` / ``use_bias`` options."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

from attnlayers import RMSNorm
from attnlayers.positional import RotaryEmbedding
from attnlayers.transformer import TransformerDecoder, TransformerDecoderBlock, TransformerEncoderBlock

B, T, D, N, F = 2, 3, 8, 4, 12


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


def np_rms_norm(x, gain, eps):
    """RMSNorm(x) = x / sqrt(mean_i(x_i^2) + eps) * g (eq. 4)."""
    x = np.asarray(x, "float64")
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * gain


@pytest.fixture
def x(rng):
    return rng.normal(size=(B, T, D)).astype("float32") * 3.0 + 1.0


def test_harness(x):
    run_layer_test(RMSNorm, {"epsilon": 1e-5}, x, expected_output_shape=(B, T, D), expected_num_trainable_weights=1)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_equals_numpy_reference(eps, x, rng):
    norm = RMSNorm(epsilon=eps)
    norm.build(x.shape)
    gain = rng.normal(size=(D,)).astype("float32")
    norm.set_weights([gain])
    np.testing.assert_allclose(_np(norm(x)), np_rms_norm(x, gain, eps), rtol=1e-5, atol=1e-6)
    # Re-scaling invariance (the paper's point): RMSNorm(a x) = RMSNorm(x) for a > 0 (up to eps).
    if eps < 1e-3:
        np.testing.assert_allclose(_np(norm(7.0 * x)), _np(norm(x)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy, rng):
    """Compute dtype out, statistics in float32: inputs whose squares overflow float16 (300^2 > 65504) still
    normalize to the float32 answer."""
    x = (rng.normal(size=(B, T, D)) * 300.0).astype("float32")
    norm = RMSNorm(dtype=policy)
    y = norm(x)
    assert keras.backend.standardize_dtype(y.dtype) == policy.split("_")[1]
    assert keras.backend.standardize_dtype(norm.gamma.dtype) == "float32"  # the gain stays a float32 variable
    np.testing.assert_allclose(_np(y), np_rms_norm(x, np.ones(D), 1e-6), rtol=2e-2, atol=2e-2)


def test_bad_input(x):
    with pytest.raises(ValueError, match="epsilon"):
        RMSNorm(epsilon=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        RMSNorm(epsilon="small")
    norm = RMSNorm()
    norm(x)
    with pytest.raises(ValueError, match="inputs"):
        norm(np.zeros((B, T, D + 1), "float32"))


# ---- in the Transformer blocks ---------------------------------------------------------------------------


def test_llama_style_block_harness(x):
    """Pre-RMSNorm, SwiGLU, no biases, grouped-query attention with RoPE: the LLaMA block, composed."""
    kwargs = {"num_heads": N, "intermediate_dim": F, "normalize_first": True, "normalization": "rms",
              "use_bias": False, "activation": "swiglu", "layer_norm_epsilon": 1e-6,
              "attention_kwargs": {"num_key_value_heads": 2, "rotary": RotaryEmbedding()}}
    block = run_layer_test(TransformerDecoderBlock, kwargs, {"decoder_sequence": x}, expected_output_shape=(B, T, D))
    assert isinstance(block.self_attention_layer_norm, RMSNorm) and isinstance(block.feedforward_layer_norm, RMSNorm)
    assert not any("bias" in w.path for w in block.weights)  # the norms have no bias either
    assert block.self_attention.num_key_value_heads == 2


def test_pre_rms_block_equals_numpy(x, rng):
    """Pre-norm wiring with RMSNorm: h = x + Attention(RMSNorm(x)); h + FFN(RMSNorm(h)); then the stack's final
    RMSNorm, each norm with its own gain (the sublayers themselves are called as they are)."""
    stack = TransformerDecoder(1, N, F, normalize_first=True, normalization="rms", use_bias=False,
                               layer_norm_epsilon=1e-6)
    stack.build(x.shape)
    block = stack.blocks[0]
    for norm in (block.self_attention_layer_norm, block.feedforward_layer_norm, stack.final_layer_norm):
        norm.set_weights([rng.normal(size=(D,)).astype("float32")])
    y = _np(stack(x))
    g1, g2, g3 = (_np(n.gamma) for n in (block.self_attention_layer_norm, block.feedforward_layer_norm,
                                          stack.final_layer_norm))
    h = np_rms_norm(x, g1, 1e-6).astype("float32")
    h = x + _np(block.self_attention(h, h, use_causal_mask=True))
    h2 = np_rms_norm(h, g2, 1e-6).astype("float32")
    h = h + _np(block.feedforward(h2))
    np.testing.assert_allclose(y, np_rms_norm(h, g3, 1e-6), atol=1e-5)


def test_block_defaults_are_unchanged(x):
    block = TransformerEncoderBlock(N, F)
    block(x)
    config = block.get_config()
    assert (config["normalization"], config["use_bias"]) == ("layer", True)
    assert type(block.self_attention_layer_norm) is keras.layers.LayerNormalization
    assert block.self_attention.use_bias and block.feedforward.use_bias
    # A config saved before these arguments existed loads as LayerNorm with biases.
    old = {k: v for k, v in config.items() if k not in ("normalization", "use_bias")}
    assert TransformerEncoderBlock.from_config(old).get_config() == config
    with pytest.raises(ValueError, match="normalization"):
        TransformerEncoderBlock(N, F, normalization="batch")
