"""LocalAttention (Luong et al. 2015 local-m / local-p): harness, NumPy reference, window edges, learning."""

import keras
import numpy as np
import pytest
from harness import np_softmax, run_layer_test
from keras import ops

import attnlayers as al

B, T, S, D = 2, 4, 7, 6


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_local_attention_harness(mode, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        al.LocalAttention,
        {"window": 2, "mode": mode, "score": "general"},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, T, S)),
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
    )


def test_local_m_numpy_reference_and_window_edges(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    context, weights = al.LocalAttention(window=1, mode="local-m", score="dot")(q, v, return_attention_scores=True)
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]
    window = np.abs(s - t) <= 1  # p_t = t; at t = 0 the window is clipped to [0, 1]
    expected = np_softmax(np.einsum("btd,bsd->bts", q, v), window[None])
    np.testing.assert_allclose(_np(weights), expected, atol=1e-5)
    np.testing.assert_allclose(_np(context), expected @ v, atol=1e-5)
    assert np.all(_np(weights)[:, 0, 2:] == 0)


def test_local_p_numpy_reference_with_padding(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1] * 4 + [0] * 3, [1] * 7], bool)
    layer = al.LocalAttention(window=2, mode="local-p", score="dot")
    weights = _np(layer(q, v, value_mask=value_mask, return_attention_scores=True)[1])
    wp, vp = _np(layer.position_dense.kernel), _np(layer.position_v)
    last = value_mask.sum(-1)[:, None, None] - 1.0
    p = last * (1 / (1 + np.exp(-(np.tanh(q @ wp) @ vp))))[..., None]  # eq. 9
    s = np.arange(S)[None, None, :]
    mask = (np.abs(s - p) <= 2) & value_mask[:, None, :]
    expected = np_softmax(np.einsum("btd,bsd->bts", q, v), mask) * np.exp(-((s - p) ** 2) / (2 * 1.0**2))
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    assert np.all(weights[0, :, 4:] == 0)  # never reaches padding
    assert np.all(p[0] <= 3) and np.all(p >= 0)


def test_local_m_single_step_uses_start_index(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.LocalAttention(window=1, mode="local-m", score="dot")
    full = _np(layer(q, v, return_attention_scores=True)[1])
    for t in range(T):
        step = _np(layer(q[:, t], v, start_index=t, return_attention_scores=True)[1])
        np.testing.assert_allclose(step, full[:, t], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"window": 0}, "window"), ({"window": 2, "mode": "local-x"}, "`mode`"), ({"window": 2, "units": -1}, "units")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        al.LocalAttention(**kwargs)


def test_local_p_learns_monotone_alignment_on_copy_task():
    """Copy task: target position t must read source position t, so local-p must learn p_t ~ t (eq. 9).

    window=4 on length 8: at initialisation (p_t ~ 3.5 for all t) every source position is inside every
    window, so the Gaussian term gives p_t a gradient towards the right position from the start.
    """
    rng = np.random.default_rng(0)
    n, length, vocab = 3000, 8, 12
    src = rng.integers(1, vocab, size=(n, length))

    source = keras.Input((length,), dtype="int32")
    positions = ops.arange(length)
    keys = keras.layers.Embedding(vocab, 32)(source) + keras.layers.Embedding(length, 32)(positions)
    queries = keras.layers.Embedding(length, 32)(ops.zeros_like(source) + positions)
    local = al.LocalAttention(window=4, mode="local-p", score="general")
    context, weights = local(queries, keys, return_attention_scores=True)
    logits = keras.layers.Dense(vocab)(keras.layers.Concatenate()([context, queries]))
    model = keras.Model(source, logits)
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(src[:2500], src[:2500], epochs=10, batch_size=64, verbose=0)
    _, accuracy = model.evaluate(src[2500:], src[2500:], verbose=0)
    alignment = keras.Model(source, weights).predict(src[2500:], verbose=0)
    assert accuracy >= 0.95, accuracy
    assert np.mean(alignment.argmax(-1) == np.arange(length)[None, :]) >= 0.95
    query_states = keras.Model(source, queries).predict(src[:1], verbose=0)
    p = _np(local.aligned_positions(ops.convert_to_tensor(query_states), None, length))[0, :, 0]
    assert np.all(np.diff(p) > 0), p  # monotone
    assert np.max(np.abs(p - np.arange(length))) <= 1.0, p


def test_local_m_attend_step_uses_index_as_p_t(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = al.LocalAttention(window=1, mode="local-m", score="general")
    full = _np(layer(q, v, return_attention_scores=True)[1])
    memory = layer.prepare_memory(v)
    for t in range(T):
        _, weights = layer.attend_step(q[:, t], memory, index=t)  # p_t = t
        np.testing.assert_allclose(_np(weights), full[:, t], atol=1e-6)
        assert np.all(_np(weights)[:, np.abs(np.arange(S) - t) > 1] == 0.0)


def test_local_p_attend_step_equals_call(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1] * 4 + [0] * 3, [1] * 7], bool)
    layer = al.LocalAttention(window=2, mode="local-p")
    context, weights = layer(q, v, value_mask=value_mask, return_attention_scores=True)
    memory = layer.prepare_memory(v, value_mask=value_mask)
    for t in range(T):
        c, w = layer.attend_step(q[:, t], memory)  # local-p ignores the index
        np.testing.assert_allclose(_np(w), _np(weights)[:, t], atol=1e-6)
        np.testing.assert_allclose(_np(c), _np(context)[:, t], atol=1e-5)
