"""Memory-efficient (chunked, online-softmax) attention: outputs and gradients equal the dense computation for
every mask piece, bias, GQA, fully-masked rows, dropout, mixed precision and XLA; MultiHeadAttention's path
choice, errors and config. Tiny shapes with chunks of 3-5 rows, so T and S are not multiples of the chunks and
every loop runs several blocks."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers import masking
from attnlayers.chunked import _Problem, chunked_attention, dropout_keep_mask, seed_tensor
from attnlayers.masking import visible_queries
from attnlayers.multi_head import MultiHeadAttention
from attnlayers.positional import ALiBi
from attnlayers.routes import CHUNKED_MIN_LENGTH, AttentionRoute

BACKEND = keras.backend.backend()
B, T, S, N, N_KV, H, HV = 2, 7, 10, 4, 2, 3, 2
CHUNKS = dict(query_chunk_size=3, key_chunk_size=4)


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _dense(q, k, v, bias=None, query_mask=None, key_mask=None, attention_mask=None, causal=False, offset=None,
           window=None, keep=None):
    """softmax(Q K^T / sqrt(H) + bias) V with one dense (B, N, T, S) mask; ``keep`` an explicit dropout
    multiplier (B, N, T, S)."""
    t, s, n = q.shape[1], k.shape[1], q.shape[2]
    groups = n // k.shape[2]
    k, v = ops.repeat(k, groups, axis=2), ops.repeat(v, groups, axis=2)
    logits = ops.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias
    i = np.arange(t)[:, None] + (s - t if offset is None else offset)
    j = np.arange(s)[None]
    mask = np.ones((q.shape[0], t, s), bool)
    if causal:
        mask &= j <= i
    if window is not None:
        mask &= np.abs(i - j) < window
    for m in (None if query_mask is None else query_mask[:, :, None],
              None if key_mask is None else key_mask[:, None, :], attention_mask):
        if m is not None:
            mask = mask & m
    weights = masking.masked_softmax(logits, mask[:, None])
    if keep is not None:
        weights = weights * keep
    return ops.einsum("bnts,bsnh->btnh", weights, v)


def _value_and_grads(fn, args):
    """fn(*args) and the gradients of sum(out * cos(out)) with respect to every arg."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        args = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(args)
            out = fn(*args)
            loss = ops.sum(out * ops.cos(out))
        return out, tape.gradient(loss, args)
    import jax

    def loss(*a):
        out = fn(*a)
        return ops.sum(out * ops.cos(out)), out

    # One compilation of forward and backward (unjitted, JAX compiles the loops' forward and transpose apart).
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(args))), has_aux=True))(*args)
    return out, grads


def _assert_close(a, b, atol=1e-5, what=""):
    a, b = _np(a), _np(b)
    assert np.all(np.isfinite(a)), f"non-finite {what}"
    np.testing.assert_allclose(a, b, atol=atol, rtol=0, err_msg=what)


def _inputs(rng, t=T, s=S, n=N, n_kv=N_KV):
    return (rng.normal(size=(B, t, n, H)).astype("float32"), rng.normal(size=(B, s, n_kv, H)).astype("float32"),
            rng.normal(size=(B, s, n_kv, HV)).astype("float32"))


