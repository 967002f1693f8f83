"""The GPT application's model: cached steps equal the full forward pass, greedy generation equals the argmax of
teacher-forced logits, keras-hub's GPT-2 weights give keras-hub's outputs, the model harness (configs and .keras
files round-trip, a fit step on keras-hub's dict inputs), bad input is refused by name. Runs under the TensorFlow
and JAX backends."""

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from attnlayers.applications.core import GenerativeModel
from attnlayers.applications.gpt import GPT, GPTConfig, copy_keras_hub_weights, from_keras_hub
from attnlayers.decoding import BeamSearch, Sampling
from model_harness import run_model_test

CONFIG = GPTConfig(vocabulary_size=29, max_sequence_length=12, num_layers=2, num_heads=2, hidden_dim=16,
                   intermediate_dim=32)
PROMPT = np.array([[5, 9, 3, 7], [7, 4, 0, 0], [11, 0, 0, 0]], "int32")
PROMPT_MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], bool)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(11)
    return GPT(CONFIG)


def test_shapes_and_special_tokens(model):
    logits = model(PROMPT, padding_mask=PROMPT_MASK)
    assert tuple(logits.shape) == (3, 4, 29)
    assert (model.end_token_id, model.pad_token_id) == (28, 28)  # GPT-2's convention: <|endoftext|> = V - 1
    custom = GPT(GPTConfig(vocabulary_size=10, end_token_id=3, pad_token_id=0))
    assert (custom.end_token_id, custom.pad_token_id) == (3, 0)
    # Tied output projection: the token embedding is the only (V, d) matrix.
    assert sum(tuple(w.shape) == (29, 16) for w in model.weights) == 1


def test_cached_next_equals_full_recomputation(model):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 29, size=(3, 12)).astype("int32")
    tokens[:, :4] = np.where(PROMPT_MASK, PROMPT, tokens[:, :4])
    full = _np(model(tokens))  # (B, L, V): position i scores token i + 1
    cache = model.initial_cache(PROMPT, PROMPT_MASK, max_length=12)
    assert tuple(cache.shape) == (3, 2, 2, 12, 2, 8)
    # Steps from the shortest prompt on: the first rewrites the prompt's entries, as generate() does.
    for index in range(1, 12):
        logits, cache = model.next(tokens, cache, ops.convert_to_tensor(index, "int32"))
        np.testing.assert_allclose(_np(logits), full[:, index - 1], atol=1e-5, err_msg=f"index {index}")


def test_greedy_generate_is_the_argmax_of_teacher_forced_logits(model):
    result = model.generate(PROMPT, max_length=12, padding_mask=PROMPT_MASK, stop_token_ids=None)
    tokens = _np(result.tokens)
    assert tokens.shape == (3, 12)
    np.testing.assert_array_equal(tokens[:, :4][PROMPT_MASK], PROMPT[PROMPT_MASK])
    predicted = _np(ops.argmax(model(tokens), axis=-1))
    for row, start in enumerate(PROMPT_MASK.sum(1)):
        np.testing.assert_array_equal(tokens[row, start:], predicted[row, start - 1:-1])
    np.testing.assert_array_equal(_np(result.lengths), [12, 12, 12])


def test_generate_stops_at_the_end_token():
    keras.utils.set_random_seed(2)
    free = GPT(CONFIG).generate(PROMPT, max_length=12, padding_mask=PROMPT_MASK, stop_token_ids=None)
    end = int(_np(free.tokens)[0, 6])  # a token that greedy decoding emits in row 0
    keras.utils.set_random_seed(2)
    model = GPT(GPTConfig(**{**vars(CONFIG), "end_token_id": end, "pad_token_id": 0}))
    result = model.generate(PROMPT, max_length=12, padding_mask=PROMPT_MASK)  # stop_token_ids="auto"
    tokens, lengths = _np(result.tokens), _np(result.lengths)
    assert lengths[0] <= 7 and tokens[0, lengths[0] - 1] == end
    assert np.all(tokens[0, lengths[0]:] == 0)  # then pad_token_id


