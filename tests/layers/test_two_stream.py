"""XLNet's permutation masks, factorisation orders, partial prediction and two-stream attention (Yang et al. 2019,
section 2.3): NumPy references written from the definitions, the query stream's blindness to its own token, the
shared harness, bad input."""

import math

import keras
import numpy as np
import pytest
from harness import np_softmax, run_layer_test
from keras import ops

from attnlayers import TwoStreamAttention
from attnlayers.permutation import (
    num_predictions,
    permutation_masks,
    prediction_targets,
    sample_factorization_order,
)
from attnlayers.relative_positional import TransformerXLRelativeBias

BACKEND = keras.backend.backend()
B, T, D, N, H = 2, 6, 8, 2, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


# ----------------------------------------------------------------------------------------------------------
# NumPy references, from the definitions


def np_permutation_masks(order, padding=None):
    """content[b, i, j]: j comes at or before i in the order z (h_{z_t} sees x_{z<=t}); query: strictly before."""
    batch, length = order.shape
    padding = np.ones((batch, length), bool) if padding is None else padding
    content, query = np.zeros((2, batch, length, length), bool)
    for b in range(batch):
        place = {int(position): t for t, position in enumerate(order[b])}  # rank_z
        for i in range(length):
            for j in range(length):
                visible = padding[b, i] and padding[b, j]
                content[b, i, j] = visible and place[j] <= place[i]
                query[b, i, j] = visible and place[j] < place[i]
    return content, query


