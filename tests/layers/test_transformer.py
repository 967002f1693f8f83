"""FeedForward, Transformer blocks and stacks: harness, NumPy references, keras-hub equivalence, caches,
the causal rule on every path, the paper's parameter count, bad input."""

import keras_hub
import numpy as np
import pytest
from harness import np_softmax, run_layer_test
from keras import ops

from attnlayers.transformer import (
    FeedForward,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)

B, T, S, D, N, F = 2, 4, 6, 16, 4, 32


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")), dtype="float64")


# ---- NumPy references written from the equations -------------------------------------------------------


def np_layer_norm(x, norm, eps=1e-5):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _np(norm.gamma) + _np(norm.beta)


def np_mha(mha, query, value, mask=None):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V."""
    w = {name: (_np(layer.kernel), _np(layer.bias)) for name, layer in
         (("q", mha._query_dense), ("k", mha._key_dense), ("v", mha._value_dense), ("o", mha._output_dense))}
    q = np.einsum("btd,dnh->btnh", query, w["q"][0]) + w["q"][1]
    k = np.einsum("bsd,dnh->bsnh", value, w["k"][0]) + w["k"][1]
    v = np.einsum("bsd,dnh->bsnh", value, w["v"][0]) + w["v"][1]
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    weights = np_softmax(logits, None if mask is None else mask[:, None])
    heads = np.einsum("bnts,bsnh->btnh", weights, v)
    return np.einsum("btnh,nhd->btd", heads, w["o"][0]) + w["o"][1]


def np_ffn(ffn, x):
    h = np.maximum(x @ _np(ffn.intermediate_dense.kernel) + _np(ffn.intermediate_dense.bias), 0)  # eq. 2
    return h @ _np(ffn.output_dense.kernel) + _np(ffn.output_dense.bias)


def np_encoder_block(block, x, mask=None):
    if block.normalize_first:
        h = x + np_mha(block.self_attention, np_layer_norm(x, block.self_attention_layer_norm),
                       np_layer_norm(x, block.self_attention_layer_norm), mask)
        return h + np_ffn(block.feedforward, np_layer_norm(h, block.feedforward_layer_norm))
    h = np_layer_norm(x + np_mha(block.self_attention, x, x, mask), block.self_attention_layer_norm)
    return np_layer_norm(h + np_ffn(block.feedforward, h), block.feedforward_layer_norm)


def np_decoder_block(block, x, memory, memory_mask=None):
    causal = np.tril(np.ones((x.shape[1], x.shape[1]), bool))[None]
    h = np_layer_norm(x + np_mha(block.self_attention, x, x, causal), block.self_attention_layer_norm)
    cross_mask = None if memory_mask is None else np.broadcast_to(memory_mask[:, None, :], (x.shape[0], x.shape[1], memory.shape[1]))
    h = np_layer_norm(h + np_mha(block.cross_attention, h, memory, cross_mask), block.cross_attention_layer_norm)
    return np_layer_norm(h + np_ffn(block.feedforward, h), block.feedforward_layer_norm)


@pytest.fixture
def data(rng):
    return rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")


# ---- harness ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
def test_feedforward_harness(activation, data):
    run_layer_test(FeedForward, {"intermediate_dim": F, "activation": activation}, data[0],
                   expected_output_shape=(B, T, D))


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_harness(normalize_first, data):
    run_layer_test(
        TransformerEncoderBlock,
        {"num_heads": N, "intermediate_dim": F, "normalize_first": normalize_first},
        data[0],
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, N, T, T)),
        mask_check={"input_name": "__first__", "mask_arg": "padding_mask", "zero_rows": False},
    )


def test_decoder_block_harness(data):
    x, memory = data
    run_layer_test(
        TransformerDecoderBlock,
        {"num_heads": N, "intermediate_dim": F, "dropout": 0.1},
        {"decoder_sequence": x, "encoder_sequence": memory},
        expected_output_shape=(B, T, D),
        mask_check={"input_name": "encoder_sequence", "mask_arg": "encoder_padding_mask", "zero_rows": False},
    )
    run_layer_test(TransformerDecoderBlock, {"num_heads": N, "intermediate_dim": F, "normalize_first": True},
                   {"decoder_sequence": x}, expected_output_shape=(B, T, D))


def test_stack_harness(data):
    x, memory = data
    run_layer_test(TransformerEncoder, {"num_layers": 2, "num_heads": N, "intermediate_dim": F}, x,
                   expected_output_shape=(B, T, D))
    run_layer_test(TransformerDecoder, {"num_layers": 2, "num_heads": N, "intermediate_dim": F, "normalize_first": True},
                   {"decoder_sequence": x, "encoder_sequence": memory}, expected_output_shape=(B, T, D))


# ---- numerics ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_against_numpy(normalize_first, data):
    x = data[0]
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    block = TransformerEncoderBlock(N, F, normalize_first=normalize_first)
    out = _np(block(x, padding_mask=mask))
    attention_mask = mask[:, :, None] & mask[:, None, :]
    np.testing.assert_allclose(out, np_encoder_block(block, x.astype("float64"), attention_mask), atol=1e-4)


def test_decoder_block_against_numpy(data):
    x, memory = data
    memory_mask = np.array([[1] * 4 + [0] * 2, [1] * 6], bool)
    block = TransformerDecoderBlock(N, F)
    out = _np(block(x, memory, encoder_padding_mask=memory_mask))
    np.testing.assert_allclose(out, np_decoder_block(block, x.astype("float64"), memory.astype("float64"), memory_mask), atol=1e-4)


def keras_hub_encoder_to_attnlayers(hub_block, block):
    """Copies the weights of a ``keras_hub.layers.TransformerEncoder`` into a TransformerEncoderBlock.

    keras-hub sublayer -> attnlayers sublayer (the MHA and Dense kernels have the same layouts):
      _self_attention_layer            -> self_attention
      _self_attention_layer_norm       -> self_attention_layer_norm
      _feedforward_layer_norm          -> feedforward_layer_norm
      _feedforward_intermediate_dense  -> feedforward.intermediate_dense
      _feedforward_output_dense        -> feedforward.output_dense
    """
    pairs = [
        (hub_block._self_attention_layer, block.self_attention),
        (hub_block._self_attention_layer_norm, block.self_attention_layer_norm),
        (hub_block._feedforward_layer_norm, block.feedforward_layer_norm),
        (hub_block._feedforward_intermediate_dense, block.feedforward.intermediate_dense),
        (hub_block._feedforward_output_dense, block.feedforward.output_dense),
    ]
    for source, target in pairs:
        target.set_weights(source.get_weights())


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_equals_keras_hub(normalize_first, data):
    x = data[0]
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    hub = keras_hub.layers.TransformerEncoder(F, N, activation="relu", normalize_first=normalize_first)
    ours = TransformerEncoderBlock(N, F, normalize_first=normalize_first)
    expected = _np(hub(x, padding_mask=mask))
    ours(x)
    keras_hub_encoder_to_attnlayers(hub, ours)
    got = _np(ours(x, padding_mask=mask))
    np.testing.assert_allclose(got[mask], expected[mask], atol=1e-5)  # padded rows differ by design:
    # keras gives a padded query the mean of the values, we give it zeros (the fully-masked rule).


# ---- caches ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cross", [True, False])
def test_cached_decoding_equals_full_recomputation(cross, data, rng):
    x, memory = data
    layers, head_dim = 2, D // N
    decoder = TransformerDecoder(layers, N, F, normalize_first=True)
    full = _np(decoder(x, memory if cross else None))
    self_cache = ops.zeros((B, layers, 2, T, N, head_dim))
    cross_cache = ops.zeros((B, layers, 2, S, N, head_dim)) if cross else None
    for t in range(T):
        out = decoder(
            x[:, t : t + 1], memory if cross else None,
            self_attention_cache=self_cache, self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache, cross_attention_cache_update_index=0 if t == 0 else None,
        )
        self_cache = out["self_attention_cache"]
        if cross:
            cross_cache = out["cross_attention_cache"]
        np.testing.assert_allclose(_np(out["sequence_output"])[:, 0], full[:, t], atol=1e-5, err_msg=f"step {t}")


def test_causal_rule_on_every_path(data):
    x, memory = data
    block = TransformerDecoderBlock(N, F, dropout=0.5)
    block(x, memory)
    for training in (False, True):
        _, scores = block(x, memory, return_attention_scores=True, training=training)
        upper = np.triu(np.ones((T, T), bool), k=1)
        assert np.all(_np(scores["self_attention"])[..., upper] == 0.0), f"training={training}"
    changed = x.copy()
    changed[:, 2:] += 3.0
    a, b = _np(block(x, memory)), _np(block(changed, memory))
    np.testing.assert_allclose(a[:, :2], b[:, :2], atol=1e-5)


def test_stack_returns_every_layer(data):
    x = data[0]
    encoder = TransformerEncoder(3, N, F)
    out = encoder(x, return_hidden_states=True, return_attention_scores=True)
    assert len(out["hidden_states"]) == 3 and len(out["attention_scores"]) == 3
    np.testing.assert_allclose(_np(out["hidden_states"][-1]), _np(out["sequence_output"]), atol=1e-6)
    assert tuple(out["attention_scores"][0].shape) == (B, N, T, T)
    first, second = encoder.blocks[0].self_attention._query_dense.kernel, encoder.blocks[1].self_attention._query_dense.kernel
    assert first is not second and not np.allclose(_np(first), _np(second))  # no weight sharing


def test_paper_base_configuration_parameter_count():
    d, h, dff, layers = 512, 8, 2048, 6
    encoder = TransformerEncoder(layers, h, dff)
    decoder = TransformerDecoder(layers, h, dff)
    encoder.build((None, None, d))
    decoder.build((None, None, d), (None, None, d))
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    ffn = d * dff + dff + dff * d + d
    norm = 2 * d
    assert encoder.count_params() == layers * (attention + ffn + 2 * norm)
    assert decoder.count_params() == layers * (2 * attention + ffn + 3 * norm)
    # 6 * 3,152,384 + 6 * 4,204,032 (the ~63M of the paper's base model is this plus 37k x 512 embeddings)
    assert encoder.count_params() + decoder.count_params() == 44_138_496


# ---- bad input -------------------------------------------------------------------------------------------


def test_bad_input(data):
    x, memory = data
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        TransformerEncoderBlock(3, F)(x)
    with pytest.raises(ValueError, match="same batch size"):
        TransformerDecoderBlock(N, F)(x, np.concatenate([memory, memory]))
    with pytest.raises(ValueError, match="decoder_sequence"):
        TransformerDecoderBlock(N, F)(x[0])
    with pytest.raises(ValueError, match="num_layers=2"):
        TransformerDecoder(2, N, F)(x[:, :1], self_attention_cache=ops.zeros((B, 3, 2, T, N, D // N)),
                                    self_attention_cache_update_index=0)
    with pytest.raises(ValueError, match="built decoder-only"):
        block = TransformerDecoderBlock(N, F)
        block(x)
        block(x, memory)
    for kwargs in ({"num_heads": 0}, {"dropout": 1.5}, {"intermediate_dim": -1}):
        with pytest.raises(ValueError):
            TransformerEncoderBlock(**{"num_heads": N, "intermediate_dim": F, **kwargs})


# ---- masks are checked under the caller's argument names ---------------------------------------------------


def _mask_error(call, name):
    with pytest.raises(ValueError, match=f"`{name}`") as error:
        call()
    message = str(error.value)
    assert "query_mask" not in message and "value_mask" not in message, message


def test_block_masks_are_reported_under_their_own_names(data):
    x, memory = data
    encoder = TransformerEncoderBlock(N, F)
    encoder(x)
    decoder = TransformerDecoderBlock(N, F)
    decoder(x, memory)
    cases = [
        (lambda: encoder(x, padding_mask=np.ones((B, T + 1), bool)), "padding_mask"),
        (lambda: encoder(x, padding_mask=np.ones((B, T), "float32")), "padding_mask"),
        (lambda: encoder(x, attention_mask=np.ones((B, T, T + 1), bool)), "attention_mask"),
        (lambda: decoder(x, memory, decoder_padding_mask=np.ones((B, S), bool)), "decoder_padding_mask"),
        (lambda: decoder(x, memory, decoder_attention_mask=np.ones((B, T, S), bool)), "decoder_attention_mask"),
        (lambda: decoder(x, memory, encoder_padding_mask=np.ones((B, T), bool)), "encoder_padding_mask"),
        (lambda: decoder(x, memory, encoder_attention_mask=np.ones((B, T, T), bool)), "encoder_attention_mask"),
        # With a cache the self-attention keys are the cache positions: (B, 1, S_max) for one step.
        (lambda: decoder(x[:, :1], memory, decoder_attention_mask=np.ones((B, 1, 3), bool),
                         self_attention_cache=ops.zeros((B, 2, T, N, D // N)), self_attention_cache_update_index=0),
         "decoder_attention_mask"),
    ]
    for call, name in cases:
        _mask_error(call, name)


def test_stack_masks_are_reported_under_their_own_names(data):
    x, memory = data
    encoder = TransformerEncoder(2, N, F)
    decoder = TransformerDecoder(2, N, F)
    _mask_error(lambda: encoder(x, padding_mask=np.ones((B, S), bool)), "padding_mask")
    _mask_error(lambda: encoder(x, attention_mask=np.ones((B, S, S), bool)), "attention_mask")
    _mask_error(lambda: decoder(x, memory, decoder_padding_mask=np.ones((B, S), bool)), "decoder_padding_mask")
    _mask_error(lambda: decoder(x, memory, encoder_padding_mask=np.ones((B, T), bool)), "encoder_padding_mask")
    _mask_error(lambda: decoder(x, memory, encoder_attention_mask=np.ones((B, T, T), bool)), "encoder_attention_mask")


# ---- missing inputs and a feature size other than the built one -------------------------------------------


def test_missing_inputs_and_changed_feature_size(data):
    x, memory = data
    for make, call, match in [
        (lambda: FeedForward(F), lambda layer: layer(None), "`inputs` is required"),
        (lambda: TransformerEncoderBlock(N, F), lambda layer: layer(None), "`inputs` is required"),
        (lambda: TransformerDecoderBlock(N, F), lambda layer: layer(None, memory), "`decoder_sequence` is required"),
        (lambda: TransformerEncoder(2, N, F), lambda layer: layer(None), "`inputs` is required"),
        (lambda: TransformerDecoder(2, N, F), lambda layer: layer(None, memory), "`decoder_sequence` is required"),
    ]:
        with pytest.raises(ValueError, match=match):
            call(make())
    narrow, memory_narrow = x[..., : D - 2], memory[..., : D - 2]
    ffn, encoder, decoder = FeedForward(F), TransformerEncoderBlock(N, F), TransformerDecoderBlock(N, F)
    ffn(x), encoder(x), decoder(x, memory)
    encoder_stack, decoder_stack = TransformerEncoder(2, N, F), TransformerDecoder(2, N, F)
    encoder_stack(x), decoder_stack(x, memory)
    for call, match in [
        (lambda: ffn(narrow), rf"`inputs` must have last axis {D}"),
        (lambda: encoder(narrow), rf"`inputs` must have last axis {D}"),
        (lambda: encoder(None), "`inputs` is required"),
        (lambda: decoder(narrow, memory), rf"`decoder_sequence` must have last axis {D}"),
        (lambda: decoder(x, memory_narrow), rf"`encoder_sequence` must have last axis {D}"),
        (lambda: encoder_stack(narrow), rf"`inputs` must have last axis {D}"),
        (lambda: decoder_stack(x, memory_narrow), rf"`encoder_sequence` must have last axis {D}"),
    ]:
        with pytest.raises(ValueError, match=match):
            call()


def test_decoder_block_outputs_pack_and_unpack():
    from attnlayers.transformer import DecoderBlockOutputs

    o, c1, c2, s = "outputs", "self", "cross", {"self_attention": 1}
    for has_self, has_cross, scores, packed in [
        (False, True, False, o), (False, True, True, (o, s)), (True, False, False, (o, c1)),
        (True, True, False, (o, c1, c2)), (True, True, True, (o, c1, c2, s)), (True, False, True, (o, c1, s)),
    ]:
        parts = DecoderBlockOutputs(
            o, c1 if has_self else None, c2 if has_self and has_cross else None, s if scores else None
        )
        assert parts.pack(has_self, has_cross, scores) == packed
        assert DecoderBlockOutputs.unpack(packed, has_self, has_cross, scores) == parts


def test_the_split_modules_keep_every_public_name_of_attnlayers_transformer():
    """attnlayers.transformer holds the stacks and re-exports the blocks and the feed-forward sublayer, the same
    classes under the same registered names."""
    import keras

    from attnlayers import feed_forward, transformer, transformer_blocks

    for name in transformer.__all__:
        cls = getattr(transformer, name)
        assert cls is getattr(feed_forward, name, None) or cls is getattr(transformer_blocks, name, None) \
            or cls.__module__ == "attnlayers.transformer"
    for cls in (transformer.FeedForward, transformer.TransformerEncoderBlock, transformer.TransformerDecoder):
        assert keras.saving.get_registered_name(cls) == f"attnlayers>{cls.__name__}"