def test_generate_with_other_strategies(model):
    beam = model.generate(PROMPT, max_length=10, search=BeamSearch(3, 2), padding_mask=PROMPT_MASK)
    assert tuple(beam.tokens.shape) == (3, 2, 10)
    first = _np(model.generate(PROMPT, 10, Sampling(top_k=5), seed=4, padding_mask=PROMPT_MASK).tokens)
    again = _np(model.generate(PROMPT, 10, Sampling(top_k=5), seed=4, padding_mask=PROMPT_MASK).tokens)
    other = _np(model.generate(PROMPT, 10, Sampling(top_k=5), seed=5, padding_mask=PROMPT_MASK).tokens)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_gpt_is_a_generative_model(model):
    """GPT stands on the shared generation contract: generation_inputs gives the prompt, its mask and the prefilled
    cache; core's generate (under GPT's argument names) decodes from them."""
    assert isinstance(model, GenerativeModel)
    assert (model.start_token_id, model.stop_token_ids, model.max_generation_length) == (None, (28,), 12)
    inputs = model.generation_inputs(PROMPT, padding_mask=PROMPT_MASK, max_length=10)
    np.testing.assert_array_equal(_np(inputs["prompt"]), PROMPT)
    np.testing.assert_array_equal(_np(inputs["prompt_mask"]), PROMPT_MASK)
    np.testing.assert_allclose(_np(inputs["cache"]), _np(model.initial_cache(PROMPT, PROMPT_MASK, 10)), atol=1e-6)
    assert tuple(inputs["cache"].shape) == (3, 2, 2, 10, 2, 8)
    ours = model.generate(token_ids=PROMPT, max_length=10, padding_mask=PROMPT_MASK)  # GPT's keyword names
    core = GenerativeModel.generate(model, PROMPT, 10, padding_mask=PROMPT_MASK)
    np.testing.assert_array_equal(_np(ours.tokens), _np(core.tokens))
    np.testing.assert_array_equal(_np(ours.lengths), _np(core.lengths))
    assert model.generate(PROMPT).tokens.shape == (3, 12)  # default: max_sequence_length


def test_mixed_precision():
    keras.utils.set_random_seed(11)
    model = GPT(CONFIG, dtype="mixed_bfloat16")
    logits = model(PROMPT, padding_mask=PROMPT_MASK)
    assert keras.backend.standardize_dtype(logits.dtype) == "bfloat16"
    assert np.all(np.isfinite(_np(ops.cast(logits, "float32"))))
    result = model.generate(PROMPT, max_length=8, padding_mask=PROMPT_MASK, stop_token_ids=None)
    tokens = _np(result.tokens)
    assert tokens.shape == (3, 8) and tokens.min() >= 0 and tokens.max() < 29
    assert np.all(np.isfinite(_np(result.scores)))


def test_keras_hub_weights_give_keras_hub_outputs():
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=29, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32, max_sequence_length=12,
    )
    ours = from_keras_hub(backbone)
    ids = np.array([[5, 9, 3, 7, 1, 2, 8, 4], [7, 4, 6, 0, 0, 0, 0, 0]], "int32")
    mask = ids != 0
    hidden = backbone({"token_ids": ids, "padding_mask": mask})
    expected = _np(ops.matmul(hidden, ops.transpose(backbone.token_embedding.embeddings)))  # GPT2CausalLM's logits
    np.testing.assert_allclose(_np(ours(ids, padding_mask=mask))[mask], expected[mask], atol=1e-5)  # the bar; measured 0.0
    # keras-hub's own greedy generation gives our tokens.
    hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    hub.compile(sampler="greedy")
    buffer = np.zeros((2, 12), "int32")
    buffer[:, :8] = ids
    hub_tokens = _np(hub.generate({"token_ids": buffer, "padding_mask": buffer != 0}, stop_token_ids=None)["token_ids"])
    result = ours.generate(ids, max_length=12, padding_mask=mask, stop_token_ids=None)
    np.testing.assert_array_equal(_np(result.tokens), hub_tokens)
    # Different sizes are refused by name.
    with pytest.raises(ValueError, match="same architecture.*shapes that differ"):
        copy_keras_hub_weights(backbone, GPT(GPTConfig(vocabulary_size=30, max_sequence_length=12, num_layers=2,
                                                       num_heads=2, hidden_dim=16, intermediate_dim=32)))


def _same_special_ids(loaded, model):
    assert (loaded.end_token_id, loaded.pad_token_id, loaded.stop_token_ids) == (
        model.end_token_id, model.pad_token_id, model.stop_token_ids)


