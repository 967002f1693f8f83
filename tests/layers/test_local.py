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


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("position", ["paper", "diagonal"])
def test_local_p_numpy_reference_with_padding(position, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1] * 4 + [0] * 3, [1] * 7], bool)
    layer = al.LocalAttention(window=2, mode="local-p", score="dot", position=position)
    weights = _np(layer(q, v, value_mask=value_mask, return_attention_scores=True)[1])
    wp, vp = _np(layer.position_dense.kernel), _np(layer.position_v)
    last = value_mask.sum(-1)[:, None, None] - 1.0
    gate = (np.tanh(q @ wp) @ vp)[..., None]
    if position == "paper":
        p = last * _sigmoid(gate)  # eq. 9
    else:  # L sigmoid(g / sqrt(u) + logit((t + 1/2) / (L + 1)))
        prior = np.clip((np.arange(T)[None, :, None] + 0.5) / (last + 1), 1e-3, 1 - 1e-3)
        p = last * _sigmoid(gate / np.sqrt(D) + np.log(prior / (1 - prior)))
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


def _learn_shifted_copy(position, shift, epochs):
    """Target word t is source word min(t + shift, 7) of 8: local-p must learn p_t ~ t + shift. Returns the
    held-out accuracy, the share of (t + shift <= 7) words whose largest weight is on t + shift, and p_t."""
    rng = np.random.default_rng(0)
    n, length, vocab = 3000, 8, 12
    src = rng.integers(1, vocab, size=(n, length))
    aligned = np.minimum(np.arange(length) + shift, length - 1)
    tgt = src[:, aligned]

    source = keras.Input((length,), dtype="int32")
    positions = ops.arange(length)
    keys = keras.layers.Embedding(vocab, 32)(source) + keras.layers.Embedding(length, 32)(positions)
    queries = keras.layers.Embedding(length, 32)(ops.zeros_like(source) + positions)
    local = al.LocalAttention(window=4, mode="local-p", score="general", position=position)
    context, weights = local(queries, keys, return_attention_scores=True)
    logits = keras.layers.Dense(vocab)(keras.layers.Concatenate()([context, queries]))
    model = keras.Model(source, logits)
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(src[:2500], tgt[:2500], epochs=epochs, batch_size=64, verbose=0)
    _, accuracy = model.evaluate(src[2500:], tgt[2500:], verbose=0)
    unclipped = np.arange(length) + shift < length
    peaks = keras.Model(source, weights).predict(src[2500:], verbose=0).argmax(-1)[:, unclipped]
    query_states = keras.Model(source, queries).predict(src[:1], verbose=0)
    p = _np(local.aligned_positions(ops.convert_to_tensor(query_states), None, length))[0, :, 0]
    return accuracy, np.mean(peaks == aligned[unclipped]), p


def test_local_p_learns_monotone_alignment_on_copy_task():
    """Copy task with eq. 9 as published, which starts at p_t ~ 3.5 for every t: window=4 on length 8 puts
    every source position inside every window, so the Gaussian term gives p_t a gradient towards t."""
    accuracy, aligned, p = _learn_shifted_copy("paper", shift=0, epochs=10)
    assert accuracy >= 0.95 and aligned >= 0.95, (accuracy, aligned)
    assert np.all(np.diff(p) > 0), p  # monotone
    assert np.max(np.abs(p - np.arange(8))) <= 1.0, p


def test_local_p_diagonal_learns_an_offset_from_the_diagonal():
    """The diagonal p_t starts at ~t; here target t reads source t + 2, so its gate must move p_t by 2
    (clipped at the last position), through the 1/sqrt(u) scaling."""
    accuracy, aligned, p = _learn_shifted_copy("diagonal", shift=2, epochs=10)
    assert accuracy >= 0.95 and aligned >= 0.95, (accuracy, aligned)
    expected = np.minimum(np.arange(8) + 2, 7)
    assert np.max(np.abs(p - expected)) <= 1.0, p
    assert np.max(np.abs(p[:6] - np.arange(6))) > 1.5, p  # it left the starting diagonal


