"""The BERT backbone: the closed-form parameter count equals the built model's (and gives BERT-Base's and -Large's
published sizes), output shapes and hidden-state features, padding invariance, default inputs, bad inputs
refused by name, config round trip, and keras-hub's BertBackbone with copied weights gives the same outputs."""

import keras
import keras_hub
import numpy as np
import pytest
from attnlayers.applications.bert import FEATURES, BertBackbone, BertConfig
from attnlayers.applications.bert.checkpoint import copy_keras_hub_weights, from_keras_hub
from keras import ops
from model_harness import run_model_test

SMALL = BertConfig(vocabulary_size=50, max_sequence_length=16, num_segments=3, num_layers=4, num_heads=2,
                   hidden_dim=8, intermediate_dim=24)
TOKENS = np.array([[2, 7, 11, 5, 9, 3], [2, 8, 3, 6, 0, 0], [2, 30, 0, 0, 0, 0]], "int32")
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 2, 1, 0, 0], [0, 1, 0, 0, 0, 0]], "int32")
MASK = TOKENS != 0


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _inputs(tokens=TOKENS, segments=SEGMENTS, mask=MASK):
    return {"token_ids": tokens, "segment_ids": segments, "padding_mask": mask}


@pytest.fixture(scope="module")
def backbone():
    keras.utils.set_random_seed(5)
    model = BertBackbone(SMALL)
    model(_inputs())
    return model


def test_parameter_count_closed_form():
    tiny = BertBackbone("tiny")
    tiny(TOKENS)
    assert tiny.count_params() == tiny.config.parameter_count() == BertConfig.preset("tiny").parameter_count()
    small = BertBackbone(SMALL)
    small(TOKENS)
    assert small.count_params() == SMALL.parameter_count()
    assert SMALL.parameter_count(pooler=False) == SMALL.parameter_count() - (8 * 8 + 8)
    # Devlin et al. 2019's BERT-Base (110M) and BERT-Large (340M), exactly, without building them.
    assert BertConfig.preset("base").parameter_count() == 109_482_240
    assert BertConfig.preset("large").parameter_count() == 335_141_888


def test_output_shapes_and_hidden_states(backbone):
    out = backbone(_inputs())
    assert sorted(out) == ["pooled_output", "sequence_output"]
    assert tuple(out["sequence_output"].shape) == (3, 6, 8)
    assert tuple(out["pooled_output"].shape) == (3, 8)

    out = backbone(_inputs(), return_hidden_states=True)
    assert sorted(out) == ["hidden_states", "pooled_output", "sequence_output"]
    hidden = out["hidden_states"]
    assert len(hidden) == SMALL.num_layers + 1  # the embeddings, then every block
    assert all(tuple(h.shape) == (3, 6, 8) for h in hidden)
    np.testing.assert_array_equal(_np(hidden[-1]), _np(out["sequence_output"]))


@pytest.mark.parametrize("combination", FEATURES)
def test_features(backbone, combination):
    features = _np(backbone.features(_inputs(), combination))
    hidden = [_np(h) for h in backbone(_inputs(), return_hidden_states=True)["hidden_states"]]
    layers = hidden[1:]
    expected = {
        "last": layers[-1], "second_to_last": layers[-2], "sum_last_four": sum(layers[-4:]),
        "concat_last_four": np.concatenate(layers[-4:], axis=-1), "sum_all": sum(layers), "embeddings": hidden[0],
    }[combination]
    assert features.shape == ((3, 6, 32) if combination == "concat_last_four" else (3, 6, 8))
    np.testing.assert_allclose(features, expected, atol=1e-6)


def test_features_errors():
    shallow = BertBackbone(BertConfig(**{**vars(SMALL), "num_layers": 2}))
    with pytest.raises(ValueError, match="`combination='sum_last_four'` needs more layers than this model's 2"):
        shallow.features(_inputs(), "sum_last_four")
    with pytest.raises(ValueError, match="Unknown `combination` 'mean'"):
        shallow.features(_inputs(), "mean")


def test_padding_invariance(backbone):
    reference = backbone(_inputs())
    rng = np.random.default_rng(0)
    tokens = np.where(MASK, TOKENS, rng.integers(1, 50, TOKENS.shape)).astype("int32")  # junk in padded slots
    segments = np.where(MASK, SEGMENTS, rng.integers(0, 3, TOKENS.shape)).astype("int32")
    changed = backbone(_inputs(tokens, segments, MASK))
    np.testing.assert_allclose(_np(changed["sequence_output"])[MASK], _np(reference["sequence_output"])[MASK],
                               atol=1e-6)
    np.testing.assert_allclose(_np(changed["pooled_output"]), _np(reference["pooled_output"]), atol=1e-6)


def test_default_segment_ids_and_padding_mask(backbone):
    explicit = backbone(_inputs(TOKENS, np.zeros_like(TOKENS), TOKENS != SMALL.pad_token_id))
    for defaulted in (backbone({"token_ids": TOKENS}), backbone(TOKENS)):
        for key in ("sequence_output", "pooled_output"):
            np.testing.assert_array_equal(_np(defaulted[key]), _np(explicit[key]))


def test_bad_inputs_are_refused_by_name(backbone):
    too_long = np.ones((1, 17), "int32")
    with pytest.raises(ValueError, match="`token_ids` has 17 positions but max_sequence_length is 16"):
        backbone(too_long)
    with pytest.raises(ValueError, match=r"received keys \['tokens'\]"):
        backbone({"tokens": TOKENS})
    with pytest.raises(ValueError, match=r"received keys \['mask', 'token_ids'\]"):
        backbone({"token_ids": TOKENS, "mask": MASK})
    shape = r"must have the shape of `token_ids` \(3, 6\); received "
    with pytest.raises(ValueError, match=r"`segment_ids` " + shape + r"\(3, 5\)"):
        backbone(_inputs(segments=SEGMENTS[:, :5]))
    with pytest.raises(ValueError, match=r"`padding_mask` " + shape + r"\(2, 6\)"):
        backbone(_inputs(mask=MASK[:2]))
    with pytest.raises(ValueError, match="token_ids"):
        backbone(TOKENS[0])  # (T,) instead of (B, T)


