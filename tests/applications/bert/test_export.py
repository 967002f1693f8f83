"""The string-in BERT SavedModel: a tiny classifier, tagger and embedder exported with export_text_model, loaded in a
fresh process that imports only tensorflow and tensorflow_text (attnlayers and keras_hub cannot be imported
there), agree with the in-process Keras models on single texts and pairs; truncated, empty, whitespace-only and
non-UTF-8 texts and empty batches give valid outputs and flags; bad inputs and bad export arguments are refused.
The BERT family in the same process: a RoBERTa classifier (byte-level BPE, <s> A </s></s> B </s>, positions from
2), an ALBERT classifier (SentencePiece, factorised embeddings, shared layers) and a DistilBERT embedder (no segment
ids, no pooler). TensorFlow only."""

import json
import os
import textwrap

import keras
import numpy as np
import pytest
from model_harness import serve_alone

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="SavedModel export is TensorFlow-only")

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    from attnlayers.applications.bert import BertBackbone, BertConfig
    from attnlayers.applications.bert.export import export_text_model
    from attnlayers.applications.bert.heads import BertClassifier, BertTokenClassifier
    from attnlayers.applications.bert.roberta_tokenizer import RobertaTokenizer
    from attnlayers.applications.bert.sentencepiece_tokenizer import AlbertTokenizer
    from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS, BertTokenizer
    from attnlayers.applications.core.tokenizers.byte_bpe import BYTE_SYMBOLS

