"""The XLNet backbone: Hugging Face checkpoints in both key layouts (``XLNetModel``'s bare names and
``XLNetLMHeadModel``'s ``transformer.`` prefix) load into a backbone whose outputs equal a NumPy forward pass of
XLNet written here from the raw tensors, and are written back tensor for tensor; keras-hub's XLNetBackbone with
random, perturbed weights copied in either direction gives the same outputs; padding does not reach the real
tokens; the query stream never sees its own token; the closed-form parameter count."""

import json
import math
import os

import keras
import keras_hub
import numpy as np
import pytest
from attnlayers.applications.core.formats.safetensors import read_safetensors
from attnlayers.applications.xlnet import XLNetBackbone, XLNetConfig
from attnlayers.applications.xlnet.checkpoint import (
    config_from_hf,
    copy_keras_hub_weights,
    copy_weights_to_keras_hub,
    from_keras_hub,
    load_hf_checkpoint,
    save_hf_checkpoint,
)
from attnlayers.applications.xlnet.viewer import attention_maps, attention_viewer
from keras import ops
from model_harness import run_model_test
from safetensors_reference import write_safetensors

from attnlayers.permutation import permutation_masks, sample_factorization_order

HF_CONFIG = {
    "architectures": ["XLNetLMHeadModel"], "model_type": "xlnet", "vocab_size": 40, "d_model": 16, "n_layer": 2,
    "n_head": 2, "d_head": 8, "d_inner": 24, "ff_activation": "gelu", "attn_type": "bi", "bi_data": False,
    "clamp_len": -1, "same_length": False, "mem_len": None, "dropout": 0.1, "layer_norm_eps": 1e-12,
    "pad_token_id": 5,
}
# XLNet's segments: A = 0, B = 1, <cls> = 2 (its own segment); 5 is <pad>.
TOKENS = np.array([[7, 11, 9, 3, 12, 30, 4], [8, 3, 6, 20, 4, 5, 5], [31, 3, 4, 5, 5, 5, 5]], "int32")
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 2], [0, 0, 1, 1, 2, 0, 0], [0, 1, 2, 0, 0, 0, 0]], "int32")
MASK = TOKENS != 5


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _inputs(tokens=TOKENS, segments=SEGMENTS, mask=MASK):
    return {"token_ids": tokens, "segment_ids": segments, "padding_mask": mask}


# ------------------------------------------------------------------------------------------------------------------
# XLNet in NumPy from Hugging Face's tensors (XLNetModel's equations, attn_type "bi"), float64.


def _random_tensors(config=HF_CONFIG, seed=0):
    """An XLNetModel's tensors in its names, all random (LayerNorm scales around 1, every bias nonzero)."""
    rng = np.random.default_rng(seed)
    d, f, n = config["d_model"], config["d_inner"], config["n_head"]
    h = d // n

    def normal(*shape, scale=0.3, center=0.0):
        return (center + scale * rng.standard_normal(shape)).astype("float32")

    tensors = {"word_embedding.weight": normal(config["vocab_size"], d), "mask_emb": normal(1, 1, d)}
    for i in range(config["n_layer"]):
        p = f"layer.{i}."
        for name in ("q", "k", "v", "o", "r"):
            tensors[f"{p}rel_attn.{name}"] = normal(d, n, h)
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            tensors[f"{p}rel_attn.{name}"] = normal(n, h)
        tensors[f"{p}rel_attn.seg_embed"] = normal(2, n, h)
        tensors[f"{p}ff.layer_1.weight"], tensors[f"{p}ff.layer_1.bias"] = normal(f, d), normal(f, scale=0.1)
        tensors[f"{p}ff.layer_2.weight"], tensors[f"{p}ff.layer_2.bias"] = normal(d, f), normal(d, scale=0.1)
        for norm in ("rel_attn.layer_norm", "ff.layer_norm"):
            tensors[f"{p}{norm}.weight"], tensors[f"{p}{norm}.bias"] = normal(d, scale=0.1, center=1.0), normal(d)
    return tensors


