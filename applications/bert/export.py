"""The servable BERT: a SavedModel that takes raw strings, with the tokenizer and the [CLS] A [SEP] B [SEP] packing
inside the graph, and returns class probabilities, per-piece tags or sentence embeddings. The BERT family serves the
same way with its own tokenizer and layout: RoBERTa (byte-level BPE, ``<s> A </s></s> B </s>``), ALBERT and
XLM-RoBERTa (SentencePiece), DistilBERT (WordPiece, no segment ids).

    export_text_model(classifier, tokenizer, "/tmp/sentiment", labels=["negative", "neutral", "positive"])
    # anywhere with only TensorFlow:
    import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the WordPiece ops)
    model = tf.saved_model.load("/tmp/sentiment")
    model.classify(tf.constant(["what a day"]))["label"]                       # [b"positive"]
    model.classify(text=tf.constant(["a"]), text_pair=tf.constant(["b"]))      # sentence pairs
    model.signatures["classify"](text=tf.constant(["what a day"]))             # TF Serving: also serving_default

The SavedModel holds the model's weights, the tokenizer's vocabulary and the serving functions; it loads and runs
with ``tensorflow`` and ``tensorflow_text`` alone: neither attnlayers nor keras_hub is needed (the tests load it in
a process where they cannot be imported).

Unlike the generative applications (``applications.core.formats.export.export_generator``, on
:func:`attnlayers.export.export_generate`, which exports a decoding loop), BERT's tasks are one forward pass, so
this module writes its own small ``tf.Module``; it reuses the tokenizer (``BertTokenizer`` or a family's, TensorFlow
ops) and its ``pack`` (tensorflow-text ops) as they are used for training, so served and trained inputs are packed by
the same code.

Inputs the model cannot take as such are handled in the graph, never by a crash inside TensorFlow:
- a text longer than the sequence length is truncated (a pair loses pieces from its longer segment first, as in
  training) and ``truncated`` is True for it;
- an empty or whitespace-only text (no word piece) is packed as [CLS] [SEP] and gets the model's output for that
  input (a valid probability vector, no tagged piece, a unit-length embedding), with ``empty`` True;
- bytes that are not UTF-8 are replaced by U+FFFD (then [UNK]); an empty batch gives empty outputs.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from attnlayers.export import assert_rank

from .backbone import BertBackbone
from .heads import BertClassifier, BertTokenClassifier
from .tokenizer import BertTokenizer

__all__ = ["TASKS", "export_text_model"]

# task -> the serving function's name (the signatures: NAME, NAME_pair, serving_default = NAME).
TASKS = {"classifier": "classify", "tagger": "tag", "embedding": "embed"}


class _TextModel(tf.Module):
    def __init__(self, model, tokenizer, labels, sequence_length):
        super().__init__(name="attnlayers_bert")
        self.model_variables = list(model.variables)  # saved with the functions that read them
        self.tokenizer = tokenizer  # its vocabulary constants and tokenize function
        self.sequence_length = tf.Variable(sequence_length, trainable=False, dtype=tf.int32, name="sequence_length")
        if labels is not None:
            self.label_names = tf.Variable(labels, trainable=False, dtype=tf.string, name="label_names")


def _check_labels(labels, count, task):
    if labels is None:
        return [str(i) for i in range(count)]
    if isinstance(labels, (str, bytes)) or not all(isinstance(label, str) and label for label in labels):
        raise ValueError(f"`labels` must be a list of non-empty strings, one per {task} output; received {labels!r}.")
    labels = list(labels)
    if len(labels) != count:
        raise ValueError(f"`labels` must name the model's {count} outputs; received {len(labels)} labels: {labels}.")
    if len(set(labels)) != len(labels):
        raise ValueError(f"`labels` must be distinct; received {labels}.")
    return labels


def _backbone_and_count(model, task):
    """The model's backbone and its number of outputs (classes / tags; None for embeddings), checked for task."""
    if task == "classifier":
        if not isinstance(model, BertClassifier):
            raise ValueError(f"task='classifier' exports a BertClassifier; received a {type(model).__name__}.")
        return model.backbone, model.num_classes
    if task == "tagger":
        if not isinstance(model, BertTokenClassifier):
            raise ValueError(f"task='tagger' exports a BertTokenClassifier; received a {type(model).__name__}.")
        return model.backbone, model.num_tags
    if isinstance(model, BertBackbone):
        return model, None
    if isinstance(getattr(model, "backbone", None), BertBackbone):
        return model.backbone, None
    raise ValueError(f"task='embedding' exports a BertBackbone (or a BERT task model's backbone); received a "
                     f"{type(model).__name__}.")