LENGTH = 16
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "run", "##s", "##ning", "a", "big", "red", ",", ".", "!", "?"]
LABELS = ["negative", "neutral", "positive"]
TAGS = ["NOUN", "VERB", "DET", "."]
TEXTS = [
    "The cat sat on the mat.",
    "",
    "   ",
    "dogs running!",
    " ".join(["the big red dog sat on a mat ."] * 4),  # 36 pieces > LENGTH
    "zebra 😀 the cat",  # unknown word, emoji
]
PAIRS = ["a dog.", "", "the cat", "the red mat", "a", "dogs"]
PIECES = [7, 0, 0, 5, 36, 4]  # word pieces of TEXTS: [UNK] for "zebra" and for the emoji

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the WordPiece ops

    def plain(value):
        value = value.numpy()
        if value.dtype.kind in "OS":
            return [[b.decode("utf-8") for b in row] if hasattr(row, "__len__") and not isinstance(row, bytes)
                    else row.decode("utf-8") for row in value.tolist()]
        return value.tolist()

    paths, texts, pairs = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
    results = {}
    for task, (path, name) in paths.items():
        loaded = tf.saved_model.load(path)
        function = getattr(loaded, name)
        single = function(tf.constant(texts))
        pair = function(text=tf.constant(texts), text_pair=tf.constant(pairs))
        by_signature = loaded.signatures[name](text=tf.constant(texts))
        default = loaded.signatures["serving_default"](text=tf.constant(texts[:2]))
        pair_signature = loaded.signatures[name + "_pair"](text=tf.constant(texts), text_pair=tf.constant(pairs))
        empty_batch = function(tf.constant([], tf.string))
        bad_utf8 = function(tf.constant([b"\\xff\\xfe the cat"]))
        refused = {}
        for case, inputs in {"scalar": {"text": tf.constant("a")},
                             "scalar_pair": {"text": tf.constant(["a"]), "text_pair": tf.constant("b")}}.items():
            try:
                loaded.signatures[name + ("_pair" if "text_pair" in inputs else "")](**inputs)
                refused[case] = ""
            except tf.errors.InvalidArgumentError as error:
                refused[case] = error.message
        results[task] = {
            "single": {k: plain(v) for k, v in single.items()},
            "pair": {k: plain(v) for k, v in pair.items()},
            "signature_equal": all(
                (by_signature[k].numpy() == single[k].numpy()).all() for k in single),
            "pair_signature_equal": all(
                (pair_signature[k].numpy() == pair[k].numpy()).all() for k in pair),
            "default_keys": sorted(default),
            "empty_batch": {k: list(v.shape) for k, v in empty_batch.items()},
            "bad_utf8_empty": bool(bad_utf8["empty"].numpy()[0]),
            "refused": refused,
            "sequence_length": int(loaded.sequence_length.numpy()),
            "label_names": [b.decode() for b in loaded.label_names.numpy()] if hasattr(loaded, "label_names")
            else None,
        }
    blocked = imported("attnlayers", "keras_hub")  # noqa: F821  (serve_alone's prelude)
    assert not blocked, blocked
    print(json.dumps(results))
    """
)


def _tokenizer():
    return BertTokenizer(list(SPECIAL_TOKENS) + WORDS, lowercase=True)


def _backbone(seed):
    keras.utils.set_random_seed(seed)
    return BertBackbone(BertConfig(vocabulary_size=len(SPECIAL_TOKENS) + len(WORDS), max_sequence_length=LENGTH,
                                   num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32, dropout=0.0))


def _models():
    return {
        "classifier": BertClassifier(_backbone(1), num_classes=len(LABELS)),
        "tagger": BertTokenClassifier(_backbone(2), num_tags=len(TAGS)),
        "embedding": _backbone(3),
    }


BERT_TASKS = ("classifier", "tagger", "embedding")
# RoBERTa's byte-level BPE: <s> <pad> </s> <unk>, the 256 byte symbols (byte b at id 4 + b), three merges, <mask>.
ROBERTA_VOCABULARY = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{s: 4 + b for b, s in enumerate(BYTE_SYMBOLS)},
                      "he": 260, "Ġt": 261, "Ġthe": 262, "<mask>": 263}


def _family_models(folder):
    """{name: (model, tokenizer, task, sequence length)}: RoBERTa's and ALBERT's classifiers and DistilBERT's
    embedder, tiny. RoBERTa's length, 12, leaves 8 pieces for a pair: the third pair (9 pieces) is truncated with its
    layout's four special tokens and would not be with BERT's three."""
    import io

    import sentencepiece

    sizes = {"num_layers": 2, "num_heads": 2, "hidden_dim": 16, "intermediate_dim": 32, "dropout": 0.0}
    roberta = RobertaTokenizer(ROBERTA_VOCABULARY, ["h e", "Ġ t", "Ġt he"])
    spiece = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS[:1] + TEXTS[3:4] + PAIRS + ["the big red dog runs on the mat"] * 3),
        model_writer=spiece, vocab_size=40, model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
        minloglevel=2, num_threads=1, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1)
    (folder / "spiece.model").write_bytes(spiece.getvalue())
    keras.utils.set_random_seed(4)  # before the SentencePiece tokenizer: seeding destroys its TensorFlow resource
    albert = AlbertTokenizer(folder / "spiece.model")
    return {
        "roberta": (BertClassifier(BertBackbone(BertConfig(
            family="roberta", vocabulary_size=264, max_sequence_length=LENGTH + 2, num_segments=1, pad_token_id=1,
            position_offset=2, **sizes)), num_classes=len(LABELS)), roberta, "classifier", 12),
        "albert": (BertClassifier(BertBackbone(BertConfig(
            family="albert", vocabulary_size=albert.vocabulary_size, max_sequence_length=LENGTH, embedding_dim=8,
            num_groups=1, activation="gelu_approximate", **sizes)), num_classes=len(LABELS)), albert, "classifier",
                   LENGTH),
        "distilbert": (BertBackbone(BertConfig(family="distilbert", vocabulary_size=len(SPECIAL_TOKENS) + len(WORDS),
                                               max_sequence_length=LENGTH, num_segments=0, pooler=False, **sizes)),
                       _tokenizer(), "embedding", LENGTH),
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The three tiny models, their tokenizer, their SavedModels, and what a fresh process serves from them."""
    tokenizer = _tokenizer()
    models = _models()
    root = tmp_path_factory.mktemp("bert_export")
    paths, labels = {}, {"classifier": LABELS, "tagger": TAGS, "embedding": None}
    names = {"classifier": "classify", "tagger": "tag", "embedding": "embed"}
    for task, model in models.items():
        path = str(root / task)
        export_text_model(model, tokenizer, path, sequence_length=LENGTH, task=task, labels=labels[task])
        paths[task] = (path, names[task])
    families = _family_models(root)
    for name, (model, family_tokenizer, task, length) in families.items():
        path = str(root / name)
        export_text_model(model, family_tokenizer, path, sequence_length=length, task=task, labels=labels[task])
        paths[name] = (path, names[task])
    served = serve_alone(SCRIPT, json.dumps(paths), json.dumps(TEXTS), json.dumps(PAIRS), cwd=root)
    return {"tokenizer": tokenizer, "models": models, "paths": paths, "served": served, "families": families,
            "root": root}


