"""ALBERT's and XLM-RoBERTa's SentencePiece tokenizers (Kudo and Richardson 2018) as TensorFlow ops, giving Hugging
Face's ids: ``AlbertTokenizer`` (Lan et al. 2020) from a spiece.model, ``XLMRobertaTokenizer`` (Conneau et al. 2020)
from a sentencepiece.bpe.model.

    tokenizer = AlbertTokenizer.from_directory("albert/")          # spiece.model (+ tokenizer_config.json)
    ids = tokenizer.tokenize(["Hello world", "naïve 日本語"])        # tf.RaggedTensor int32 (2, None)
    inputs = tokenizer.pack(ids, sequence_length=128)              # [CLS] A [SEP] <pad>...

The model runs in `tensorflow_text.SentencepieceTokenizer` (the SentencePiece library's own encoder, the model's
normaliser inside it: for ALBERT's and XLM-R's models, NMT-NFKC, extra whitespace removed, a "▁" before the text),
so a tokenizer exports in a SavedModel that serves with ``tensorflow`` and ``tensorflow_text``. Around it, what
transformers 5's tokenizers do (its ``AlbertTokenizer`` / ``XLMRobertaTokenizer``, built on Hugging Face's
``tokenizers``: the model's normaliser, then a split at whitespace, "▁" before each word, a unigram model over the
model's pieces):

- special tokens are matched in the raw text first (``applications.bert.added_tokens``): ``[CLS]``, ``[SEP]``,
  ``<pad>``, ``<unk>``, ``[MASK]`` for ALBERT; ``<s>``, ``</s>``, ``<pad>``, ``<unk>``, ``<mask>`` for XLM-R;
- ALBERT's text is prepared as its tokenizer does, before the model's normaliser: two backquotes or two apostrophes
  become one double quote; unless ``keep_accents``, NFKD then every combining mark (\\p{M}) dropped; with
  ``do_lower_case`` (the default), each character lower-cased on its own (``bert.tokenizer.lower_case``);
- a whitespace character (Unicode's White_Space) that the model's normaliser keeps (NMT-NFKC maps most to a space;
  Hugging Face splits words at the others too) becomes a space first;
- ids: ALBERT's are the model's (``<pad>`` 0, ``<unk>`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4 in albert-base-v2's);
  XLM-R's are fairseq's (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, the model's piece i at i + 1 for i >= 3,
  ``<mask>`` last), as transformers' conversion orders them.

Pairs: ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1 for ALBERT (BERT's `pack`); ``<s> A </s></s> B </s>`` with
segment ids 0 for XLM-R (`pack_roberta`).

Left to differ: combining marks added in Unicode 10 and later (U+1AC5, U+1CF7, U+0ECE): TensorFlow's Unicode tables
know them and ALBERT's accent stripping here drops them, Hugging Face's keeps them (5 of 1,000 random strings in
benchmarks/bert_family_tokenizer_reference.py); a model whose normaliser keeps extra whitespace or adds no "▁"
before the text (Hugging Face adds one before every word either way; ALBERT's and XLM-R's models remove extra
whitespace and add the "▁"); and a tokenizer.json written by transformers' converter (``AlbertConverter``), which
scores the pieces that end in a digit and a comma ("▁1,") 100 lower than the spiece.model does: transformers 5
building the tokenizer from spiece.model alone, and this class, use the model's scores.
"""

from __future__ import annotations

import os

import tensorflow as tf

from ..core.inputs.token_lookup import TokenLookup
from .added_tokens import AddedTokens, read_strip_flags
from .tokenizer import lower_case

__all__ = ["ALBERT_SPECIAL_TOKENS", "XLM_ROBERTA_SPECIAL_TOKENS", "AlbertTokenizer", "SentencePieceTokenizer",
           "XLMRobertaTokenizer", "read_model"]

ALBERT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "<pad>", "unk": "<unk>", "mask": "[MASK]"}
XLM_ROBERTA_SPECIAL_TOKENS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}
# fairseq's dictionary starts with these four; SentencePiece's first three pieces (<unk>, <s>, </s>) map onto them
_FAIRSEQ_FIRST = ("<s>", "<pad>", "</s>", "<unk>")

