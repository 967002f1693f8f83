"""Bad-input sweep over the public entry points of the four applications.

For each entry point (NMT: ``model.generate``, ``nmt.evaluate.translate``, the translator SavedModel's
``translate``; captioning: ``model.generate``, ``predict.caption_images``, the SavedModel's ``caption``; BERT:
``BertTokenizer.tokenize``, ``pack``, the backbone and the heads, the SavedModel's ``embed``; GPT: the model call,
``generate``, ``generate_text``, the SavedModel's ``generate``) bad inputs are fed: wrong dtypes (floats / ints
where strings are expected and the reverse), wrong ranks (scalars, 3-D), empty batches, None, token ids out of
range, negative lengths / sizes, mismatched batch sizes. Each case either raises an error whose message names the
offending argument, or returns the documented result (asserted). One tiny model per application, each exported
once (no XLA), and one test per application that runs all its cases (so that its model is built once whatever
process runs it) and names each failing case. TensorFlow only: tokenizers and SavedModels are TensorFlow's."""

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="tokenizers and SavedModels run TensorFlow ops")

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops the SavedModels use

    from attnlayers.applications import nmt
    from attnlayers.applications.bert import BertBackbone, BertConfig
    from attnlayers.applications.bert.export import export_text_model
    from attnlayers.applications.bert.heads import BertClassifier, BertSpanQA, BertTokenClassifier
    from attnlayers.applications.bert.pretraining_data import pack
    from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS, BertTokenizer
    from attnlayers.applications.captioning import ShowAttendTell, data, predict
    from attnlayers.applications.captioning.export import export_captioner
    from attnlayers.applications.gpt import GPT, GPTConfig
    from attnlayers.applications.gpt.export import export_gpt
    from attnlayers.applications.gpt.generation import generate_text
    from attnlayers.applications.gpt.tokenizer import GPT2Tokenizer, train_byte_level_bpe
    from attnlayers.applications.nmt import evaluate
    from attnlayers.applications.nmt.export import export_translator
    from attnlayers.applications.nmt.model import build_model

    GraphError = tf.errors.InvalidArgumentError  # an in-graph assertion of a SavedModel

L = 8  # generated length everywhere
RNG = np.random.default_rng(0)


def raises(match, error=ValueError):
    return ("raises", error, match)


def returns(check):
    return ("returns", check)


def _run(context, call, expect):
    if expect[0] == "raises":
        with pytest.raises(expect[1], match=expect[2]):
            call(context)
    else:
        expect[1](call(context))


