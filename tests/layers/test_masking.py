"""Mask algebra: shapes and values, the fully-masked rule in three precisions, validation errors."""

import keras
import numpy as np
import pytest
from harness import gradient, np_softmax
from keras import ops

from attnlayers import masking


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_large_negative_is_finite_and_large(dtype):
    value = masking.large_negative(dtype)
    assert np.isfinite(value) and value < -1e4
    assert np.isfinite(_np(ops.cast(ops.cast(ops.convert_to_tensor(value, "float32"), dtype), "float32")))
    assert np.isfinite(masking.large_negative("float64"))


def test_padding_to_attention_mask():
    q = np.array([[1, 1, 0]], bool)
    k = np.array([[1, 0, 1, 1]], bool)
    mask = _np(masking.padding_to_attention_mask(q, k))
    np.testing.assert_array_equal(np.broadcast_to(mask, (1, 3, 4)), q[:, :, None] & k[:, None, :])
    assert _np(masking.padding_to_attention_mask(None, k)).shape == (1, 1, 4)
    assert _np(masking.padding_to_attention_mask(q, None)).shape == (1, 3, 1)
    assert masking.padding_to_attention_mask(None, None) is None


def test_causal_mask_square_offset_and_tensor_offset():
    np.testing.assert_array_equal(_np(masking.causal_mask(3)), np.tril(np.ones((3, 3), bool)))
    # Two queries that are the last two of five positions (default offset S - T = 3).
    expected = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(_np(masking.causal_mask(2, 5)), expected)
    # One query at cache index 1 of a preallocated cache of 4: sees keys 0 and 1.
    np.testing.assert_array_equal(
        _np(masking.causal_mask(1, 4, offset=ops.convert_to_tensor(1))), [[True, True, False, False]]
    )


def test_sliding_window_mask():
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    np.testing.assert_array_equal(_np(masking.sliding_window_mask(5, window=1)), np.abs(i - j) <= 1)
    np.testing.assert_array_equal(
        _np(masking.sliding_window_mask(5, window=2, causal=True)), (i - j >= 0) & (i - j <= 2)
    )


@pytest.mark.parametrize("window", [0, -1, 1.5, True, None])
def test_window_must_be_positive_int(window):
    with pytest.raises(ValueError, match="window"):
        masking.sliding_window_mask(4, window=window)


def test_combine_masks():
    a = np.array([[True, False, True]])
    b = np.array([[True, True, False]])
    np.testing.assert_array_equal(_np(masking.combine_masks(a, None, b)), a & b)
    assert masking.combine_masks(None, None) is None


def test_check_mask_accepts_bool_and_int():
    assert _np(masking.check_mask(np.array([[1, 0]], "int32"), "m", (1, 2))).dtype == bool
    assert masking.check_mask(None, "m", (1, 2)) is None


@pytest.mark.parametrize(
    "mask, match",
    [
        (np.ones((2, 3), "float32"), "dtype float32"),
        (np.ones((2, 3, 1), bool), "rank 2"),
        (np.ones((2, 4), bool), r"\(2, 4\), which does not broadcast"),
    ],
)
def test_check_mask_rejects_bad_masks(mask, match):
    with pytest.raises(ValueError, match=match):
        masking.check_mask(mask, "value_mask", (2, 3))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_masked_softmax_numerics_and_fully_masked_rule(dtype):
    logits = np.array([[2.0, 1.0, 0.5], [3.0, -1.0, 0.0], [1.0, 1.0, 1.0]], "float32")
    mask = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 1]], bool)
    x = ops.cast(logits, dtype)
    weights = masking.masked_softmax(x, mask)
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    tol = 1e-6 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(_np(ops.cast(weights, "float32")), np_softmax(logits, mask), atol=tol)
    assert np.all(_np(ops.cast(weights, "float32"))[1] == 0.0)  # exactly zero, not an average of padding
    # Gradient through a fully masked row is finite (and zero).
    target = np.arange(9, dtype="float32").reshape(3, 3)
    grad = gradient(lambda z: masking.masked_softmax(z, mask) * ops.cast(target, z.dtype), x)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[1], 0.0)


def test_masked_softmax_large_logits_fp16_no_overflow():
    # Logits near the float16 max with a mask: a literal -1e9 fill would overflow to -inf / NaN.
    logits = ops.cast(np.array([[60000.0, -60000.0, 0.0]], "float32"), "float16")
    weights = _np(ops.cast(masking.masked_softmax(logits, np.array([[False, True, True]])), "float32"))
    assert np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights, [[0.0, 0.0, 1.0]], atol=1e-3)


def test_compute_attention_mask_combines_everything():
    q = np.array([[1, 1, 0]], bool)
    k = np.array([[1, 1, 1]], bool)
    explicit = np.array([[[1, 0, 1], [1, 1, 1], [1, 1, 1]]], bool)
    mask = _np(masking.compute_attention_mask(3, 3, q, k, explicit, use_causal_mask=True))
    expected = q[:, :, None] & k[:, None, :] & explicit & np.tril(np.ones((3, 3), bool))
    np.testing.assert_array_equal(np.broadcast_to(mask, (1, 3, 3)), expected)


def test_keras_mask_reads_the_implicit_mask():
    tokens = np.array([[3, 4, 0]])
    embedded = keras.layers.Embedding(5, 2, mask_zero=True)(tokens)
    np.testing.assert_array_equal(_np(masking.keras_mask(embedded)), tokens != 0)
    assert masking.keras_mask(ops.ones((1, 3))) is None
    assert masking.keras_mask(None) is None


def test_keras_mask_of_a_symbolic_tensor_is_a_model_output(tmp_path):
    """On a functional model's symbolic tensor the mask comes back as a symbolic tensor (through the public
    mask-reading layer, no private attribute) that computes the mask, also after a .keras round trip."""
    tokens = keras.Input((3,), dtype="int32")
    mask = masking.keras_mask(keras.layers.Embedding(5, 2, mask_zero=True)(tokens))
    assert masking.keras_mask(keras.Input((3, 2))) is None
    model = keras.Model(tokens, mask)
    x = np.array([[3, 0, 4], [0, 0, 1]])
    np.testing.assert_array_equal(_np(model(x)), x != 0)
    model.save(tmp_path / "mask.keras")
    np.testing.assert_array_equal(_np(keras.models.load_model(tmp_path / "mask.keras")(x)), x != 0)


def test_keras_mask_inside_a_compiled_training_step():
    """Traced values (a JAX jit, a TensorFlow graph) keep their implicit mask too: a layer reading it with
    keras_mask zeroes the padded steps, so their inputs get no gradient and the loss ignores them."""

    class ZeroPadded(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.supports_masking = True

        def call(self, x):
            mask = masking.keras_mask(x)  # None while the functional model is being built
            return x if mask is None else x * ops.cast(mask, x.dtype)[..., None]

    tokens = keras.Input((3,), dtype="int32")
    embedding = keras.layers.Embedding(5, 2, mask_zero=True, embeddings_initializer="ones")
    model = keras.Model(tokens, ZeroPadded()(embedding(tokens)))
    model.compile(keras.optimizers.SGD(1.0), "mse", jit_compile=True)
    x = np.array([[0, 1, 0], [0, 2, 0]])
    model.fit(x, np.zeros((2, 3, 2)), epochs=1, verbose=0)
    table = _np(embedding.embeddings)
    np.testing.assert_array_equal(table[0], 1.0)  # padding rows got no gradient
    assert np.all(table[1] != 1.0)
