"""BigBirdAttention: harness; the blocked computation equals MultiHeadAttention with attention_mask=bigbird_mask
(outputs, scores, gradients; key/query padding, fully masked rows, partial last block, causal, GQA) in float32,
under mixed_float16 and under jit; the pattern itself; refused arguments."""

import keras
import numpy as np
import pytest
from harness import outputs_and_gradients, run_layer_test
from keras import ops

from attnlayers.bigbird import BigBirdAttention, bigbird_mask, bigbird_pattern
from attnlayers.multi_head import MultiHeadAttention

B, L, D, N, H = 2, 12, 8, 2, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _pair(config, length, causal=False, **kwargs):
    """A BigBirdAttention and a MultiHeadAttention with the same weights, and the dense mask of the pattern."""
    bigbird = BigBirdAttention(N, H, bias_initializer="random_normal", **config, **kwargs)
    dense = MultiHeadAttention(N, H, **kwargs)
    bigbird.build((None, length, D), (None, length, D))
    dense.build((None, length, D), (None, length, D))
    dense.set_weights(bigbird.get_weights())
    mask = bigbird_mask(length, config["block_size"], config["num_global_blocks"], config["num_random_blocks"],
                        config["pattern_seed"])
    return bigbird, dense, mask[None]


CONFIGS = {
    "g1_r1": ({"block_size": 2, "num_global_blocks": 1, "num_random_blocks": 1, "pattern_seed": 3}, 12),
    "partial_block_g2_r2": ({"block_size": 3, "num_global_blocks": 2, "num_random_blocks": 2, "pattern_seed": 5}, 11),
    "no_global": ({"block_size": 2, "num_global_blocks": 0, "num_random_blocks": 1, "pattern_seed": 7}, 8),
    # few blocks: random blocks repeat window / global blocks and each other, and get masked
    "random_overlaps": ({"block_size": 2, "num_global_blocks": 1, "num_random_blocks": 3, "pattern_seed": 0}, 10),
}


# ----------------------------------------------------------------------------------------------------------
# Harness


def test_harness(rng):
    """Self-attention returning the dense scores; padded values change nothing; a row of padding gives zeros."""
    x = rng.normal(size=(B, L, D)).astype("float32")
    run_layer_test(
        BigBirdAttention,
        {"num_heads": N, "key_dim": H, "block_size": 2, "num_global_blocks": 1, "num_random_blocks": 1},
        {"query": x, "value": x},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, L, D), (B, N, L, L)),
        expected_num_trainable_weights=8,
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
        run_gradients=False,  # test_gradients_reach_every_weight (jitted: the eager JAX gradient is slow)
    )


def test_harness_gqa_gate_dropout_causal_partial_block(rng):
    x = rng.normal(size=(B, 11, D)).astype("float32")
    run_layer_test(
        BigBirdAttention,
        {"num_heads": 4, "key_dim": H, "num_key_value_heads": 2, "use_gate": True, "dropout": 0.1,
         "block_size": 3, "num_global_blocks": 1, "num_random_blocks": 1, "pattern_seed": 1},
        {"query": x, "value": x},
        call_kwargs={"use_causal_mask": True},
        expected_output_shape=(B, 11, D),
        expected_num_trainable_weights=10,
        # jit and mixed precision: test_harness and the tests below; gradients: test_gradients_reach_every_weight
        run_jit=False,
        run_mixed_precision=False,
        run_gradients=False,
    )


@pytest.mark.parametrize("gqa", [False, True], ids=["heads", "gqa_gate_dropout"])
def test_gradients_reach_every_weight(rng, gqa):
    config, length = CONFIGS["partial_block_g2_r2"]
    extra = {"num_key_value_heads": 1, "use_gate": True, "dropout": 0.1} if gqa else {}
    layer = BigBirdAttention(N, H, **config, **extra)
    x = rng.normal(size=(B, length, D)).astype("float32")
    layer.build(x.shape, x.shape)
    _, grads = outputs_and_gradients(layer, {"query": x, "value": x}, training=True, use_causal_mask=gqa)
    assert len(grads) == len(layer.trainable_weights) + 2
    for variable, grad in zip(layer.trainable_weights, grads):
        assert np.all(np.isfinite(grad)) and np.any(grad != 0), variable.path


