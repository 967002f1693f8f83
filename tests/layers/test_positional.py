"""Positional layers: harness, NumPy references written from the papers' equations, start_index, bad input."""

import math

import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

from attnlayers import positional as P

B, T, S, D, N, H = 2, 4, 6, 6, 2, 4


# ----------------------------------------------------------------------------------------------------------
# NumPy references


def np_sinusoidal(length, dim, start=0, max_wavelength=10000.0):
    """PE(pos, 2i) = sin(pos / w^(2i/d)), PE(pos, 2i+1) = cos(pos / w^(2i/d)) (Vaswani et al. 3.5)."""
    pe = np.zeros((length, dim))
    for pos in range(start, start + length):
        for i in range(0, (dim + 1) // 2):
            angle = pos / max_wavelength ** (2 * i / dim)
            pe[pos - start, 2 * i] = math.sin(angle)
            if 2 * i + 1 < dim:
                pe[pos - start, 2 * i + 1] = math.cos(angle)
    return pe


def np_rotary(x, start=0, base=10000.0, interleaved=False, scaling=1.0):
    """Rotate feature pairs of x (B, T, [N,] H) by pos * theta_i, theta_i = base^(-2i/H) (RoFormer eq. 34)."""
    x = np.asarray(x, dtype="float64")
    out = np.empty_like(x)
    dim = x.shape[-1]
    for t in range(x.shape[1]):
        pos = (start + t) / scaling
        for i in range(dim // 2):
            a = pos * base ** (-2 * i / dim)
            rotation = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
            p, q = (2 * i, 2 * i + 1) if interleaved else (i, i + dim // 2)
            pair = np.stack([x[:, t, ..., p], x[:, t, ..., q]], -1)  # (..., 2)
            rotated = pair @ rotation.T
            out[:, t, ..., p], out[:, t, ..., q] = rotated[..., 0], rotated[..., 1]
    return out


def np_t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's _relative_position_bucket for one integer (memory position - context position)."""
    ret, n = 0, -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


# ----------------------------------------------------------------------------------------------------------
# Harness


def _qk(rng):
    return {
        "query": rng.normal(size=(B, T, N, H)).astype("float32"),
        "key": rng.normal(size=(B, S, N, H)).astype("float32"),
    }


@pytest.mark.parametrize(
    "layer_cls, init_kwargs, kind, expected_shape, num_weights",
    [
        (P.SinusoidalPositionEncoding, {}, "sequence", (B, T, D), 0),
        (P.PositionEmbedding, {"sequence_length": 8}, "sequence", (B, T, D), 1),
        (P.RotaryEmbedding, {}, "heads", (B, T, N, H), 0),
        (P.RelativePositionBias, {"num_heads": N, "num_buckets": 8, "max_distance": 16}, "qk", (1, N, T, S), 1),
        (P.ALiBi, {"num_heads": N}, "qk", (1, N, T, S), 0),
    ],
    ids=["sinusoidal", "learned", "rotary", "relative_bias", "alibi"],
)
def test_positional_harness(layer_cls, init_kwargs, kind, expected_shape, num_weights, rng):
    data = {
        "sequence": lambda: rng.normal(size=(B, T, D)).astype("float32"),
        "heads": lambda: rng.normal(size=(B, T, N, H)).astype("float32"),
        "qk": lambda: _qk(rng),
    }[kind]()
    run_layer_test(
        layer_cls,
        init_kwargs,
        data,
        expected_output_shape=expected_shape,
        expected_num_trainable_weights=num_weights,
    )


# ----------------------------------------------------------------------------------------------------------
# Sinusoidal


def test_sinusoidal_table_matches_equations():
    x = np.zeros((1, 50, 16), "float32")
    pe = _np(P.SinusoidalPositionEncoding()(x))[0]
    np.testing.assert_allclose(pe, np_sinusoidal(50, 16), atol=1e-5)
    assert pe.min() >= -1.0 and pe.max() <= 1.0
    # Exact interleaving: sin on even features, cos on odd ones, sharing the angle of the pair.
    np.testing.assert_allclose(pe[0, 0::2], 0.0, atol=1e-7)
    np.testing.assert_allclose(pe[0, 1::2], 1.0, atol=1e-7)
    np.testing.assert_allclose(pe[7, 0], math.sin(7), atol=1e-6)
    np.testing.assert_allclose(pe[7, 1], math.cos(7), atol=1e-6)
    angle = 3 / 10000 ** (2 / 16)
    np.testing.assert_allclose(pe[3, 2:4], [math.sin(angle), math.cos(angle)], atol=1e-6)
    # It returns the encoding (not input + encoding), broadcast over the batch.
    out = _np(P.SinusoidalPositionEncoding()(np.ones((3, 5, 16), "float32")))
    np.testing.assert_allclose(out, np.broadcast_to(np_sinusoidal(5, 16), (3, 5, 16)), atol=1e-5)


def test_sinusoidal_odd_dim_wavelength_and_start_index():
    x = np.zeros((2, 4, 7), "float32")
    layer = P.SinusoidalPositionEncoding(max_wavelength=100)
    np.testing.assert_allclose(_np(layer(x))[1], np_sinusoidal(4, 7, max_wavelength=100), atol=1e-5)
    for start in (5, ops.convert_to_tensor(5)):
        np.testing.assert_allclose(
            _np(layer(x, start_index=start))[0], np_sinusoidal(4, 7, start=5, max_wavelength=100), atol=1e-5
        )


# ----------------------------------------------------------------------------------------------------------
# Learned


def test_position_embedding_rows_and_start_index(rng):
    layer = P.PositionEmbedding(sequence_length=8)
    x = rng.normal(size=(2, 3, 5)).astype("float32")
    table = None
    for start in (0, 4, ops.convert_to_tensor(5)):
        out = _np(layer(x, start_index=start))
        table = _np(layer.embeddings)
        s = int(_np(start))
        np.testing.assert_allclose(out, np.broadcast_to(table[s : s + 3], (2, 3, 5)))
    assert table.shape == (8, 5)


# ----------------------------------------------------------------------------------------------------------
# Rotary


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_matches_equations(interleaved, rng):
    x = rng.normal(size=(2, 5, 3, 8)).astype("float32")
    layer = P.RotaryEmbedding(interleaved=interleaved, max_wavelength=500, scaling_factor=2.0)
    np.testing.assert_allclose(
        _np(layer(x)), np_rotary(x, interleaved=interleaved, base=500, scaling=2.0), atol=1e-5
    )
    for start in (7, ops.convert_to_tensor(7)):
        np.testing.assert_allclose(
            _np(layer(x, start_index=start)),
            np_rotary(x, start=7, interleaved=interleaved, base=500, scaling=2.0),
            atol=1e-5,
        )
    # Rank 3 input (B, T, H), and rotations preserve the norm.
    y = _np(layer(x[:, :, 0]))
    np.testing.assert_allclose(y, np_rotary(x[:, :, 0], interleaved=interleaved, base=500, scaling=2.0), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x[:, :, 0], axis=-1), rtol=1e-5)


def test_rotary_dot_products_depend_on_relative_position(rng):
    layer = P.RotaryEmbedding()
    q = rng.normal(size=(1, 1, 1, 8)).astype("float32")
    k = rng.normal(size=(1, 1, 1, 8)).astype("float32")
    dots = {}
    for m, n in [(3, 1), (10, 8), (2, 5), (12, 15)]:
        dots[(m, n)] = float(np.sum(_np(layer(q, start_index=m)) * _np(layer(k, start_index=n))))
    np.testing.assert_allclose(dots[(3, 1)], dots[(10, 8)], rtol=1e-4)
    np.testing.assert_allclose(dots[(2, 5)], dots[(12, 15)], rtol=1e-4)
    assert abs(dots[(3, 1)] - dots[(2, 5)]) > 1e-3


# ----------------------------------------------------------------------------------------------------------
# Relative position bias (T5)


def test_t5_buckets_known_values():
    bucket = lambda r, **kw: int(_np(P.relative_position_bucket(ops.convert_to_tensor(r), **kw)))  # noqa: E731
    # Bidirectional 32 / 128: keys before the query in buckets 0..15, after it in 16..31.
    assert [bucket(r) for r in (0, -1, 1, -7, 7, -200, 200)] == [0, 1, 17, 7, 23, 15, 31]
    # Causal: later keys share bucket 0; log-spaced from distance 16 on.
    assert [bucket(r, bidirectional=False) for r in (5, 0, -5, -15, -20, -1000)] == [0, 0, 5, 15, 17, 31]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_position_bias_matches_t5(bidirectional, rng):
    layer = P.RelativePositionBias(num_heads=3, num_buckets=8, max_distance=20, bidirectional=bidirectional)
    q, k = np.zeros((1, 5, 3, 2), "float32"), np.zeros((1, 12, 3, 2), "float32")
    for start in (0, 6, ops.convert_to_tensor(6)):
        bias = _np(layer(q, k, start_index=start))
        table = _np(layer.embeddings)
        s = int(_np(start))
        buckets = np.array(
            [[np_t5_bucket(j - (s + i), bidirectional, 8, 20) for j in range(12)] for i in range(5)]
        )
        assert bias.shape == (1, 3, 5, 12)
        np.testing.assert_allclose(bias[0], np.transpose(table[buckets], (2, 0, 1)), atol=0)


# ----------------------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_press_et_al():
    np.testing.assert_allclose(P.alibi_slopes(8), [2.0**-k for k in range(1, 9)])
    np.testing.assert_allclose(P.alibi_slopes(4), [2.0**-k for k in (2, 4, 6, 8)])
    # Not a power of two: the 4-head slopes, then every other slope of 8 heads.
    np.testing.assert_allclose(P.alibi_slopes(6), [2.0**-k for k in (2, 4, 6, 8, 1, 3)])


def test_alibi_bias_matches_equation():
    layer = P.ALiBi(num_heads=4)
    q, k = np.zeros((2, 3, 4, 2), "float32"), np.zeros((2, 7, 4, 2), "float32")
    slopes = np.array([2.0**-k for k in (2, 4, 6, 8)])
    for start in (0, 4, ops.convert_to_tensor(4)):
        s = int(_np(start))
        i, j = np.arange(3)[:, None] + s, np.arange(7)[None]
        expected = -slopes[:, None, None] * np.abs(i - j)
        np.testing.assert_allclose(_np(layer(q, k, start_index=start))[0], expected, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# keras-hub conventions and bad input


def test_matches_keras_hub(rng):
    import keras_hub

    x = rng.normal(size=(2, 9, 12)).astype("float32")
    np.testing.assert_allclose(
        _np(P.SinusoidalPositionEncoding()(x, start_index=3)),
        _np(keras_hub.layers.SinePositionEncoding()(x, start_index=3)),
        atol=1e-5,
    )
    heads = rng.normal(size=(2, 6, 2, 8)).astype("float32")
    np.testing.assert_allclose(
        _np(P.RotaryEmbedding()(heads, start_index=4)),
        _np(keras_hub.layers.RotaryEmbedding()(heads, start_index=4)),
        atol=1e-5,
    )
    # ALiBi: under a causal mask, -m (t - s) and keras-hub's m (s - (S - 1)) differ by a per-row constant.
    logits = rng.normal(size=(1, 4, 6, 6)).astype("float32")
    causal = np.tril(np.ones((6, 6), bool))
    positions = np.zeros((1, 6, 4, 2), "float32")  # only the length is read
    ours = logits + _np(P.ALiBi(num_heads=4)(positions, positions))
    theirs = _np(keras_hub.layers.AlibiBias()(logits))

    def softmax(x):
        x = np.where(causal, x, -np.inf)
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    np.testing.assert_allclose(softmax(ours), softmax(theirs), atol=1e-6)


def test_errors():
    for make, match in [
        (lambda: P.SinusoidalPositionEncoding(max_wavelength=0), "max_wavelength"),
        (lambda: P.PositionEmbedding(sequence_length=0), "sequence_length"),
        (lambda: P.RotaryEmbedding(max_wavelength=-1), "max_wavelength"),
        (lambda: P.RelativePositionBias(num_heads=0), "num_heads"),
        (lambda: P.RelativePositionBias(num_heads=2, num_buckets=32, max_distance=4), "max_distance"),
        (lambda: P.ALiBi(num_heads=-1), "num_heads"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()
    embedding = P.PositionEmbedding(sequence_length=4)
    rotary = P.RotaryEmbedding()
    for call, match in [
        (lambda: embedding(np.zeros((1, 5, 2), "float32")), r"start_index \+ length <= 4"),
        (lambda: embedding(np.zeros((1, 3, 2), "float32"), start_index=2), r"start_index=2"),
        (lambda: embedding(np.zeros((1, 3, 2), "float32"), start_index=-1), "start_index"),
        (lambda: rotary(np.zeros((1, 2, 2, 5), "float32")), "even"),
        (lambda: rotary(np.zeros((1, 2, 2, 4), "float32"), start_index=np.zeros((2,), "int32")), "start_index"),
        (lambda: rotary(np.zeros((2, 4), "float32")), "inputs"),
        (lambda: P.ALiBi(2)(np.zeros((2, 4), "float32"), np.zeros((2, 4, 1), "float32")), "query"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_missing_inputs_and_changed_feature_size():
    x = np.zeros((B, T, D), "float32")
    for call, match in [
        (lambda: P.SinusoidalPositionEncoding()(None), "`inputs` is required"),
        (lambda: P.PositionEmbedding(sequence_length=8)(None), "`inputs` is required"),
        (lambda: P.RotaryEmbedding()(None), "`inputs` is required"),
        (lambda: P.ALiBi(N)(None, x), "`query` is required"),
        (lambda: P.RelativePositionBias(N)(x, None), "`key` is required"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    embedding = P.PositionEmbedding(sequence_length=8)
    embedding(x)
    with pytest.raises(ValueError, match=rf"`inputs` must have last axis {D} .*received shape \(2, 4, 3\)"):
        embedding(x[..., :3])