_CASES = {
    # padding of both sides, an explicit (B, T, S) mask, GQA and a full bias.
    "padding_mask_bias_gqa": dict(masks=("query_mask", "key_mask", "attention_mask"), bias=(1, N, T, S)),
    # causal with T < S (queries the last T positions) and a per-key bias (B, 1, 1, S).
    "causal_offset_key_bias": dict(causal=True, bias=(B, 1, 1, S)),
    # causal at offset 0 (query t sees keys 0..t) with a per-query bias; one fully padded key row (batch 1).
    "causal_offset0_fully_masked": dict(causal=True, offset=0, masks=("key_mask",), bias=(1, 1, T, 1),
                                        empty_row=True),
    # sliding window, T == S: blocks outside the band are skipped.
    "window": dict(window=3, t=S),
    "causal_window_padding": dict(window=4, causal=True, masks=("query_mask", "key_mask"), t=S, n_kv=1),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_outputs_and_gradients_equal_dense(name):
    case = _CASES[name]
    rng = np.random.default_rng(0)
    t = case.get("t", T)
    q, k, v = _inputs(rng, t=t, n_kv=case.get("n_kv", N_KV))
    kwargs = dict(causal=case.get("causal", False), offset=case.get("offset"), window=case.get("window"))
    given = dict(query_mask=rng.random((B, t)) < 0.8, key_mask=rng.random((B, S)) < 0.7,
                 attention_mask=rng.random((B, t, S)) < 0.8)
    if case.get("empty_row"):
        given["key_mask"][1] = False  # batch 1: no key at all
    kwargs.update({name: given[name] for name in case.get("masks", ())})
    args = [q, k, v]
    if "bias" in case:
        args.append(rng.normal(size=tuple(t if d == T else d for d in case["bias"])).astype("float32"))

    out, grads = _value_and_grads(lambda *a: chunked_attention(*a, **kwargs, **CHUNKS), args)
    expected, expected_grads = _value_and_grads(lambda *a: _dense(*a, **kwargs), args)
    _assert_close(out, expected, what="output")
    for arg_name, g, e in zip(("query", "key", "value", "bias"), grads, expected_grads):
        assert tuple(g.shape) == tuple(np.shape(e)), arg_name
        _assert_close(g, e, what=f"gradient of {arg_name}")
    if case.get("empty_row"):
        np.testing.assert_array_equal(_np(out)[1], 0.0)


def test_blocks_outside_the_band_are_skipped():
    """Key blocks [lo, hi) visited per query block: a window of W visits O(W / Ck + 1) blocks, the causal rule
    none beyond the diagonal, and every visible key lies in a visited block."""
    t = s = 64
    q = ops.zeros((1, t, 1, 2))
    for causal, window in ((False, 5), (True, 5), (True, None)):
        problem = _Problem(q, q, q, None, None, None, None, causal, None, window, 1.0, 0.0, None, (8, 8))
        i, j = np.arange(t)[:, None], np.arange(s)[None]
        visible = np.ones((t, s), bool) & ((j <= i) if causal else True)
        visible &= (np.abs(i - j) < window) if window else True
        for block in range(t // 8):
            lo, hi = (int(x) for x in problem.key_range(block))
            needed = np.nonzero(visible[block * 8 : block * 8 + 8].any(0))[0]
            assert lo <= needed.min() // 8 and needed.max() // 8 < hi
            assert hi - lo <= (2 if causal else 3) if window else hi == block + 1
            q_lo, q_hi = (int(x) for x in problem.query_range(block))  # the transposed range (backward pass)
            rows = np.nonzero(visible[:, block * 8 : block * 8 + 8].any(1))[0]
            assert q_lo <= rows.min() // 8 and rows.max() // 8 < q_hi and q_hi - q_lo <= (3 if window else 8)


def test_visible_queries_without_a_dense_mask():
    rng = np.random.default_rng(1)
    query_mask, key_mask = rng.random((B, T)) < 0.8, rng.random((B, S)) < 0.3
    attention_mask = rng.random((B, T, S)) < 0.3
    for kwargs in (dict(causal=True, offset=0), dict(window=2), dict(window=3, causal=True, offset=-2),
                   dict(attention_mask=attention_mask, causal=True)):
        i, j = np.arange(T)[:, None] + kwargs.get("offset", S - T), np.arange(S)[None]
        dense = np.ones((B, T, S), bool) & query_mask[:, :, None] & key_mask[:, None]
        dense &= (j <= i) if kwargs.get("causal") else True
        dense &= (np.abs(i - j) < kwargs["window"]) if kwargs.get("window") else True
        dense &= kwargs.get("attention_mask", True)
        got = visible_queries(T, S, query_mask=query_mask, key_mask=key_mask, **kwargs)
        np.testing.assert_array_equal(np.broadcast_to(_np(got) > 0, (B, T)), dense.any(-1), err_msg=str(kwargs))
    assert visible_queries(T, S) is None


def test_dropout_forward_and_gradient_consistent():
    """With dropout, the output and gradients equal a dense computation applying the explicit (B, N, T, S)
    mask rebuilt from the same per-block draws (dropout_keep_mask), and the kept fraction is about 1 - rate."""
    rng = np.random.default_rng(2)
    rate, seed, (cq, ck) = 0.4, 7, (3, 4)
    q, k, v = _inputs(rng)
    t_pad, s_pad = -(-T // cq) * cq, -(-S // ck) * ck
    seed_t = seed_tensor(seed)
    rows = [ops.concatenate([dropout_keep_mask(seed_t, i, j, (B, N, cq, ck), rate) for j in range(s_pad // ck)],
                            axis=-1) for i in range(t_pad // cq)]
    kept = _np(ops.concatenate(rows, axis=2))[:, :, :T, :S]
    assert abs(kept.mean() - (1 - rate)) < 0.1
    keep = kept / (1 - rate)
    kwargs = dict(causal=True, key_mask=rng.random((B, S)) < 0.8)
    out, grads = _value_and_grads(
        lambda *a: chunked_attention(*a, dropout_rate=rate, seed=seed, query_chunk_size=cq, key_chunk_size=ck,
                                     **kwargs), [q, k, v])
    expected, expected_grads = _value_and_grads(lambda *a: _dense(*a, keep=keep, **kwargs), [q, k, v])
    _assert_close(out, expected, what="output with dropout")
    for g, e in zip(grads, expected_grads):
        _assert_close(g, e, what="gradient with dropout")


# ----------------------------------------------------------------------------------------------------------
# MultiHeadAttention


def _layer_pair(**kwargs):
    """The same layer twice (same weights): the memory-efficient path with tiny chunks, and the plain path."""
    chunked = MultiHeadAttention(N, H, value_dim=HV, memory_efficient=True, bias_initializer="random_normal",
                                 **kwargs)
    chunked._chunk_sizes = (3, 4)
    plain = MultiHeadAttention(N, H, value_dim=HV, memory_efficient=False, **kwargs)
    return chunked, plain


def _layer_value_and_grads(layer, query, value, call_kwargs):
    """The layer's output and the gradients of sum(out * cos(out)) w.r.t. its weights and both inputs."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        query, value = tf.convert_to_tensor(query), tf.convert_to_tensor(value)
        with tf.GradientTape() as tape:
            tape.watch([query, value])
            out = layer(query, value, **call_kwargs)
            loss = ops.sum(ops.cast(out, "float32") * ops.cos(ops.cast(out, "float32")))
        return out, tape.gradient(loss, [v.value for v in layer.trainable_variables] + [query, value])
    import jax

    def loss(trainable, query, value):
        out, _ = layer.stateless_call(trainable, [w.value for w in layer.non_trainable_variables], query, value,
                                      **call_kwargs)
        f = ops.cast(out, "float32")
        return ops.sum(f * ops.cos(f)), out

    if not layer.built:
        layer(query, value)
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(
        [w.value for w in layer.trainable_variables], query, value)
    return out, list(grads[0]) + [grads[1], grads[2]]


def _compare_layers(chunked, plain, query, value, call_kwargs, atol=1e-5):
    out, grads = _layer_value_and_grads(chunked, query, value, call_kwargs)
    expected, expected_grads = _layer_value_and_grads(plain, query, value, call_kwargs)
    _assert_close(out, expected, atol, "layer output")
    assert len(grads) == len(expected_grads) == len(chunked.trainable_variables) + 2
    for g, e in zip(grads, expected_grads):
        _assert_close(g, e, atol, "layer gradient")
    return out


@pytest.mark.parametrize("self_attention", [True, False])
def test_layer_equals_plain_path(self_attention):
    """Outputs and gradients (every weight, query and value) of the memory-efficient path equal the plain path:
    self-attention with padding, causal rule and an attention_bias; cross-attention (T < S) with GQA, an explicit
    mask, a sliding window and a query with nothing visible (zero output, finite gradients)."""
    rng = np.random.default_rng(3)
    query = rng.normal(size=(B, S if self_attention else T, 6)).astype("float32")
    value = query if self_attention else rng.normal(size=(B, S, 6)).astype("float32")
    if self_attention:
        kwargs = dict(use_bias=True)
        call = dict(use_causal_mask=True, value_mask=rng.random((B, S)) < 0.8,
                    attention_bias=rng.normal(size=(1, N, S, S)).astype("float32"))
    else:
        kwargs = dict(num_key_value_heads=2, sliding_window=4)
        attention_mask = rng.random((B, T, S)) < 0.7
        attention_mask[0, 2] = False  # query 2 of batch 0 sees nothing
        call = dict(attention_mask=attention_mask, query_mask=rng.random((B, T)) < 0.9)
    chunked, plain = _layer_pair(**kwargs)
    chunked(query, value)
    plain(query, value)
    plain.set_weights(chunked.get_weights())
    out = _compare_layers(chunked, plain, query, value, call)
    if not self_attention:
        np.testing.assert_array_equal(_np(out)[0, 2], 0.0)


@pytest.mark.parametrize("policy, atol", [("mixed_float16", 2e-2), ("mixed_bfloat16", 1e-1)])
def test_mixed_precision(policy, atol):
    """Under mixed precision the blocks compute in float32 and the output is in the compute dtype. The plain path
    rounds the logits and weights to float16 / bfloat16 (8 bits of mantissa for bfloat16), so the two agree to
    the compute dtype's precision only."""
    keras.config.set_dtype_policy(policy)
    rng = np.random.default_rng(4)
    query = rng.normal(size=(B, T, 6)).astype("float32")
    chunked, plain = _layer_pair(sliding_window=3)
    chunked(query, query)
    plain(query, query)
    plain.set_weights(chunked.get_weights())
    out = _compare_layers(chunked, plain, query, query, dict(use_causal_mask=True), atol=atol)
    assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]


def test_jit_compiled():
    """Under tf.function(jit_compile=True) / jax.jit the forward and backward passes compile and equal eager."""
    rng = np.random.default_rng(5)
    query = rng.normal(size=(B, T, 6)).astype("float32")
    chunked, _ = _layer_pair(num_key_value_heads=1)
    chunked(query, query)
    call = dict(use_causal_mask=True, query_mask=rng.random((B, T)) < 0.8)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(query)  # one tensor for query and value, as in the compiled call
        eager, eager_grads = _layer_value_and_grads(chunked, x, x, call)
        compiled = tf.function(lambda x: _layer_value_and_grads(chunked, x, x, call), jit_compile=True)
        out, grads = compiled(tf.convert_to_tensor(query))
    else:
        import jax

        eager, eager_grads = _layer_value_and_grads(chunked, query, query, call)
        out, grads = jax.jit(lambda x: _layer_value_and_grads(chunked, x, x, call))(query)
    _assert_close(out, eager, 1e-5, "jit output")
    for g, e in zip(grads, eager_grads):
        _assert_close(g, e, 1e-5, "jit gradient")


def test_layer_dropout_trains_and_is_off_at_inference():
    rng = np.random.default_rng(6)
    query = rng.normal(size=(B, T, 6)).astype("float32")
    chunked, plain = _layer_pair(dropout=0.5, seed=3)
    chunked(query, query)
    plain(query, query)
    plain.set_weights(chunked.get_weights())
    _assert_close(chunked(query, query, training=False), plain(query, query, training=False), what="inference")
    a, b = chunked(query, query, training=True), chunked(query, query, training=True)
    assert np.all(np.isfinite(_np(a))) and not np.allclose(_np(a), _np(b))  # a fresh mask per call


def test_deprecated_names_warn_and_name_the_new_ones():
    """The names the chunked route had before its rename, kept as deprecated aliases."""
    from attnlayers import chunked, multi_head

    with pytest.warns(DeprecationWarning, match="attnlayers.routes.CHUNKED_MIN_LENGTH"):
        assert multi_head.MEMORY_EFFICIENT_MIN_LENGTH == CHUNKED_MIN_LENGTH
    with pytest.warns(DeprecationWarning, match="attnlayers.masking.visible_queries"):
        old = chunked.visible_queries(4, 6, key_mask=np.array([[True] * 2 + [False] * 4]), window=2)
    np.testing.assert_array_equal(_np(old), _np(visible_queries(4, 6, key_mask=np.array([[True] * 2 + [False] * 4]),
                                                                window=2)))


def test_automatic_choice(monkeypatch):
    """implementation="auto" takes the exact route below CHUNKED_MIN_LENGTH (always at T <= 512), the
    chunked one above it when the call allows (no cuDNN on a CPU); the aliases select their routes."""
    layer = MultiHeadAttention(2, 4)
    short, long = 512, CHUNKED_MIN_LENGTH
    assert layer.attention_implementation(short, short) == "exact"
    assert layer.attention_implementation(long, long) == "chunked"
    assert layer.attention_implementation(long, long, return_attention_scores=True) == "exact"
    assert layer.attention_implementation(long, long, cached=True) == "exact"
    assert MultiHeadAttention(2, 4, score="general").attention_implementation(long, long) == "exact"
    assert MultiHeadAttention(2, 4, memory_efficient=False).attention_implementation(long, long) == "exact"
    assert MultiHeadAttention(2, 4, memory_efficient=True).attention_implementation(short, short) == "chunked"
    flash = "fused" if keras.backend.backend() == "jax" else "chunked"  # keras' alias: the fused kernel or blocks
    assert MultiHeadAttention(2, 4, flash_attention=True).attention_implementation(short, short) == flash
    # A short call really goes through the plain path (the chunked function is not called).
    calls = []
    monkeypatch.setattr("attnlayers.chunked.chunked_attention", lambda *a, **k: calls.append(a))
    layer = MultiHeadAttention(2, 4)
    x = np.ones((1, 5, 8), "float32")
    layer(x, x)
    assert not calls and layer.last_attention == AttentionRoute("exact")


def test_errors_and_config():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(B, T, 8)).astype("float32")
    layer = MultiHeadAttention(N, H, memory_efficient=True)
    layer(x, x)
    # A cached call (decoding) attends over its cache exactly whatever the route: a model trained in blocks decodes.
    cache = np.zeros((B, 2, 9, N, H), "float32")
    exact = MultiHeadAttention(N, H)
    exact(x, x)
    exact.set_weights(layer.get_weights())
    np.testing.assert_allclose(_np(layer(x, x, cache=cache, cache_update_index=0)[0]),
                               _np(exact(x, x, cache=cache, cache_update_index=0)[0]), atol=1e-6)
    for call, match in [
        (lambda: layer(x, x, return_attention_scores=True), "chunked.*return_attention_scores"),
        (lambda: MultiHeadAttention(N, H, score="general", memory_efficient=True)(x, x), "score"),
        (lambda: MultiHeadAttention(N, H, position_bias=ALiBi(N), memory_efficient=True)(x, x), "position_bias"),
        (lambda: MultiHeadAttention(N, H, flash_attention=True)(x, x, return_attention_scores=True),
         "Returning attention scores is not supported when flash attention is enabled"),  # keras' words
        (lambda: MultiHeadAttention(N, H, flash_attention=True, dropout=0.1),
         "Dropout is not supported when flash attention is enabled"),
        (lambda: MultiHeadAttention(N, H, implementation="chunked")(x, x, return_attention_scores=True),
         "implementation='chunked'.*return_attention_scores"),
        (lambda: chunked_attention(*_inputs(rng), query_chunk_size=0), "query_chunk_size"),
        (lambda: chunked_attention(*_inputs(rng), dropout_rate=0.1), "seed"),
        (lambda: chunked_attention(*_inputs(rng, n=3, n_kv=2)), "multiple"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    for kwargs in (dict(memory_efficient=True), dict(memory_efficient=False), dict(flash_attention=True), {},
                   dict(implementation="chunked")):
        config = MultiHeadAttention(N, H, **kwargs).get_config()
        clone = MultiHeadAttention.from_config(config)
        assert clone.get_config() == config
        assert clone.implementation == MultiHeadAttention(N, H, **kwargs).implementation
    # A config saved before `implementation` existed loads with its route.
    old = {key: value for key, value in MultiHeadAttention(N, H).get_config().items() if key != "implementation"}
    for flags, route in (((None, True), "chunked"), ((None, False), "exact"), ((None, None), "auto")):
        config = dict(old, flash_attention=flags[0], memory_efficient=flags[1])
        assert MultiHeadAttention.from_config(config).implementation == route


def test_dropout_masks_of_other_blocks_and_of_the_next_seed_are_unrelated():
    """A SeedGenerator's next seed adds 1 to the seed's second entry: no block of the next step may repeat a block
    of this one (as it would if (i, j) were added to the seed), and no two blocks of a step are equal."""
    seed = seed_tensor(7)
    following = seed + ops.convert_to_tensor([0, 1], "int32")
    shape = (1, 2, 8, 8)
    masks = {(step, i, j): _np(dropout_keep_mask(s, i, j, shape, 0.5))
             for step, s in ((0, seed), (1, following)) for i in range(2) for j in range(2)}
    keys = list(masks)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert not np.array_equal(masks[keys[a]], masks[keys[b]]), (keys[a], keys[b])


def test_memory_efficient_layer_passes_the_layer_harness():
    """The shared harness (build, config, functional model, .keras file, jit, mixed precision, gradients to every
    weight, value padding) on the memory-efficient path, causal with a sliding window, small blocks."""
    from harness import run_layer_test

    class Small(MultiHeadAttention):  # many blocks at these sizes
        _chunk_sizes = (3, 4)

    rng = np.random.default_rng(5)
    x = rng.normal(size=(B, S, 8)).astype("float32")
    keras.saving.get_custom_objects()["Small"] = Small
    try:
        run_layer_test(
            Small,
            {"num_heads": N, "key_dim": H, "num_key_value_heads": N_KV, "sliding_window": 4, "memory_efficient": True},
            {"query": x, "value": x},
            call_kwargs={"use_causal_mask": True},
            expected_output_shape=(B, S, 8),
            expected_num_trainable_weights=8,
            mask_check={"input_name": "value", "mask_arg": "value_mask"},
        )
    finally:
        keras.saving.get_custom_objects().pop("Small")