def _run_all(context, cases):
    """Every case of one application on its one model (built and exported once); the failures are reported
    together, each under its case's name."""
    failures = []
    for case in cases:
        call, expect = case.values
        try:
            _run(context, call, expect)
        except (Exception, pytest.fail.Exception) as error:  # pytest.raises' "DID NOT RAISE" is a BaseException
            failures.append(f"[{case.id}] {type(error).__name__}: {str(error)[:500]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


def _shape(*shape):
    return lambda out: _assert_shape(out, shape)


def _assert_shape(out, shape):
    out = getattr(out, "tokens", out)
    assert tuple(np.shape(out)) == shape, np.shape(out)


def _case(name, call, expect):
    return pytest.param(call, expect, id=name)


# ------------------------------------------------------------------------------------------------------------
# NMT

@pytest.fixture(scope="module")
def nmt_app(tmp_path_factory):
    pairs = nmt.synthetic_pairs(200, seed=7, max_length=8)
    tokenizers = nmt.build_tokenizers(pairs, source_vocabulary_size=100, target_vocabulary_size=100,
                                      model_type="word")
    keras.utils.set_random_seed(1)
    model = build_model("transformer", tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size,
                        num_layers=1, d_model=16, num_heads=2, intermediate_dim=32, max_length=12)
    ids = np.ones((1, 3), "int32")
    model((ids, ids))
    path = str(tmp_path_factory.mktemp("nmt") / "translator")
    export_translator(path, model, tokenizers, max_source_length=12, max_length=12, jit_compile=False)
    return dict(model=model, tokenizers=tokenizers, loaded=tf.saved_model.load(path), text=pairs.source[0])


SRC = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")


def _translate(texts, **kwargs):
    return lambda a: evaluate.translate(a["model"], a["tokenizers"], texts, max_source_length=12, max_length=12,
                                        warn_truncation=False, **kwargs)


def _translate_signature(text):
    return lambda a: a["loaded"].signatures["translate"](text=text)


NMT_CASES = [
    # model.generate(source_ids, max_length, ...)
    _case("generate-float-ids", lambda a: a["model"].generate(SRC + 0.5, L), raises(r"`inputs`.*integer.*float64")),
    _case("generate-strings", lambda a: a["model"].generate(np.array([["a"]]), L), raises(r"`inputs`.*integer")),
    _case("generate-None", lambda a: a["model"].generate(None, L), raises(r"`inputs`.*received None")),
    _case("generate-scalar", lambda a: a["model"].generate(np.int32(3), L), raises(r"`inputs`.*\(batch, length\)")),
    _case("generate-3d", lambda a: a["model"].generate(SRC[None], L), raises(r"`inputs`.*\(batch, length\)")),
    _case("generate-empty-batch", lambda a: a["model"].generate(SRC[:0], L), returns(_shape(0, L))),
    _case("generate-no-positions", lambda a: a["model"].generate(np.zeros((2, 0), "int32"), L),
          raises(r"`inputs` holds empty sources")),
    _case("generate-all-padding-row", lambda a: a["model"].generate(np.zeros((1, 3), "int32"), L),
          returns(_shape(1, L))),  # the fully-masked rule: no source visible, context 0
    _case("generate-id-too-large", lambda a: a["model"].generate(SRC + 1000, L),
          raises(r"`inputs` must hold source token ids in \[0, source_vocabulary_size=")),
    _case("generate-negative-id", lambda a: a["model"].generate(SRC - 10, L), raises(r"`inputs`.*out of range")),
    _case("generate-negative-max_length", lambda a: a["model"].generate(SRC, -1), raises(r"`max_length`.*-1")),
    _case("generate-zero-max_length", lambda a: a["model"].generate(SRC, 0), raises(r"`max_length`.*0")),
    _case("generate-float-max_length", lambda a: a["model"].generate(SRC, 8.0), raises(r"`max_length`")),
    _case("generate-source-too-long", lambda a: a["model"].generate(np.ones((1, 40), "int32"), L),
          raises(r"`source_ids` has 40 tokens")),
    _case("generate-padding_mask-batch", lambda a: a["model"].generate(SRC, L, padding_mask=np.ones((3, 4), bool)),
          raises(r"`padding_mask` has shape \(3, 4\)")),
    _case("generate-padding_mask-float", lambda a: a["model"].generate(SRC, L, padding_mask=np.ones((2, 4))),
          raises(r"`padding_mask` must be a boolean")),
    _case("generate-negative-max_new_tokens", lambda a: a["model"].generate(SRC, L, max_new_tokens=-1),
          raises(r"`max_new_tokens`.*-1")),
    _case("generate-bad-seed", lambda a: a["model"].generate(SRC, L, search="sample", seed="x"),
          raises(r"`seed`")),
    # evaluate.translate(model, tokenizers, texts, ...)
    _case("translate-one-string", _translate("a b"), raises(r"`texts`.*not one string")),
    _case("translate-None", _translate(None), raises(r"`texts`.*None")),
    _case("translate-ints", _translate([1, 2]), raises(r"`texts`.*texts\[0\]=1")),
    _case("translate-bytes", _translate([b"abc"]), raises(r"`texts`.*bytes")),
    _case("translate-nested", _translate([["a"]]), raises(r"`texts`.*list")),
    _case("translate-2d-array", _translate(np.array([["a"]])), raises(r"`texts`.*shape \(1, 1\)")),
    _case("translate-int-tensor", _translate(tf.constant([1])), raises(r"`texts`.*dtype int32")),
    _case("translate-empty-batch", _translate([]), returns(lambda out: out == [])),
    _case("translate-empty-strings", _translate(["", "   "]), returns(lambda out: out == ["", ""])),
    _case("translate-string-tensor", _translate(tf.constant(["a b"])), returns(lambda out: len(out) == 1)),
    _case("translate-zero-max_length", lambda a: evaluate.translate(a["model"], a["tokenizers"], ["a"], max_length=0),
          raises(r"`max_length`.*0")),
    _case("translate-negative-max_source_length",
          lambda a: evaluate.translate(a["model"], a["tokenizers"], ["a"], max_source_length=-1),
          raises(r"`max_source_length`.*-1")),
    _case("translate-zero-batch_size", _translate(["a"], batch_size=0), raises(r"`batch_size`.*0")),
    _case("translate-negative-batch_size", _translate(["a"], batch_size=-1), raises(r"`batch_size`.*-1")),
    # the SavedModel's `translate` signature
    _case("signature-scalar-text", _translate_signature(tf.constant("a b")), raises(r"`text` must have shape \(batch,\)",
                                                                                    GraphError)),
    _case("signature-2d-text", _translate_signature(tf.constant([["a b"]])),
          raises(r"`text` must have shape \(batch,\)", GraphError)),
    _case("signature-int-text", _translate_signature(tf.constant([1, 2])),
          raises(r"input #0\(zero-based\) was expected to be a string tensor", GraphError)),
    _case("signature-empty-batch", _translate_signature(tf.constant([], tf.string)),
          returns(lambda out: out["translation"].shape == (0,) and out["token_ids"].shape == (0, 12))),
    _case("signature-empty-string", _translate_signature(tf.constant(["", "qqq"])),
          returns(lambda out: out["empty"].numpy().tolist() == [True, False] and out["translation"].numpy()[0] == b"")),
    _case("function-None", lambda a: a["loaded"].translate(None), raises(r"text", TypeError)),
    _case("function-int-text", lambda a: a["loaded"].translate(tf.constant([1])), raises(r"name='text'", TypeError)),
]


def test_nmt(nmt_app):
    _run_all(nmt_app, NMT_CASES)


# ------------------------------------------------------------------------------------------------------------
# Captioning

@pytest.fixture(scope="module")
def captioning_app(tmp_path_factory):
    vocabulary = data.CaptionVocabulary(["red", "blue", "circle", "square", "a", "on", "left"])
    keras.utils.set_random_seed(2)
    model = ShowAttendTell(vocabulary.vocabulary_size, image_size=16, filters=(4, 8), units=8, embedding_dim=4)
    model((np.zeros((1, 16, 16, 3), "uint8"), np.ones((1, 1), "int32")))
    path = str(tmp_path_factory.mktemp("captioning") / "captioner")
    export_captioner(path, model, vocabulary, search="greedy", max_length=L, jit_compile=False)
    return dict(model=model, vocabulary=vocabulary, loaded=tf.saved_model.load(path))


IMAGES = RNG.integers(0, 256, (2, 16, 16, 3)).astype("uint8")


def _caption(images, **kwargs):
    return lambda a: predict.caption_images(a["model"], images, a["vocabulary"], max_length=L, **kwargs)


def _caption_signature(images):
    return lambda a: a["loaded"].signatures["caption"](images=images)


CAPTIONING_CASES = [
    # predict.caption_images(model, images, vocabulary, ...)
    _case("caption-None", _caption(None), raises(r"`images`.*None")),
    _case("caption-strings", _caption(np.array(["a"])), raises(r"`images`.*shape \(N, S, S, 3\)")),
    _case("caption-scalar", _caption(np.uint8(3)), raises(r"`images`.*received shape \(\)")),
    _case("caption-one-image", _caption(IMAGES[0]), raises(r"`images`.*received shape \(16, 16, 3\)")),
    _case("caption-5d", _caption(IMAGES[None]), raises(r"`images`.*received shape \(1, 2, 16, 16, 3\)")),
    _case("caption-floats-in-0-1", _caption(IMAGES / 255.0), raises(r"`images`.*Multiply them by 255")),
    _case("caption-out-of-range-ints", _caption(np.full((1, 16, 16, 3), 1000)), raises(r"`images`.*0\.\.255")),
    _case("caption-wrong-size", _caption(np.zeros((1, 20, 20, 3), "uint8")), raises(r"`images` must be 16 x 16")),
    _case("caption-gray", _caption(np.zeros((1, 16, 16, 1), "uint8")), raises(r"`images` must be RGB")),
    _case("caption-empty-batch", _caption(IMAGES[:0]), returns(lambda out: out == [])),
    _case("caption-float-pixels", _caption(IMAGES.astype("float32")), returns(lambda out: len(out) == 2)),
    _case("caption-zero-max_length", lambda a: predict.caption_images(a["model"], IMAGES, a["vocabulary"], max_length=0),
          raises(r"`max_length`.*0")),
    _case("caption-zero-batch_size", _caption(IMAGES, batch_size=0), raises(r"`batch_size`.*0")),
    _case("caption-negative-batch_size", _caption(IMAGES, batch_size=-1), raises(r"`batch_size`.*-1")),
    _case("caption-no-vocabulary", lambda a: predict.caption_images(a["model"], IMAGES, None, max_length=L),
          raises(r"`vocabulary`")),
    # model.generate(images, max_length)
    _case("generate-None", lambda a: a["model"].generate(None, L), raises(r"`images`.*None")),
    _case("generate-one-image", lambda a: a["model"].generate(IMAGES[0], L), raises(r"`images`.*\(16, 16, 3\)")),
    _case("generate-empty-batch", lambda a: a["model"].generate(IMAGES[:0], L), raises(r"`images` is an empty batch")),
    _case("generate-float-tensor-in-0-1", lambda a: a["model"].generate(tf.constant(IMAGES / 255.0, tf.float32), L),
          raises(r"`images`.*Multiply them by 255")),
    _case("generate-padding_mask", lambda a: a["model"].generate(IMAGES, L, padding_mask=np.ones((2, 3), bool)),
          raises(r"`padding_mask` must be None")),
    _case("generate-negative-max_length", lambda a: a["model"].generate(IMAGES, -1), raises(r"`max_length`.*-1")),
    # the SavedModel's `caption` signature
    _case("signature-floats", _caption_signature(tf.constant(IMAGES, tf.float32)),
          raises(r"input #0\(zero-based\) was expected to be a uint8 tensor", GraphError)),
    _case("signature-one-image", _caption_signature(tf.constant(IMAGES[0])),
          raises(r"`images` must have shape \(batch, height, width, channels\)", GraphError)),
    _case("signature-scalar", _caption_signature(tf.constant(3, tf.uint8)),
          raises(r"`images` must have shape \(batch, height, width, channels\)", GraphError)),
    _case("signature-two-channels", _caption_signature(tf.zeros((1, 16, 16, 2), tf.uint8)),
          raises(r"images must have 1 \(gray\), 3 \(RGB\) or 4 \(RGBA\) channels", GraphError)),
    _case("signature-no-pixels", _caption_signature(tf.zeros((1, 0, 0, 3), tf.uint8)),
          raises(r"`images` must have height and width >= 1", GraphError)),
    _case("signature-empty-batch", _caption_signature(tf.zeros((0, 16, 16, 3), tf.uint8)),
          returns(lambda out: out["caption"].shape == (0,) and out["token_ids"].shape == (0, L))),
    _case("signature-other-size-gray", _caption_signature(tf.zeros((2, 30, 20, 1), tf.uint8)),
          returns(lambda out: out["caption"].shape == (2,))),
    _case("function-floats", lambda a: a["loaded"].caption(tf.constant(IMAGES, tf.float32)),
          raises(r"name='images'", TypeError)),
]


def test_captioning(captioning_app):
    _run_all(captioning_app, CAPTIONING_CASES)


# ------------------------------------------------------------------------------------------------------------
# BERT

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "run", "##s", "a", "big", "red", ".", "!"]
BERT_LENGTH = 8