def np_attention(x, content, mask, weights):
    """MultiHead(Q = x W^Q, K = content W^K, V = content W^V) W^O with softmax(Q K^T / sqrt(H)) under ``mask``
    (B, T, S); a query that sees no key outputs 0."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(w, "float64") for w in weights]
    q = np.einsum("btd,dnh->btnh", x, wq) + bq
    k = np.einsum("bsd,dnh->bsnh", content, wk) + bk
    v = np.einsum("bsd,dnh->bsnh", content, wv) + bv
    logits = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    alignment = np_softmax(logits, mask[:, None])
    out = np.einsum("bnts,bsnh,nhd->btd", alignment, v, wo) + bo
    return np.where(mask.any(-1)[..., None], out, 0.0)


def np_two_stream(weights, content, query_stream, content_mask, query_mask):
    """h^(m)_{z_t} = Attention(Q = h_{z_t}, KV = h_{z<=t}); g^(m)_{z_t} = Attention(Q = g_{z_t}, KV = h_{z<t})."""
    return (np_attention(content, content, content_mask, weights),
            np_attention(query_stream, content, query_mask, weights))


def _inputs(seed=0, padding=True):
    rng = np.random.default_rng(seed)
    content = rng.normal(size=(B, T, D)).astype("float32")
    query_stream = rng.normal(size=(B, T, D)).astype("float32")
    lengths = np.array([T, T - 2]) if padding else np.array([T, T])
    mask = np.arange(T)[None] < lengths[:, None]
    order = _np(sample_factorization_order(B, T, seed=seed, padding_mask=mask))
    content_mask, query_mask = (_np(m) for m in permutation_masks(order, padding_mask=mask))
    return content, query_stream, content_mask, query_mask, order, mask


def _perturbed_layer(**kwargs):
    layer = TwoStreamAttention(num_heads=N, key_dim=H, **kwargs)
    layer.build((B, T, D))
    rng = np.random.default_rng(1)
    layer.set_weights([w + 0.3 * rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()])
    return layer


# ----------------------------------------------------------------------------------------------------------
# Masks, orders and partial prediction


def test_permutation_masks_orders_and_partial_prediction():
    # The identity order: the causal mask (content) and the strictly causal one (query).
    content, query = (_np(m) for m in permutation_masks(ops.arange(T)[None]))
    np.testing.assert_array_equal(content[0], np.tril(np.ones((T, T), bool)))
    np.testing.assert_array_equal(query[0], np.tril(np.ones((T, T), bool), -1))
    # Any order, with padding: equal to the definition; padding never visible and sees nothing.
    order = np.stack([np.random.default_rng(s).permutation(T) for s in range(3)])
    padding = np.arange(T)[None] < np.array([[T], [4], [1]])
    for got, want in zip(permutation_masks(order, padding_mask=padding), np_permutation_masks(order, padding)):
        np.testing.assert_array_equal(_np(got), want)

    # Sampled orders: permutations, the padding last, reproducible from the seed, different for another seed.
    sampled = _np(sample_factorization_order(3, T, seed=[5, 1], padding_mask=padding))
    assert all(sorted(row) == list(range(T)) for row in sampled)
    assert sampled[1, 4:].tolist() == [4, 5] and sampled[2, 1:].tolist() == [1, 2, 3, 4, 5]
    np.testing.assert_array_equal(sampled, _np(sample_factorization_order(3, T, seed=[5, 1], padding_mask=padding)))
    assert not np.array_equal(_np(sample_factorization_order(3, T, seed=[5, 2])),
                              _np(sample_factorization_order(3, T, seed=[5, 1])))
    # Uniform: the 6 orders of 3 positions over 6000 rows, each 1000 +- 5 standard deviations (29).
    rows = _np(sample_factorization_order(6000, 3, seed=7))
    counts = np.unique(rows @ np.array([9, 3, 1]), return_counts=True)[1]
    assert len(counts) == 6 and np.all(np.abs(counts - 1000) < 145), counts

    # Partial prediction: the last round(n / K) real tokens of each order, never padding.
    order = _np(sample_factorization_order(2, 12, seed=3, padding_mask=np.arange(12)[None] < [[12], [7]]))
    targets = _np(prediction_targets(order, K=6, padding_mask=np.arange(12)[None] < [[12], [7]]))
    assert set(np.flatnonzero(targets[0])) == set(order[0, -2:])  # 12 / 6 = 2
    assert set(np.flatnonzero(targets[1])) == {order[1, 6]}  # round(7 / 6) = 1, the last real one
    full = _np(prediction_targets(order, K=1))
    assert full.all()
    assert num_predictions(512, 6) == 85 and num_predictions(0, 6) == 0 and num_predictions(2, 6) == 1
    # Padding placed anywhere in the order: never predicted, and not counted (2 real tokens, K = 2: one target).
    assert _np(prediction_targets([[2, 0, 1]], K=2, padding_mask=[[True, True, False]])).tolist() == [[0, 1, 0]]

    with pytest.raises(ValueError, match="`K`"):
        prediction_targets(order, K=0.5)
    with pytest.raises(ValueError, match="`order`"):
        permutation_masks(np.zeros((2, 3, 4), "int32"))
    with pytest.raises(ValueError, match="`seed`"):
        sample_factorization_order(2, 3, seed=[1, 2, 3])


def test_orders_from_a_stateless_seed_in_a_compiled_step():
    """One compiled function, a new seed tensor per step: new orders, no retrace; a SeedGenerator advances."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        step = tf.function(lambda seed: sample_factorization_order(4, T, seed), jit_compile=True)
        first, second = _np(step(tf.constant([0, 1]))), _np(step(tf.constant([0, 2])))
        assert step.experimental_get_tracing_count() == 1
        dataset = tf.data.Dataset.range(3).map(lambda i: sample_factorization_order(1, T, tf.stack([i, i]))[0])
        assert all(sorted(row) == list(range(T)) for row in dataset.as_numpy_iterator())
    else:
        import jax

        step = jax.jit(lambda seed: sample_factorization_order(4, T, seed))
        first, second = _np(step(np.array([0, 1], "uint32"))), _np(step(np.array([0, 2], "uint32")))
    np.testing.assert_array_equal(first, _np(sample_factorization_order(4, T, [0, 1])))
    assert not np.array_equal(first, second)
    generator = keras.random.SeedGenerator(3)
    assert not np.array_equal(_np(sample_factorization_order(4, T, generator)),
                              _np(sample_factorization_order(4, T, generator)))


# ----------------------------------------------------------------------------------------------------------
# The layer


