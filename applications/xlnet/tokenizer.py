"""XLNet's SentencePiece tokenizer (Yang et al. 2019; Kudo and Richardson 2018) as TensorFlow ops, giving the ids of
transformers 5's ``XLNetTokenizer`` (what ``AutoTokenizer`` gives for an XLNet checkpoint directory).

    tokenizer = XLNetTokenizer.from_directory("xlnet/")             # spiece.model (+ tokenizer_config.json)
    ids = tokenizer.tokenize(["Hello world", "naïve 日本語"])         # tf.RaggedTensor int32 (2, None)
    inputs = tokenizer.pack(ids, ids, sequence_length=128)          # A <sep> B <sep> <cls> <pad>...

Built on ``applications.core.tokenizers.sentencepiece`` (the base ALBERT's and XLM-RoBERTa's tokenizers share):

- special tokens are matched in the raw text first: ``<unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop>``;
  ``<mask>`` takes the whitespace on its left (transformers' default for XLNet);
- the text is prepared as ALBERT's is (`prepare_text`): two backquotes or two apostrophes become one double quote,
  NFKD then every combining mark dropped, lower-cased only with ``do_lower_case`` (False: every published XLNet is
  cased); extra whitespace goes with the split at whitespace (the original tokenizer's ``remove_space``);
- ids are the model's pieces (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<cls>`` 3, ``<sep>`` 4, ``<pad>`` 5, ``<mask>``
  6, ``<eod>`` 7, ``<eop>`` 8 in xlnet-base-cased's spiece.model).

Layout (section 2.5; `applications.xlnet.inputs`): the special tokens at the END, where the classifier reads <cls>.

    single:  A <sep> <cls>              segment ids 0 ... 0 2
    pair:    A <sep> B <sep> <cls>      segment ids 0 ... 0 1 ... 1 2

Left to differ: transformers 5's ``XLNetTokenizer`` strips accents whatever its ``keep_accents`` says (its
converter from the original tokenizer honours it, as this class does; no published XLNet keeps accents); it pads
token_type_ids with 3 and on the left by default (``pack`` pads segment ids with 0, as `inputs.pack` does, on the
side asked); the same Unicode 10+ combining marks and tokenizer.json scores as ALBERT's
(``applications.bert.sentencepiece_tokenizer``).
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.validation import is_int

from ..core.tokenizers.added_tokens import read_strip_flags
from ..core.tokenizers.directory import read_tokenizer_config, require_files
from ..core.tokenizers.sentencepiece import SentencePieceTokenizer, prepare_text
from .inputs import CLS_SEGMENT, special_tokens

__all__ = ["XLNET_SPECIAL_TOKENS", "XLNetTokenizer"]

XLNET_SPECIAL_TOKENS = {"unk": "<unk>", "bos": "<s>", "eos": "</s>", "cls": "<cls>", "sep": "<sep>", "pad": "<pad>",
                        "mask": "<mask>", "eod": "<eod>", "eop": "<eop>"}
_DEFAULT_LSTRIP = ("<mask>",)  # transformers' XLNetTokenizer: AddedToken(mask_token, lstrip=True)


class XLNetTokenizer(SentencePieceTokenizer):
    """XLNet's tokenizer: a spiece.model with XLNet's text preparation and layout (see the module docstring).

    Args:
        model: the path of a spiece.model, or its bytes.
        do_lower_case: lower-case the text (Hugging Face's option; False for every published XLNet).
        keep_accents: keep accents (False: NFKD, then combining marks dropped).
        lstrip, rstrip: special tokens that take the whitespace on their left / right (default: ``<mask>`` lstrip).

    Attributes:
        unk_token_id, bos_token_id, eos_token_id, cls_token_id, sep_token_id, pad_token_id, mask_token_id,
            eod_token_id, eop_token_id: the special tokens' ids.
    """

    special_tokens = XLNET_SPECIAL_TOKENS

    def __init__(self, model, *, do_lower_case: bool = False, keep_accents: bool = False, lstrip=_DEFAULT_LSTRIP,
                 rstrip=(), name: str | None = None):
        self.do_lower_case, self.keep_accents = bool(do_lower_case), bool(keep_accents)
        super().__init__(model, lstrip=lstrip, rstrip=rstrip, name=name)

    @classmethod
    def from_directory(cls, directory, **kwargs) -> XLNetTokenizer:
        """The tokenizer of a Hugging Face XLNet directory: its spiece.model, with tokenizer_config.json's
        ``do_lower_case`` and ``keep_accents`` and the special tokens' lstrip / rstrip (``<mask>`` lstrip when the
        directory names none; keyword arguments override them).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments, overriding those read from the directory.

        Returns:
            The tokenizer.

        Raises:
            ValueError: naming the missing file.
        """
        (path,) = require_files(directory, ("spiece.model",), "XLNet")
        config = read_tokenizer_config(directory)
        lstrip, rstrip = read_strip_flags(directory)
        if not (lstrip or rstrip):
            lstrip = _DEFAULT_LSTRIP
        options = {"do_lower_case": bool(config.get("do_lower_case", False)),
                   "keep_accents": bool(config.get("keep_accents", False)), "lstrip": lstrip, "rstrip": rstrip}
        return cls(path, **{**options, **kwargs})

    def _vocabulary(self, pieces):
        return list(pieces)

    def _prepare(self, text):
        return prepare_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)

    def pack(self, segments_a, segments_b=None, *, sequence_length: int, padding_side: str = "right"):
        """XLNet's layout, ``A <sep> (B <sep>) <cls>``, segment ids 0 / 1 / 2, cut and padded to one length, as
        TensorFlow ops (a tf.data map runs it).

        A pair too long loses tokens from the end of its longer segment, one at a time (the reference's
        ``_truncate_seq_pair``: `tensorflow_text.RoundRobinTrimmer`).

        Args:
            segments_a: token ids of the first segments: a (B, None) ``tf.RaggedTensor``, a (B, T) tensor, a list of
                lists, or one example (T,).
            segments_b: the second segments, the same way; None packs single segments.
            sequence_length: L, the packed length (at least 4 for pairs, 3 for single segments).
            padding_side: "right" (`inputs.pack`'s) or "left" (Hugging Face's default for XLNet): where ``<pad>``
                goes.

        Returns:
            ``{"token_ids": int32 (B, L), "segment_ids": int32 (B, L) (0 on padding), "padding_mask": bool (B, L)}``
            (each (L,) for one example).

        Raises:
            ValueError: for a `sequence_length` without room for a token beside the special tokens, or a
                `padding_side` other than "right" / "left".
        """
        import tensorflow_text as tf_text

        a, single = _as_ragged(segments_a)
        segments = [a] if segments_b is None else [a, _as_ragged(segments_b)[0]]
        special = special_tokens(segments_b is not None)
        if not is_int(sequence_length) or sequence_length < special + 1:
            raise ValueError(f"`sequence_length` must be an integer >= {special + 1}, room for a token beside the "
                             f"{special} special tokens; received {sequence_length!r}.")
        if padding_side not in ("right", "left"):
            raise ValueError(f"`padding_side` must be 'right' or 'left'; received {padding_side!r}.")
        segments = tf_text.RoundRobinTrimmer(sequence_length - special).trim(segments)
        rows = segments[0].nrows()

        def column(value):  # (B, 1) of one id
            return tf.fill(tf.stack([rows, 1]), tf.constant(value, tf.int32))

        tokens, kinds = [], []
        for kind, segment in enumerate(segments):  # segment id 0 for A <sep>, 1 for B <sep>
            tokens += [segment, column(self.sep_token_id)]
            kinds += [tf.ones_like(segment) * kind, column(kind)]
        tokens.append(column(self.cls_token_id))
        kinds.append(column(CLS_SEGMENT))
        token_ids, segment_ids = tf.concat(tokens, axis=1), tf.concat(kinds, axis=1)
        shape = [None, sequence_length]
        packed = {"token_ids": token_ids.to_tensor(self.pad_token_id, shape=shape),
                  "segment_ids": segment_ids.to_tensor(0, shape=shape),
                  "padding_mask": tf.ones_like(token_ids, tf.bool).to_tensor(False, shape=shape)}
        if padding_side == "left":  # each row rolled right by its padding
            lengths = tf.cast(token_ids.row_lengths(), tf.int32)
            source = (tf.range(sequence_length)[None, :] + lengths[:, None]) % sequence_length
            packed = {key: tf.gather(value, source, batch_dims=1) for key, value in packed.items()}
        return {key: value[0] for key, value in packed.items()} if single else packed


def _as_ragged(segments):
    """Token ids as a (B, None) int32 RaggedTensor, and whether one example (T,) was given."""
    if isinstance(segments, (list, tuple)):
        segments = tf.ragged.constant(segments, tf.int32)
    elif not isinstance(segments, tf.RaggedTensor):
        segments = tf.convert_to_tensor(segments)
    if not segments.dtype.is_integer:
        raise ValueError(f"the segments must be integer token ids (run `tokenize` first); received {segments.dtype}.")
    segments = tf.cast(segments, tf.int32)
    single = segments.shape.rank == 1
    if single:
        segments = segments[None]
    if not isinstance(segments, tf.RaggedTensor):
        segments = tf.RaggedTensor.from_tensor(segments)
    return segments, single
