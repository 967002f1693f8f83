"""The BERT family's Hugging Face checkpoints (RoBERTa, XLM-RoBERTa, DistilBERT, ALBERT as options of BertBackbone):
key sets written here by hand in Hugging Face's layouts load into a backbone whose outputs equal a NumPy forward pass
written from the raw tensors (RoBERTa's positions as fairseq numbers them); our writer's files, bare and prefixed,
read back equal; ALBERT's layers are one set of weights; the published base sizes' weight counts; unknown model
types and options a family cannot hold are refused by name."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest
from attnlayers.applications.bert import BertBackbone, BertClassifier, BertConfig
from attnlayers.applications.bert.checkpoint import load_hf_checkpoint, save_hf_checkpoint
from attnlayers.applications.bert.config import FAMILIES
from attnlayers.applications.core.formats.safetensors import read_safetensors, write_safetensors
from keras import ops

V, P, D, F, E, LAYERS, HEADS = 30, 12, 8, 12, 6, 2, 2
# Hugging Face's config.json of each family at these sizes (the keys its config class writes).
HF_CONFIGS = {
    "roberta": {"model_type": "roberta", "vocab_size": V, "hidden_size": D, "num_hidden_layers": LAYERS,
                "num_attention_heads": HEADS, "intermediate_size": F, "max_position_embeddings": P,
                "type_vocab_size": 1, "pad_token_id": 1, "layer_norm_eps": 1e-5, "hidden_act": "gelu"},
    "distilbert": {"model_type": "distilbert", "vocab_size": V, "dim": D, "n_layers": LAYERS, "n_heads": HEADS,
                   "hidden_dim": F, "max_position_embeddings": P, "activation": "gelu", "pad_token_id": 0},
    "albert": {"model_type": "albert", "vocab_size": V, "embedding_size": E, "hidden_size": D,
               "num_hidden_layers": 3, "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": HEADS,
               "intermediate_size": F, "max_position_embeddings": P, "type_vocab_size": 2, "hidden_act": "gelu_new"},
}
HF_CONFIGS["xlm-roberta"] = {**HF_CONFIGS["roberta"], "model_type": "xlm-roberta"}
PREFIXES = {"roberta": "roberta.", "xlm-roberta": "roberta.", "distilbert": "distilbert.", "albert": "albert."}
TOKENS = np.array([[2, 7, 11, 5, 9, 3, 4], [2, 8, 3, 6, 0, 0, 0]], "int32")
MASK = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]], "int32")


def _hand_written(family, seed=0):
    """Every tensor of the family's bare Hugging Face model, random, in its own names (LayerNorm scales near 1)."""
    rng = np.random.default_rng(seed)
    tensors = {}

    def normal(*shape, scale=0.3, center=0.0):
        return (center + scale * rng.standard_normal(shape)).astype("float32")

    def linear(name, out_dim, in_dim):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(out_dim, in_dim), normal(out_dim, scale=0.1)

    def layer_norm(name, width=D):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(width, scale=0.1, center=1.0), normal(width)

    width = E if family == "albert" else D
    tensors["embeddings.word_embeddings.weight"] = normal(V, width)
    tensors["embeddings.position_embeddings.weight"] = normal(P, width)
    if family != "distilbert":
        tensors["embeddings.token_type_embeddings.weight"] = normal(2 if family == "albert" else 1, width)
    layer_norm("embeddings.LayerNorm", width)
    if family == "distilbert":
        for i in range(LAYERS):
            p = f"transformer.layer.{i}."
            for name in ("q_lin", "k_lin", "v_lin", "out_lin"):
                linear(f"{p}attention.{name}", D, D)
            layer_norm(f"{p}sa_layer_norm")
            linear(f"{p}ffn.lin1", F, D)
            linear(f"{p}ffn.lin2", D, F)
            layer_norm(f"{p}output_layer_norm")
    elif family == "albert":
        linear("encoder.embedding_hidden_mapping_in", D, E)
        p = "encoder.albert_layer_groups.0.albert_layers.0."
        for name in ("query", "key", "value", "dense"):
            linear(f"{p}attention.{name}", D, D)
        layer_norm(f"{p}attention.LayerNorm")
        linear(f"{p}ffn", F, D)
        linear(f"{p}ffn_output", D, F)
        layer_norm(f"{p}full_layer_layer_norm")
        linear("pooler", D, D)
    else:
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."
            for name in ("query", "key", "value"):
                linear(f"{p}attention.self.{name}", D, D)
            linear(f"{p}attention.output.dense", D, D)
            layer_norm(f"{p}attention.output.LayerNorm")
            linear(f"{p}intermediate.dense", F, D)
            linear(f"{p}output.dense", D, F)
            layer_norm(f"{p}output.LayerNorm")
        linear("pooler.dense", D, D)
    return tensors


