"""BahdanauDecoder and LuongDecoder: harness, teacher forcing = step by step, NumPy steps from the equations,
decoding cache, masks, bad input, and a small reversal task that must learn the alignment."""

import os
import warnings
import tempfile

import keras
import numpy as np
import pytest
from harness import BACKEND, np_softmax, run_layer_test
from keras import ops

import attnlayers as al
from attnlayers.recurrent import BahdanauDecoder, LuongDecoder

B, T, S, E, D, U = 2, 3, 5, 4, 6, 8
MEMORY_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


def _inputs(rng):
    return rng.normal(size=(B, T, E)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")


# name -> (class, constructor kwargs factory, output dim)
CONFIGS = {
    "bahdanau-gru-additive": (BahdanauDecoder, lambda: {"units": U}, U + D),
    "bahdanau-lstm-general-dropout": (
        BahdanauDecoder,
        lambda: {
            "cell": keras.layers.LSTMCell(U, dropout=0.2, recurrent_dropout=0.2),
            "attention": al.Attention(score="general", dropout=0.2),
        },
        U + D,
    ),
    "luong-lstm-general-feeding": (LuongDecoder, lambda: {"units": U}, U),
    "luong-gru-local-p": (
        LuongDecoder,
        lambda: {"units": U, "cell": "gru", "input_feeding": False, "attention": al.LocalAttention(window=1)},
        U,
    ),
    "luong-stacked-local-m-dot": (
        LuongDecoder,
        lambda: {
            "cell": keras.layers.StackedRNNCells([keras.layers.GRUCell(D), keras.layers.LSTMCell(D)]),
            "attention": al.LocalAttention(window=1, mode="local-m", score="dot"),
        },
        D,
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_decoder_harness(name, rng):
    cls, kwargs, out_dim = CONFIGS[name]
    y, memory = _inputs(rng)
    run_layer_test(
        cls,
        kwargs(),
        {"target_embeddings": y, "memory": memory},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, out_dim), (B, T, S)),
        # Outputs are RNN states, not contexts: a sequence with no visible memory still has an output.
        mask_check={"input_name": "memory", "mask_arg": "memory_mask", "zero_rows": False},
    )


def _make(style, cell):
    if style == "bahdanau":
        return BahdanauDecoder(U, cell=cell)
    if style == "luong":
        return LuongDecoder(U, cell=cell)
    if style == "luong-no-feeding":
        return LuongDecoder(U, cell=cell, input_feeding=False)
    return LuongDecoder(U, cell=cell, attention=al.LocalAttention(window=1, mode="local-m"))  # p_t = t


@pytest.mark.parametrize(
    "style, cell",
    [("bahdanau", "gru"), ("bahdanau", "lstm"), ("luong", "gru"), ("luong", "lstm"), ("luong-no-feeding", "gru"),
     ("luong-local-m", "lstm")],
)
def test_teacher_forcing_equals_step_by_step(style, cell, rng):
    y, memory = _inputs(rng)
    decoder = _make(style, cell)
    num_states = 2 if cell == "lstm" else 1
    initial_state = [rng.normal(size=(B, U)).astype("float32") for _ in range(num_states)]
    outputs, weights = decoder(y, memory, memory_mask=MEMORY_MASK, initial_state=initial_state,
                               return_attention_scores=True)
    cache = decoder.initial_cache(memory, MEMORY_MASK, initial_state)
    for t in range(T):
        output, cache, w = decoder.step(y[:, t], cache, t)
        np.testing.assert_allclose(_np(output), _np(outputs)[:, t], atol=1e-5)
        np.testing.assert_allclose(_np(w), _np(weights)[:, t], atol=1e-5)
    assert np.all(_np(weights)[0, :, 3:] == 0.0)  # padded memory positions get no weight
    np.testing.assert_allclose(_np(weights).sum(-1), 1.0, atol=1e-5)
    if style == "luong-local-m":  # window [t - 1, t + 1]
        assert np.all(_np(weights)[1, 0, 2:] == 0.0) and np.all(_np(weights)[1, 2, :1] == 0.0)


def test_memory_with_nothing_visible(rng):
    """A sequence whose memory is all padding gets zero weights and a zero context (never NaN)."""
    y, memory = _inputs(rng)
    mask = np.array([[0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], bool)
    outputs, weights = BahdanauDecoder(U)(y, memory, memory_mask=mask, return_attention_scores=True)
    outputs, weights = _np(outputs), _np(weights)
    assert np.all(np.isfinite(outputs))
    assert np.all(weights[0] == 0.0) and np.all(outputs[0, :, U:] == 0.0)  # c_i = 0
    np.testing.assert_allclose(weights[1].sum(-1), 1.0, atol=1e-6)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru(x, h, cell):
    # Keras GRUCell, reset_after=True: gates z, r, candidate h~; h' = z * h + (1 - z) * h~ (Cho et al. 2014).
    kernel, recurrent, bias = (_np(w) for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    xz, xr, xh = np.split(x @ kernel + bias[0], 3, axis=-1)
    hz, hr, hh = np.split(h @ recurrent + bias[1], 3, axis=-1)
    z, r = _sigmoid(xz + hz), _sigmoid(xr + hr)
    return z * h + (1 - z) * np.tanh(xh + r * hh)


def _lstm(x, h, c, cell):
    kernel, recurrent, bias = (_np(w) for w in (cell.kernel, cell.recurrent_kernel, cell.bias))
    i, f, g, o = np.split(x @ kernel + h @ recurrent + bias, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def test_bahdanau_step_against_numpy(rng):
    y, memory = _inputs(rng)
    decoder = BahdanauDecoder(U, cell="gru")  # additive score, the paper's
    decoder(y, memory)
    s_prev = rng.normal(size=(B, U)).astype("float32")
    cache = decoder.initial_cache(memory, MEMORY_MASK, s_prev)
    output, cache, weights = decoder.step(y[:, 0], cache, 0)

    score = decoder.attention.scorer
    w_a, u_a, b_u, v_a = (_np(w) for w in (score.query_dense.kernel, score.key_dense.kernel, score.key_dense.bias,
                                            score.v))
    h = memory.astype("float64")
    e = np.tanh((s_prev @ w_a)[:, None, :] + h @ u_a + b_u) @ v_a  # eq. 6: v_a^T tanh(W_a s_{i-1} + U_a h_j)
    alpha = np_softmax(e, MEMORY_MASK)  # eq. 6
    c = np.einsum("bs,bsd->bd", alpha, h)  # eq. 5
    s = _gru(np.concatenate([y[:, 0], c], -1), s_prev, decoder.cell)  # s_i = f(s_{i-1}, [y_{i-1}; c_i])
    np.testing.assert_allclose(_np(weights), alpha, atol=1e-5)
    np.testing.assert_allclose(_np(output), np.concatenate([s, c], -1), atol=1e-5)
    np.testing.assert_allclose(_np(cache["states"][0]), s, atol=1e-5)


def test_luong_step_against_numpy(rng):
    y, memory = _inputs(rng)
    decoder = LuongDecoder(U)  # LSTM, general score, input feeding
    decoder(y, memory)
    h_prev, c_prev, feed = (rng.normal(size=(B, U)).astype("float32") for _ in range(3))
    cache = decoder.initial_cache(memory, MEMORY_MASK, [h_prev, c_prev])
    cache["feed"] = ops.convert_to_tensor(feed)  # h~_{t-1}
    output, cache, weights = decoder.step(y[:, 1], cache, 1)

    h_s = memory.astype("float64")
    h, c = _lstm(np.concatenate([y[:, 1], feed], -1), h_prev, c_prev, decoder.cell)  # input feeding, sec. 3.3
    w_a = _np(decoder.attention.scorer.kernel)
    a = np_softmax(np.einsum("bu,ud,bsd->bs", h, w_a, h_s), MEMORY_MASK)  # eq. 7, 8 "general": h_t^T W_a h_s
    context = np.einsum("bs,bsd->bd", a, h_s)
    h_tilde = np.tanh(np.concatenate([context, h], -1) @ _np(decoder.attentional_dense.kernel))  # eq. 5
    np.testing.assert_allclose(_np(weights), a, atol=1e-5)
    np.testing.assert_allclose(_np(output), h_tilde, atol=1e-5)
    np.testing.assert_allclose(_np(cache["feed"]), h_tilde, atol=1e-5)
    np.testing.assert_allclose(_np(cache["states"][0]), h, atol=1e-5)
    np.testing.assert_allclose(_np(cache["states"][1]), c, atol=1e-5)


def test_cache_structure_and_beam_tiling(rng):
    y, memory = _inputs(rng)
    decoder = LuongDecoder(U)
    decoder(y, memory)
    cache = decoder.initial_cache(memory, MEMORY_MASK)
    assert sorted(cache) == ["feed", "memory", "memory_keys", "memory_mask", "states"]
    assert [tuple(s.shape) for s in cache["states"]] == [(B, U), (B, U)]
    assert tuple(cache["memory_keys"].shape) == (B, S, U)  # W_a h_s, computed once
    assert all(x.shape[0] == B for x in keras.tree.flatten(cache))
    k = 3
    tiled = keras.tree.map_structure(lambda x: ops.repeat(x, k, axis=0), cache)
    output, cache, weights = decoder.step(y[:, 0], cache, 0)
    tiled_output, tiled, tiled_weights = decoder.step(np.repeat(y[:, 0], k, 0), tiled, 0)
    np.testing.assert_allclose(_np(tiled_output), np.repeat(_np(output), k, 0), atol=1e-6)
    np.testing.assert_allclose(_np(tiled_weights), np.repeat(_np(weights), k, 0), atol=1e-6)
    assert keras.tree.map_structure(lambda x: tuple(x.shape)[1:], tiled) == keras.tree.map_structure(
        lambda x: tuple(x.shape)[1:], cache
    )


def test_greedy_generate_with_next_function(rng):
    from attnlayers import decoding

    vocab, length = 7, 4
    embedding, project = keras.layers.Embedding(vocab, E), keras.layers.Dense(vocab)
    decoder = BahdanauDecoder(U)
    memory = rng.normal(size=(B, S, D)).astype("float32")
    project(decoder(embedding(np.zeros((B, 1), "int32")), memory))
    start = np.array([1, 2], "int32")
    cache = decoder.initial_cache(memory, MEMORY_MASK)
    result = decoding.generate(decoder.next_function(embedding, project), start, length, "greedy", cache=cache)
    # The same greedy decode, by hand.
    cache, token, expected = decoder.initial_cache(memory, MEMORY_MASK), start, [start]
    for t in range(length - 1):
        output, cache, _ = decoder.step(embedding(token), cache, t)
        token = np.argmax(_np(project(output)), -1).astype("int32")
        expected.append(token)
    np.testing.assert_array_equal(_np(result.tokens).astype(int), np.stack(expected, 1))


def test_implicit_masks_and_dynamic_lengths():
    source = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]])
    target = np.array([[6, 2, 0], [6, 1, 2]])
    s_in, t_in = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    source_embedding = keras.layers.Embedding(8, D, mask_zero=True)
    target_embedding = keras.layers.Embedding(8, E, mask_zero=True)
    decoder = LuongDecoder(U)
    outputs, weights = decoder(target_embedding(t_in), source_embedding(s_in), return_attention_scores=True)
    pooled = keras.layers.GlobalAveragePooling1D()(outputs)  # honours the target mask the decoder propagates
    model = keras.Model([s_in, t_in], [outputs, weights, pooled])
    out, w, p = (_np(x) for x in model([source, target]))
    assert np.all(w[0, :, 3:] == 0.0)
    np.testing.assert_allclose(p[0], out[0, :2].mean(0), atol=1e-6)
    # The implicit memory mask is the explicit one.
    memory = ops.convert_to_tensor(_np(source_embedding(source)), "float32")
    y = ops.convert_to_tensor(_np(target_embedding(target)), "float32")
    np.testing.assert_allclose(out, _np(decoder(y, memory, memory_mask=source != 0)), atol=1e-6)
    # Other lengths through the same model.
    out3 = model([np.array([[1, 2, 3, 4, 5, 6, 7]]), np.array([[6, 1]])])[0]
    assert tuple(out3.shape) == (1, 2, U)


def test_random_attention_in_the_loop(rng):
    """Attention that draws random numbers inside the loop (here hard attention's samples; dropout likewise)
    trains with fit and draws fresh numbers on every eager call, on both backends: JAX's traced scan cannot
    assign the seed variable, so the layer threads it through the loop."""
    y_in, m_in = keras.Input((T, E)), keras.Input((S, D))
    decoder = LuongDecoder(U, attention=al.HardAttention(score="general", estimator="gumbel"))
    model = keras.Model([y_in, m_in], keras.layers.Dense(3)(decoder(y_in, m_in)))
    model.compile("adam", "mse")
    y, memory = rng.normal(size=(8, T, E)).astype("float32"), rng.normal(size=(8, S, D)).astype("float32")
    history = model.fit([y, memory], rng.normal(size=(8, T, 3)), epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    _, a = decoder(y, memory, training=True, return_attention_scores=True)
    _, b = decoder(y, memory, training=True, return_attention_scores=True)
    assert set(np.unique(_np(a))) <= {0.0, 1.0} and not np.array_equal(_np(a), _np(b))  # one-hot samples
    np.testing.assert_array_equal(_np(decoder(y, memory)), _np(decoder(y, memory)))  # inference: argmax


# TensorFlow: a Dense on the rank-3 (B, 1, D) query of a step (the additive / mlp / location scores, local-p's
# W_p) is a tf.tensordot whose gradient XLA cannot compile inside the decoder's while loop, until the scores
# apply those Dense layers to a rank-2 view (scoring.dense_last_axis, proposed alongside this layer). Until
# then the XLA training test uses the general score (a batched matmul).
_XLA_SCORE = "additive" if BACKEND != "tensorflow" or hasattr(al.scoring, "dense_last_axis") else "general"


def test_trains_with_jit_compile_and_dynamic_lengths(rng):
    """model.fit with jit_compile=True and lengths unknown when traced. TensorFlow: the loop's gradient compiles
    with XLA. JAX: the attention dropout drawn inside the loop is threaded through the traced scan."""
    y_in, m_in = keras.Input((None, E)), keras.Input((None, D))
    decoder = BahdanauDecoder(cell=keras.layers.LSTMCell(U, dropout=0.2, recurrent_dropout=0.2),
                              attention=al.Attention(score=_XLA_SCORE, dropout=0.3))
    model = keras.Model([y_in, m_in], keras.layers.Dense(3)(decoder(y_in, m_in)))
    model.compile("adam", "mse", jit_compile=True)
    y, memory = rng.normal(size=(4, T, E)).astype("float32"), rng.normal(size=(4, S, D)).astype("float32")
    loss = model.fit([y, memory], rng.normal(size=(4, T, 3)), epochs=2, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss))


def test_bridged_initial_state_in_a_functional_model(rng):
    """The NMT wiring: the encoder's final LSTM state, through Dense "bridges", starts the decoder."""
    s_in, t_in = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    states, h, c = keras.layers.LSTM(12, return_sequences=True, return_state=True)(
        keras.layers.Embedding(10, E, mask_zero=True)(s_in))
    h0, c0 = keras.layers.Dense(U, activation="tanh")(h), keras.layers.Dense(U)(c)
    decoder = LuongDecoder(U, attention=al.LocalAttention(window=2))
    outputs = decoder(keras.layers.Embedding(10, E)(t_in), states, initial_state=[h0, c0])
    model = keras.Model([s_in, t_in], outputs)
    source, target = np.array([[1, 2, 3, 0], [4, 5, 6, 7]]), np.array([[1, 2, 3], [3, 4, 5]])
    expected = _np(model([source, target]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bridged.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(_np(loaded([source, target])), expected, atol=1e-6)


@pytest.mark.parametrize(
    "make, call, match",
    [
        (lambda: BahdanauDecoder(U), {"target_embeddings": np.zeros((B, E))}, "`target_embeddings` must have shape"),
        (lambda: BahdanauDecoder(U), {"memory": np.zeros((B, S))}, "`memory` must have shape"),
        (lambda: LuongDecoder(U), {"memory": np.zeros((B + 1, S, D))}, "same batch size"),
        (lambda: LuongDecoder(U), {"memory_mask": np.ones((B, S + 1), bool)}, "`memory_mask` has shape"),
        (lambda: LuongDecoder(U), {"initial_state": [np.zeros((B, U))]}, "`initial_state` must hold 2"),
        (lambda: BahdanauDecoder(U), {"initial_state": np.zeros((B, U + 1))}, "`initial_state` entries must"),
    ],
)
def test_bad_call_arguments(make, call, match):
    args = {"target_embeddings": np.zeros((B, T, E)), "memory": np.zeros((B, S, D))}
    args.update(call)
    args = {k: v.astype("float32") if isinstance(v, np.ndarray) and v.dtype == np.float64 else v
            for k, v in args.items()}
    if isinstance(args.get("initial_state"), list):
        args["initial_state"] = [s.astype("float32") for s in args["initial_state"]]
    with pytest.raises(ValueError, match=match):
        make()(**args)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="Unknown `cell` 'transformer'"):
        BahdanauDecoder(U, cell="transformer")
    with pytest.raises(ValueError, match=r"`units` must be a positive integer.*received units=0"):
        LuongDecoder(0)
    with pytest.raises(ValueError, match="`units` is required"):
        LuongDecoder()
    with pytest.raises(ValueError, match="`cell` must be one of"):
        LuongDecoder(cell=keras.layers.Dense(U))
    with pytest.raises(ValueError, match=r"`units` \(4\) does not match"):
        LuongDecoder(4, cell=keras.layers.GRUCell(U))
    with pytest.raises(ValueError, match="`attention` must be an attnlayers attention layer"):
        BahdanauDecoder(U, attention=keras.layers.AdditiveAttention())
    with pytest.raises(ValueError, match="`attention` must be an attnlayers attention layer"):
        BahdanauDecoder(U, attention=al.AttentionPooling())


def test_step_errors(rng):
    y, memory = _inputs(rng)
    decoder = LuongDecoder(U)
    with pytest.raises(ValueError, match="needs a built layer"):
        decoder.initial_cache(memory)
    decoder(y, memory)
    cache = decoder.initial_cache(memory)
    with pytest.raises(ValueError, match=r"`y_prev` must have shape \(batch, 4\)"):
        decoder.step(y, cache)
    with pytest.raises(ValueError, match="`memory` must have last axis 6"):
        decoder.initial_cache(memory[..., :3])


def _reversal_data(rng, n, vocab, length):
    """Reverse sequences of 4..length tokens (1..vocab-1, 0 = padding); decoder input: start token `vocab`,
    then the reversed tokens shifted right. Target token t is aligned with source position len - 1 - t."""
    lengths = rng.integers(4, length + 1, n)
    source = rng.integers(1, vocab, (n, length))
    source[np.arange(length)[None] >= lengths[:, None]] = 0
    target = np.zeros_like(source)
    for i, n_i in enumerate(lengths):
        target[i, :n_i] = source[i, :n_i][::-1]
    decoder_in = np.concatenate([np.full((n, 1), vocab), target[:, :-1]], 1)
    return source, decoder_in, target, lengths


def test_bahdanau_learns_reversal_and_its_alignment(rng):
    vocab, length = 12, 6
    s_in, t_in = keras.Input((length,), dtype="int32"), keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(vocab, 16, mask_zero=True)(s_in)
    # Annotations h_j = [x_j; BiGRU_j], the BiGRU reading positions only (a constant input under the padding
    # mask): token j is then in annotation j alone, so the one way to read it is to attend to j. (A BiGRU on
    # the tokens smears each token into its neighbours' annotations, and attention may settle one step off.)
    ones = keras.layers.Embedding(vocab, 1, mask_zero=True, embeddings_initializer="ones", trainable=False)(s_in)
    h = keras.layers.Concatenate()([x, keras.layers.Bidirectional(keras.layers.GRU(16, return_sequences=True))(ones)])
    outputs, weights = BahdanauDecoder(32)(keras.layers.Embedding(vocab + 1, 16, mask_zero=True)(t_in), h,
                                           return_attention_scores=True)
    model = keras.Model([s_in, t_in], keras.layers.Dense(vocab)(outputs))
    attention = keras.Model([s_in, t_in], weights)
    source, decoder_in, target, _ = _reversal_data(rng, 1200, vocab, length)
    epochs, batch_size = 5, 64
    schedule = keras.optimizers.schedules.CosineDecay(1e-2, epochs * -(-len(source) // batch_size))
    model.compile(keras.optimizers.Adam(schedule, clipnorm=1.0),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit([source, decoder_in], target, batch_size=batch_size, epochs=epochs, verbose=0).history["loss"]
    assert losses[-1] < 0.1 * losses[0], losses

    source, decoder_in, target, lengths = _reversal_data(rng, 200, vocab, length)
    valid = np.arange(length)[None] < lengths[:, None]
    predicted = np.argmax(_np(model.predict_on_batch([source, decoder_in])), -1)
    accuracy = (predicted == target)[valid].mean()
    assert accuracy > 0.9, accuracy
    aligned = lengths[:, None] - 1 - np.arange(length)[None]
    alignment = (np.argmax(_np(attention.predict_on_batch([source, decoder_in])), -1) == aligned)[valid].mean()
    assert alignment >= 0.9, alignment


# ------------------------------------------------------------------------- REINFORCE hard attention in the loop


def test_return_sample_from_the_decoder_loop(rng):
    """HardAttention(estimator="reinforce") in the loop: log p(s_t) and H(alpha_t) of every step come out
    explicitly, (B, T) each, and carry a gradient to the scorer (what ReinforceLoss needs)."""
    y, memory = _inputs(rng)
    attention = al.HardAttention(score="general", estimator="reinforce", seed=1)
    decoder = LuongDecoder(U, attention=attention)
    outputs, weights, sample = decoder(y, memory, memory_mask=MEMORY_MASK, return_attention_scores=True,
                                       return_sample=True, training=True)
    assert tuple(outputs.shape) == (B, T, U) and sorted(sample) == ["entropy", "log_prob"]
    log_prob, entropy, w = _np(sample["log_prob"]), _np(sample["entropy"]), _np(weights)
    assert log_prob.shape == entropy.shape == (B, T)
    assert set(np.unique(w)) <= {0.0, 1.0} and np.all(w[0, :, 3:] == 0.0)  # one-hot samples, never padding
    assert np.all(log_prob <= 0.0) and np.all(np.isfinite(log_prob))
    assert np.all(entropy >= 0.0) and np.all(entropy[0] <= np.log(3) + 1e-5)  # 3 visible positions

    if BACKEND == "tensorflow":  # (JAX: tests/layers/test_learning.py trains through this gradient)
        import tensorflow as tf

        with tf.GradientTape() as tape:
            _, s = decoder(y, memory, memory_mask=MEMORY_MASK, return_sample=True, training=True)
            value = ops.sum(s["log_prob"])
        grad = tape.gradient(value, attention.scorer.kernel.value)
        assert grad is not None and np.any(_np(grad) != 0.0)


def test_return_sample_in_a_functional_model_and_errors(rng):
    y_in, m_in = keras.Input((T, E)), keras.Input((S, D))
    decoder = BahdanauDecoder(U, attention=al.HardAttention(score="general"))
    outputs, sample = decoder(y_in, m_in, return_sample=True)
    model = keras.Model([y_in, m_in], [outputs, sample["log_prob"], sample["entropy"]])
    y, memory = _inputs(rng)
    assert [tuple(x.shape) for x in model([y, memory])] == [(B, T, U + D), (B, T), (B, T)]
    with pytest.raises(ValueError, match="`return_sample=True` needs an attention layer that samples"):
        BahdanauDecoder(U)(y, memory, return_sample=True)


def test_unreturned_reinforce_samples_warn_once(rng):
    y, memory = _inputs(rng)
    decoder = LuongDecoder(U, attention=al.HardAttention(score="general", estimator="reinforce"))
    with pytest.warns(UserWarning, match="return_sample=True"):
        decoder(y, memory, training=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decoder(y, memory, training=True)  # once
        decoder(y, memory)  # inference samples nothing
        LuongDecoder(U, attention=al.HardAttention(score="general", estimator="gumbel"))(y, memory, training=True)


def test_missing_inputs_and_feature_sizes(rng):
    y, memory = _inputs(rng)
    decoder = LuongDecoder(U)
    with pytest.raises(ValueError, match="`memory` is required"):
        decoder(y, None)
    with pytest.raises(ValueError, match="`target_embeddings` is required"):
        decoder(None, memory)
    decoder(y, memory)
    with pytest.raises(ValueError, match=r"`target_embeddings` must have last axis 4 \(the size the layer"):
        decoder(y[..., :3], memory)
    with pytest.raises(ValueError, match=r"`memory` must have last axis 6"):
        decoder(y, memory[..., :5])
    with pytest.raises(ValueError, match="`memory` is required"):
        decoder.initial_cache(None)