def _keras_outputs(model, tokenizer, texts, pairs=None, length=LENGTH):
    """The in-process reference: tokenize, pack, call the Keras model eagerly."""
    segments = [tokenizer.tokenize(tf.constant(texts))]
    if pairs is not None:
        segments.append(tokenizer.tokenize(tf.constant(pairs)))
    packed = tokenizer.pack(*segments, sequence_length=length)
    if not model.backbone.config.num_segments if hasattr(model, "backbone") else not model.config.num_segments:
        packed.pop("segment_ids")  # DistilBERT: no segment embeddings
    return packed, model(packed, training=False)


def _softmax(x):
    x = np.asarray(x, "float64")
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("pairs", [None, PAIRS], ids=["single", "pair"])
def test_served_classifier_matches_keras(exported, pairs):
    served = exported["served"]["classifier"]["pair" if pairs else "single"]
    _, logits = _keras_outputs(exported["models"]["classifier"], exported["tokenizer"], TEXTS, pairs)
    expected = _softmax(logits)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    np.testing.assert_allclose(np.sum(served["probabilities"], -1), 1.0, atol=1e-5)
    assert served["label_id"] == expected.argmax(-1).tolist()
    assert served["label"] == [LABELS[i] for i in expected.argmax(-1)]


@pytest.mark.parametrize("pairs", [None, PAIRS], ids=["single", "pair"])
def test_served_tagger_matches_keras(exported, pairs):
    tokenizer = exported["tokenizer"]
    served = exported["served"]["tagger"]["pair" if pairs else "single"]
    packed, logits = _keras_outputs(exported["models"]["tagger"], tokenizer, TEXTS, pairs)
    token_ids = packed["token_ids"].numpy()
    real = packed["padding_mask"].numpy()
    tag_mask = real & (token_ids != tokenizer.cls_token_id) & (token_ids != tokenizer.sep_token_id)
    probabilities = np.where(tag_mask[..., None], _softmax(logits), 0.0)
    np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-5)
    assert served["token_ids"] == token_ids.tolist()
    assert served["tag_mask"] == tag_mask.tolist()
    tag_ids = np.where(tag_mask, probabilities.argmax(-1), -1)
    assert served["tag_ids"] == tag_ids.tolist()
    assert served["tags"] == [[TAGS[t] if t >= 0 else "" for t in row] for row in tag_ids]
    vocabulary = tokenizer.get_vocabulary()
    assert served["tokens"] == [[vocabulary[t] if r else "" for t, r in zip(row, mask)]
                                for row, mask in zip(token_ids, real)]
    # "dogs running!": dog ##s run ##ning ! -> word starts at dog, run, !
    row = served["tokens"][3]
    assert row[:7] == ["[CLS]", "dog", "##s", "run", "##ning", "!", "[SEP]"]
    assert served["word_start"][3][:7] == [False, True, False, True, False, True, False]


@pytest.mark.parametrize("pairs", [None, PAIRS], ids=["single", "pair"])
def test_served_embeddings_match_keras(exported, pairs):
    served = exported["served"]["embedding"]["pair" if pairs else "single"]
    packed, out = _keras_outputs(exported["models"]["embedding"], exported["tokenizer"], TEXTS, pairs)
    hidden = out["sequence_output"].numpy().astype("float64")
    mask = packed["padding_mask"].numpy()[..., None]
    mean = (hidden * mask).sum(1) / mask.sum(1)
    expected = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
    embedding = np.asarray(served["embedding"])
    np.testing.assert_allclose(embedding, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=-1), 1.0, atol=1e-5)  # empty texts too


