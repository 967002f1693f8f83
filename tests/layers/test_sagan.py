"""SelfAttention2D, the SAGAN self-attention block (Zhang et al. 2019, section 3): harness, NumPy reference from the
paper's equations (both value forms), identity at gamma = 0, training inside a small CNN, bad input, unknown
spatial sizes."""

import keras
import numpy as np
import pytest
from harness import np_softmax, run_layer_test
from keras import ops

from attnlayers.sagan import SelfAttention2D

B, H, W, C = 2, 4, 5, 16
N = H * W


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.fixture
def x(rng):
    return rng.normal(size=(B, H, W, C)).astype("float32")


def np_sagan(x, gamma, f_kernel, g_kernel, g_bias, h_kernel, h_bias, v_kernel=None, v_bias=None):
    """The paper's equations over the N = H * W positions, row-major (float64)."""
    x = np.asarray(x, "float64").reshape(x.shape[0], -1, x.shape[-1])  # (B, N, C)
    f = x @ f_kernel  # f(x_i) = W_f x_i
    g = x @ g_kernel + g_bias  # g(x_j) = W_g x_j
    h = x @ h_kernel + h_bias  # h(x_i) = W_h x_i
    s = np.einsum("bic,bjc->bij", f, g)  # s_ij = f(x_i)^T g(x_j)
    beta = np_softmax(np.swapaxes(s, 1, 2), axis=-1)  # beta[b, j, i] = exp(s_ij) / sum_i exp(s_ij)
    o = beta @ h  # sum_i beta_{j,i} h(x_i)
    if v_kernel is not None:
        o = o @ v_kernel + v_bias  # o_j = v(sum_i beta_{j,i} h(x_i))
    return gamma * o + x, beta  # y = gamma * o + x


@pytest.mark.parametrize(
    "init_kwargs, call_kwargs, expected_shape, num_weights",
    [
        # gamma = 1: with the default gamma = 0 no gradient reaches f, g, h (see test_gamma_zero_is_identity).
        ({"gamma_initializer": "ones"}, {}, (B, H, W, C), 6),
        ({"reduction": 4, "value_dim": 12, "kernel_initializer": "he_normal", "gamma_initializer": "ones"},
         {"return_attention_scores": True}, ((B, H, W, C), (B, N, N)), 8),
    ],
    ids=["default", "value_dim"],
)
def test_harness(init_kwargs, call_kwargs, expected_shape, num_weights, x):
    run_layer_test(SelfAttention2D, init_kwargs, x, call_kwargs=call_kwargs, expected_output_shape=expected_shape,
                   expected_num_trainable_weights=num_weights)


@pytest.mark.parametrize("value_dim", [None, 12])
def test_equals_numpy_reference(value_dim, x, rng):
    layer = SelfAttention2D(reduction=4, value_dim=value_dim)
    layer.build(x.shape)
    layer.gamma.assign(0.7)
    params = {}
    for name, dense in (("f", layer.f_projection), ("g", layer.g_projection), ("h", layer.h_projection),
                        ("v", layer.v_projection)):
        if dense is None:
            continue
        params[f"{name}_kernel"] = rng.normal(size=dense.kernel.shape).astype("float32") * 0.5
        dense.kernel.assign(params[f"{name}_kernel"])
        if dense.bias is not None:
            params[f"{name}_bias"] = rng.normal(size=dense.bias.shape).astype("float32")
            dense.bias.assign(params[f"{name}_bias"])
    assert layer.f_projection.bias is None  # a bias on f would cancel in the softmax over i
    y, beta = layer(x, return_attention_scores=True)
    y_ref, beta_ref = np_sagan(x, 0.7, **params)
    assert tuple(y.shape) == (B, H, W, C) and tuple(beta.shape) == (B, N, N)
    np.testing.assert_allclose(_np(y), y_ref.reshape(B, H, W, C), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(beta), beta_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(beta).sum(-1), 1.0, atol=1e-5)  # each output position's weights sum to 1
    np.testing.assert_allclose(_np(layer(x)), _np(y), atol=0)  # the same output without the scores


@pytest.mark.parametrize("value_dim", [None, 12])
def test_gamma_zero_is_identity(value_dim, x):
    layer = SelfAttention2D(value_dim=value_dim)
    y = layer(x)
    assert float(_np(layer.gamma)) == 0.0
    np.testing.assert_array_equal(_np(y), x.astype("float64"))
    config = layer.get_config()
    assert {k: config[k] for k in ("reduction", "value_dim", "use_bias")} == {
        "reduction": 8, "value_dim": value_dim, "use_bias": True}
    assert keras.initializers.get(config["gamma_initializer"]).__class__ is keras.initializers.Zeros
    assert keras.initializers.get(config["kernel_initializer"]).__class__ is keras.initializers.GlorotUniform