@pytest.fixture(scope="module")
def bert_app(tmp_path_factory):
    tokenizer = BertTokenizer(list(SPECIAL_TOKENS) + WORDS, lowercase=True)
    keras.utils.set_random_seed(3)
    backbone = BertBackbone(BertConfig(vocabulary_size=len(SPECIAL_TOKENS) + len(WORDS),
                                       max_sequence_length=BERT_LENGTH, num_layers=1, num_heads=2, hidden_dim=8,
                                       intermediate_dim=16, dropout=0.0))
    heads = {"classifier": BertClassifier(backbone, num_classes=3), "tagger": BertTokenClassifier(backbone, num_tags=4),
             "span": BertSpanQA(backbone)}
    path = str(tmp_path_factory.mktemp("bert") / "embedder")
    export_text_model(backbone, tokenizer, path, sequence_length=BERT_LENGTH, task="embedding")
    return dict(tokenizer=tokenizer, backbone=backbone, heads=heads, loaded=tf.saved_model.load(path),
                ids=tokenizer.tokenize(["the cat", "a dog"]))


TOKENS = {"token_ids": np.array([[2, 5, 6, 3], [2, 7, 3, 0]], "int32")}


def _pack(*segments, **kwargs):
    return lambda a: pack(*[a["ids"] if s is None else s for s in segments],
                          **{"sequence_length": BERT_LENGTH, "tokenizer": a["tokenizer"], **kwargs})