def test_flags_signatures_and_edge_inputs(exported):
    for task in BERT_TASKS:
        result = exported["served"][task]
        single, pair = result["single"], result["pair"]
        assert single["num_tokens"] == PIECES, task
        assert single["empty"] == [False, True, True, False, False, False], task
        assert single["truncated"] == [False, False, False, False, True, False], task  # 36 > 16 - 2
        pair_pieces = [7 + 3, 0 + 0, 0 + 2, 5 + 3, 36 + 1, 4 + 2]
        assert pair["num_tokens"] == pair_pieces
        assert pair["empty"] == [n == 0 for n in pair_pieces]
        assert pair["truncated"] == [n > LENGTH - 3 for n in pair_pieces]
        assert result["signature_equal"] and result["pair_signature_equal"], task
        assert result["sequence_length"] == LENGTH
        assert result["bad_utf8_empty"] is False  # invalid bytes become U+FFFD -> [UNK], the rest is served
        assert all(shape[0] == 0 for shape in result["empty_batch"].values()), result["empty_batch"]
        assert "truncated" in result["default_keys"]
    assert exported["served"]["classifier"]["label_names"] == LABELS
    assert exported["served"]["tagger"]["label_names"] == TAGS
    assert exported["served"]["embedding"]["label_names"] is None
    assert exported["served"]["tagger"]["empty_batch"]["probabilities"] == [0, LENGTH, len(TAGS)]


@pytest.mark.parametrize("pairs", [None, PAIRS], ids=["single", "pair"])
def test_the_family_serves_alone_as_keras_computes(exported, pairs):
    """RoBERTa (its own BPE and layout, positions from 2) and ALBERT (SentencePiece) classify, DistilBERT embeds
    without segment ids, in the process without attnlayers, as the in-process models; the truncation flag counts
    each layout's special tokens (RoBERTa's pair has four)."""
    specials = {"roberta": (2, 4), "albert": (2, 3), "distilbert": (2, 3)}
    for name, (model, tokenizer, task, length) in exported["families"].items():
        served = exported["served"][name]["pair" if pairs else "single"]
        if name == "albert":  # made again: each test's clear_session destroyed its SentencePiece resource
            tokenizer = AlbertTokenizer(exported["root"] / "spiece.model")
        packed, out = _keras_outputs(model, tokenizer, TEXTS, pairs, length)
        if task == "classifier":
            np.testing.assert_allclose(served["probabilities"], _softmax(out), atol=1e-5, err_msg=name)
        else:
            hidden = out["sequence_output"].numpy().astype("float64")
            mask = packed["padding_mask"].numpy()[..., None]
            mean = (hidden * mask).sum(1) / mask.sum(1)
            np.testing.assert_allclose(served["embedding"], mean / np.linalg.norm(mean, axis=-1, keepdims=True),
                                       atol=1e-5, err_msg=name)
        pieces = [len(t) for t in tokenizer.tokenize(tf.constant(TEXTS)).to_list()]
        if pairs:
            pieces = [a + len(b) for a, b in zip(pieces, tokenizer.tokenize(tf.constant(PAIRS)).to_list())]
        assert served["num_tokens"] == pieces, name
        assert served["truncated"] == [n > length - specials[name][bool(pairs)] for n in pieces], name
        assert any(served["truncated"]) and not all(served["truncated"]), (name, pieces)
    assert exported["served"]["roberta"]["pair"]["truncated"][2] and exported["served"]["roberta"]["pair"][
        "num_tokens"][2] == 12 - 3  # "   " + "the cat": 9 pieces, 8 fit
    assert exported["served"]["roberta"]["label_names"] == LABELS


def test_bad_serving_inputs_are_refused(exported):
    loaded = tf.saved_model.load(exported["paths"]["classifier"][0])
    with pytest.raises((TypeError, ValueError)):
        loaded.classify(tf.constant([1, 2]))  # not strings
    with pytest.raises((TypeError, ValueError)):
        loaded.classify(tf.constant([["a", "b"]]))  # not a 1-D batch
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of strings"):
        loaded.classify(text=tf.constant(["a", "b"]), text_pair=tf.constant(["c"]))
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        loaded.signatures["classify"](text=tf.constant([1]))


