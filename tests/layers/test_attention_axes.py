"""Attention over any axes (``attention_axes``), against keras' MultiHeadAttention with the same weights: 2-D attention
over images, one axis of a rank-4 input beside a free axis (causal), two axes of a rank-5 input, cross-attention with
other lengths; outputs and scores to 1e-6, the same training under ``fit``, and the refusals of what has no meaning
over several axes. (The SavedModel: tests/layers/test_export.py.)"""

import keras
import numpy as np
import pytest
from keras import ops

import attnlayers

CASES = {
    # name: (query shape, value shape, attention_axes, attention mask shape or None, use_causal_mask)
    "images_2d": ((2, 3, 4, 8), (2, 3, 4, 8), (1, 2), (2, 3, 4, 3, 4), False),
    "one_axis_beside_a_free_axis_causal": ((2, 5, 3, 8), (2, 5, 3, 8), (1,), None, True),
    "rank5_two_axes_broadcast_mask": ((2, 2, 3, 4, 8), (2, 2, 3, 4, 8), (-3, -2), (3, 4, 3, 4), False),
    "cross_attention_other_lengths": ((2, 3, 4, 8), (2, 2, 5, 8), (1, 2), None, False),
}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _pair(**kwargs):
    return attnlayers.MultiHeadAttention(**kwargs), keras.layers.MultiHeadAttention(**kwargs)


@pytest.mark.parametrize("case", CASES)
def test_equals_keras_with_copied_weights(case):
    query_shape, value_shape, axes, mask_shape, causal = CASES[case]
    rng = np.random.default_rng(0)
    query = rng.normal(size=query_shape).astype("float32")
    value = rng.normal(size=value_shape).astype("float32")
    mask = None
    if mask_shape is not None:
        mask = rng.random(mask_shape) < 0.6
        mask[..., 0, 0] = True  # every query sees a key (keras averages the values of one that sees none; we give 0)
    ours, theirs = _pair(num_heads=2, key_dim=4, attention_axes=axes, use_gate=True, bias_initializer="random_normal")
    theirs_out, theirs_scores = theirs(query, value, attention_mask=mask, use_causal_mask=causal,
                                       return_attention_scores=True)
    ours(query, value)
    ours.set_weights(theirs.get_weights())
    out, scores = ours(query, value, attention_mask=mask, use_causal_mask=causal, return_attention_scores=True)
    assert out.shape == theirs_out.shape and scores.shape == theirs_scores.shape
    np.testing.assert_allclose(_np(out), _np(theirs_out), atol=1e-6)
    np.testing.assert_allclose(_np(scores), _np(theirs_scores), atol=1e-6)


def test_trains_as_keras_under_fit():
    """The same model with either layer, the same weights and data: the same losses, weights and outputs after fit
    (float32, to 1e-6)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 3, 4, 8)).astype("float32")
    y = rng.normal(size=(8, 1)).astype("float32")

    def model(layer_class):
        inputs = keras.Input((3, 4, 8))
        attended = layer_class(num_heads=2, key_dim=4, attention_axes=(1, 2))(inputs, inputs)
        outputs = keras.layers.Dense(1)(keras.layers.Flatten()(attended))
        built = keras.Model(inputs, outputs)
        built.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        return built

    theirs, ours = model(keras.layers.MultiHeadAttention), model(attnlayers.MultiHeadAttention)
    ours.set_weights(theirs.get_weights())
    histories = [m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"] for m in (theirs, ours)]
    np.testing.assert_allclose(histories[1], histories[0], rtol=1e-6)  # measured 1.3e-7 (TensorFlow)
    assert histories[0][-1] < histories[0][0]  # it trained
    for got, expected in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_allclose(got, expected, atol=1e-6)  # measured 6e-8
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0), atol=1e-6)


def test_refusals_over_several_axes():
    x = np.zeros((2, 3, 4, 8), "float32")
    layer = attnlayers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 2))
    layer(x, x)
    for call, match in [
        (lambda: layer(x, x, use_causal_mask=True), "`use_causal_mask` order the positions along one axis"),
        (lambda: layer(x, x, query_mask=np.ones((2, 3), bool)), "not `query_mask`"),
        (lambda: layer(x, x[:, :2], x), "except the last one, must be equal"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(ValueError, match="attention_axes"):
        attnlayers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="attention_axes"):
        attnlayers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 1))(x, x)


def test_the_chunked_route_attends_over_axes_as_the_exact_one():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    mask = rng.random((2, 3, 4, 3, 4)) < 0.6
    mask[..., 0, 0] = True
    exact = attnlayers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 2), implementation="exact")
    chunked = attnlayers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 2), implementation="chunked")
    exact(x, x)
    chunked(x, x)
    chunked.set_weights(exact.get_weights())
    np.testing.assert_allclose(_np(chunked(x, x, attention_mask=mask)), _np(exact(x, x, attention_mask=mask)),
                               atol=1e-5)
    assert chunked.last_attention.route == "chunked"