def test_local_p_diagonal_starts_on_the_diagonal(rng):
    """With a zero gate, p_t = L (t + 1/2) / (L + 1): within 1/2 of t, monotone, clipped at L past the end;
    ``start_index`` shifts t."""
    q = rng.normal(size=(B, 6, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1] * 4 + [0] * 3, [1] * 7], bool)
    layer = al.LocalAttention(window=2, mode="local-p")
    layer(q, v, value_mask=value_mask)
    layer.position_v.assign(np.zeros(D, "float32"))
    for start in (0, 3):
        p = _np(layer.aligned_positions(ops.convert_to_tensor(q), ops.convert_to_tensor(value_mask), S, start))
        t = np.arange(start, start + 6)
        last = np.array([3.0, 6.0])[:, None]
        expected = last * np.clip((t + 0.5) / (last + 1), 1e-3, 1 - 1e-3)
        np.testing.assert_allclose(p[..., 0], expected, atol=1e-4)
        assert np.all(np.abs(p[..., 0] - np.minimum(t, last)) <= 0.5 + 1e-6)


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


@pytest.mark.parametrize("position", ["paper", "diagonal"])
def test_local_p_attend_step_equals_call(position, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    value_mask = np.array([[1] * 4 + [0] * 3, [1] * 7], bool)
    layer = al.LocalAttention(window=2, mode="local-p", position=position)
    context, weights = layer(q, v, value_mask=value_mask, return_attention_scores=True)
    memory = layer.prepare_memory(v, value_mask=value_mask)
    for t in range(T):
        c, w = layer.attend_step(q[:, t], memory, index=t)  # the diagonal's t; eq. 9 ignores it
        np.testing.assert_allclose(_np(w), _np(weights)[:, t], atol=1e-6)
        np.testing.assert_allclose(_np(c), _np(context)[:, t], atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# implementation="windowed" (default, O(T (2D + 1))) against "masked" (all (t, s) pairs scored, then masked)

BACKEND = keras.backend.backend()
SCORES = ["dot", "scaled_dot", "general", "additive", "location", "cosine", "mlp"]
TW, SW = 7, 9  # T > S - D: local-m windows clip at both ends; padded batch 0 leaves the last windows empty
PADDING = np.array([[1] * 3 + [0] * 6, [1] * 9], bool)
QUERY_PADDING = np.array([[1] * 6 + [0], [1] * 7], bool)


def _score(name):
    return al.LocationScore(max_length=12) if name == "location" else name


def _pair(rng, mode="local-p", score="general", window=2, **kwargs):
    """A windowed layer and a masked copy with the same weights, built on (B, TW, D) x (B, SW, D).

    The same shapes and window in every test: op-by-op JAX compiles each primitive once per shape.
    """
    q = rng.normal(size=(B, TW, D)).astype("float32")
    v = rng.normal(size=(B, SW, D)).astype("float32")
    windowed = al.LocalAttention(window=window, mode=mode, score=_score(score), **kwargs)
    masked = al.LocalAttention(window=window, mode=mode, score=_score(score), implementation="masked", **kwargs)
    windowed(q, v), masked(q, v)
    masked.set_weights(windowed.get_weights())
    return windowed, masked, q, v


def _outputs_and_grads(layer, q, v, kwargs, jit=False):
    """(context, weights) and the gradients of a random projection of both w.r.t. query, value and every
    trainable weight; under ``jit`` compiled with XLA (tf.function(jit_compile=True) / jax.jit)."""
    rng = np.random.default_rng(1)
    r_context = rng.normal(size=(B, TW, D)).astype("float32")
    r_weights = rng.normal(size=(B, TW, SW)).astype("float32")
    call_kwargs = {**kwargs, "return_attention_scores": True}

    def loss(context, weights):
        context, weights = ops.cast(context, "float32"), ops.cast(weights, "float32")
        return ops.sum(context * r_context) + ops.sum(weights * r_weights)

    if BACKEND == "tensorflow":
        import tensorflow as tf

        def run(q, v):
            with tf.GradientTape() as tape:
                tape.watch([q, v])
                context, weights = layer(q, v, **call_kwargs)
                value = loss(context, weights)
            grads = tape.gradient(value, [q, v] + [w.value for w in layer.trainable_weights])
            return context, weights, [tf.convert_to_tensor(g) for g in grads]

        run = tf.function(run, jit_compile=True) if jit else run
        return run(tf.constant(q), tf.constant(v))
    import jax

    non_trainable = [w.value for w in layer.non_trainable_weights]

    def forward(args):
        trainable, q, v = args
        (context, weights), _ = layer.stateless_call(trainable, non_trainable, q, v, **call_kwargs)
        return loss(context, weights), (context, weights)

    run = jax.value_and_grad(forward, has_aux=True)
    run = jax.jit(run) if jit else run
    (_, (context, weights)), (g_trainable, g_q, g_v) = run(([w.value for w in layer.trainable_weights], q, v))
    return context, weights, [g_q, g_v] + list(g_trainable)


def _assert_same(layer_a, layer_b, q, v, atol=1e-6, jit_a=False, **kwargs):
    a = _outputs_and_grads(layer_a, q, v, kwargs, jit=jit_a)
    b = _outputs_and_grads(layer_b, q, v, kwargs)
    np.testing.assert_allclose(_np(a[0]), _np(b[0]), atol=atol, err_msg="context")
    np.testing.assert_allclose(_np(a[1]), _np(b[1]), atol=atol, err_msg="weights")
    assert len(a[2]) == len(b[2]) == 2 + len(layer_a.trainable_weights)
    names = ["query", "value"] + [w.path for w in layer_a.trainable_weights]
    for name, ga, gb in zip(names, a[2], b[2]):
        assert np.all(np.isfinite(_np(ga))), name
        np.testing.assert_allclose(_np(ga), _np(gb), atol=atol * 10, err_msg=f"gradient w.r.t. {name}")
    return a


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_windowed_equals_masked_with_padding(mode, score, rng):
    windowed, masked, q, v = _pair(rng, mode, score)
    context, weights, _ = _assert_same(windowed, masked, q, v, value_mask=PADDING, query_mask=QUERY_PADDING)
    weights = _np(weights)
    assert np.all(weights[0, :, 3:] == 0)  # never reaches padding
    assert np.all(weights[0, 6] == 0) and np.all(_np(context)[0, 6] == 0)  # padded query
    if mode == "local-m":  # p_t = t: windows [t - 2, t + 2] clipped at 0 and at S; t >= 5 sees only padding
        assert np.all(weights[1, 0, 3:] == 0) and np.all(weights[1, 6, :4] == 0)
        assert np.all(weights[0, 5:] == 0) and np.all(_np(context)[0, 5:] == 0)
    # Without the weights requested: the same context.
    np.testing.assert_allclose(_np(windowed(q, v, value_mask=PADDING, query_mask=QUERY_PADDING)), _np(context),
                               atol=1e-6)


@pytest.mark.parametrize(
    "mode, mask_shape",
    [("local-m", (B, TW, SW)), ("local-p", (B, TW, SW)), ("local-m", (1, TW, SW)), ("local-p", (B, 1, SW))],
)
def test_windowed_equals_masked_with_explicit_and_causal_masks(mode, mask_shape, rng):
    windowed, masked, q, v = _pair(rng, mode, "additive")
    attention_mask = rng.random(mask_shape) < 0.6
    attention_mask[..., 0, :] = False  # query 0 sees nothing
    _assert_same(windowed, masked, q, v, value_mask=PADDING[::-1], attention_mask=attention_mask,
                 use_causal_mask=True)


@pytest.mark.parametrize("start_index", [3, 8])  # 8: windows past the end of S
def test_windowed_equals_masked_local_m_start_index(start_index, rng):
    windowed, masked, q, v = _pair(rng, "local-m", "general")
    _assert_same(windowed, masked, q, v, start_index=start_index)
    step = windowed(q[:, 0], v, start_index=ops.convert_to_tensor(start_index), return_attention_scores=True)
    expected = masked(q[:, 0], v, start_index=start_index, return_attention_scores=True)
    for a, b in zip(step, expected):
        np.testing.assert_allclose(_np(a), _np(b), atol=1e-6)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_windowed_equals_masked_attend_step(mode, rng):
    windowed, masked, q, v = _pair(rng, mode, "general")
    memory_w = windowed.prepare_memory(v, value_mask=PADDING)
    memory_m = masked.prepare_memory(v, value_mask=PADDING)
    for t in range(TW):
        step_w = windowed.attend_step(q[:, t], memory_w, index=t)
        step_m = masked.attend_step(q[:, t], memory_m, index=t)
        assert tuple(step_w[1].shape) == (B, SW)
        for a, b in zip(step_w, step_m):
            np.testing.assert_allclose(_np(a), _np(b), atol=1e-6)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_windowed_equals_masked_under_jit(mode, rng):
    windowed, masked, q, v = _pair(rng, mode, "general")
    _assert_same(windowed, masked, q, v, jit_a=True, value_mask=PADDING, use_causal_mask=True)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_windowed_equals_masked_mixed_float16(mode, rng):
    keras.config.set_dtype_policy("mixed_float16")
    windowed, masked, q, v = _pair(rng, mode, "general")
    context, weights = windowed(q, v, value_mask=PADDING, return_attention_scores=True)
    assert context.dtype == weights.dtype == "float16"
    expected = masked(q, v, value_mask=PADDING, return_attention_scores=True)
    np.testing.assert_allclose(_np(context), _np(expected[0]), atol=2e-3)
    np.testing.assert_allclose(_np(weights), _np(expected[1]), atol=2e-3)


def test_windowed_dropout_drops_window_weights(rng):
    windowed, masked, q, v = _pair(rng, "local-p", "general", dropout=0.5, seed=3)
    kept = _np(masked(q, v, value_mask=PADDING, return_attention_scores=True, training=False)[1])
    context, weights = windowed(q, v, value_mask=PADDING, return_attention_scores=True, training=True)
    weights = _np(weights)
    dropped = (weights == 0) & (kept > 0)
    assert dropped.any() and (~dropped & (kept > 0)).any()
    np.testing.assert_allclose(weights[~dropped], 2.0 * kept[~dropped], atol=1e-6)  # 1 / (1 - rate)
    np.testing.assert_allclose(_np(context), weights @ v, atol=1e-5)  # the weights returned are applied


def test_implementation_config_round_trip():
    layer = al.LocalAttention(window=3, mode="local-m", implementation="masked")
    config = layer.get_config()
    assert config["implementation"] == "masked"
    assert al.LocalAttention.from_config(config).get_config() == config
    del config["implementation"]  # a config saved before the argument existed
    assert al.LocalAttention.from_config(config).implementation == "windowed"
    with pytest.raises(ValueError, match="implementation.*'sparse'.*windowed"):
        al.LocalAttention(window=3, implementation="sparse")


def test_position_config_round_trip():
    layer = al.LocalAttention(window=3)
    config = layer.get_config()
    assert config["position"] == "diagonal"
    assert al.LocalAttention.from_config(config).get_config() == config
    del config["position"]  # saved before the argument existed: eq. 9 as it was computed then
    assert al.LocalAttention.from_config(config).position == "paper"
    with pytest.raises(ValueError, match="position.*'middle'.*diagonal"):
        al.LocalAttention(window=3, position="middle")


def _intermediate_shapes(layer, q, v):
    """Static shapes of every intermediate of the layer's (jitted) call, without the weights returned."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        graph = tf.function(lambda q, v: layer(q, v, value_mask=PADDING, use_causal_mask=True)).get_concrete_function(
            tf.constant(q), tf.constant(v)).graph
        return [tuple(t.shape) for op in graph.get_operations() for t in op.outputs if t.shape.rank is not None]
    import jax

    non_trainable = [w.value for w in layer.non_trainable_weights]
    trainable = [w.value for w in layer.trainable_weights]
    jaxpr = jax.make_jaxpr(lambda q, v: layer.stateless_call(trainable, non_trainable, q, v, value_mask=PADDING,
                                                             use_causal_mask=True)[0])(q, v)
    shapes = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            shapes.extend(tuple(getattr(x.aval, "shape", ())) for x in eqn.outvars)
            for sub in jax.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return shapes


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_windowed_builds_no_target_by_source_tensor(mode, rng):
    windowed, masked, q, v = _pair(rng, mode, "general")

    def dense(shapes):  # any tensor with both a T axis and an S axis, or as many elements as (T, S)
        return [s for s in shapes if (TW in s and SW in s) or (np.prod(s, dtype=int) % (TW * SW) == 0 and s != ())]

    assert dense(_intermediate_shapes(masked, q, v))  # the check sees the masked path's (B, T, S) tensors
    assert not dense(_intermediate_shapes(windowed, q, v))


@pytest.mark.parametrize("mode", ["local-p", "local-m"])
def test_no_key_at_all_gives_zeros(mode):
    """S = 0: every query sees nothing and outputs 0 (the windowed gather failed with GatherV2 on an empty axis)."""
    query, value = np.ones((2, 3, 8), "float32"), np.zeros((2, 0, 8), "float32")
    context, weights = al.LocalAttention(window=2, mode=mode)(query, value, return_attention_scores=True)
    assert tuple(context.shape) == (2, 3, 8) and tuple(weights.shape) == (2, 3, 0)
    assert np.all(ops.convert_to_numpy(context) == 0)