# Unicode's White_Space characters (core.tokenizers.byte_bpe.WHITESPACE is the same set as an RE2 class)
_WHITESPACE_CHARACTERS = ("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B))
                          + "\u2028\u2029\u202f\u205f\u3000")


def read_model(model) -> bytes:
    """A serialized SentencePiece model: the bytes of a .model file (a path) or the bytes given.

    Raises:
        ValueError: naming the path when the file does not exist, or when `model` is neither.
    """
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        if not os.path.isfile(model):
            raise ValueError(f"`model`: the SentencePiece model file {os.fspath(model)!r} does not exist.")
        with open(model, "rb") as f:
            return f.read()
    raise ValueError(f"`model` must be the path of a SentencePiece .model file or its bytes; received {type(model)}.")


class SentencePieceTokenizer(TokenLookup):
    """A SentencePiece model in the graph, with Hugging Face's special tokens and whitespace split around it: what
    `AlbertTokenizer` and `XLMRobertaTokenizer` share (each defines ``_vocabulary(pieces)`` and may define
    ``_prepare(text)``).

    Args:
        model: the path of a SentencePiece .model file, or its bytes.
        lstrip, rstrip: special tokens that take the whitespace on their left / right.

    Attributes:
        cls_token_id, sep_token_id, pad_token_id, unk_token_id, mask_token_id: the special tokens' ids;
            ``bos_token_id`` / ``eos_token_id`` are cls / sep.
        special_token_ids: (pad, unk, cls, sep, mask), as ``BertTokenizer``'s.
        sentencepiece: the ``tensorflow_text.SentencepieceTokenizer``.

    Raises:
        ValueError: for a missing file or a model that lacks a special token.
    """

    special_tokens: dict = {}

    def __init__(self, model, *, lstrip=(), rstrip=(), name: str | None = None):
        super().__init__(name=name)
        import tensorflow_text as tf_text

        self.sentencepiece = tf_text.SentencepieceTokenizer(model=read_model(model), out_type=tf.int32)
        size = int(self.sentencepiece.vocab_size())
        pieces = [piece.decode("utf-8") for piece in self.sentencepiece.id_to_string(tf.range(size)).numpy()]
        vocabulary = self._vocabulary(pieces)
        self._token_ids = {token: i for i, token in enumerate(vocabulary)}
        missing = [token for token in self.special_tokens.values() if token not in self._token_ids]
        if missing:
            raise ValueError(f"`model`: the SentencePiece model lacks the special token(s) {missing} of "
                             f"{type(self).__name__} (is it this family's model?).")
        for kind, token in self.special_tokens.items():
            setattr(self, f"{kind}_token_id", self._token_ids[token])
        self.bos_token_id, self.eos_token_id = self.cls_token_id, self.sep_token_id
        self._tokens = tf.constant(vocabulary)
        # the model's piece i -> our id i' (the same piece)
        self._piece_ids = tf.constant([self._token_ids[piece] for piece in pieces], tf.int32)
        self.added_tokens = AddedTokens({token: self._token_ids[token] for token in self.special_tokens.values()},
                                        lstrip=lstrip, rstrip=rstrip)
        self._kept_whitespace = self._whitespace_the_model_keeps(pieces)

    def _vocabulary(self, pieces) -> list:
        """Our tokens in id order, from the model's pieces in its id order."""
        raise NotImplementedError

    def _prepare(self, text):
        """The family's text preparation before the model's normaliser ((N,) tf.string -> (N,))."""
        return text

    def _whitespace_the_model_keeps(self, pieces) -> str:
        """An RE2 class of the White_Space characters that the model's normaliser neither turns into a space nor
        removes ("" for none): Hugging Face splits words at them, the model would not. Probed with a letter x that
        has a piece "▁x": "x?x" spelled as "x x" (a space) or as "xx" (removed), or else kept."""
        letters = [piece[1] for piece in pieces if len(piece) == 2 and piece[0] == "▁" and piece[1].isalnum()]
        x = letters[0] if letters else "a"
        probes = [f"{x} {x}", x + x] + [f"{x}{character}{x}" for character in _WHITESPACE_CHARACTERS]
        ids = self.sentencepiece.tokenize(tf.constant(probes)).to_list()
        kept = [character for character, row in zip(_WHITESPACE_CHARACTERS, ids[2:]) if row not in ids[:2]]
        return "[" + "".join(f"\\x{{{ord(character):X}}}" for character in kept) + "]" if kept else ""

    @property
    def special_token_ids(self) -> tuple:
        return (self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id)

    def get_vocabulary(self) -> list:
        """The tokens in id order."""
        return sorted(self._token_ids, key=self._token_ids.get)

    def tokenize(self, text):
        """Strings to token ids (no special token added; special tokens' texts in the text are their ids).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.

        Raises:
            RuntimeError: the SentencePiece model's TensorFlow resource is gone: ``tf.random.set_seed``
                (``keras.utils.set_random_seed``) and ``keras.backend.clear_session`` clear the kernels that own it
                (``tensorflow_text.SentencepieceTokenizer``'s resource is kernel-owned). Make the tokenizer after
                seeding, or make it again.
        """
        try:
            return super().tokenize(text)
        except tf.errors.NotFoundError as error:
            if "SentencepieceOp" not in str(error):
                raise
            raise RuntimeError(
                f"{type(self).__name__}: its SentencePiece model's TensorFlow resource was destroyed after the "
                "tokenizer was made: tf.random.set_seed (keras.utils.set_random_seed) and "
                "keras.backend.clear_session clear the kernels that own it. Make the tokenizer after seeding "
                "(or make it again, e.g. with from_directory)."
            ) from error

    __call__ = tokenize

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def _tokenize_batch(self, text):
        return self.added_tokens.tokenize(text, self._plain_ids)

    def _plain_ids(self, text):
        """(N,) text without special tokens -> (N, None) ids."""
        text = self._prepare(text)
        if self._kept_whitespace:
            text = tf.strings.regex_replace(text, self._kept_whitespace, " ")
        pieces = self.sentencepiece.tokenize(text)
        return pieces.with_flat_values(tf.gather(self._piece_ids, pieces.flat_values))

    def detokenize(self, ids):
        """Token ids to text: the pieces joined, "▁" as spaces (the first dropped), ``<pad>`` dropped, other special
        tokens as their text. Lower-casing, accents and extra whitespace are not restored.

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged.

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T).
        """
        return super().detokenize(ids)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)])
    def _detokenize_batch(self, ids):
        ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, self.pad_token_id))
        checks = [tf.debugging.assert_non_negative(ids.flat_values, message="`ids` holds a negative id"),
                  tf.debugging.assert_less(ids.flat_values, self.vocabulary_size,
                                           message="`ids` holds an id >= vocabulary_size")]
        with tf.control_dependencies(checks):
            text = tf.strings.reduce_join(tf.gather(self._tokens, ids), axis=-1)
        text = tf.strings.regex_replace(text, "▁", " ")
        return tf.strings.regex_replace(text, "^ ", "")