def _backbone(inputs):
    return lambda a: a["backbone"](inputs)


def _head(name, inputs):
    return lambda a: a["heads"][name](inputs)


def _embed(**inputs):
    name = "embed_pair" if "text_pair" in inputs else "embed"
    return lambda a: a["loaded"].signatures[name](**inputs)


BERT_CASES = [
    # BertTokenizer.tokenize(text)
    _case("tokenize-None", lambda a: a["tokenizer"].tokenize(None), raises(r"`text`.*None")),
    _case("tokenize-int", lambda a: a["tokenizer"].tokenize(3), raises(r"`text`.*received 3")),
    _case("tokenize-floats", lambda a: a["tokenizer"].tokenize(np.array([1.5])), raises(r"`text`")),
    _case("tokenize-int-tensor", lambda a: a["tokenizer"].tokenize(tf.constant([1])), raises(r"`text`.*int32")),
    _case("tokenize-2d", lambda a: a["tokenizer"].tokenize([["a"]]), raises(r"`text`.*1-D batch")),
    _case("tokenize-empty-batch", lambda a: a["tokenizer"].tokenize([]), returns(lambda out: out.shape[0] == 0)),
    _case("tokenize-empty-string", lambda a: a["tokenizer"].tokenize(["", "the"]),
          returns(lambda out: out.row_lengths().numpy().tolist() == [0, 1])),
    # pack(segments_a, segments_b, sequence_length=, tokenizer=)
    _case("pack-batch-mismatch", lambda a: pack(a["ids"], a["ids"][:1], sequence_length=BERT_LENGTH,
                                                tokenizer=a["tokenizer"]),
          raises(r"`segments_a` and `segments_b` must have the same batch size")),
    _case("pack-negative-sequence_length", _pack(None, sequence_length=-1), raises(r"`sequence_length`.*-1")),
    _case("pack-float-sequence_length", _pack(None, sequence_length=8.0), raises(r"`sequence_length`")),
    _case("pack-None", _pack(np.array(None)), raises(r"`segments_a`")),
    _case("pack-floats", _pack(np.ones((2, 3), "float32")), raises(r"`segments_a`.*float32")),
    _case("pack-raw-text", _pack(["the cat"]), raises(r"`segments_a`.*tokenizer")),
    _case("pack-3d", _pack(np.ones((1, 2, 3), "int32")), raises(r"`segments_a`.*\(1, 2, 3\)")),
    _case("pack-scalar", _pack(np.int32(3)), raises(r"`segments_a`.*shape \(\)")),
    _case("pack-empty-batch", lambda a: pack(a["ids"][:0], sequence_length=BERT_LENGTH, tokenizer=a["tokenizer"]),
          returns(lambda out: out["token_ids"].shape == (0, BERT_LENGTH))),
    # the backbone: {"token_ids", "segment_ids", "padding_mask"}
    _case("backbone-None", _backbone(None), raises(r"BertBackbone takes a dict|`token_ids`")),
    _case("backbone-None-token_ids", _backbone({"token_ids": None}), raises(r"`token_ids` is required")),
    _case("backbone-float-ids", _backbone({"token_ids": TOKENS["token_ids"].astype("float32")}),
          raises(r"`token_ids` must be integer token ids.*float32")),
    _case("backbone-string-ids", _backbone({"token_ids": np.array([["a"]])}), raises(r"`token_ids`.*string")),
    _case("backbone-1d", _backbone({"token_ids": np.array([2, 5])}), raises(r"`token_ids` must have shape")),
    _case("backbone-3d", _backbone({"token_ids": np.ones((1, 2, 3), "int32")}), raises(r"`token_ids` must have shape")),
    _case("backbone-empty-batch", _backbone({"token_ids": np.zeros((0, 4), "int32")}),
          returns(lambda out: out["sequence_output"].shape == (0, 4, 8) and out["pooled_output"].shape == (0, 8))),
    _case("backbone-no-positions", _backbone({"token_ids": np.zeros((2, 0), "int32")}),
          raises(r"`token_ids` holds empty sequences")),
    _case("backbone-id-too-large", _backbone({"token_ids": TOKENS["token_ids"] + 100}),
          raises(r"`token_ids` must hold ids in \[0, vocabulary_size=")),
    _case("backbone-negative-id", _backbone({"token_ids": TOKENS["token_ids"] - 5}), raises(r"`token_ids`.*out of range")),
    _case("backbone-segment-out-of-range", _backbone({**TOKENS, "segment_ids": np.full((2, 4), 5, "int32")}),
          raises(r"`segment_ids` must hold ids in \[0, num_segments=2\)")),
    _case("backbone-float-segments", _backbone({**TOKENS, "segment_ids": np.zeros((2, 4), "float32")}),
          raises(r"`segment_ids` must be integer")),
    _case("backbone-mask-batch-mismatch", _backbone({**TOKENS, "padding_mask": np.ones((3, 4), bool)}),
          raises(r"`padding_mask` must have the shape of `token_ids`")),
    _case("backbone-float-mask", _backbone({**TOKENS, "padding_mask": np.ones((2, 4), "float32")}),
          raises(r"`padding_mask` must be a boolean")),
    _case("backbone-segments-batch-mismatch", _backbone({**TOKENS, "segment_ids": np.zeros((1, 4), "int32")}),
          raises(r"`segment_ids` must have the shape of `token_ids`")),
    _case("backbone-too-long", _backbone({"token_ids": np.ones((1, 20), "int32")}),
          raises(r"`token_ids` has 20 positions but max_sequence_length is 8")),
    # the heads
    *[_case(f"{name}-{what}", _head(name, inputs), expect) for name in ("classifier", "tagger", "span")
      for what, inputs, expect in [
          ("None", None, raises(r"takes a dict")),
          ("float-ids", {"token_ids": TOKENS["token_ids"].astype("float32")}, raises(r"`token_ids` must be integer")),
          ("id-too-large", {"token_ids": TOKENS["token_ids"] + 100}, raises(r"`token_ids` must hold ids")),
          ("3d", {"token_ids": np.ones((1, 2, 3), "int32")}, raises(r"`token_ids` must have shape")),
          ("mask-batch-mismatch", {**TOKENS, "padding_mask": np.ones((3, 4), bool)}, raises(r"`padding_mask`")),
          ("empty-batch", {"token_ids": np.zeros((0, 4), "int32")},
           returns(lambda out: all(v.shape[0] == 0 for v in (out.values() if isinstance(out, dict) else [out])))),
      ]],
    # the SavedModel's `embed` signatures
    _case("embed-int-text", _embed(text=tf.constant([1])),
          raises(r"input #0\(zero-based\) was expected to be a string tensor", GraphError)),
    _case("embed-scalar-text", _embed(text=tf.constant("x")), raises(r"`text` must have shape \(batch,\)", GraphError)),
    _case("embed-2d-text", _embed(text=tf.constant([["x"]])), raises(r"`text` must have shape \(batch,\)", GraphError)),
    _case("embed-pair-batch-mismatch", _embed(text=tf.constant(["a", "b"]), text_pair=tf.constant(["c"])),
          raises(r"`text` and `text_pair` must hold the same number of strings", GraphError)),
    _case("embed-empty-batch", _embed(text=tf.constant([], tf.string)),
          returns(lambda out: out["embedding"].shape == (0, 8))),
    _case("embed-empty-string", _embed(text=tf.constant(["", "the cat"])),
          returns(lambda out: out["empty"].numpy().tolist() == [True, False]
                  and np.allclose(np.linalg.norm(out["embedding"].numpy(), axis=-1), 1.0, atol=1e-5))),
    _case("embed-function-None", lambda a: a["loaded"].embed(None),  # TensorFlow's binding error: cannot be reworded
          raises(r"Could not find matching concrete function", (TypeError, ValueError))),
]