def test_passes_the_model_harness(tmp_path):
    """Config and .keras round trips (the special ids kept: the same greedy tokens, stopping at end_token_id), and
    one fit step on keras-hub's dict inputs {"token_ids", "padding_mask"} with sample weights."""
    sequence = np.tile(np.arange(1, 12, dtype="int32"), (8, 1))
    mask = np.ones_like(sequence, bool)
    mask[4:, 8:] = False
    x = {"token_ids": sequence[:, :-1], "padding_mask": mask[:, :-1]}

    def make():
        keras.utils.set_random_seed(11)
        return GPT(CONFIG)

    def compile_lm(lm):
        lm.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"))

    lm = run_model_test(make, PROMPT, tmp_path, call=lambda m, ids: m(ids, padding_mask=PROMPT_MASK),
                        generate=lambda m, ids: m.generate(ids, 6, padding_mask=PROMPT_MASK).tokens,
                        compile=compile_lm, fit_batch=(x, sequence[:, 1:], mask[:, 1:].astype("float32")),
                        check_loaded=_same_special_ids)
    assert isinstance(GPT.from_config(lm.get_config()).config, GPTConfig)
    np.testing.assert_allclose(_np(lm(x)), _np(lm(x["token_ids"], padding_mask=x["padding_mask"])), atol=1e-6)
    with pytest.raises(ValueError, match="token_ids.*received keys"):
        lm({"ids": sequence})


def test_trains():
    keras.utils.set_random_seed(0)
    lm = GPT(CONFIG)
    lm.compile(optimizer=keras.optimizers.Adam(1e-2),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    sequence = np.tile(np.arange(1, 12, dtype="int32"), (8, 1))  # count upwards
    history = lm.fit(sequence[:, :-1], sequence[:, 1:], epochs=15, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda m: GPTConfig(hidden_dim=30, num_heads=4), r"hidden_dim.*num_heads.*hidden_dim=30"),
        (lambda m: GPTConfig(num_layers=0), r"num_layers.*num_layers=0"),
        (lambda m: GPTConfig(dropout=1.5), r"dropout.*dropout=1.5"),
        (lambda m: GPTConfig(vocabulary_size=10, end_token_id=10), r"end_token_id.*vocabulary_size=10"),
        (lambda m: GPT(config="gpt2"), r"config.*'gpt2'"),
        (lambda m: m(np.zeros((2, 3, 4), "int32")), r"token_ids.*\(batch, length\).*\(2, 3, 4\)"),
        (lambda m: m.generate(np.zeros((2, 3), "float32")), r"token_ids.*integer.*float32"),
        (lambda m: m(np.zeros((1, 13), "int32")), r"token_ids.*max_sequence_length=12.*\(1, 13\)"),
        (lambda m: m(PROMPT, padding_mask=PROMPT_MASK[:, :3]), r"padding_mask.*\(3, 4\).*\(3, 3\)"),
        (lambda m: m.generate(PROMPT, max_length=13), r"max_length.*max_sequence_length=12.*max_length=13"),
        (lambda m: m.generate(PROMPT, max_length=3), r"max_length.*prompt length 4.*max_length=3"),
        (lambda m: m.initial_cache(PROMPT, max_length=0), r"max_length.*max_length=0"),
        # token ids outside [0, V) (the bug: a CPU gather error, zeros on a GPU, tokens generated from -1)
        (lambda m: m(np.array([[1, 29, 2]], "int32")), r"token_ids.*\[0, vocabulary_size=29\).*\[0, 1\] = 29"),
        (lambda m: m(np.array([[1, 5000]], "int32")), r"token_ids.*\[0, vocabulary_size=29\).*= 5000"),
        (lambda m: m.generate(np.array([[3, -1]], "int32")), r"token_ids.*\[0, vocabulary_size=29\).*= -1"),
        (lambda m: m.generate(np.array([[3, 5000]], "int32"), 6, "sample", seed=1), r"token_ids.*= 5000"),
        (lambda m: m.generation_inputs(np.array([[3, 29]], "int32")), r"token_ids.*= 29"),
        (lambda m: m.initial_cache(np.array([[-2, 3]], "int32")), r"token_ids.*= -2"),
        (lambda m: m({"token_ids": np.array([[1, 40]], "int32")}), r"token_ids.*= 40"),
        # a seed that is not an int / integer tensor (the bug: "Cast string to uint32 is not supported")
        (lambda m: m.generate(PROMPT, 6, "sample", seed="abc"), r"seed.*int.*integer tensor.*'abc'"),
        (lambda m: m.generate(PROMPT, 6, seed="abc"), r"seed.*'abc'"),
        (lambda m: m.generate(PROMPT, 6, "sample", seed=1.5), r"seed.*1.5"),
        (lambda m: m.generate(PROMPT, 6, "sample", seed=np.array([1.0, 2.0])), r"seed.*float"),
    ],
)
def test_bad_input(model, make, match):
    with pytest.raises(ValueError, match=match):
        make(model)


