"""Subword tokenizers for translation: SentencePiece, trained offline, run as TensorFlow ops.

Why SentencePiece (and not keras_hub's WordPiece): translation has to turn ids back into text, and
SentencePiece is lossless there: it keeps whitespace as a symbol ("▁"), so `detokenize(tokenize(text))`
gives back `text` (after its NFKC normalisation), "Ich bin's." included, while WordPiece splits on
punctuation before tokenizing and can only join words with spaces ("Ich bin ' s ."). It also needs no
language-specific pre-splitting, and the reserved ids are fixed in the model itself. The model is trained
with the `sentencepiece` package (a dependency of keras-hub) and run with
`tensorflow_text.FastSentencepieceTokenizer`: graph ops over a constant buffer, with no TensorFlow resource
(unlike `tensorflow_text.SentencepieceTokenizer`, whose resource `keras.backend.clear_session()` destroys),
so a SavedModel that embeds a `SubwordTokenizer` serves in a process with only `tensorflow` and
`tensorflow_text`.

Reserved ids, the same in every vocabulary:

    [PAD] = 0    padding; losses and attention masks ignore it
    [UNK] = 1    characters not seen in training (detokenizes to the text "[UNK]")
    [START] = 2  first decoder input
    [END] = 3    last decoder output; decoding stops there

Example (with `attnlayers.applications.nmt.data`):

    splits = split_pairs(load_de_en())                      # train / validation / test
    tokenizers = build_tokenizers(splits)                   # trained on splits.train only
    ids = tokenizers.source.tokenize(["Das ist gut."])      # tf.RaggedTensor, int32
    tokenizers.source.detokenize(ids)                       # [b"Das ist gut."]
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable

import tensorflow as tf
import tensorflow_text as tf_text

__all__ = ["END_ID", "PAD_ID", "RESERVED_TOKENS", "START_ID", "SubwordTokenizer", "Tokenizers", "UNK_ID",
           "build_tokenizers", "train_sentencepiece"]

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3


def train_sentencepiece(
    texts: Iterable[str],
    vocabulary_size: int = 8000,
    *,
    model_type: str = "unigram",
    normalization: str = "nmt_nfkc",
    character_coverage: float = 1.0,
) -> bytes:
    """Trains a SentencePiece model in memory and returns its serialized proto.

    Args:
        texts: training sentences (strings).
        vocabulary_size: the largest vocabulary, reserved tokens included; smaller data gives a smaller
            vocabulary instead of an error.
        model_type: "unigram" (Kudo 2018; subwords) or "word" (whitespace-separated words, one id each).
        normalization: SentencePiece rule: "nmt_nfkc" (NFKC plus whitespace clean-up), "nmt_nfkc_cf" (the
            same, lower-cased) or "identity".
        character_coverage: share of characters covered (1.0: every character seen in training).

    Raises:
        ValueError: when `texts` has no non-empty string or `vocabulary_size` is too small.
    """
    import sentencepiece as spm  # training only; not needed to run the tokenizer

    sentences = [t for t in texts if t and t.strip()]
    if not sentences:
        raise ValueError("train_sentencepiece needs at least one non-empty sentence; received none.")
    if vocabulary_size <= len(RESERVED_TOKENS):
        raise ValueError(
            f"vocabulary_size must exceed the {len(RESERVED_TOKENS)} reserved tokens; received {vocabulary_size}."
        )
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocabulary_size,
        hard_vocab_limit=False,
        model_type=model_type,
        normalization_rule_name=normalization,
        character_coverage=character_coverage,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        pad_piece=RESERVED_TOKENS[PAD_ID],
        unk_piece=RESERVED_TOKENS[UNK_ID],
        bos_piece=RESERVED_TOKENS[START_ID],
        eos_piece=RESERVED_TOKENS[END_ID],
        byte_fallback=False,
        num_threads=1,  # deterministic
        minloglevel=2,
    )
    return model.getvalue()


class SubwordTokenizer(tf.Module):
    """A SentencePiece tokenizer made of TensorFlow ops (`tensorflow_text.FastSentencepieceTokenizer`).

    The model is held as a constant buffer, not as a TensorFlow resource, so the tokenizer survives
    `keras.backend.clear_session()` (which destroys the resource of `tensorflow_text.SentencepieceTokenizer`)
    and exports with any module that holds it. Being a `tf.Module`, it can be an attribute of a module
    exported with `tf.saved_model.save`, and its methods work inside `tf.function`s and `tf.data` maps.
    The fast op supports "unigram" and "word" models (it segments "bpe" models differently from
    SentencePiece, so those are refused).

    Args:
        model_proto: a serialized SentencePiece model (`train_sentencepiece`, or the bytes of a `.model`
            file) whose first four pieces are `RESERVED_TOKENS`.
    """

    pad_id, unk_id, start_id, end_id = PAD_ID, UNK_ID, START_ID, END_ID

    def __init__(self, model_proto: bytes, name: str | None = None):
        super().__init__(name=name)
        import sentencepiece as spm  # reads the vocabulary; the ops below do not need it

        self._model_proto = bytes(model_proto)
        processor = spm.SentencePieceProcessor(model_proto=self._model_proto)
        self._pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        if tuple(self._pieces[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"the SentencePiece model must start with the pieces {RESERVED_TOKENS}; "
                f"received {self._pieces[: len(RESERVED_TOKENS)]}."
            )
        model_type = _model_type(self._model_proto)
        if model_type not in ("unigram", "word"):
            raise ValueError(f"SubwordTokenizer runs 'unigram' and 'word' models; received a {model_type!r} model.")
        self.tokenizer = tf_text.FastSentencepieceTokenizer(self._model_proto)

    @classmethod
    def train(cls, texts: Iterable[str], vocabulary_size: int = 8000, **kwargs) -> SubwordTokenizer:
        """Trains on `texts` (see `train_sentencepiece` for the keyword arguments).

        Args:
            texts: the training sentences.
            vocabulary_size: the number of pieces, reserved tokens included.
            **kwargs: more `train_sentencepiece` arguments.

        Returns:
            A :class:`SubwordTokenizer`.
        """
        return cls(train_sentencepiece(texts, vocabulary_size, **kwargs))

    @classmethod
    def load(cls, path) -> SubwordTokenizer:
        """Reads a model written by `save` (a SentencePiece `.model` file).

        Args:
            path: the file.

        Returns:
            A :class:`SubwordTokenizer`.

        Raises:
            ValueError: the model does not start with the reserved tokens, or is not a unigram or word model.
        """
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path) -> None:
        """Writes the SentencePiece model proto (readable by `load` and by `sentencepiece` itself).

        Args:
            path: the file to write.
        """
        with open(path, "wb") as f:
            f.write(self._model_proto)

    @property
    def model_proto(self) -> bytes:
        return self._model_proto

    @property
    def vocabulary_size(self) -> int:
        return len(self._pieces)

    def get_vocabulary(self) -> list:
        """The pieces, as Python strings, in id order ("▁" marks the start of a word)."""
        return list(self._pieces)

    def id_to_token(self, ids):
        """Ids to their pieces.

        Args:
            ids: int ids of any shape.

        Returns:
            A tf.string tensor of the same shape.
        """
        return tf.gather(tf.constant(self._pieces), tf.cast(ids, tf.int32))

    def tokenize(self, text):
        """Strings to ids, without [START] / [END].

        Args:
            text: a string or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string, a `tf.RaggedTensor` (B, None) for a batch. An empty string
            gives no ids; characters never seen in training give [UNK].
        """
        return tf.cast(self.tokenizer.tokenize(tf.convert_to_tensor(text, tf.string)), tf.int32)

    def detokenize(self, ids):
        """Ids to strings: each sequence is cut at its first [END], and [PAD] / [START] are dropped.

        [UNK] comes back as the text "[UNK]" in place of the unknown characters.

        Args:
            ids: int ids, (T,) or (B, T), dense (padded with 0) or ragged.

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T).
        """
        if isinstance(ids, tf.RaggedTensor):
            dense = ids.to_tensor(default_value=PAD_ID)
        else:
            dense = tf.convert_to_tensor(ids)
        dense = tf.cast(dense, tf.int32)
        single = dense.shape.rank == 1
        if single:
            dense = dense[tf.newaxis]
        before_end = tf.equal(tf.cumsum(tf.cast(tf.equal(dense, END_ID), tf.int32), axis=-1), 0)
        keep = before_end & tf.not_equal(dense, PAD_ID) & tf.not_equal(dense, START_ID)
        text = self.tokenizer.detokenize(tf.ragged.boolean_mask(dense, keep))
        # SentencePiece writes an unknown piece as " \u2047 " (spaces added on both sides).
        text = tf.strings.regex_replace(text, " ?\u2047 ?", RESERVED_TOKENS[UNK_ID])
        return text[0] if single else text


def _model_type(model_proto: bytes) -> str:
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(model.trainer_spec.model_type).lower()


@dataclasses.dataclass
class Tokenizers:
    """The source and target tokenizers of a translation task (one object when shared).

    Attributes:
        source: the source sentences' `SubwordTokenizer`.
        target: the target sentences' (the same object when shared).
    """

    source: SubwordTokenizer
    target: SubwordTokenizer

    @property
    def shared(self) -> bool:
        return self.source is self.target


def build_tokenizers(
    corpus,
    *,
    source_vocabulary_size: int = 8000,
    target_vocabulary_size: int = 8000,
    shared: bool = False,
    **kwargs,
) -> Tokenizers:
    """Trains the source and target tokenizers on training text only.

    Args:
        corpus: a `data.Splits` (only `.train` is read: validation and test text never reaches the
            vocabulary) or a `data.Pairs` that is already the training set.
        source_vocabulary_size: most pieces of the source vocabulary (reserved tokens included).
        target_vocabulary_size: most pieces of the target vocabulary.
        shared: one vocabulary trained on both sides, of `source_vocabulary_size` (for tied embeddings);
            then `tokenizers.source is tokenizers.target`.
        **kwargs: passed to `train_sentencepiece` (model_type, normalization, character_coverage).

    Returns:
        `Tokenizers(source, target)`.
    """
    train = getattr(corpus, "train", corpus)
    if shared:
        tokenizer = SubwordTokenizer.train(list(train.source) + list(train.target), source_vocabulary_size, **kwargs)
        return Tokenizers(tokenizer, tokenizer)
    return Tokenizers(
        SubwordTokenizer.train(train.source, source_vocabulary_size, **kwargs),
        SubwordTokenizer.train(train.target, target_vocabulary_size, **kwargs),
    )