def test_bert(bert_app):
    _run_all(bert_app, BERT_CASES)


# ------------------------------------------------------------------------------------------------------------
# GPT

CORPUS = ["The quick brown fox jumps over the lazy dog. The dog sleeps.", "A cat, a hat; the cat sat on the mat!"] * 4
CONTEXT = 16


@pytest.fixture(scope="module")
def gpt_app(tmp_path_factory):
    tokenizer = GPT2Tokenizer(*train_byte_level_bpe(CORPUS, 300, tmp_path_factory.mktemp("bpe")))
    keras.utils.set_random_seed(4)
    model = GPT(GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=CONTEXT, num_layers=1,
                          num_heads=2, hidden_dim=8, intermediate_dim=16, end_token_id=tokenizer.end_token_id))
    path = str(tmp_path_factory.mktemp("gpt") / "generate")
    export_gpt(path, model, tokenizer, max_length=12, jit_compile=False)
    return dict(model=model, tokenizer=tokenizer, loaded=tf.saved_model.load(path))


PROMPT = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
SETTINGS = dict(temperature=0.0, top_k=0, top_p=1.0, seed=0, max_new_tokens=3)


def _gpt_signature(text, **settings):
    def call(a):
        inputs = {name: tf.constant(value) for name, value in {**SETTINGS, **settings}.items()}
        return a["loaded"].signatures["generate"](text=text, **inputs)

    return call