def test_initialization_scales_the_residual_projections_as_gpt2():
    """GPT-2's initialization (Radford et al. 2019, section 2.3): weights ~ N(0, 0.02), except the attention output
    and the MLP's second projection of each block, ~ N(0, 0.02 / sqrt(2 n_layer)); biases 0, LayerNorm scales 1;
    the same seed, the same weights."""
    config = GPTConfig(vocabulary_size=64, max_sequence_length=16, num_layers=4, num_heads=4, hidden_dim=128,
                       intermediate_dim=512)
    keras.utils.set_random_seed(3)
    model = GPT(config)
    residual = 0.02 / np.sqrt(2 * config.num_layers)
    scaled = 0
    for weight in model.weights:
        values, path = _np(weight.value), weight.path
        if path.endswith(("attention_output/kernel", "output_dense/kernel")):
            scaled += 1
            assert values.std() == pytest.approx(residual, rel=0.05), path
        elif path.endswith(("kernel", "embeddings")):
            assert values.std() == pytest.approx(0.02, rel=0.05), path
        elif path.endswith(("bias", "beta")):
            assert not values.any(), path
        else:
            assert path.endswith("gamma") and np.all(values == 1), path
        assert abs(values.mean()) < 0.1 * max(values.std(), 1e-3) or path.endswith("gamma"), path
    assert scaled == 2 * config.num_layers
    keras.utils.set_random_seed(3)
    again = GPT(config)
    for a, b in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(_np(a.value), _np(b.value))


def test_in_range_ids_and_integer_seeds_pass_the_checks(model):
    edge = np.array([[0, 28, 3]], "int32")  # the first and the last id of V = 29
    assert tuple(model(edge).shape) == (1, 3, 29)
    first = _np(model.generate(PROMPT, 8, Sampling(), seed=np.int64(3), padding_mask=PROMPT_MASK).tokens)
    again = _np(model.generate(PROMPT, 8, Sampling(), seed=ops.convert_to_tensor(3, "int32"),
                                padding_mask=PROMPT_MASK).tokens)
    np.testing.assert_array_equal(first, again)


def test_max_new_tokens_beyond_the_context_is_clipped(model):
    """2**31 - 1 ("no limit", what examples/generate.py passed) used to wrap around in the int32 prompt length +
    max_new_tokens and stop every row after one token."""
    full = model.generate(PROMPT, padding_mask=PROMPT_MASK, stop_token_ids=None)
    for n in (2**31 - 1, 2**31 - 3, 100):
        out = model.generate(PROMPT, padding_mask=PROMPT_MASK, stop_token_ids=None, max_new_tokens=n)
        np.testing.assert_array_equal(_np(out.lengths), [12, 12, 12])
        np.testing.assert_array_equal(_np(out.tokens), _np(full.tokens))
    out = model.generate(PROMPT, 9, "sample", seed=1, padding_mask=PROMPT_MASK, stop_token_ids=None,
                         max_new_tokens=2**31 - 1)
    np.testing.assert_array_equal(_np(out.lengths), [9, 9, 9])
    out = model.generate(PROMPT[:1], stop_token_ids=None, max_new_tokens=2**31 - 1)  # no mask: P + room = 12
    np.testing.assert_array_equal(_np(out.lengths), [12])
    out = model.generate(PROMPT, padding_mask=PROMPT_MASK, stop_token_ids=None, max_new_tokens=3)  # still honoured
    np.testing.assert_array_equal(_np(out.lengths), [7, 5, 4])


def test_attention_implementation_reaches_every_attention():
    """GPTConfig(attention_implementation=...) is every block's MultiHeadAttention option (the route its calls
    take, recorded in last_attention), for both architectures; an unknown name is refused before a layer is
    built."""
    from attnlayers.layer_walk import nested_layers
    from attnlayers.routes import AttentionRoute

    tokens = np.random.default_rng(0).integers(0, 64, (2, 8)).astype("int32")
    for architecture in ("gpt2", "llama"):
        model = GPT(GPTConfig(vocabulary_size=64, architecture=architecture, attention_implementation="chunked"))
        model(tokens, training=True)
        taken = [layer.last_attention for layer in nested_layers(model) if hasattr(layer, "last_attention")]
        assert len(taken) == 2 and all(route.route == "chunked" for route in taken), taken
        model = GPT(GPTConfig(vocabulary_size=64, architecture=architecture))
        model(tokens, training=True)
        assert {layer.last_attention for layer in nested_layers(model)
                if hasattr(layer, "last_attention")} == {AttentionRoute("exact")}
    with pytest.raises(ValueError, match="attention_implementation.*'cudnn'.*'flash'"):
        GPTConfig(attention_implementation="cudnn")
