"""ALBERT's and XLM-RoBERTa's SentencePiece tokenizers (Kudo and Richardson 2018) as TensorFlow ops, giving Hugging
Face's ids: ``AlbertTokenizer`` (Lan et al. 2020) from a spiece.model, ``XLMRobertaTokenizer`` (Conneau et al. 2020)
from a sentencepiece.bpe.model.

    tokenizer = AlbertTokenizer.from_directory("albert/")          # spiece.model (+ tokenizer_config.json)
    ids = tokenizer.tokenize(["Hello world", "naïve 日本語"])        # tf.RaggedTensor int32 (2, None)
    inputs = tokenizer.pack(ids, sequence_length=128)              # [CLS] A [SEP] <pad>...

The base class, ``SentencePieceTokenizer``, lives in ``applications.core.tokenizers.sentencepiece`` (XLNet's tokenizer
uses it too; the names stay importable here). The model runs in `tensorflow_text.SentencepieceTokenizer` (the
SentencePiece library's own encoder, the model's normaliser inside it: for ALBERT's and XLM-R's models, NMT-NFKC,
extra whitespace removed, a "▁" before the text), so a tokenizer exports in a SavedModel that serves with
``tensorflow`` and ``tensorflow_text``. Around it, what transformers 5's tokenizers do (its ``AlbertTokenizer`` /
``XLMRobertaTokenizer``, built on Hugging Face's ``tokenizers``: the model's normaliser, then a split at whitespace,
"▁" before each word, a unigram model over the model's pieces):

- special tokens are matched in the raw text first (``applications.core.tokenizers.added_tokens``): ``[CLS]``,
  ``[SEP]``, ``<pad>``, ``<unk>``, ``[MASK]`` for ALBERT; ``<s>``, ``</s>``, ``<pad>``, ``<unk>``, ``<mask>`` for XLM-R;
- ALBERT's text is prepared as its tokenizer does, before the model's normaliser: two backquotes or two apostrophes
  become one double quote; unless ``keep_accents``, NFKD then every combining mark (\\p{M}) dropped; with
  ``do_lower_case`` (the default), each character lower-cased on its own (``core.tokenizers.case.lower_case``);
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

from ..core.tokenizers.added_tokens import read_strip_flags
from ..core.tokenizers.directory import read_tokenizer_config, require_files
from ..core.tokenizers.sentencepiece import SentencePieceTokenizer, prepare_text, read_model

__all__ = ["ALBERT_SPECIAL_TOKENS", "XLM_ROBERTA_SPECIAL_TOKENS", "AlbertTokenizer", "SentencePieceTokenizer",
           "XLMRobertaTokenizer", "read_model"]

ALBERT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "<pad>", "unk": "<unk>", "mask": "[MASK]"}
XLM_ROBERTA_SPECIAL_TOKENS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}
# fairseq's dictionary starts with these four; SentencePiece's first three pieces (<unk>, <s>, </s>) map onto them
_FAIRSEQ_FIRST = ("<s>", "<pad>", "</s>", "<unk>")


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
        (path,) = require_files(directory, ("spiece.model",), "ALBERT")
        config = read_tokenizer_config(directory)
        lstrip, rstrip = read_strip_flags(directory)
        options = {"do_lower_case": bool(config.get("do_lower_case", True)),
                   "keep_accents": bool(config.get("keep_accents", False)), "lstrip": lstrip, "rstrip": rstrip}
        return cls(path, **{**options, **kwargs})

    def _vocabulary(self, pieces):
        return list(pieces)

    def _prepare(self, text):
        return prepare_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)

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