def reference_xlnet(tensors, config, token_ids, segment_ids, padding_mask, masks=None, attention_weights=None):
    """The last hidden states (B, T, d) of Hugging Face's XLNetModel (eval mode): the content stream, or with
    ``masks`` (content, query: (B, T, T), True = may attend) the content and the query stream (section 2.3: g starts
    from w and attends the content stream's keys and values with its own queries). A query that sees no key gets
    a zero attention output (attnlayers' rule; Hugging Face averages every value there). ``attention_weights``: a
    list that receives each layer's content-stream weights (B, N, T, T)."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    d, eps, length = config["d_model"], config["layer_norm_eps"], token_ids.shape[1]
    head_dim = d // config["n_head"]
    x = t["word_embedding.weight"][token_ids]
    # R_{i-j} = [sin((i - j) f), cos((i - j) f)], f_k = 1 / 10000^(2k / d) (Transformer-XL, sines first).
    frequencies = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    angles = (np.arange(length)[:, None] - np.arange(length)[None, :])[..., None] * frequencies
    relative = np.concatenate([np.sin(angles), np.cos(angles)], -1)  # (T, T, d)
    different = segment_ids[:, :, None] != segment_ids[:, None, :]  # (B, T, T)
    if masks is None:  # real keys, and each position itself
        masks = (padding_mask[:, None, :] | np.eye(length, dtype=bool), None)
    streams = [x, None if masks[1] is None else np.broadcast_to(t["mask_emb"], x.shape)]  # h^(0) = E[x], g^(0) = w

    def post_ln(x, update, name):
        y = x + update
        mean, variance = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
        return (y - mean) / np.sqrt(variance + eps) * t[f"{name}.weight"] + t[f"{name}.bias"]

    for i in range(config["n_layer"]):
        p, f = f"layer.{i}.rel_attn.", f"layer.{i}.ff."
        k, v = (np.einsum("bjd,dnh->bjnh", streams[0], t[p + name]) for name in ("k", "v"))  # from h only
        position_keys = np.einsum("ijd,dnh->ijnh", relative, t[p + "r"])

        def attend(stream, visible):
            q = np.einsum("bid,dnh->binh", stream, t[p + "q"])
            content = np.einsum("binh,bjnh->bnij", q + t[p + "r_w_bias"], k)  # (a) + (c)
            position = np.einsum("binh,ijnh->bnij", q + t[p + "r_r_bias"], position_keys)  # (b) + (d)
            segment = np.einsum("binh,snh->bnis", q + t[p + "r_s_bias"], t[p + "seg_embed"])
            segment = np.where(different[:, None], segment[..., 1:], segment[..., :1])  # s_- across segments
            scores = np.where(visible[:, None], (content + position + segment) / math.sqrt(head_dim), -1e30)
            weights = np.exp(scores - scores.max(-1, keepdims=True)) * visible[:, None]
            weights /= np.maximum(weights.sum(-1, keepdims=True), 1e-30)
            if attention_weights is not None and stream is streams[0]:
                attention_weights.append(weights)
            return np.einsum("binh,dnh->bid", np.einsum("bnij,bjnh->binh", weights, v), t[p + "o"])

        for s, (stream, visible) in enumerate(zip(list(streams), masks)):
            if stream is None:
                continue
            x = post_ln(stream, attend(stream, visible), p + "layer_norm")
            hidden = x @ t[f + "layer_1.weight"].T + t[f + "layer_1.bias"]
            hidden = 0.5 * hidden * (1.0 + np.vectorize(math.erf)(hidden / math.sqrt(2.0)))  # GELU, erf form
            streams[s] = post_ln(x, hidden @ t[f + "layer_2.weight"].T + t[f + "layer_2.bias"], f + "layer_norm")
    return streams[0] if masks[1] is None else tuple(streams)


def _write_checkpoint(directory, tensors, config=HF_CONFIG):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    return str(directory)


# ------------------------------------------------------------------------------------------------------------------


def test_hugging_face_checkpoints_in_both_layouts(tmp_path):
    """Read: the bare layout equals the NumPy XLNet at every position, the prefixed one loads the same weights.
    Write: both layouts hold every tensor as read (so they read back to the same outputs)."""
    tensors = _random_tensors()
    lm_bias = np.linspace(-1, 1, 40).astype("float32")
    lm_head = {"transformer." + name: value for name, value in tensors.items()}
    lm_head["lm_loss.bias"] = lm_bias
    backbone, info = load_hf_checkpoint(_write_checkpoint(tmp_path / "XLNetModel", tensors))
    weights = []
    np.testing.assert_allclose(_np(backbone(_inputs())),
                               reference_xlnet(tensors, HF_CONFIG, TOKENS, SEGMENTS, MASK, attention_weights=weights),
                               atol=1e-5)
    np.testing.assert_allclose(attention_maps(backbone, _inputs()), np.stack(weights, 1), atol=1e-5)  # the viewer's
    assert (info["prefix"], info["ignored"]) == ("", [])
    prefixed, info = load_hf_checkpoint(_write_checkpoint(tmp_path / "XLNetLMHeadModel", lm_head))
    assert (info["prefix"], info["ignored"]) == ("transformer.", ["lm_loss.bias"])
    for ours, theirs in zip(backbone.weights, prefixed.weights, strict=True):
        np.testing.assert_array_equal(_np(ours), _np(theirs), err_msg=ours.path)
    config = info["config"]
    assert (config.vocabulary_size, config.hidden_dim, config.num_layers, config.num_heads,
            config.intermediate_dim, config.pad_token_id, config.clamp_length) == (40, 16, 2, 2, 24, 5, None)
    assert backbone.count_params() == config.parameter_count()

    for layout, stored in (("XLNetModel", tensors), ("XLNetLMHeadModel", lm_head)):
        out = str(tmp_path / f"out-{layout}")
        save_hf_checkpoint(backbone, out, architecture=layout,
                           lm_bias=lm_bias if layout == "XLNetLMHeadModel" else None)
        written, _ = read_safetensors(os.path.join(out, "model.safetensors"))
        assert written.keys() == stored.keys()
        for name, value in stored.items():
            np.testing.assert_array_equal(written[name], value, err_msg=name)
        with open(os.path.join(out, "config.json")) as f:
            assert config_from_hf(json.load(f)) == config
    for key, value in (("attn_type", "uni"), ("bi_data", True), ("ff_activation", "gelu_new"), ("d_head", 4)):
        with pytest.raises(ValueError, match=key):
            config_from_hf({**HF_CONFIG, key: value})
    assert config_from_hf({**HF_CONFIG, "clamp_len": 3}).clamp_length == 3

    # Both streams of pretraining under a sampled factorisation order (each stream's own segment term).
    masks = tuple(_np(m) for m in permutation_masks(sample_factorization_order(3, 7, seed=[1, 2], padding_mask=MASK),
                                                    padding_mask=MASK))
    expected = reference_xlnet(tensors, HF_CONFIG, TOKENS, SEGMENTS, MASK, masks)
    for ours, theirs in zip(backbone.two_stream(_inputs(), *masks), expected):
        np.testing.assert_allclose(_np(ours), theirs, atol=1e-5)
    # Without segment ids there is no segment term: one segment's (a per-query constant, which softmax ignores).
    expected = reference_xlnet(tensors, HF_CONFIG, TOKENS, np.zeros_like(SEGMENTS), MASK, masks)
    for ours, theirs in zip(backbone.two_stream({"token_ids": TOKENS}, *masks), expected):
        np.testing.assert_allclose(_np(ours), theirs, atol=1e-5)


def _perturbed(model, seed):
    """Every weight of ``model`` moved off its initial value (zero biases and LayerNorm's 1 / 0 included), so that
    no swapped or missed weight can hide."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(weight.value + 0.2 * rng.standard_normal(weight.shape).astype("float32"))
    return model


def _keras_hub_outputs(keras_hub_backbone, tokens, segments, mask):
    # keras-hub's XLNet scrambles a batch of more than one sequence (its relative encodings and padding masks are
    # reshaped, not transposed, from the (T, B) layout of the original code): one sequence per call.
    return np.concatenate([_np(keras_hub_backbone({
        "token_ids": tokens[b:b + 1], "segment_ids": segments[b:b + 1], "padding_mask": mask[b:b + 1].astype("int32"),
    })) for b in range(len(tokens))])


def test_equals_keras_hub_backbone_with_weights_copied_both_ways():
    sizes = dict(vocabulary_size=40, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=24)
    keras_hub_backbone = _perturbed(keras_hub.models.XLNetBackbone(**sizes), seed=1)
    expected = _keras_hub_outputs(keras_hub_backbone, TOKENS, SEGMENTS, MASK)
    for model in (copy_keras_hub_weights(keras_hub_backbone, XLNetBackbone(XLNetConfig(**sizes, dropout=0.0))),
                  from_keras_hub(keras_hub_backbone)):
        np.testing.assert_allclose(_np(model(_inputs())), expected, atol=1e-5)

    ours = _perturbed(XLNetBackbone(XLNetConfig(**sizes)), seed=2)
    ours(_inputs())
    copied = copy_weights_to_keras_hub(ours, keras_hub.models.XLNetBackbone(**sizes))
    np.testing.assert_allclose(_keras_hub_outputs(copied, TOKENS, SEGMENTS, MASK), _np(ours(_inputs())), atol=1e-5)

    with pytest.raises(ValueError, match="xlnet_encoder_1/feedforward_intermediate_dense/kernel"):
        copy_keras_hub_weights(keras_hub_backbone, XLNetBackbone(XLNetConfig(**{**sizes, "intermediate_dim": 20})))


def test_padding_default_mask_the_query_stream_and_the_model_harness(tmp_path):
    keras.utils.set_random_seed(4)
    config = XLNetConfig(vocabulary_size=40, hidden_dim=16, intermediate_dim=24, clamp_length=4)
    backbone = _perturbed(XLNetBackbone(config), 5)
    out = _np(backbone(_inputs()))
    run_model_test(lambda: backbone, _inputs(), tmp_path)  # config and .keras round trips: the same outputs
    viewer = attention_viewer(backbone, TOKENS[1:2, :5], ["a", "b", "c", "d", "e"], str(tmp_path / "view.html"))
    assert viewer.sets[0]["weights"].shape == (2, 2, 5, 5) and os.path.isfile(tmp_path / "view.html")
    assert XLNetBackbone.from_config(backbone.get_config()).config == config
    # More padding after a sequence changes nothing at its real tokens; the default mask is token_ids != <pad>.
    longer = {"token_ids": np.pad(TOKENS, ((0, 0), (0, 3)), constant_values=5),
              "segment_ids": np.pad(SEGMENTS, ((0, 0), (0, 3)))}
    np.testing.assert_allclose(_np(backbone(longer))[:, :7][MASK], out[MASK], atol=1e-5)
    assert np.abs(_np(backbone({**_inputs(), "padding_mask": np.ones_like(MASK)}))[MASK] - out[MASK]).max() > 1e-3

    # With every key visible (XLNet's fine-tuning mask) the content stream of two_stream is call()'s output.
    order = np.tile(np.arange(7), (3, 1))
    content_mask, query_mask = permutation_masks(order, padding_mask=MASK)
    content, _ = backbone.two_stream(_inputs(), MASK[:, None, :] | np.eye(7, dtype=bool), query_mask)
    np.testing.assert_allclose(_np(content), out, atol=1e-5)
    # Under the left-to-right order the query stream at z_t = 2 does not change when token 2 does (nor the earlier
    # ones); at 3, which sees it, it does.
    _, query = backbone.two_stream(_inputs(), content_mask, query_mask)
    changed = TOKENS.copy()
    changed[:, 2] = 1
    _, query_changed = backbone.two_stream(_inputs(changed), content_mask, query_mask)
    np.testing.assert_allclose(_np(query_changed)[:, :3], _np(query)[:, :3], atol=1e-6)
    assert np.abs(_np(query_changed)[0, 3] - _np(query)[0, 3]).max() > 1e-3


def test_parameter_count_closed_form():
    # XLNet-Base (117M in Yang et al. 2019) and -Large, without building them.
    assert XLNetConfig.preset("base").parameter_count() == 116_718_336
    assert XLNetConfig.preset("large").parameter_count() == 360_268_800


def test_two_stream_first_builds_the_backbone_once():
    """Pretraining calls two_stream before any plain call: it builds the backbone, and a later call adds nothing."""
    backbone = XLNetBackbone(XLNetConfig(vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8,
                                         intermediate_dim=16))
    content_mask, query_mask = permutation_masks(np.array([[2, 0, 3, 1]], "int32"))
    backbone.two_stream({"token_ids": np.array([[1, 2, 3, 4]], "int32")}, content_mask, query_mask)
    count = len(backbone.weights)
    backbone({"token_ids": np.array([[1, 2, 3, 4]], "int32")})
    assert len(backbone.weights) == count
