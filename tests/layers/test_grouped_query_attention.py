"""Grouped-query attention in MultiHeadAttention (Ainslie et al. 2023): N query heads share N_kv key / value heads,
query head n reading K/V head n // (N / N_kv). It equals plain multi-head attention whose K/V projections repeat
each head N / N_kv times, forward and backward, with masks, causality and RoPE; the cache holds only the N_kv
heads; num_key_value_heads = num_heads is today's layer exactly; bad values are refused by name."""

import keras
import numpy as np
import pytest
from harness import gradient
from keras import ops

from attnlayers.multi_head import MultiHeadAttention
from attnlayers.positional import RotaryEmbedding

B, T, D, N, H = 2, 5, 8, 4, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _repeat_kv_heads(gqa_weights, groups):
    """GQA weights -> the plain MHA weights whose K/V projections repeat each K/V head ``groups`` times (head n of
    the repeated projection is K/V head n // groups)."""
    wq, bq, wk, bk, wv, bv, wo, bo = gqa_weights
    return [wq, bq, np.repeat(wk, groups, 1), np.repeat(bk, groups, 0), np.repeat(wv, groups, 1),
            np.repeat(bv, groups, 0), wo, bo]


def _pair(num_key_value_heads, x, **kwargs):
    """A GQA layer with random biases and the plain MHA layer it should equal."""
    gqa = MultiHeadAttention(N, H, num_key_value_heads=num_key_value_heads, bias_initializer="random_normal",
                             **kwargs)
    gqa(x, x)
    mha = MultiHeadAttention(N, H, **kwargs)
    mha(x, x)
    mha.set_weights(_repeat_kv_heads(gqa.get_weights(), N // num_key_value_heads))
    return gqa, mha


@pytest.fixture
def x(rng):
    return rng.normal(size=(B, T, D)).astype("float32")


@pytest.mark.parametrize("num_key_value_heads", [1, 2])  # multi-query and grouped-query
def test_equals_mha_with_repeated_kv_heads(num_key_value_heads, x):
    gqa, mha = _pair(num_key_value_heads, x, rotary=RotaryEmbedding())
    assert [tuple(w.shape) for w in gqa.get_weights()][2:6] == [(D, num_key_value_heads, H), (num_key_value_heads, H),
                                                               (D, num_key_value_heads, H), (num_key_value_heads, H)]
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    kwargs = {"query_mask": padding, "value_mask": padding, "use_causal_mask": True, "return_attention_scores": True}
    out, scores = gqa(x, x, **kwargs)
    ref_out, ref_scores = mha(x, x, **kwargs)
    np.testing.assert_allclose(_np(out), _np(ref_out), atol=1e-5)
    np.testing.assert_allclose(_np(scores), _np(ref_scores), atol=1e-6)
    assert tuple(scores.shape) == (B, N, T, T)  # one weight map per query head


def test_gradients_equal_mha_with_repeated_kv_heads(x):
    groups = 2
    gqa, mha = _pair(N // groups, x, rotary=RotaryEmbedding())

    def loss_of_input(layer):
        return lambda inputs: ops.square(layer(inputs, inputs, use_causal_mask=True))

    np.testing.assert_allclose(gradient(loss_of_input(gqa), x), gradient(loss_of_input(mha), x), atol=1e-4)

    # d loss / d W^K of a shared K/V head = the sum of the repeated copies' gradients over the group.
    def loss_of_key_kernel(layer):
        index = [v.path for v in layer.trainable_variables].index(layer.key_dense.kernel.path)
        values = [v.value for v in layer.trainable_variables]

        def loss(kernel):
            variables = values[:index] + [kernel] + values[index + 1:]
            out = layer.stateless_call(variables, [], x, x, use_causal_mask=True)[0]
            return ops.square(out)

        return loss

    gqa_grad = gradient(loss_of_key_kernel(gqa), _np(gqa.key_dense.kernel))  # (D, N_kv, H)
    mha_grad = gradient(loss_of_key_kernel(mha), _np(mha.key_dense.kernel))  # (D, N, H)
    np.testing.assert_allclose(gqa_grad, mha_grad.reshape(D, N // groups, groups, H).sum(2), atol=1e-4)


def test_cache_holds_only_the_kv_heads(x):
    layer = MultiHeadAttention(N, H, num_key_value_heads=2, rotary=RotaryEmbedding(), bias_initializer="random_normal")
    full = _np(layer(x, x, use_causal_mask=True))
    cache = np.zeros((B, 2, T, 2, H), "float32")  # (B, 2, S_max, N_kv, H)
    out, cache = layer(x[:, :2], x[:, :2], cache=cache, cache_update_index=0, use_causal_mask=True)
    np.testing.assert_allclose(_np(out), full[:, :2], atol=1e-5)
    for t in range(2, T):
        out, cache = layer(x[:, t:t + 1], x[:, t:t + 1], cache=cache, cache_update_index=ops.convert_to_tensor(t),
                           use_causal_mask=True)
        np.testing.assert_allclose(_np(out), full[:, t:t + 1], atol=1e-5, err_msg=f"step {t}")
    assert tuple(cache.shape) == (B, 2, T, 2, H)
    # The cached keys are the layer's own K projection of the inputs, rotated at their positions.
    keys = RotaryEmbedding()(layer.key_dense(x), start_index=0)
    np.testing.assert_allclose(_np(cache[:, 0]), _np(keys), atol=1e-5)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        layer(x[:, :1], x[:, :1], cache=np.zeros((B, 2, T, N, H), "float32"), cache_update_index=0)


def test_num_key_value_heads_equal_to_num_heads_is_todays_layer(x):
    """num_key_value_heads=None (the default) and =num_heads build the same weights and give bit-identical outputs;
    the default config is unchanged (None) and round-trips."""
    default = MultiHeadAttention(N, H, bias_initializer="random_normal")
    explicit = MultiHeadAttention(N, H, num_key_value_heads=N)
    default(x, x)
    explicit(x, x)
    assert [w.shape for w in default.get_weights()] == [w.shape for w in explicit.get_weights()]
    explicit.set_weights(default.get_weights())
    for kwargs in ({}, {"use_causal_mask": True, "return_attention_scores": True}):
        for a, b in zip(keras.tree.flatten(default(x, x, **kwargs)), keras.tree.flatten(explicit(x, x, **kwargs))):
            np.testing.assert_array_equal(_np(a), _np(b))
    config = default.get_config()
    assert config["num_key_value_heads"] is None and default.num_key_value_heads == N
    assert MultiHeadAttention.from_config(config).get_config() == config
    assert MultiHeadAttention.from_config(explicit.get_config()).num_key_value_heads == N


@pytest.mark.parametrize("value", [3, 0, -2, 2.0, True, "2"])
def test_bad_num_key_value_heads_are_refused(value):
    with pytest.raises(ValueError, match="num_key_value_heads"):
        MultiHeadAttention(N, H, num_key_value_heads=value)