def _write(directory, family, tensors, prefix=""):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(HF_CONFIGS[family], f)
    write_safetensors(os.path.join(directory, "model.safetensors"), {prefix + k: v for k, v in tensors.items()})
    return str(directory)


# ------------------------------------------------------------------------------------------------------------------
# The family in NumPy from the raw tensors (Hugging Face's RobertaModel, DistilBertModel, AlbertModel), float64.


def _gelu(x, approximate):
    if approximate:  # gelu_new: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def reference(family, tensors, token_ids, padding_mask, segment_ids):
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    eps = 1e-5 if "roberta" in family else 1e-12

    def norm(x, name):
        mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + eps) * t[f"{name}.weight"] + t[f"{name}.bias"]

    def linear(x, name):
        return x @ t[f"{name}.weight"].T + t[f"{name}.bias"]

    batch, length = token_ids.shape
    if "roberta" in family:  # fairseq's make_positions: real tokens numbered from padding_idx + 1 = 2
        positions = np.cumsum(padding_mask, axis=1) * padding_mask + 1
    else:
        positions = np.broadcast_to(np.arange(length), (batch, length))
    x = t["embeddings.word_embeddings.weight"][token_ids] + t["embeddings.position_embeddings.weight"][positions]
    if family != "distilbert":
        x = x + t["embeddings.token_type_embeddings.weight"][segment_ids if family == "albert" else 0 * segment_ids]
    x = norm(x, "embeddings.LayerNorm")
    if family == "albert":
        x = linear(x, "encoder.embedding_hidden_mapping_in")
    names = {  # query, key, value, attention output, its LayerNorm, FFN in, FFN out, last LayerNorm
        "distilbert": ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "sa_layer_norm",
                       "ffn.lin1", "ffn.lin2", "output_layer_norm"),
        "albert": ("attention.query", "attention.key", "attention.value", "attention.dense", "attention.LayerNorm",
                   "ffn", "ffn_output", "full_layer_layer_norm"),
    }.get(family, ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                   "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"))
    head_dim = D // HEADS

    def split(h):  # (B, T, d) -> (B, N, T, H)
        return h.reshape(batch, length, HEADS, head_dim).transpose(0, 2, 1, 3)

    for i in range(HF_CONFIGS[family].get("num_hidden_layers", LAYERS)):
        p = {"distilbert": f"transformer.layer.{i}.", "albert": "encoder.albert_layer_groups.0.albert_layers.0."}.get(
            family, f"encoder.layer.{i}.")  # ALBERT: every layer runs group 0
        q, k, v = (split(linear(x, p + name)) for name in names[:3])
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)
        scores = np.where(padding_mask[:, None, None, :], scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, D)
        x = norm(x + linear(context, p + names[3]), p + names[4])  # post-LN
        h = _gelu(linear(x, p + names[5]), approximate=family == "albert")
        x = norm(x + linear(h, p + names[6]), p + names[7])
    pooler = {"distilbert": None, "albert": "pooler"}.get(family, "pooler.dense")
    return x, None if pooler is None else np.tanh(linear(x[:, 0], pooler))


def _outputs(backbone, family, token_ids=TOKENS, padding_mask=MASK):
    inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
    if family == "albert":
        inputs["segment_ids"] = SEGMENTS
    out = backbone(inputs)
    pooled = out.get("pooled_output")
    return (np.asarray(ops.convert_to_numpy(out["sequence_output"])),
            None if pooled is None else np.asarray(ops.convert_to_numpy(pooled)))


# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["roberta", "distilbert", "albert"])
def test_hand_written_checkpoints_match_numpy(tmp_path, family):
    """Hugging Face's names written by hand (bare and prefixed, with a head and a buffer), read by
    load_hf_checkpoint: outputs equal the NumPy forward pass; then our writer's files in both layouts read back."""
    tensors = _hand_written(family)
    sequence_ref, pooled_ref = reference(family, tensors, TOKENS, MASK, SEGMENTS)
    head = {"roberta": "lm_head.dense.weight", "distilbert": "vocab_projector.bias", "albert": "predictions.bias"}
    prefixed = {PREFIXES[family] + k: v for k, v in tensors.items()}
    prefixed.update({head[family]: np.zeros(3, "float32"),
                     PREFIXES[family] + "embeddings.position_ids": np.arange(P, dtype="int64")[None]})
    for layout, stored in (("bare", tensors), ("prefixed", prefixed)):
        backbone, info = load_hf_checkpoint(_write(tmp_path / layout, family, stored))
        assert (info["family"], info["prefix"]) == (family, "" if layout == "bare" else PREFIXES[family])
        sequence, pooled = _outputs(backbone, family)
        np.testing.assert_allclose(sequence[MASK], sequence_ref[MASK], atol=1e-5, err_msg=f"{family} {layout}")
        assert (pooled is None) == (pooled_ref is None) == (family == "distilbert")
        if pooled is not None:
            np.testing.assert_allclose(pooled, pooled_ref, atol=1e-5)
        assert backbone.count_params() == info["config"].parameter_count()
    assert info["ignored"] == sorted([head[family], PREFIXES[family] + "embeddings.position_ids"])
    if family == "albert":  # cross-layer sharing: one block whatever the depth; the depth still changes the outputs
        deep = BertBackbone(dataclasses.replace(info["config"], num_layers=6))
        _outputs(deep, family)
        deep.set_weights(backbone.get_weights())
        assert len(deep.encoder.blocks) == 1 and deep.count_params() == backbone.count_params()
        assert np.abs(_outputs(deep, family)[0] - sequence)[MASK].max() > 1e-3  # 6 passes through it, not 3

    for prefix in ("", PREFIXES[family]):  # our writer, bare and prefixed: the very tensors that were read
        out = save_hf_checkpoint(backbone, str(tmp_path / f"ours{prefix}"), prefixed=bool(prefix))
        stored, _ = read_safetensors(os.path.join(out, "model.safetensors"))
        assert sorted(stored) == sorted(prefix + k for k in tensors)
        for name, value in tensors.items():
            np.testing.assert_array_equal(stored[prefix + name], value, err_msg=name)
        with open(os.path.join(out, "config.json")) as f:
            written = json.load(f)
        assert {k: written[k] for k in HF_CONFIGS[family]} == HF_CONFIGS[family]
    reloaded, info = load_hf_checkpoint(out)  # the prefixed one (the bare layout is read above)
    assert info["prefix"] == PREFIXES[family]
    for a, b in zip(_outputs(backbone, family), _outputs(reloaded, family), strict=True):
        np.testing.assert_array_equal(a, b)


