"""Hugging Face checkpoints of the BERT application: tiny random checkpoints written here in both key layouts
(published: ``bert.`` prefix, LayerNorm gamma / beta, ``cls.*`` heads, ``position_ids``; and today's
``save_pretrained``) load into a backbone whose outputs equal a NumPy forward pass of BERT written from the raw
tensors; save -> load round-trips; missing files, tensors and config keys are refused by name; the safetensors
reader / writer follows the documented format (checked against a parser written here, and against the
``safetensors`` package where it is installed)."""

import json
import math
import os

import numpy as np
import pytest
from attnlayers.applications.bert import BertConfig
from attnlayers.applications.bert.checkpoint import (
    config_from_hf,
    load_hf_checkpoint,
    save_hf_checkpoint,
)
from attnlayers.applications.core.formats.safetensors import read_safetensors
from keras import ops
from safetensors_reference import write_safetensors

HF_CONFIG = {
    "architectures": ["BertModel"], "model_type": "bert", "vocab_size": 40, "hidden_size": 12,
    "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 20, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 16,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0, "position_embedding_type": "absolute",
}
TOKENS = np.array([[2, 7, 11, 5, 9, 3, 4], [2, 8, 3, 6, 0, 0, 0], [2, 30, 3, 0, 0, 0, 0]], "int32")
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]], "int32")
MASK = TOKENS != 0


# ------------------------------------------------------------------------------------------------------------------
# A checkpoint written from the format's documentation, independently of the module under test.


def _random_tensors(config=HF_CONFIG, seed=0):
    """A BertModel's tensors in today's names, all random (LayerNorm scales around 1)."""
    rng = np.random.default_rng(seed)
    d, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]

    def normal(*shape, scale=0.3, center=0.0):
        return (center + scale * rng.standard_normal(shape)).astype("float32")

    def linear(name, out_dim, in_dim):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(out_dim, in_dim), normal(out_dim, scale=0.1)

    def layer_norm(name):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = normal(d, scale=0.1, center=1.0), normal(d, scale=0.1)

    tensors = {
        "embeddings.word_embeddings.weight": normal(config["vocab_size"], d),
        "embeddings.position_embeddings.weight": normal(config["max_position_embeddings"], d),
        "embeddings.token_type_embeddings.weight": normal(config["type_vocab_size"], d),
    }
    layer_norm("embeddings.LayerNorm")
    for i in range(layers):
        prefix = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            linear(f"{prefix}attention.self.{name}", d, d)
        linear(f"{prefix}attention.output.dense", d, d)
        layer_norm(f"{prefix}attention.output.LayerNorm")
        linear(f"{prefix}intermediate.dense", f, d)
        linear(f"{prefix}output.dense", d, f)
        layer_norm(f"{prefix}output.LayerNorm")
    linear("pooler.dense", d, d)
    return tensors


def _published(tensors):
    """The layout of a published (TF-converted, BertForPreTraining) checkpoint."""
    renamed = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        renamed["bert." + name] = value
    d, vocab = HF_CONFIG["hidden_size"], HF_CONFIG["vocab_size"]
    renamed.update({
        "bert.embeddings.position_ids": np.arange(HF_CONFIG["max_position_embeddings"], dtype="int64")[None],
        "cls.predictions.bias": np.zeros(vocab, "float32"),
        "cls.predictions.transform.dense.weight": np.zeros((d, d), "float32"),
        "cls.seq_relationship.weight": np.zeros((2, d), "float32"),
    })
    return renamed


def _write_checkpoint(directory, tensors, config=HF_CONFIG, vocabulary=True, tokenizer_config=None):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    if vocabulary:
        with open(os.path.join(directory, "vocab.txt"), "w") as f:
            f.write("".join(f"tok{i}\n" for i in range(config["vocab_size"])))
    if tokenizer_config is not None:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer_config, f)
    return str(directory)


# ------------------------------------------------------------------------------------------------------------------
# BERT in NumPy from the raw tensors (Devlin et al. 2019; Hugging Face BertModel's equations), float64.

