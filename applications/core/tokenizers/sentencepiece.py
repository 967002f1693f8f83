"""SentencePiece tokenizers (Kudo and Richardson 2018) as TensorFlow ops, giving Hugging Face's ids: the base that
ALBERT's and XLM-RoBERTa's (``applications.bert.sentencepiece_tokenizer``) and XLNet's
(``applications.xlnet.tokenizer``) tokenizers share.

The model runs in `tensorflow_text.SentencepieceTokenizer` (the SentencePiece library's own encoder, the model's
normaliser inside it), so a tokenizer exports in a SavedModel that serves with ``tensorflow`` and ``tensorflow_text``.
Around it, what transformers 5's tokenizers (built on Hugging Face's ``tokenizers``) do:

- special tokens are matched in the raw text first (``added_tokens``);
- the family's text preparation (`prepare_text` for ALBERT and XLNet), before the model's normaliser;
- a whitespace character (Unicode's White_Space) that the model's normaliser keeps becomes a space first (Hugging Face
  splits words at it);
- the model's pieces map to the family's ids (``_vocabulary``).
"""

from __future__ import annotations

import os

import tensorflow as tf

from ..inputs.token_lookup import TokenLookup
from .added_tokens import AddedTokens
from .case import lower_case

__all__ = ["SentencePieceTokenizer", "prepare_text", "read_model"]

# Unicode's White_Space characters (byte_bpe.WHITESPACE is the same set as an RE2 class)
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


def prepare_text(text, *, do_lower_case: bool, keep_accents: bool):
    """ALBERT's and XLNet's text preparation before the model's normaliser, as Hugging Face's normalizers do it: two
    backquotes or two apostrophes become one double quote; unless ``keep_accents``, NFKD then every combining mark
    (\\p{M}) dropped; with ``do_lower_case``, each character lower-cased on its own (`case.lower_case`).

    Args:
        text: (N,) tf.string.

    Returns:
        (N,) tf.string.
    """
    import tensorflow_text as tf_text

    text = tf.strings.regex_replace(text, "``|''", '"')
    if not keep_accents:
        text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFKD"), r"\p{M}", "")
    return lower_case(text) if do_lower_case else text


class SentencePieceTokenizer(TokenLookup):
    """A SentencePiece model in the graph, with Hugging Face's special tokens and whitespace split around it: what
    ALBERT's, XLM-RoBERTa's and XLNet's tokenizers share (each defines ``special_tokens`` and
    ``_vocabulary(pieces)``, and may define ``_prepare(text)``).

    Args:
        model: the path of a SentencePiece .model file, or its bytes.
        lstrip, rstrip: special tokens that take the whitespace on their left / right.

    Attributes:
        cls_token_id, sep_token_id, pad_token_id, unk_token_id, mask_token_id: the special tokens' ids (and one
            ``<kind>_token_id`` for each other kind of ``special_tokens``); ``bos_token_id`` / ``eos_token_id`` are
            cls / sep unless ``special_tokens`` names "bos" / "eos".
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
        self.bos_token_id = self._token_ids[self.special_tokens.get("bos", self.special_tokens["cls"])]
        self.eos_token_id = self._token_ids[self.special_tokens.get("eos", self.special_tokens["sep"])]
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