def test_every_signature_refuses_a_scalar_text_naming_the_input(exported):
    # signatures[...] check dtypes, not shapes: a scalar string reached the graph (embed took it as a batch of
    # one, the others crashed); every signature now refuses it, naming the input and the shape (batch,).
    for task, result in exported["served"].items():
        assert "`text` must have shape (batch,)" in result["refused"]["scalar"], (task, result["refused"])
        assert "`text_pair` must have shape (batch,)" in result["refused"]["scalar_pair"], (task, result["refused"])


def test_bad_export_arguments_are_refused(tmp_path):
    tokenizer = _tokenizer()
    models = _models()
    classifier, tagger, backbone = models["classifier"], models["tagger"], models["embedding"]
    path = str(tmp_path / "never")
    with pytest.raises(ValueError, match="`task` must be one of"):
        export_text_model(classifier, tokenizer, path, task="qa")
    with pytest.raises(ValueError, match="task='classifier' exports a BertClassifier"):
        export_text_model(tagger, tokenizer, path, sequence_length=LENGTH, task="classifier")
    with pytest.raises(ValueError, match="task='tagger' exports a BertTokenClassifier"):
        export_text_model(classifier, tokenizer, path, sequence_length=LENGTH, task="tagger")
    with pytest.raises(ValueError, match="task='embedding' exports a BertBackbone"):
        export_text_model(tokenizer, tokenizer, path, sequence_length=LENGTH, task="embedding")
    with pytest.raises(ValueError, match="must name the model's 3 outputs"):
        export_text_model(classifier, tokenizer, path, sequence_length=LENGTH, labels=["a", "b"])
    with pytest.raises(ValueError, match="must be distinct"):
        export_text_model(classifier, tokenizer, path, sequence_length=LENGTH, labels=["a", "a", "b"])
    with pytest.raises(ValueError, match="has no labels"):
        export_text_model(backbone, tokenizer, path, sequence_length=LENGTH, task="embedding", labels=["a"])
    for bad in (LENGTH + 1, 2, True, 8.0):
        with pytest.raises(ValueError, match="`sequence_length` must be an integer in"):
            export_text_model(classifier, tokenizer, path, sequence_length=bad)
    roberta_model, roberta, _, _ = _family_models(tmp_path)["roberta"]
    with pytest.raises(ValueError, match="task='tagger' marks word starts.*RobertaTokenizer"):
        export_text_model(BertTokenClassifier(roberta_model.backbone, num_tags=2), roberta, path, sequence_length=8,
                          task="tagger")
    with pytest.raises(ValueError, match=r"`sequence_length` must be an integer in \[4, 16\].*position offset 2"):
        export_text_model(roberta_model, roberta, path, sequence_length=LENGTH + 1)
    with pytest.raises(ValueError, match="BERT family's tokenizer"):
        export_text_model(classifier, object(), path, sequence_length=LENGTH)
    big = BertTokenizer(list(SPECIAL_TOKENS) + WORDS + [f"w{i}" for i in range(50)])
    with pytest.raises(ValueError, match="vocabulary_size"):
        export_text_model(classifier, big, path, sequence_length=LENGTH)
    assert not os.path.exists(path)


def test_exported_module_serves_in_process_and_a_head_exports_its_backbone(tmp_path):
    tokenizer = _tokenizer()
    classifier = _models()["classifier"]
    module = export_text_model(classifier, tokenizer, str(tmp_path / "embed"), sequence_length=8, task="embedding")
    out = module.embed(tf.constant(["the cat", "a dog sat on the big red mat"]))
    assert out["embedding"].shape == (2, 16)
    assert out["truncated"].numpy().tolist() == [False, True]
    packed, expected = _keras_outputs(classifier.backbone, tokenizer, ["the cat"])
    assert packed["token_ids"].shape == (1, LENGTH)  # the reference packs to LENGTH; the export to 8
    hidden = expected["sequence_output"].numpy()[0, :4].mean(0)  # [CLS] the cat [SEP]: padding does not matter
    np.testing.assert_allclose(out["embedding"].numpy()[0], hidden / np.linalg.norm(hidden), atol=1e-5)