def _special_tokens(tokenizer):
    """{"single": n, "pair": n}: the special tokens the tokenizer's ``pack`` adds (BERT's [CLS] A [SEP] B [SEP]: 2
    and 3; RoBERTa's <s> A </s></s> B </s>: 2 and 4), read off packing empty segments."""
    empty = tf.ragged.constant([[]], dtype=tf.int32)
    counts = {}
    for name, segments in (("single", [empty]), ("pair", [empty, empty])):
        packed = tokenizer.pack(*segments, sequence_length=8)
        counts[name] = int(tf.reduce_sum(tf.cast(packed["padding_mask"], tf.int32)))
    return counts


def _valid_utf8(text):
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)


def export_text_model(model, tokenizer, path, *, sequence_length=128, task="classifier", labels=None):
    """Writes a SavedModel that serves ``model`` on raw strings.

    Args:
        model: a :class:`~attnlayers.applications.bert.heads.BertClassifier` (task "classifier"), a
            :class:`~attnlayers.applications.bert.heads.BertTokenClassifier` ("tagger"), or a
            :class:`~attnlayers.applications.bert.BertBackbone` ("embedding"; a task model's backbone is taken).
        tokenizer: its :class:`~attnlayers.applications.bert.tokenizer.BertTokenizer`, or the family's
            (``RobertaTokenizer``, ``AlbertTokenizer``, ``XLMRobertaTokenizer``: anything with ``tokenize``,
            ``pack`` and the special token ids); "tagger" takes WordPiece only (its word starts are the pieces
            without "##").
        path: the SavedModel directory.
        sequence_length: L, the packed length (the special tokens included); at most the model's
            max_sequence_length minus its position offset (RoBERTa's 2).
        task: "classifier", "tagger" or "embedding".
        labels: the class (tag) names, one per output; default "0", "1", ... Not for "embedding".

    Serving functions (``loaded.classify`` / ``loaded.tag`` / ``loaded.embed``), each taking ``text`` string (B,)
    and optionally ``text_pair`` string (B,) (then every row is packed as the pair [CLS] text [SEP] text_pair
    [SEP], or the tokenizer's layout; an empty ``text_pair`` string is an empty second segment; a model without
    segment embeddings, DistilBERT's, gets no segment ids); signatures ``classify`` (``text``),
    ``classify_pair`` (``text``, ``text_pair``) and ``serving_default`` (= ``classify``), likewise for the other
    tasks. Outputs of every task:
        ``truncated`` bool (B,): the input had more pieces than fit and was cut;
        ``empty`` bool (B,): the input had no word piece;
        ``num_tokens`` int32 (B,): its word pieces before truncation (both texts of a pair).
    "classifier" adds ``probabilities`` float32 (B, K) (softmax of the logits), ``label_id`` int32 (B,) (the
    argmax) and ``label`` string (B,) (its name).
    "tagger" adds, per position of the packed input: ``probabilities`` float32 (B, L, K), ``tag_ids`` int32 (B, L)
    and ``tags`` string (B, L) (the argmax and its name; -1 and "" at [CLS], [SEP] and padding, whose
    probabilities are 0), ``tag_mask`` bool (B, L) (the text's pieces), ``word_start`` bool (B, L) (a word's
    first piece: the position whose tag is the word's, BERT's convention), ``tokens`` string (B, L) (the pieces,
    "" at padding) and ``token_ids`` int32 (B, L).
    "embedding" adds ``embedding`` float32 (B, d): the mean of the final hidden states over the packed input's
    tokens ([CLS] and [SEP] included, padding excluded, as sentence-transformers' mean pooling), L2-normalised.
    Module variables: ``sequence_length`` and, for "classifier" and "tagger", ``label_names`` string (K,).

    Inputs are checked: ``text`` and ``text_pair`` must be string tensors of shape (batch,) in every signature; a
    scalar string (which ``signatures[...]``, checking dtypes but not shapes, let through) or a rank-2 tensor
    fails an ``InvalidArgumentError`` assertion naming the input and the shape (batch,): wrap a single text in a
    list. A wrong dtype is refused by TensorFlow before the graph runs (``loaded.classify``: "Can not cast
    TensorSpec..."; ``signatures[...]``: "input #N(zero-based) was expected to be a string tensor", N the input's
    position among the signature's inputs), which the SavedModel cannot reword.

    Returns:
        The saved ``tf.Module`` (its serving function works in this process too).

    Raises:
        ValueError: another backend than TensorFlow, an unknown task, a model of another task, labels of the
            wrong number, a tokenizer whose ids exceed the model's vocabulary, or a sequence length out of range.
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"export_text_model writes a TensorFlow SavedModel and needs the TensorFlow backend; "
                         f"received KERAS_BACKEND={keras.backend.backend()!r}.")
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {sorted(TASKS)}; received task={task!r}.")
    backbone, count = _backbone_and_count(model, task)
    if task == "embedding":
        if labels is not None:
            raise ValueError(f"task='embedding' has no labels; received labels={labels!r}.")
        model = backbone
    else:
        labels = _check_labels(labels, count, task)
    config = backbone.config
    if not all(hasattr(tokenizer, name) for name in ("tokenize", "pack", "cls_token_id", "sep_token_id",
                                                      "pad_token_id")):
        raise ValueError(f"`tokenizer` must be a BertTokenizer or a BERT family's tokenizer (RobertaTokenizer, "
                         f"AlbertTokenizer, XLMRobertaTokenizer); received {type(tokenizer).__name__}.")
    if task == "tagger" and not isinstance(tokenizer, BertTokenizer):
        raise ValueError(f"task='tagger' marks word starts by WordPiece's '##' pieces and needs a BertTokenizer; "
                         f"received {type(tokenizer).__name__}.")
    special = _special_tokens(tokenizer)
    longest = config.max_sequence_length - config.position_offset
    if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) or not (
        special["pair"] <= sequence_length <= longest
    ):
        raise ValueError(
            f"`sequence_length` must be an integer in [{special['pair']}, {longest}] (room for the special tokens of "
            f"a pair; the model's max_sequence_length {config.max_sequence_length}"
            + (f" minus its position offset {config.position_offset}" if config.position_offset else "")
            + f"); received sequence_length={sequence_length!r}."
        )
    if tokenizer.vocabulary_size > config.vocabulary_size:
        raise ValueError(
            f"`tokenizer` has {tokenizer.vocabulary_size} tokens but the model's vocabulary_size is "
            f"{config.vocabulary_size}: its ids would index past the token embeddings."
        )

    length = sequence_length
    ids = tf.fill([1, length], tokenizer.pad_token_id)  # builds an unbuilt model, eagerly, before tracing
    model({"token_ids": ids, "padding_mask": tf.ones_like(ids, tf.bool)}, training=False)
    module = _TextModel(model, tokenizer, labels, length)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id

    def serve(text, text_pair=None):
        text = assert_rank(text, 1, "text", "(batch,): one string per input")
        texts, checks = [text], []
        if text_pair is not None:
            text_pair = assert_rank(text_pair, 1, "text_pair", "(batch,): one string per input")
            texts.append(text_pair)
            checks.append(tf.debugging.assert_equal(
                tf.shape(text)[0], tf.shape(text_pair)[0],
                message="`text` and `text_pair` must hold the same number of strings"))
        with tf.control_dependencies(checks):
            segments = [module.tokenizer.tokenize(_valid_utf8(t)) for t in texts]
        packed = module.tokenizer.pack(*segments, sequence_length=length)
        if not config.num_segments:  # no segment embeddings (DistilBERT): segment ids 0 only
            packed = {key: value for key, value in packed.items() if key != "segment_ids"}
        num_tokens = tf.cast(tf.add_n([s.row_lengths() for s in segments]), tf.int32)
        out = {
            "truncated": num_tokens > length - special["pair" if text_pair is not None else "single"],
            "empty": tf.equal(num_tokens, 0),
            "num_tokens": num_tokens,
        }
        result = model(packed, training=False)
        mask = packed["padding_mask"]
        if task == "classifier":
            probabilities = tf.nn.softmax(tf.cast(result, tf.float32), axis=-1)
            label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
            out.update(probabilities=probabilities, label_id=label_id,
                       label=tf.gather(module.label_names, label_id))
        elif task == "tagger":
            token_ids = packed["token_ids"]
            tag_mask = mask & tf.not_equal(token_ids, cls_id) & tf.not_equal(token_ids, sep_id)
            probabilities = tf.nn.softmax(tf.cast(result, tf.float32), axis=-1)
            probabilities = tf.where(tag_mask[..., None], probabilities, 0.0)
            tag_ids = tf.where(tag_mask, tf.argmax(probabilities, axis=-1, output_type=tf.int32), -1)
            tags = tf.where(tag_mask, tf.gather(module.label_names, tf.maximum(tag_ids, 0)), "")
            tokens = tf.where(mask, module.tokenizer.id_to_token(token_ids), "")
            word_start = tag_mask & ~tf.strings.regex_full_match(tokens, "##.+")
            out.update(probabilities=probabilities, tag_ids=tag_ids, tags=tags, tag_mask=tag_mask,
                       word_start=word_start, tokens=tokens, token_ids=token_ids)
        else:
            hidden = tf.cast(result["sequence_output"], tf.float32)
            weights = tf.cast(mask, tf.float32)[..., None]
            mean = tf.reduce_sum(hidden * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)
            out["embedding"] = tf.math.l2_normalize(mean, axis=-1, epsilon=1e-12)
        return out

    function = tf.function(serve, autograph=False)
    text_spec = tf.TensorSpec([None], tf.string, name="text")
    single = function.get_concrete_function(text_spec)
    pair = function.get_concrete_function(text_spec, tf.TensorSpec([None], tf.string, name="text_pair"))
    name = TASKS[task]
    setattr(module, name, function)
    tf.saved_model.save(module, str(path), signatures={name: single, f"{name}_pair": pair, "serving_default": single})
    return module