def test_mixed_float16_large_activations(x):
    """The logits are formed in float32: activations of a few hundred give |s_ij| beyond float16's 65504, which
    would turn the softmax into NaN; outputs keep the compute dtype, the variables stay float32."""
    layer = SelfAttention2D(gamma_initializer="ones", dtype="mixed_float16")
    y, beta = layer(300.0 * x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(y.dtype) == keras.backend.standardize_dtype(beta.dtype) == "float16"
    assert keras.backend.standardize_dtype(layer.gamma.dtype) == "float32"
    assert np.all(np.isfinite(_np(y))) and np.all(np.isfinite(_np(beta)))
    np.testing.assert_allclose(_np(beta).sum(-1), 1.0, atol=1e-2)


def test_trains_in_a_cnn():
    """Two markers of two kinds (one-hot channels), one in the two leftmost columns and one in the two rightmost
    of an 8 x 8 image; the label is "same kind". A 3 x 3 convolution sees one marker per position, so after
    global average pooling the features are phi(a) + phi(b) and a linear read-out cannot separate same from
    different (score(P,P) + score(Q,Q) = score(P,Q) + score(Q,P)): at most 75 % accuracy. Only attention between
    the two distant positions (gamma != 0, gradients through f, g, h) gets above that."""
    rng = np.random.default_rng(0)
    n, size = 512, 8
    a, b = rng.integers(0, 2, n), rng.integers(0, 2, n)
    images = np.zeros((n, size, size, 2), "float32")
    images[np.arange(n), rng.integers(0, size, n), rng.integers(0, 2, n), a] = 1.0
    images[np.arange(n), rng.integers(0, size, n), rng.integers(size - 2, size, n), b] = 1.0
    labels = (a == b).astype("float32")[:, None]
    attention = SelfAttention2D(reduction=4)
    model = keras.Sequential([
        keras.Input((size, size, 2)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        attention,
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(keras.optimizers.Adam(1e-2), "binary_crossentropy", metrics=["accuracy"])
    f_kernel = _np(attention.f_projection.kernel)
    history = model.fit(images, labels, batch_size=32, epochs=30, verbose=0).history
    _, accuracy = model.evaluate(images, labels, verbose=0)
    assert history["loss"][-1] < 0.5 * history["loss"][0], history["loss"]
    assert abs(float(_np(attention.gamma))) > 0.05
    assert not np.allclose(_np(attention.f_projection.kernel), f_kernel)  # the logits were trained too
    assert accuracy >= 0.85, accuracy  # > 75 %: the layer related the two markers


def test_bad_input(x):
    for kwargs, pattern in (({"reduction": 0}, "reduction=0"), ({"reduction": 2.0}, "reduction"),
                            ({"value_dim": 0}, "value_dim=0")):
        with pytest.raises(ValueError, match=pattern):
            SelfAttention2D(**kwargs)
    with pytest.raises(ValueError, match=r"reduction.*C=4.*reduction=8"):
        SelfAttention2D()(np.zeros((B, H, W, 4), "float32"))  # 4 // 8 = 0 channels for f and g
    with pytest.raises(ValueError, match=r"inputs.*\(4, 5, 16\)"):
        SelfAttention2D()(x[0])  # rank 3
    with pytest.raises(ValueError, match=r"channels.*\(None, 4, 5, None\)"):
        SelfAttention2D().build((None, H, W, None))
    layer = SelfAttention2D()
    layer(x)
    with pytest.raises(ValueError, match=r"inputs.*\(2, 4, 5, 24\)"):
        layer(np.zeros((B, H, W, 24), "float32"))


def test_unknown_spatial_size(rng):
    layer = SelfAttention2D(value_dim=8, gamma_initializer="ones")
    inputs = keras.Input((None, None, C))
    outputs, scores = layer(inputs, return_attention_scores=True)
    assert tuple(outputs.shape) == (None, None, None, C) and tuple(scores.shape) == (None, None, None)
    model = keras.Model(inputs, [outputs, scores])
    for height, width in ((4, 5), (3, 6)):
        image = rng.normal(size=(B, height, width, C)).astype("float32")
        y, beta = model(image)
        assert tuple(y.shape) == (B, height, width, C) and tuple(beta.shape) == (B, height * width, height * width)
        y_eager, beta_eager = layer(image, return_attention_scores=True)
        np.testing.assert_allclose(_np(y), _np(y_eager), atol=1e-6)
        np.testing.assert_allclose(_np(beta), _np(beta_eager), atol=1e-6)
