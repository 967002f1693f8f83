"""RoBERTa's tokenizer (Liu et al. 2019, section 4.4): GPT-2's byte-level BPE with RoBERTa's special tokens, as
TensorFlow ops, giving Hugging Face's ``RobertaTokenizer`` ids; and RoBERTa's input layout (`pack_roberta`).

    tokenizer = RobertaTokenizer.from_directory("roberta/")      # vocab.json + merges.txt (+ tokenizer_config.json)
    ids = tokenizer.tokenize(["Hello world", "日本語 <mask> 😀"])   # tf.RaggedTensor int32 (2, None)
    inputs = tokenizer.pack(ids, sequence_length=128)             # <s> A </s> <pad>...

The byte-level BPE is the one GPT-2's tokenizer runs (``applications.core.tokenizers.byte_bpe``): GPT-2's regex
pre-tokenizer, byte symbols and merges. What differs is around it:

- special tokens: ``<s>`` (cls / bos), ``</s>`` (sep / eos), ``<pad>``, ``<unk>`` and ``<mask>``, looked up by name
  in vocab.json (0, 2, 1, 3 and 50264 in roberta-base's). Where the text holds one of them it is that one id (the
  text between them is tokenized on its own), as Hugging Face's added tokens; ``<|endoftext|>`` is ordinary text.
  A token marked lstrip / rstrip (roberta-base's tokenizer.json marks ``<mask>`` lstrip) also takes the whitespace
  beside it (``applications.bert.added_tokens``).
- ``add_prefix_space`` (False by default, as Hugging Face's): a space is put before each text (each stretch of text
  between special tokens) that does not start with one, so that its first word is spelled as after a space.
- pairs: ``<s> A </s></s> B </s>`` (two separators between the segments), segment ids all 0 (RoBERTa has no
  next-sentence task; its token-type embedding has one row).
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.validation import is_int

from ..core.tokenizers.byte_bpe import ByteLevelBPE, pretokenize
from .added_tokens import AddedTokens, read_strip_flags

__all__ = ["ROBERTA_SPECIAL_TOKENS", "RobertaTokenizer", "pack_roberta"]

# Hugging Face's names of the five special tokens, and RoBERTa's texts for them.
ROBERTA_SPECIAL_TOKENS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "<unk>", "mask": "<mask>"}


class RobertaTokenizer(ByteLevelBPE):
    """RoBERTa's byte-level BPE tokenizer: UTF-8 text to Hugging Face's token ids with TensorFlow ops (tf.data
    maps, SavedModels).

    Args:
        vocabulary: the path of a vocab.json or a dict token -> id, holding the 256 byte symbols and the five
            special tokens.
        merges: the path of a merges.txt or a list of "left right" rules, in rank order.
        add_prefix_space: put a space before each text that does not start with one (Hugging Face's option).
        lstrip, rstrip: special tokens that take the whitespace on their left / right (`from_directory` reads them
            from the directory's tokenizer files).

    Attributes:
        cls_token_id, sep_token_id, pad_token_id, unk_token_id, mask_token_id: the special tokens' ids (``<s>``,
            ``</s>``, ``<pad>``, ``<unk>``, ``<mask>``); ``bos_token_id`` / ``eos_token_id`` are ``<s>`` / ``</s>``.
        special_token_ids: (pad, unk, cls, sep, mask), as ``BertTokenizer``'s.

    Raises:
        ValueError: naming the file (and line) for a missing or malformed vocab.json or merges.txt, or a missing
            special token.
    """

    def __init__(self, vocabulary, merges, *, add_prefix_space: bool = False, lstrip=(), rstrip=(),
                 name: str | None = None):
        required = {token: f"RoBERTa's {kind} token" for kind, token in ROBERTA_SPECIAL_TOKENS.items()}
        super().__init__(vocabulary, merges, required=required, name=name)
        for kind, token in ROBERTA_SPECIAL_TOKENS.items():
            setattr(self, f"{kind}_token_id", self._token_ids[token])
        self.bos_token_id, self.eos_token_id = self.cls_token_id, self.sep_token_id
        self.add_prefix_space = bool(add_prefix_space)
        self.added_tokens = AddedTokens({token: self._token_ids[token] for token in ROBERTA_SPECIAL_TOKENS.values()},
                                        lstrip=lstrip, rstrip=rstrip)

    @classmethod
    def from_directory(cls, directory, **kwargs) -> RobertaTokenizer:
        """The tokenizer of a Hugging Face RoBERTa directory: its vocab.json and merges.txt, with
        tokenizer_config.json's ``add_prefix_space`` and the special tokens' lstrip / rstrip (keyword arguments
        override them).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments, overriding those read from the directory.

        Returns:
            The tokenizer.

        Raises:
            ValueError: naming the missing file.
        """
        from .family_tokenizers import read_tokenizer_config, require_files

        paths = require_files(directory, ("vocab.json", "merges.txt"), "RoBERTa")
        lstrip, rstrip = read_strip_flags(directory)
        options = {"add_prefix_space": bool(read_tokenizer_config(directory).get("add_prefix_space", False)),
                   "lstrip": lstrip, "rstrip": rstrip}
        return cls(*paths, **{**options, **kwargs})

    @property
    def special_token_ids(self) -> tuple:
        return (self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id)

    def tokenize(self, text):
        """UTF-8 strings to token ids (no special token added; special tokens' texts in the text are their ids).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.
        """
        return super().tokenize(text)

    __call__ = tokenize

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def _tokenize_batch(self, text):
        return self.added_tokens.tokenize(text, self._plain_ids)

    def _plain_ids(self, text):
        """(N,) text without special tokens -> (N, None) ids: ByteLevel(add_prefix_space) + BPE."""
        if self.add_prefix_space:
            needs_space = tf.not_equal(text, "") & tf.not_equal(tf.strings.substr(text, 0, 1), " ")
            text = tf.where(needs_space, tf.strings.join([" ", text]), text)
        return self._pretokenized_ids(pretokenize(text))

    def detokenize(self, ids):
        """Token ids to UTF-8 bytes: the text that `tokenize` read (less ``<pad>``; other special tokens are
        written as their text, ``<s>``; a prefix space that `add_prefix_space` put stays).

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged; each in [0, vocabulary_size).

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T).
        """
        return super().detokenize(ids)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)])
    def _detokenize_batch(self, ids):
        ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, self.pad_token_id))
        return self.bpe.detokenize(ids.with_flat_values(self._checked(ids.flat_values)))

    def pack(self, segments_a, segments_b=None, *, sequence_length: int):
        """`pack_roberta` with this tokenizer's special tokens: ``<s> A </s>(</s> B </s>)``, segment ids 0, ``<pad>``.

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
        return pack_roberta(segments_a, segments_b, sequence_length=sequence_length, tokenizer=self)


def pack_roberta(segments_a, segments_b=None, *, sequence_length: int, tokenizer):
    """``<s> A </s>`` or ``<s> A </s></s> B </s>``, then ``<pad>``: RoBERTa's (and XLM-RoBERTa's) input layout, as
    Hugging Face's ``RobertaProcessing`` builds it, cut and padded to one length.

    A pair too long for `sequence_length` loses tokens from the end of its longer segment, one at a time
    (`tensorflow_text.RoundRobinTrimmer`, as BERT's `pack`).

    Args:
        segments_a: token ids of the first segments: a (B, None) `tf.RaggedTensor`, a (B, T) tensor of ids (every
            position a token), a list of lists, or one example (T,).
        segments_b: the second segments, the same way; None packs single segments.
        sequence_length: L, the packed length (at least 4 for pairs, 2 for single segments).
        tokenizer: gives `cls_token_id`, `sep_token_id` and `pad_token_id`.

    Returns:
        {"token_ids": int32 (B, L), "segment_ids": int32 (B, L) (all 0), "padding_mask": bool (B, L)} (each (L,)
        for one example): BERT's input names.

    Raises:
        ValueError: when the segments are not integer token ids, A and B have different batch sizes, or
            `sequence_length` leaves no room for the special tokens.
    """
    import tensorflow_text as tf_text

    from .pretraining_data import _segments

    segments, single = _segments(segments_a, segments_b)
    special = 2 if len(segments) == 1 else 4
    if not is_int(sequence_length) or sequence_length < special:
        layout = "<s> A </s>" if special == 2 else "<s> A </s></s> B </s>"
        raise ValueError(f"`sequence_length` must be an integer >= {special}, room for the special tokens of "
                         f"{layout}; received sequence_length={sequence_length!r}.")
    segments = tf_text.RoundRobinTrimmer(int(sequence_length) - special).trim(segments)
    if len(segments) == 2:  # the second </s> between A and B opens B
        first = tf.fill([segments[1].nrows(), 1], tf.constant(tokenizer.sep_token_id, segments[1].dtype))
        segments = [segments[0], tf.concat([tf.RaggedTensor.from_tensor(first), segments[1]], axis=1)]
    token_ids, _ = tf_text.combine_segments(
        segments, start_of_sequence_id=tokenizer.cls_token_id, end_of_segment_id=tokenizer.sep_token_id
    )
    shape = [None, int(sequence_length)]
    token_ids = tf.cast(token_ids, tf.int32)
    packed = {
        "token_ids": token_ids.to_tensor(default_value=tokenizer.pad_token_id, shape=shape),
        "segment_ids": tf.zeros_like(token_ids).to_tensor(default_value=0, shape=shape),
        "padding_mask": tf.ones_like(token_ids, tf.bool).to_tensor(default_value=False, shape=shape),
    }
    return {key: value[0] for key, value in packed.items()} if single else packed