# ----------------------------------------------------------------------------------------------------------
# Equal to dense attention with the pattern's mask


@pytest.mark.parametrize("name", ["partial_block_g2_r2", "no_global", "random_overlaps"])
def test_equals_dense_attention_with_bigbird_mask(rng, name):
    """Outputs, scores and the gradients of every weight and input agree with MultiHeadAttention given
    attention_mask=bigbird_mask(...) to 1e-5, bidirectional and causal, with key padding, a fully padded batch
    row (zero output) and query padding."""
    config, length = CONFIGS[name]
    bigbird, dense, mask = _pair(config, length)
    q, v = rng.normal(size=(2, B, length, D)).astype("float32")
    value_mask = rng.random((B, length)) < 0.7
    value_mask[1] = False
    query_mask = np.ones((B, length), bool)
    query_mask[0, -2] = False
    for causal in (False, True):
        kwargs = {"value_mask": value_mask, "query_mask": query_mask, "use_causal_mask": causal}
        (out, scores), grads = outputs_and_gradients(bigbird, {"query": q, "value": v}, **kwargs)
        (expected, expected_scores), dense_grads = outputs_and_gradients(
            dense, {"query": q, "value": v}, attention_mask=mask, **kwargs
        )
        np.testing.assert_allclose(out, expected, atol=1e-5)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
        assert np.all(out[1] == 0) and np.all(out[0, -2] == 0)
        for a, b in zip(grads, dense_grads):
            np.testing.assert_allclose(a, b, atol=1e-5)


def test_grouped_query_heads_equal_dense(rng):
    config, length = CONFIGS["g1_r1"]
    bigbird = BigBirdAttention(4, H, num_key_value_heads=2, **config)
    dense = MultiHeadAttention(4, H, num_key_value_heads=2)
    x = rng.normal(size=(B, length, D)).astype("float32")
    out = bigbird(x, x)
    dense(x, x)
    dense.set_weights(bigbird.get_weights())
    expected = dense(x, x, attention_mask=bigbird.attention_mask(length)[None])
    np.testing.assert_allclose(_np(out), _np(expected), atol=1e-5)


def test_mixed_float16_equals_dense(rng):
    """Under mixed_float16 the blocked and the dense computation agree (softmax in float32), padded rows are 0."""
    keras.config.set_dtype_policy("mixed_float16")
    config, length = CONFIGS["partial_block_g2_r2"]
    bigbird, dense, mask = _pair(config, length)
    x = rng.normal(size=(B, length, D)).astype("float32")
    value_mask = np.ones((B, length), bool)
    value_mask[1] = False
    out = bigbird(x, x, value_mask=value_mask)
    expected = dense(x, x, value_mask=value_mask, attention_mask=mask)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert np.all(np.isfinite(_np(out))) and np.all(_np(out)[1] == 0)
    np.testing.assert_allclose(_np(out), _np(expected), atol=5e-3)


def test_jit_compiled_model_equals_dense(rng):
    """A functional model with jit_compile=True (the padding mask an input; causal, a partial last block) gives
    the dense attention's output."""
    config, length = CONFIGS["partial_block_g2_r2"]
    bigbird, dense, mask = _pair(config, length)
    x_in, m_in = keras.Input((length, D)), keras.Input((length,), dtype="bool")
    model = keras.Model([x_in, m_in], bigbird(x_in, x_in, value_mask=m_in, use_causal_mask=True))
    model.compile(jit_compile=True)
    x = rng.normal(size=(B, length, D)).astype("float32")
    value_mask = rng.random((B, length)) < 0.7
    value_mask[1] = False
    out = model.predict_on_batch([x, value_mask])
    expected = dense(x, x, value_mask=value_mask, attention_mask=mask, use_causal_mask=True)
    np.testing.assert_allclose(_np(out), _np(expected), atol=1e-5)
    assert np.all(_np(out)[1] == 0)