@pytest.mark.parametrize(
    "inputs, match",
    [
        (lambda: _inputs(tokens=np.where(TOKENS == 30, 50, TOKENS)),
         r"`token_ids`.*\[0, vocabulary_size=50\).*\[2, 1\] = 50"),
        (lambda: TOKENS - 1, r"`token_ids`.*\[0, vocabulary_size=50\).*= -1"),
        (lambda: _inputs(segments=SEGMENTS + 1), r"`segment_ids`.*\[0, num_segments=3\).*\[1, 2\] = 3"),
        (lambda: _inputs(segments=-SEGMENTS), r"`segment_ids`.*\[0, num_segments=3\).*\[0, 3\] = -1"),
    ],
)
def test_out_of_range_ids_are_refused_by_name(backbone, inputs, match):
    with pytest.raises(ValueError, match=match):
        backbone(inputs())
    edge = np.array([[0, 49, 2]], "int32")  # the first and the last token id, the last segment
    assert tuple(backbone({"token_ids": edge, "segment_ids": np.array([[0, 2, 1]], "int32")})["pooled_output"].shape) \
        == (1, 8)


def test_passes_the_model_harness(backbone, tmp_path):
    """Config and .keras round trips: the same sequence and pooled outputs."""
    run_model_test(lambda: backbone, _inputs(), tmp_path)
    assert BertBackbone.from_config(backbone.get_config()).config == SMALL


def _exact_gelu(keras_hub_backbone):
    """keras-hub's BERT blocks use the tanh approximation of GELU; ours (and Hugging Face's) the erf form. The
    same function needs the same activation: switch keras-hub's feed-forward to the erf form."""
    for layer in keras_hub_backbone.transformer_layers:
        layer._feedforward_intermediate_dense.activation = keras.activations.gelu  # approximate=False
    return keras_hub_backbone


def test_equals_keras_hub_backbone_with_copied_weights():
    config = BertConfig.preset("tiny", vocabulary_size=120, max_sequence_length=16)
    keras_hub_backbone = keras_hub.models.BertBackbone(
        vocabulary_size=120, num_layers=2, num_heads=2, hidden_dim=128, intermediate_dim=512, max_sequence_length=16,
    )
    rng = np.random.default_rng(1)
    for w in keras_hub_backbone.weights:  # random LayerNorm and biases too, so that no mapping slip hides
        w.assign(w.value + 0.05 * rng.standard_normal(w.shape).astype("float32"))
    ours = copy_keras_hub_weights(keras_hub_backbone, BertBackbone(config))
    tokens = rng.integers(1, 120, (3, 10)).astype("int32")
    mask = np.arange(10)[None] < np.array([[10], [7], [3]])
    tokens = np.where(mask, tokens, 0).astype("int32")
    segments = np.where(np.arange(10)[None] >= 5, 1, 0).astype("int32") * mask
    reference = _exact_gelu(keras_hub_backbone)(
        {"token_ids": tokens, "segment_ids": segments, "padding_mask": mask.astype("int32")})
    for model in (ours, from_keras_hub(keras_hub_backbone)):
        out = model({"token_ids": tokens, "segment_ids": segments, "padding_mask": mask})
        np.testing.assert_allclose(_np(out["sequence_output"])[mask], _np(reference["sequence_output"])[mask],
                                   atol=1e-5)
        np.testing.assert_allclose(_np(out["pooled_output"]), _np(reference["pooled_output"]), atol=1e-5)


def test_copy_keras_hub_weights_names_mismatches():
    keras_hub_backbone = keras_hub.models.BertBackbone(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=16,
    )
    ours = BertBackbone(BertConfig(**{**vars(SMALL), "num_segments": 2}))  # 4 layers, d_ff 24
    ours({"token_ids": np.zeros((1, 2), "int32"), "padding_mask": np.ones((1, 2), bool)})
    before = [_np(w) for w in ours.weights]
    with pytest.raises(ValueError) as error:
        copy_keras_hub_weights(keras_hub_backbone, ours)
    for old, weight in zip(before, ours.weights):  # nothing half-copied (the embeddings' shapes fit)
        np.testing.assert_array_equal(_np(weight), old)
    message = str(error.value)
    assert "transformer_layer_0/feedforward_intermediate_dense/kernel (8, 16)" in message
    assert "encoder/transformerencoderblock_3/self_attention/query/kernel" in message  # not copied


def test_attention_implementation_reaches_every_attention():
    """BertConfig(attention_implementation=...) is every encoder block's MultiHeadAttention option (the route its
    calls take, recorded in last_attention); an unknown name is refused."""
    from attnlayers.layer_walk import nested_layers

    backbone = BertBackbone(BertConfig(vocabulary_size=32, num_layers=2, hidden_dim=16, num_heads=2,
                                       intermediate_dim=32, attention_implementation="chunked"))
    ids = np.arange(16, dtype="int32").reshape(2, 8)
    backbone({"token_ids": ids, "padding_mask": ids > 0}, training=True)
    taken = [layer.last_attention for layer in nested_layers(backbone) if hasattr(layer, "last_attention")]
    assert len(taken) == 2 and all(route.route == "chunked" for route in taken), taken
    with pytest.raises(ValueError, match="attention_implementation.*'cudnn'"):
        BertConfig(attention_implementation="cudnn")