def test_roberta_positions_start_after_the_pad_id(tmp_path):
    """Token t reads position row pad + 1 + t: the same model read with no offset gives other outputs; XLM-RoBERTa is
    RoBERTa's architecture under its own model_type and writes it back."""
    tensors = _hand_written("roberta", seed=1)
    backbone, info = load_hf_checkpoint(_write(tmp_path / "r", "roberta", tensors))
    assert (info["config"].position_offset, info["config"].max_tokens) == (2, P - 2)
    sequence, _ = _outputs(backbone, "roberta")
    np.testing.assert_allclose(sequence[MASK], reference("roberta", tensors, TOKENS, MASK, SEGMENTS)[0][MASK],
                               atol=1e-5)
    shifted = BertBackbone(BertConfig(**{**vars(info["config"]), "position_offset": 0}))
    _outputs(shifted, "roberta")  # builds it
    shifted.set_weights(backbone.get_weights())
    assert np.abs(_outputs(shifted, "roberta")[0] - sequence)[MASK].max() > 1e-2
    with pytest.raises(ValueError, match=r"11 positions but max_sequence_length is 12 - position_offset 2"):
        backbone({"token_ids": np.full((1, 11), 5, "int32")})
    # positions count real tokens (Hugging Face's create_position_ids_from_input_ids): left padding shifts nothing
    right, left = np.array([[0, 5, 6, 7, 2, 1, 1]], "int32"), np.array([[1, 1, 0, 5, 6, 7, 2]], "int32")
    out_right = backbone({"token_ids": right, "padding_mask": right != 1})["sequence_output"]
    out_left = backbone({"token_ids": left, "padding_mask": left != 1})["sequence_output"]
    np.testing.assert_allclose(np.asarray(out_left)[:, 2:], np.asarray(out_right)[:, :5], atol=1e-5)

    prefixed = {"roberta." + k: v for k, v in tensors.items()}
    xlmr, info = load_hf_checkpoint(_write(tmp_path / "x", "xlm-roberta", prefixed))
    assert (info["family"], info["prefix"]) == ("xlm-roberta", "roberta.")
    np.testing.assert_array_equal(_outputs(xlmr, "xlm-roberta")[0], sequence)
    with open(os.path.join(save_hf_checkpoint(xlmr, str(tmp_path / "xo")), "config.json")) as f:
        written = json.load(f)
    assert (written["model_type"], written["architectures"], written["pad_token_id"]) == (
        "xlm-roberta", ["XLMRobertaModel"], 1)


def test_published_base_sizes():
    """The closed form (== count_params of each family's built tiny model, above) at the published base sizes:
    transformers' AlbertModel for albert-base-v2 (pooler included), DistilBertModel and RobertaModel."""
    assert BertConfig.preset("base", family="albert").parameter_count() == 11_683_584
    assert BertConfig.preset("base", family="albert").parameter_count(pooler=False) == 11_092_992
    assert BertConfig.preset("base", family="distilbert", num_layers=6).parameter_count() == 66_362_880
    assert BertConfig.preset("base", family="roberta").parameter_count() == 124_645_632


def test_family_errors_are_named(tmp_path):
    tensors = _hand_written("distilbert")
    with pytest.raises(ValueError, match=r"unknown `model_type` 'electra'; the BERT family reads \['bert', 'roberta'"):
        load_hf_checkpoint(_electra(tmp_path, tensors))
    backbone, _ = load_hf_checkpoint(_write(tmp_path / "d", "distilbert", tensors))
    with pytest.raises(ValueError, match=r"segment_ids.*max\(num_segments, 1\)=1"):
        backbone({"token_ids": TOKENS, "segment_ids": SEGMENTS})
    np.testing.assert_array_equal(_outputs(backbone, "distilbert")[0], ops.convert_to_numpy(
        backbone({"token_ids": TOKENS, "padding_mask": MASK, "segment_ids": 0 * SEGMENTS})["sequence_output"]))
    with pytest.raises(ValueError, match="this backbone has none \\(pooler=False"):
        BertClassifier(backbone, num_classes=2)
    wrong = BertBackbone(BertConfig(**{**FAMILIES["distilbert"], "vocabulary_size": V, "family": "bert"}))
    with pytest.raises(ValueError, match=r"A BERT checkpoint \(BertModel.*pooler=False \(expected True\), "
                                         r"num_segments=0 \(DistilBERT's only\)"):
        save_hf_checkpoint(wrong, str(tmp_path / "w"))
    with pytest.raises(ValueError, match="`vocabulary` writes vocab.txt"):
        save_hf_checkpoint(BertBackbone(BertConfig.preset("tiny", family="albert", vocabulary_size=V)),
                           str(tmp_path / "o"), vocabulary=["x"] * V)
    with pytest.raises(ValueError, match="`num_layers` must be divisible by `num_groups`"):
        BertConfig(num_layers=3, num_groups=2)


def _electra(tmp_path, tensors):
    directory = _write(tmp_path / "electra", "distilbert", tensors)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**HF_CONFIGS["distilbert"], "model_type": "electra"}, f)
    return directory