class AlbertTokenizer(SentencePieceTokenizer):
    """ALBERT's tokenizer: a spiece.model with ALBERT's text preparation (see the module docstring).

    Args:
        model: the path of a spiece.model, or its bytes.
        do_lower_case: lower-case the text (Hugging Face's option; True for every published ALBERT).
        keep_accents: keep accents (False: NFKD, then combining marks dropped).
        lstrip, rstrip: special tokens that take the whitespace on their left / right.
    """

    special_tokens = ALBERT_SPECIAL_TOKENS

    def __init__(self, model, *, do_lower_case: bool = True, keep_accents: bool = False, lstrip=(), rstrip=(),
                 name: str | None = None):
        self.do_lower_case, self.keep_accents = bool(do_lower_case), bool(keep_accents)
        super().__init__(model, lstrip=lstrip, rstrip=rstrip, name=name)

    @classmethod
    def from_directory(cls, directory, **kwargs) -> AlbertTokenizer:
        """The tokenizer of a Hugging Face ALBERT directory: its spiece.model, with tokenizer_config.json's
        ``do_lower_case`` and ``keep_accents`` and the special tokens' lstrip / rstrip (keyword arguments override
        them).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments, overriding those read from the directory.

        Returns:
            The tokenizer.

        Raises:
            ValueError: naming the missing file.
        """
        from .family_tokenizers import read_tokenizer_config, require_files

        (path,) = require_files(directory, ("spiece.model",), "ALBERT")
        config = read_tokenizer_config(directory)
        lstrip, rstrip = read_strip_flags(directory)
        options = {"do_lower_case": bool(config.get("do_lower_case", True)),
                   "keep_accents": bool(config.get("keep_accents", False)), "lstrip": lstrip, "rstrip": rstrip}
        return cls(path, **{**options, **kwargs})

    def _vocabulary(self, pieces):
        return list(pieces)

    def _prepare(self, text):
        import tensorflow_text as tf_text

        text = tf.strings.regex_replace(text, "``|''", '"')
        if not self.keep_accents:
            text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFKD"), r"\p{M}", "")
        return lower_case(text) if self.do_lower_case else text

    def pack(self, segments_a, segments_b=None, *, sequence_length: int):
        """BERT's `pack`: ``[CLS] A [SEP] (B [SEP])``, segment ids 0 / 1, ``<pad>``.

        Args:
            segments_a: token ids of the first segments: a (B, None) ``tf.RaggedTensor``, a (B, T) tensor, a list of
                lists, or one example (T,).
            segments_b: the second segments, the same way; None packs single segments.
            sequence_length: L, the packed length.

        Returns:
            ``{"token_ids": int32 (B, L), "segment_ids": int32 (B, L), "padding_mask": bool (B, L)}`` (each (L,) for
            one example).

        Raises:
            ValueError: the segments are not integer token ids, A and B have different batch sizes, or
                ``sequence_length`` leaves no room for the special tokens.
        """
        from .pretraining_data import pack

        return pack(segments_a, segments_b, sequence_length=sequence_length, tokenizer=self)


