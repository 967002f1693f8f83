"""attnlayers.kv_cache against NumPy: writing one position (plain and stacked caches), writing a call's keys and
values, the static prefix lengths, and one query's attention over the written positions (GQA, sliding window,
write-then-read and attend-beside)."""

import numpy as np
import pytest
from keras import ops

from attnlayers import kv_cache

B, L, N, N_KV, H = 2, 40, 4, 2, 8  # L = 40: prefixes (20, 40)


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_prefix_lengths():
    assert kv_cache.prefix_lengths(272) == (34, 68, 102, 136, 170, 204, 238, 272)
    assert kv_cache.prefix_lengths(40) == (20, 40)
    assert kv_cache.prefix_lengths(20) == (20,)
    for max_length in (1, 15, 16, 33, 100, 1024):
        lengths = kv_cache.prefix_lengths(max_length)
        assert lengths[-1] == max_length and len(lengths) <= 8 and list(lengths) == sorted(set(lengths))
        assert all(length >= min(16, max_length) for length in lengths)
    for bad in (0, None, 2.5):
        with pytest.raises(ValueError, match="max_length"):
            kv_cache.prefix_lengths(bad)


def test_write_position_writes_only_the_index(rng):
    cache = rng.normal(size=(B, 2, L, N_KV, H)).astype("float32")
    entries = rng.normal(size=(B, 2, N_KV, H)).astype("float32")
    expected = cache.copy()
    expected[:, :, 7] = entries
    written = kv_cache.write_position(ops.convert_to_tensor(cache), entries, ops.convert_to_tensor(7))
    np.testing.assert_array_equal(_np(written), expected)


def test_write_position_stacked(rng):
    cache = rng.normal(size=(B, 3, 2, L, N_KV, H)).astype("float32")
    entries = rng.normal(size=(B, 3, 2, N_KV, H)).astype("float32")
    every_layer = kv_cache.write_position(ops.convert_to_tensor(cache), entries, 30)
    expected = cache.copy()
    expected[:, :, :, 30] = entries
    np.testing.assert_array_equal(_np(every_layer), expected)
    one_layer = kv_cache.write_position(ops.convert_to_tensor(cache), entries[:, 1], 9, layer=1)
    expected = cache.copy()
    expected[:, 1, :, 9] = entries[:, 1]
    np.testing.assert_array_equal(_np(one_layer), expected)


def test_update_writes_a_call(rng):
    cache = rng.normal(size=(B, 2, L, N_KV, H)).astype("float32")
    key, value = rng.normal(size=(2, B, 3, N_KV, H)).astype("float32")
    keys, values, written, mask = kv_cache.update(ops.convert_to_tensor(cache), key, value, 5)
    expected = cache.copy()
    expected[:, 0, 5:8], expected[:, 1, 5:8] = key, value
    np.testing.assert_array_equal(_np(written), expected)
    np.testing.assert_array_equal(_np(keys), expected[:, 0])
    np.testing.assert_array_equal(_np(values), expected[:, 1])
    np.testing.assert_array_equal(ops.convert_to_numpy(mask)[0, 0], np.arange(L) < 8)
    assert kv_cache.update(ops.convert_to_tensor(cache), key, value, 5, "float16")[2].dtype == "float16"


def _reference(q, keys, values, index, scale, window):
    """softmax(q K^T * scale) V over positions s <= index (and index - s < window): (B, 1, N, H)."""
    group = N // N_KV
    keys, values = np.repeat(keys, group, axis=2), np.repeat(values, group, axis=2)  # head n reads n // G
    logits = np.einsum("bnh,bsnh->bns", q[:, 0], keys[:, : index + 1]) * scale
    visible = np.arange(index + 1) > index - (window or L + 1)
    logits = np.where(visible, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bns,bsnh->bnh", weights, values[:, : index + 1])[:, None]


def test_attend_one_equals_softmax_attention(rng):
    """Both ways of taking the new position (written, then read; or attended beside the cache), on either side
    of the prefix boundary 20, with and without a sliding window, on a stacked cache whose unwritten positions
    hold garbage."""
    scale = H**-0.5
    stack = rng.normal(size=(B, 2, 2, L, N_KV, H)).astype("float32")  # 2 layers; layer 1 is read
    for index, window in ((0, None), (19, 5), (20, None), (39, 5)):
        attend = dict(num_heads=N, num_key_value_heads=N_KV, scale=scale, sliding_window=window, layer=1)
        q = rng.normal(size=(B, 1, N, H)).astype("float32")
        entry = rng.normal(size=(B, 2, N_KV, H)).astype("float32")
        keys, values = stack[:, 1, 0].copy(), stack[:, 1, 1].copy()
        keys[:, index], values[:, index] = entry[:, 0], entry[:, 1]
        expected = _reference(q, keys, values, index, scale, window)
        written = kv_cache.write_position(ops.convert_to_tensor(stack), entry, index, layer=1)
        after_write = kv_cache.attend_one(q, written, ops.convert_to_tensor(index), **attend)
        beside = kv_cache.attend_one(q, stack, index, new=(entry[:, :1], entry[:, 1:]), **attend)
        np.testing.assert_allclose(_np(after_write), expected, atol=1e-5, err_msg=f"index {index}")
        np.testing.assert_allclose(_np(beside), expected, atol=1e-5, err_msg=f"index {index}")
    plain = kv_cache.attend_one(q, written[:, 1], index, **{**attend, "layer": None})
    np.testing.assert_allclose(_np(plain), expected, atol=1e-5)


def test_attend_one_errors(rng):
    q = np.zeros((B, 1, N, H), "float32")
    with pytest.raises(ValueError, match="num_key_value_heads"):
        kv_cache.attend_one(q, np.zeros((B, 2, L, 3, H), "float32"), 0, num_heads=N, num_key_value_heads=3, scale=1.0)
    with pytest.raises(ValueError, match=r"`cache` must have shape \(batch, 2, max_length"):
        kv_cache.attend_one(q, np.zeros((B, L, N_KV, H), "float32"), 0, num_heads=N, num_key_value_heads=N_KV,
                            scale=1.0)