def test_two_stream_attention_equals_the_equations():
    content, query_stream, content_mask, query_mask, _, _ = _inputs()
    layer = _perturbed_layer()
    expected = np_two_stream(layer.get_weights(), content, query_stream, content_mask, query_mask)
    kwargs = {"content_attention_mask": content_mask, "query_attention_mask": query_mask}
    for got, want in zip(layer(content, query_stream, **kwargs), expected):
        np.testing.assert_allclose(_np(got), want, atol=1e-5)
    # The chunked route computes the same; the content stream alone (fine-tuning) is the same content output.
    chunked = _perturbed_layer(implementation="chunked")
    chunked.set_weights(layer.get_weights())
    for got, want in zip(chunked(content, query_stream, **kwargs), expected):
        np.testing.assert_allclose(_np(got), want, atol=1e-5)
    alone = layer(content, content_attention_mask=content_mask)
    np.testing.assert_allclose(_np(alone), expected[0], atol=1e-5)
    # With a Transformer-XL memory: keys and values over [memory; h], the memory visible to every query.
    memory = np.random.default_rng(2).normal(size=(B, 3, D)).astype("float32")
    keys = np.concatenate([memory, content], 1)
    with_memory = [np.concatenate([np.ones((B, T, 3), bool), m], -1) for m in (content_mask, query_mask)]
    expected = (np_attention(content, keys, with_memory[0], layer.get_weights()),
                np_attention(query_stream, keys, with_memory[1], layer.get_weights()))
    for got, want in zip(layer(content, query_stream, memory=memory, **kwargs), expected):
        np.testing.assert_allclose(_np(got), want, atol=1e-5)

    with pytest.raises(ValueError, match="`query_attention_mask` is required"):
        layer(content, query_stream)
    with pytest.raises(ValueError, match="`query_stream` must have the shape of `content`"):
        layer(content, query_stream[:, :3], query_attention_mask=query_mask[:, :3])


def test_query_stream_never_sees_its_own_token():
    """Two stacked layers: g at position z_t does not change when x_{z_t} does (the objective is well-posed),
    while h at z_t and g at later positions of the order do."""
    content, query_stream, content_mask, query_mask, order, _ = _inputs(padding=False)
    first, second = _perturbed_layer(), _perturbed_layer()
    kwargs = {"content_attention_mask": content_mask, "query_attention_mask": query_mask}

    def stack(x):
        h, g = first(x, query_stream, **kwargs)
        return second(h, g, **kwargs)

    h, g = (_np(o) for o in stack(content))
    for b in range(B):
        position, later = order[b, 2], order[b, 3:]
        perturbed = content.copy()
        perturbed[b, position] += 5.0
        h2, g2 = (_np(o) for o in stack(perturbed))
        np.testing.assert_allclose(g2[b, position], g[b, position], atol=1e-5)
        assert np.abs(h2[b, position] - h[b, position]).max() > 1e-2  # the content stream sees its token
        assert np.abs(g2[b, later] - g[b, later]).max(-1).min() > 1e-3  # later positions of the order see it
        np.testing.assert_allclose(g2[b, order[b, :2]], g[b, order[b, :2]], atol=1e-5)  # earlier ones do not


def test_two_stream_attention_harness():
    content, query_stream, content_mask, query_mask, _, _ = _inputs()
    run_layer_test(
        TwoStreamAttention,
        {"num_heads": N, "key_dim": H, "use_bias": False, "position_bias": TransformerXLRelativeBias(num_heads=N)},
        {"content": content, "query_stream": query_stream, "content_attention_mask": content_mask,
         "query_attention_mask": query_mask},
        expected_output_shape=((B, T, D), (B, T, D)),
        expected_num_trainable_weights=7,  # W^Q, W^K, W^V, W^O; the hook's W_{k,R}, u, v
    )
    # The content stream alone (fine-tuning) is one output, which a functional model can hold.
    assert isinstance(TwoStreamAttention(num_heads=N, key_dim=H)(keras.Input((T, D))), keras.KerasTensor)