_erf = np.vectorize(math.erf)


def _layer_norm(x, t, name, eps):
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * t[f"{name}.weight"] + t[f"{name}.bias"]


def _linear(x, t, name):
    return x @ t[f"{name}.weight"].T + t[f"{name}.bias"]  # PyTorch Linear: y = x W^T + b, W (out, in)


def reference_bert(tensors, config, token_ids, segment_ids, padding_mask):
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    batch, length = token_ids.shape
    x = (t["embeddings.word_embeddings.weight"][token_ids] + t["embeddings.position_embeddings.weight"][:length]
         + t["embeddings.token_type_embeddings.weight"][segment_ids])
    x = _layer_norm(x, t, "embeddings.LayerNorm", eps)
    head_dim = x.shape[-1] // heads

    def split(h):  # (B, T, d) -> (B, N, T, H)
        return h.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3)

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (split(_linear(x, t, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)  # (B, N, T, S)
        scores = np.where(padding_mask[:, None, None, :], scores, -np.inf)  # padded keys get no weight
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
        x = _layer_norm(x + _linear(context, t, f"{p}attention.output.dense"), t, f"{p}attention.output.LayerNorm",
                        eps)  # post-LN
        h = _linear(x, t, f"{p}intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))  # GELU, erf form
        x = _layer_norm(x + _linear(h, t, f"{p}output.dense"), t, f"{p}output.LayerNorm", eps)
    pooled = np.tanh(_linear(x[:, 0], t, "pooler.dense"))
    return x, pooled


def _outputs(backbone):
    out = backbone({"token_ids": TOKENS, "segment_ids": SEGMENTS, "padding_mask": MASK})
    return np.asarray(ops.convert_to_numpy(out["sequence_output"])), np.asarray(ops.convert_to_numpy(
        out["pooled_output"]))


def _assert_matches_reference(backbone, tensors):
    sequence, pooled = _outputs(backbone)
    sequence_ref, pooled_ref = reference_bert(tensors, HF_CONFIG, TOKENS, SEGMENTS, MASK)
    # Real tokens only: what a padded query computes is not part of the contract (ours attends to nothing there).
    np.testing.assert_allclose(sequence[MASK], sequence_ref[MASK], atol=1e-5)
    np.testing.assert_allclose(pooled, pooled_ref, atol=1e-5)


# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["save_pretrained", "published"])
def test_load_matches_numpy_reference(tmp_path, layout):
    tensors = _random_tensors()
    stored = tensors if layout == "save_pretrained" else _published(tensors)
    directory = _write_checkpoint(tmp_path / layout, stored, tokenizer_config={"do_lower_case": False})
    backbone, info = load_hf_checkpoint(directory)
    _assert_matches_reference(backbone, tensors)

    config = info["config"]
    assert (config.vocabulary_size, config.hidden_dim, config.num_layers, config.num_heads,
            config.intermediate_dim, config.max_sequence_length) == (40, 12, 2, 3, 20, 16)
    assert info["vocabulary"] == os.path.join(directory, "vocab.txt")
    assert info["do_lower_case"] is False
    assert info["file"] == os.path.join(directory, "model.safetensors")
    if layout == "published":
        assert info["prefix"] == "bert."
        assert info["ignored"] == ["bert.embeddings.position_ids", "cls.predictions.bias",
                                   "cls.predictions.transform.dense.weight", "cls.seq_relationship.weight"]
    else:
        assert (info["prefix"], info["ignored"]) == ("", [])
    assert backbone.count_params() == config.parameter_count()


def test_tokenizer_information_defaults(tmp_path):
    directory = _write_checkpoint(tmp_path, _random_tensors(), vocabulary=False)
    _, info = load_hf_checkpoint(directory)
    assert info["vocabulary"] is None
    assert info["do_lower_case"] is True  # BertTokenizer's default when tokenizer_config.json is absent


def test_save_load_round_trip(tmp_path):
    tensors = _random_tensors(seed=3)
    backbone, _ = load_hf_checkpoint(_write_checkpoint(tmp_path / "in", tensors))
    vocabulary = [f"[unused{i}]" for i in range(40)]
    out = tmp_path / "out"
    assert save_hf_checkpoint(backbone, str(out), vocabulary=vocabulary) == str(out)

    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", "vocab.txt"]  # no temporary left
    with open(out / "config.json") as f:
        written = json.load(f)
    assert written["architectures"] == ["BertModel"]
    assert {k: written[k] for k in HF_CONFIG if k != "architectures"} == {
        k: v for k, v in HF_CONFIG.items() if k != "architectures"}
    assert (out / "vocab.txt").read_text().splitlines() == vocabulary
    # Today's layout and PyTorch's (out, in) Linear weights: the very tensors that were loaded.
    stored, metadata = read_safetensors(str(out / "model.safetensors"))
    assert metadata == {"format": "pt"}
    assert sorted(stored) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(stored[name], value, err_msg=name)

    reloaded, info = load_hf_checkpoint(str(out))
    assert info["vocabulary"] == str(out / "vocab.txt")
    for a, b in zip(_outputs(backbone), _outputs(reloaded)):
        np.testing.assert_array_equal(a, b)
    _assert_matches_reference(reloaded, tensors)

    save_hf_checkpoint(reloaded, str(out))  # overwrites in place
    np.testing.assert_array_equal(read_safetensors(str(out / "model.safetensors"))[0]["pooler.dense.weight"],
                                  tensors["pooler.dense.weight"])


def test_save_refuses_bad_arguments(tmp_path):
    backbone, _ = load_hf_checkpoint(_write_checkpoint(tmp_path / "in", _random_tensors()))
    with pytest.raises(ValueError, match="`vocabulary` must have the backbone's vocabulary_size=40 tokens; received 3"):
        save_hf_checkpoint(backbone, str(tmp_path / "out"), vocabulary=["a", "b", "c"])
    with pytest.raises(ValueError, match="`backbone` must be a BertBackbone; received dict"):
        save_hf_checkpoint({}, str(tmp_path / "out"))


def test_missing_unexpected_and_mismatched_tensors_are_named(tmp_path):
    tensors = _random_tensors()
    del tensors["encoder.layer.1.attention.self.key.bias"]
    tensors["encoder.layer.1.attention.self.extra.weight"] = np.zeros((12, 12), "float32")
    tensors["encoder.layer.0.intermediate.dense.weight"] = np.zeros((12, 20), "float32")  # transposed
    directory = _write_checkpoint(tmp_path, tensors)
    with pytest.raises(ValueError) as error:
        load_hf_checkpoint(directory)
    message = str(error.value)
    for text in (os.path.join(directory, "model.safetensors"),
                 "missing tensors: ['encoder.layer.1.attention.self.key.bias']",
                 "unexpected tensors: ['encoder.layer.1.attention.self.extra.weight']",
                 "encoder.layer.0.intermediate.dense.weight (12, 20) (expected (20, 12))"):
        assert text in message


def test_missing_pooler_is_explained(tmp_path):
    tensors = {k: v for k, v in _random_tensors().items() if not k.startswith("pooler.")}  # BertForMaskedLM's
    with pytest.raises(ValueError, match=r"missing tensors: \['pooler.dense.weight', 'pooler.dense.bias'\] \(a model "
                                         "saved without its pooler"):
        load_hf_checkpoint(_write_checkpoint(tmp_path, tensors))


def test_published_layout_names_its_own_tensors(tmp_path):
    tensors = _published(_random_tensors())
    del tensors["bert.encoder.layer.0.output.LayerNorm.gamma"]
    tensors["bert.encoder.layer.2.output.dense.bias"] = np.zeros(12, "float32")  # a third layer: not in config
    tensors["other.weight"] = np.zeros(3, "float32")  # outside both the encoder and the known heads
    with pytest.raises(ValueError) as error:
        load_hf_checkpoint(_write_checkpoint(tmp_path, tensors))
    message = str(error.value)
    assert "missing tensors: ['bert.encoder.layer.0.output.LayerNorm.weight']" in message
    assert "unexpected tensors: ['bert.encoder.layer.2.output.dense.bias', 'other.weight']" in message


def test_missing_files_are_named(tmp_path):
    directory = _write_checkpoint(tmp_path / "a", _random_tensors())
    os.remove(os.path.join(directory, "config.json"))
    with pytest.raises(ValueError, match=r"has no config\.json"):
        load_hf_checkpoint(directory)
    directory = _write_checkpoint(tmp_path / "b", _random_tensors())
    os.remove(os.path.join(directory, "model.safetensors"))
    with pytest.raises(ValueError, match=r"has no model\.safetensors"):
        load_hf_checkpoint(directory)


def test_config_errors_are_named():
    assert config_from_hf(HF_CONFIG) == BertConfig(
        vocabulary_size=40, max_sequence_length=16, num_segments=2, num_layers=2, num_heads=3, hidden_dim=12,
        intermediate_dim=20, dropout=0.1, layer_norm_epsilon=1e-12, pad_token_id=0)
    with pytest.raises(ValueError, match=r"`hidden_act` must be 'gelu'.*received 'relu'"):
        config_from_hf({**HF_CONFIG, "hidden_act": "relu"})
    with pytest.raises(ValueError, match="`position_embedding_type` must be 'absolute'"):
        config_from_hf({**HF_CONFIG, "position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match=r"my/config\.json: missing \['hidden_size'\]"):
        config_from_hf({k: v for k, v in HF_CONFIG.items() if k != "hidden_size"}, source="my/config.json")
    with pytest.raises(ValueError, match="divisible by `num_heads`"):
        config_from_hf({**HF_CONFIG, "num_attention_heads": 5})


def test_save_a_backbone_first_built_inside_a_task_model(tmp_path):
    """Weights created while a classifier builds the backbone carry the classifier's name first; they still save
    under their Hugging Face names and load back the same."""
    from attnlayers.applications.bert import BertBackbone, BertClassifier

    backbone = BertBackbone(BertConfig.of({k: v for k, v in zip(
        ("vocabulary_size", "max_sequence_length", "num_layers", "num_heads", "hidden_dim", "intermediate_dim"),
        (40, 16, 2, 3, 12, 20), strict=True)}))
    classifier = BertClassifier(backbone, num_classes=2)
    classifier({"token_ids": TOKENS, "segment_ids": SEGMENTS, "padding_mask": MASK})
    assert backbone.weights[0].path.startswith(classifier.name + "/")
    loaded, _ = load_hf_checkpoint(save_hf_checkpoint(backbone, str(tmp_path / "out")))
    inputs = {"token_ids": TOKENS, "segment_ids": SEGMENTS, "padding_mask": MASK}
    np.testing.assert_allclose(ops.convert_to_numpy(loaded(inputs)["pooled_output"]),
                               ops.convert_to_numpy(backbone(inputs)["pooled_output"]), atol=1e-6)


def test_attention_dropout_is_its_own_rate():
    """attention_probs_dropout_prob sets the attention weights' dropout, hidden_dropout_prob the residual branches'
    and the embeddings'; both written back; None means dropout's rate (configs saved before the field)."""
    from attnlayers.applications.bert.checkpoint import config_to_hf
    from attnlayers.applications.bert.training import built_backbone

    config = config_from_hf({**HF_CONFIG, "attention_probs_dropout_prob": 0.0, "hidden_dropout_prob": 0.2})
    assert (config.dropout, config.attention_dropout) == (0.2, 0.0)
    blocks = built_backbone(config).encoder.blocks
    assert [b.self_attention.dropout for b in blocks] == [0.0, 0.0] and blocks[0].dropout == 0.2
    hf = config_to_hf(config)
    assert (hf["attention_probs_dropout_prob"], hf["hidden_dropout_prob"]) == (0.0, 0.2)
    assert BertConfig(dropout=0.3).attention_dropout == 0.3