class XLMRobertaTokenizer(SentencePieceTokenizer):
    """XLM-RoBERTa's tokenizer: a sentencepiece.bpe.model with fairseq's ids (see the module docstring).

    Args:
        model: the path of a sentencepiece.bpe.model, or its bytes.
        lstrip, rstrip: special tokens that take the whitespace on their left / right.
    """

    special_tokens = XLM_ROBERTA_SPECIAL_TOKENS

    @classmethod
    def from_directory(cls, directory, **kwargs) -> XLMRobertaTokenizer:
        """The tokenizer of a Hugging Face XLM-RoBERTa directory: its sentencepiece.bpe.model, with the special
        tokens' lstrip / rstrip (keyword arguments override them).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments, overriding those read from the directory.

        Returns:
            The tokenizer.

        Raises:
            ValueError: naming the missing file.
        """
        from .family_tokenizers import require_files

        (path,) = require_files(directory, ("sentencepiece.bpe.model",), "XLM-RoBERTa")
        lstrip, rstrip = read_strip_flags(directory)
        return cls(path, **{"lstrip": lstrip, "rstrip": rstrip, **kwargs})

    def _vocabulary(self, pieces):
        # transformers' XLMRobertaConverter: fairseq's four, the model's pieces from its fourth on, <mask> last
        return [*_FAIRSEQ_FIRST, *pieces[3:], XLM_ROBERTA_SPECIAL_TOKENS["mask"]]

    def pack(self, segments_a, segments_b=None, *, sequence_length: int):
        """`pack_roberta`: ``<s> A </s>(</s> B </s>)``, segment ids 0, ``<pad>``.

        Args:
            segments_a: token ids of the first segments: a (B, None) ``tf.RaggedTensor``, a (B, T) tensor, a list of
                lists, or one example (T,).
            segments_b: the second segments, the same way; None packs single segments.
            sequence_length: L, the packed length.

        Returns:
            ``{"token_ids": int32 (B, L), "segment_ids": int32 (B, L), "padding_mask": bool (B, L)}`` (each (L,) for
            one example).

        Raises:
            ValueError: the segments are not integer token ids, A and B have different batch sizes, or
                ``sequence_length`` leaves no room for the special tokens.
        """
        from .roberta_tokenizer import pack_roberta

        return pack_roberta(segments_a, segments_b, sequence_length=sequence_length, tokenizer=self)