# ----------------------------------------------------------------------------------------------------------
# The pattern


def test_pattern_global_window_random_without_duplicates():
    length, b, g, r = 64, 4, 2, 3
    mask = bigbird_mask(length, b, g, r, seed=11)
    blocks = mask[::b, ::b]  # one entry per (query block, key block)
    num_blocks = length // b
    assert np.all(blocks[:g]) and np.all(blocks[:, :g])  # global rows and columns
    for i in range(num_blocks):
        assert all(blocks[i, j] for j in (i - 1, i, i + 1) if 0 <= j < num_blocks)  # the window
    # every non-global query block sees its window, the globals and exactly r more blocks
    for i in range(g, num_blocks):
        window_and_global = {j for j in (i - 1, i, i + 1) if 0 <= j < num_blocks} | set(range(g))
        assert blocks[i].sum() == len(window_and_global) + r
    # the blocks are whole: the dense mask is constant within each (b, b) tile
    assert np.array_equal(mask, np.repeat(np.repeat(blocks, b, 0), b, 1))
    assert np.array_equal(mask, bigbird_mask(length, b, g, r, seed=11))
    assert not np.array_equal(mask, bigbird_mask(length, b, g, r, seed=12))
    keys, valid = bigbird_pattern(num_blocks, g, r, seed=11)
    assert keys.shape == valid.shape == (num_blocks - g, g + 3 + r)
    for row, ok in zip(keys, valid):  # valid slots never repeat a block
        assert len(set(row[ok])) == ok.sum()


def test_pattern_seed_in_config_and_reproducible():
    keras.utils.set_random_seed(3)
    first = BigBirdAttention(N, H, block_size=2)
    keras.utils.set_random_seed(3)
    second = BigBirdAttention(N, H, block_size=2)
    assert first.pattern_seed == second.pattern_seed == first.get_config()["pattern_seed"]
    clone = BigBirdAttention.from_config(first.get_config())
    assert np.array_equal(clone.attention_mask(40), first.attention_mask(40))


# ----------------------------------------------------------------------------------------------------------
# Refused arguments


def test_refused_arguments(rng):
    x = rng.normal(size=(B, L, D)).astype("float32")
    layer = BigBirdAttention(N, H, block_size=2, num_global_blocks=1, num_random_blocks=1, pattern_seed=0)
    layer(x, x)
    with pytest.raises(ValueError, match=r"T == S.*\(2, 5, 8\).*\(2, 12, 8\)"):
        layer(x[:, :5], x)
    with pytest.raises(ValueError, match=r"attention_mask of shape \(1, 12, 12\)"):
        layer(x, x, attention_mask=np.ones((1, L, L), bool))
    with pytest.raises(ValueError, match="attention_bias"):
        layer(x, x, attention_bias=np.zeros((1, N, L, L), "float32"))
    with pytest.raises(ValueError, match="no key/value cache"):
        layer(x, x, cache=np.zeros((B, 2, L, N, H), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="score='general'"):
        BigBirdAttention(N, H, score="general")
    with pytest.raises(ValueError, match="block_size=0"):
        BigBirdAttention(N, H, block_size=0)
    with pytest.raises(ValueError, match="num_random_blocks=-1"):
        BigBirdAttention(N, H, num_random_blocks=-1)
    with pytest.raises(ValueError, match="pattern_seed=-1"):
        BigBirdAttention(N, H, pattern_seed=-1)
    with pytest.raises(ValueError, match="sliding_window"):
        BigBirdAttention(N, H, sliding_window=3)
    with pytest.raises(ValueError, match="flash_attention=True"):
        BigBirdAttention(N, H, flash_attention=True)
