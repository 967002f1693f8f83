"""Special tokens cut out of raw text before it is tokenized (Hugging Face's "added tokens"), as TensorFlow ops: what
the RoBERTa, ALBERT, XLM-RoBERTa and XLNet tokenizers share.

Hugging Face's tokenizers match each special token's text (``<mask>``, ``[CLS]``) in the raw text first, longest
first; each match is that token's one id, and the text between matches is tokenized on its own (normalised,
pre-tokenized, a prefix space or "▁" added again). A token marked ``lstrip`` (``rstrip``) also takes the whitespace
on its left (right): ``"a <mask>"`` is ``a`` and ``<mask>`` with RoBERTa's published tokenizer.json, where ``<mask>``
has ``lstrip``. Whitespace is Unicode's White_Space (Rust's ``char::is_whitespace``).

    special = AddedTokens({"<s>": 0, "<mask>": 50264}, lstrip=("<mask>",))
    ids = special.tokenize(text, plain)      # (B,) strings -> (B, None) int32; plain: (N,) strings -> (N, None)
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from .byte_bpe import WHITESPACE, re2_alternatives, regex_split, row_ids, special_segment_ids

__all__ = ["AddedTokens", "read_strip_flags"]

_LEADING_OR_TRAILING_WHITESPACE = rf"^[{WHITESPACE}]+|[{WHITESPACE}]+$"


def read_strip_flags(directory) -> tuple:
    """``(lstrip, rstrip)``: the special tokens that a Hugging Face tokenizer directory marks as taking the whitespace
    beside them (tokenizer_config.json's ``added_tokens_decoder``, else tokenizer.json's ``added_tokens``); two empty
    tuples when neither file says (transformers' default for tokens given as strings)."""
    entries = []
    config = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            entries = list((json.load(f).get("added_tokens_decoder") or {}).values())
    serialized = os.path.join(directory, "tokenizer.json")
    if not entries and os.path.isfile(serialized):
        with open(serialized, encoding="utf-8") as f:
            entries = json.load(f).get("added_tokens") or []
    return (tuple(entry["content"] for entry in entries if entry.get("lstrip")),
            tuple(entry["content"] for entry in entries if entry.get("rstrip")))


class AddedTokens(tf.Module):
    """Special tokens matched in the raw text, each its one id.

    Args:
        tokens: ``{token text: id}``.
        lstrip, rstrip: tokens that also take the whitespace on their left / right.

    Raises:
        ValueError: when `tokens` is empty or a token of `lstrip` / `rstrip` is not one of `tokens`.
    """

    def __init__(self, tokens: dict, *, lstrip=(), rstrip=(), name: str | None = None):
        super().__init__(name=name)
        if not tokens or "" in tokens:
            raise ValueError(f"`tokens` must be a non-empty dict of non-empty token texts -> ids; received {tokens}.")
        unknown = [token for token in (*lstrip, *rstrip) if token not in tokens]
        if unknown:
            raise ValueError(f"`lstrip` / `rstrip` name tokens that are not special tokens: {unknown}; expected some "
                             f"of {sorted(tokens)}.")
        self.ids = dict(tokens)
        space = f"[{WHITESPACE}]*"
        alternatives = [
            (space if token in lstrip else "") + re2_alternatives([token]) + (space if token in rstrip else "")
            for token in sorted(tokens, key=len, reverse=True)
        ]
        self._pattern = "|".join(alternatives)
        self._strips = bool(lstrip or rstrip)
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(tokens)), tf.constant(list(tokens.values()),
                                                                                        tf.int32)), -1)

    def tokenize(self, text, plain):
        """Token ids of ``text`` (B,) tf.string: the special tokens' ids where their text is, ``plain`` (a (N,)
        string tensor -> (N, None) int32 ragged ids; given "" for each special token's segment) on the rest.

        Returns:
            int32 `tf.RaggedTensor` (B, None).
        """
        safe = tf.strings.regex_replace(text, r"\x00", "\x01")  # regex_split stops at NUL; \x01 is classed the same
        begin, end = regex_split(safe, self._pattern)
        key = (lambda segments: tf.strings.regex_replace(segments, _LEADING_OR_TRAILING_WHITESPACE, "")
               ) if self._strips else None
        return special_segment_ids(text, begin, end, row_ids(begin), self._table, plain, key=key)