def _generate_text(prompts, **kwargs):
    return lambda a: generate_text(a["model"], a["tokenizer"], prompts, **kwargs)


GPT_CASES = [
    # model(token_ids, padding_mask)
    _case("call-None", lambda a: a["model"](None), raises(r"`token_ids` is required")),
    _case("call-float-ids", lambda a: a["model"](PROMPT.astype("float32")), raises(r"`token_ids`.*integer")),
    _case("call-string-ids", lambda a: a["model"](np.array([["a"]])), raises(r"`token_ids`.*integer")),
    _case("call-1d", lambda a: a["model"](PROMPT[0]), raises(r"`token_ids` must have shape \(batch, length\)")),
    _case("call-3d", lambda a: a["model"](PROMPT[None]), raises(r"`token_ids` must have shape \(batch, length\)")),
    _case("call-empty-batch", lambda a: a["model"](PROMPT[:0]), returns(_shape(0, 4, 300))),
    _case("call-no-positions", lambda a: a["model"](np.zeros((2, 0), "int32")), returns(_shape(2, 0, 300))),
    _case("call-id-too-large", lambda a: a["model"](PROMPT + 10000), raises(r"`token_ids` must hold token ids in \[0")),
    _case("call-negative-id", lambda a: a["model"](PROMPT - 10), raises(r"`token_ids`.*out of range")),
    _case("call-mask-batch-mismatch", lambda a: a["model"](PROMPT, padding_mask=np.ones((3, 4), bool)),
          raises(r"`padding_mask` must have the shape of `token_ids`")),
    _case("call-float-mask", lambda a: a["model"](PROMPT, padding_mask=np.ones((2, 4), "float32")),
          raises(r"`padding_mask` must be a boolean")),
    _case("call-too-long", lambda a: a["model"](np.ones((1, 20), "int32")), raises(r"`token_ids` may hold at most")),
    # model.generate(token_ids, max_length, ...)
    _case("generate-None", lambda a: a["model"].generate(None, L), raises(r"`token_ids` is required")),
    _case("generate-float-ids", lambda a: a["model"].generate(PROMPT.astype("float32"), L),
          raises(r"`token_ids`.*integer")),
    _case("generate-3d", lambda a: a["model"].generate(PROMPT[None], L), raises(r"`token_ids` must have shape")),
    _case("generate-empty-batch", lambda a: a["model"].generate(PROMPT[:0], L), returns(_shape(0, L))),
    _case("generate-empty-prompts", lambda a: a["model"].generate(np.zeros((2, 0), "int32"), L),
          raises(r"`token_ids` holds empty prompts")),
    _case("generate-id-too-large", lambda a: a["model"].generate(PROMPT + 10000, L), raises(r"`token_ids` must hold")),
    _case("generate-negative-max_length", lambda a: a["model"].generate(PROMPT, -1), raises(r"`max_length`.*-1")),
    _case("generate-max_length-beyond-context", lambda a: a["model"].generate(PROMPT, CONTEXT + 1),
          raises(r"`max_length`")),
    _case("generate-zero-max_new_tokens", lambda a: a["model"].generate(PROMPT, L, max_new_tokens=0),
          raises(r"`max_new_tokens`.*0")),
    _case("generate-mask-batch-mismatch", lambda a: a["model"].generate(PROMPT, L, padding_mask=np.ones((3, 4), bool)),
          raises(r"`padding_mask` must have the shape of `token_ids`")),
    _case("generate-float-mask", lambda a: a["model"].generate(PROMPT, L, padding_mask=np.ones((2, 4), "float32")),
          raises(r"`padding_mask` must be a boolean")),
    _case("generate-float-seed", lambda a: a["model"].generate(PROMPT, L, "sample", seed=1.5), raises(r"`seed`")),
    # generate_text(model, tokenizer, prompts, ...)
    _case("text-None", _generate_text(None), raises(r"`prompts`.*None")),
    _case("text-ints", _generate_text([1, 2]), raises(r"`prompts`.*\[1, 2\]")),
    _case("text-empty-list", _generate_text([]), raises(r"`prompts`.*non-empty")),
    _case("text-empty-prompt", _generate_text(["the cat", ""]), raises(r"`prompts`\[1\] is empty")),
    _case("text-nested", _generate_text([["a"]]), raises(r"`prompts`")),
    _case("text-string-tensor", _generate_text(tf.constant(["the cat"])), raises(r"`prompts`")),
    _case("text-negative-max_new_tokens", _generate_text(["the cat"], max_new_tokens=-1),
          raises(r"`max_new_tokens`.*-1")),
    _case("text-negative-max_length", _generate_text(["the cat"], max_length=-1), raises(r"`max_length`.*max_length=-1")),
    _case("text-bad-seed", _generate_text(["the cat"], search="sample", seed="x"), raises(r"`seed`")),
    _case("text-stop_strings-one-string", _generate_text(["the cat"], stop_strings="."), raises(r"`stop_strings`")),
    _case("text-one-string", _generate_text("the cat", max_new_tokens=2),
          returns(lambda out: isinstance(out, list) and len(out) == 1)),  # documented: a string is one prompt
    # the SavedModel's `generate` signature
    _case("signature-scalar-text", _gpt_signature(tf.constant("the cat")),
          raises(r"`text` must have shape \(batch,\)", GraphError)),
    _case("signature-2d-text", _gpt_signature(tf.constant([["the cat"]])),
          raises(r"`text` must have shape \(batch,\)", GraphError)),
    _case("signature-int-text", _gpt_signature(tf.constant([1])), raises(r"was expected to be a string tensor",
                                                                        GraphError)),
    _case("signature-empty-batch", _gpt_signature(tf.constant([], tf.string)),
          returns(lambda out: out["text"].shape == (0,) and out["token_ids"].shape == (0, 12))),
    _case("signature-empty-prompt", _gpt_signature(tf.constant(["the", ""])),
          raises(r"`text`: every prompt needs at least one token", GraphError)),
    _case("signature-negative-temperature", _gpt_signature(tf.constant(["the"]), temperature=-1.0),
          raises(r"`temperature`", GraphError)),
    _case("signature-negative-top_k", _gpt_signature(tf.constant(["the"]), top_k=-1), raises(r"`top_k`", GraphError)),
    _case("signature-zero-top_p", _gpt_signature(tf.constant(["the"]), top_p=0.0), raises(r"`top_p`", GraphError)),
    _case("signature-negative-max_new_tokens", _gpt_signature(tf.constant(["the"]), max_new_tokens=-1),
          raises(r"`max_new_tokens` must be an integer >= 1", GraphError)),
    _case("signature-int-temperature", _gpt_signature(tf.constant(["the"]), temperature=1),
          raises(r"was expected to be a float tensor", GraphError)),
]


def test_gpt(gpt_app):
    _run_all(gpt_app, GPT_CASES)
