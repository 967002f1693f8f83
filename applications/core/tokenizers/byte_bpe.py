"""Byte-level BPE (Radford et al. 2019, section 2.2) as TensorFlow ops: the algorithm GPT-2's and RoBERTa's
tokenizers share (``gpt.tokenizer.GPT2Tokenizer``, ``bert.roberta_tokenizer.RobertaTokenizer``).

Text is split into pre-tokens by GPT-2's regex, each pre-token's UTF-8 bytes are written as the 256 printable
"byte symbols" of GPT-2 (a space is "Ġ", a newline "Ċ"), and the merges of merges.txt are applied in rank order.
Every byte has a symbol in the vocabulary, so any UTF-8 text round-trips exactly.

What is keras-hub's and what is ours. The merges run on `keras_hub.tokenizers.BytePairTokenizer`'s TensorFlow
machinery (its byte<->symbol tables, merge-rank table, the cache of merged words and its token<->id tables), and
detokenizing is its ``detokenize``. The pre-tokenization is ours, because keras-hub 0.32's (`split_strings_for_bpe`)
does not round-trip every text and does not always split as GPT-2 does (the cases, measured against Hugging Face
on GPT-2's own files: benchmarks/README.md, GPT, "Tokenizer").

Ours (`pretokenize`) computes the same split as GPT-2's regex
``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`` without look-ahead and without
marker characters: the text is cut into whitespace runs and the rest; a whitespace run followed by a word gives up
its last character, which joins the word when it is a space (the `` ?`` of the word alternatives) and stands alone
otherwise; words are then split by the regex's word alternatives. It works on byte offsets (NUL bytes are replaced
by \\x01, which RE2 classes the same, only to compute the offsets), so pre-tokens are cut from the original bytes.
``\\s`` is Unicode's White_Space, as in Python's ``regex`` and Hugging Face's ``tokenizers``. Tokens passed as
``keep_whole`` (GPT-2's ``<|endoftext|>``) are split out first, so the text between two of them is pre-tokenized on
its own (Hugging Face's added-token rule). The merge step calls one private method of keras-hub's tokenizer
(keras-hub 0.32, pinned in pyproject.toml), through ``core.runs.keras_fixes.bpe_merge_into_cache``: the constructor
raises an ImportError naming the version if it is gone. It is given each new word once (keras-hub passes every
occurrence, and its merge loop costs words x longest word per merge step).

Differences from Hugging Face that remain: the Unicode tables of RE2 (TensorFlow's) and of Oniguruma (Hugging Face's)
may class a character added in a recent Unicode version differently (letter vs. other): the split, not the round
trip, changes.

The tables are TensorFlow resources owned by the tokenizer object (not by the Keras session), so it survives
``keras.backend.clear_session()``, and its ``tf.function``s export in a SavedModel that serves with ``tensorflow``
and ``tensorflow_text`` alone. keras-hub's cache of merged words grows with every new word it sees.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

import tensorflow as tf

from attnlayers.validation import is_int

from ..inputs.token_lookup import TokenLookup
from ..runs import keras_fixes

__all__ = ["BYTE_SYMBOLS", "WHITESPACE", "ByteLevelBPE", "core_regex_split", "pretokenize", "re2_alternatives",
           "read_merges", "read_vocabulary", "regex_split", "row_ids", "special_segment_ids"]
# Unicode's White_Space characters: ``\s`` of Python's `regex` and of Hugging Face's byte-level pre-tokenizer (RE2's
# ``\s`` is ASCII only).
WHITESPACE = r"\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
_WHITESPACE_RUN = rf"[{WHITESPACE}]+"
# GPT-2's regex without its whitespace alternatives (stage 2 of `pretokenize`).
_WORDS = rf"'s|'t|'re|'ve|'m|'ll|'d| ?\p{{L}}+| ?\p{{N}}+| ?[^{WHITESPACE}\p{{L}}\p{{N}}]+"


def _byte_symbols() -> list:
    """GPT-2's 256 byte symbols (``bytes_to_unicode`` of openai/gpt-2's encoder.py), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[byte] for byte in range(256)]


BYTE_SYMBOLS = tuple(_byte_symbols())


def re2_alternatives(tokens) -> str:
    """An RE2 pattern matching any of ``tokens`` literally, longest first ("" for none)."""
    return "|".join(re.escape(token) for token in sorted(tokens, key=len, reverse=True))


# ----------------------------------------------------------------------------------------------------------------
# Reading vocab.json and merges.txt


def read_vocabulary(vocabulary, *, required=None) -> dict:
    """A byte-level BPE vocabulary as ``{token: id}``.

    Args:
        vocabulary: the path of a vocab.json (a JSON object token -> id, GPT-2's encoder.json) or a dict.
        required: ``{token: what it is}``, the special tokens the vocabulary must hold (e.g.
            ``{"<|endoftext|>": "the end-of-text token"}``).

    Returns:
        The dict (a copy).

    Raises:
        ValueError: naming the file, when it is missing or not JSON, or the vocabulary is not ``{str: int}``, its
            ids are not 0 .. V-1 each once, it lacks one of the 256 byte symbols (some text could not be encoded)
            or lacks a `required` token.
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        source = f"vocabulary file {os.fspath(vocabulary)!r}"
        if not os.path.isfile(vocabulary):
            raise ValueError(f"`vocabulary`: {source} does not exist; expected a vocab.json (token -> id).")
        try:
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"`vocabulary`: {source} is not valid UTF-8 JSON: {error}.") from None
    elif isinstance(vocabulary, dict):
        source = "the `vocabulary` dict"
    else:
        raise ValueError(f"`vocabulary` must be the path of a vocab.json or a dict; received {type(vocabulary)}.")
    _check_vocabulary(vocabulary, source, required or {})
    return dict(vocabulary)


def _check_vocabulary(vocabulary, source, required):
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError(f"{source} must hold a non-empty JSON object token -> id; received {type(vocabulary)}.")
    bad = [(token, i) for token, i in vocabulary.items() if not isinstance(token, str) or not is_int(i)]
    if bad:
        raise ValueError(f"{source} must map string tokens to integer ids; received {bad[:3]}.")
    if sorted(vocabulary.values()) != list(range(len(vocabulary))):
        raise ValueError(
            f"{source}: the ids must be 0 .. {len(vocabulary) - 1}, each once (one id per token); received ids "
            f"from {min(vocabulary.values())} to {max(vocabulary.values())} for {len(vocabulary)} tokens."
        )
    missing = [symbol for symbol in BYTE_SYMBOLS if symbol not in vocabulary]
    if missing:
        raise ValueError(
            f"{source} lacks {len(missing)} of GPT-2's 256 byte symbols (e.g. {missing[:5]}): text holding those "
            f"bytes could not be encoded. A byte-level BPE vocabulary holds all 256."
        )
    for token, what in required.items():
        if token not in vocabulary:
            raise ValueError(f"{source} lacks {what} {token!r}.")


def read_merges(merges, vocabulary: dict) -> list:
    """Merge rules as a list of "left right" strings, in rank order.

    Args:
        merges: the path of a merges.txt (GPT-2's vocab.bpe: an optional "#version" line, then one "left right"
            rule a line) or a list of such strings.
        vocabulary: ``{token: id}`` (from `read_vocabulary`): both sides and the merged token must be in it.

    Raises:
        ValueError: naming the file and line, when the file is missing, a line is not two tokens separated by one
            space, or a token of it (or the merged token) is not in the vocabulary.
    """
    if isinstance(merges, (str, os.PathLike)):
        source = f"merges file {os.fspath(merges)!r}"
        if not os.path.isfile(merges):
            raise ValueError(f"`merges`: {source} does not exist; expected a merges.txt (one merge a line).")
        try:
            with open(merges, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"`merges`: {source} is not UTF-8 text: {error}.") from None
    elif isinstance(merges, Iterable):
        source, lines = "the `merges` list", [str(line) for line in merges]
    else:
        raise ValueError(f"`merges` must be the path of a merges.txt or a list of strings; received {type(merges)}.")
    rules = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if not line or (number == 1 and line.startswith("#version")):
            continue
        rules.append(_check_merge(line, number, vocabulary, source))
    return rules


def _check_merge(line, number, vocabulary, source):
    parts = line.split(" ")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{source}, line {number}: expected two tokens separated by one space; received {line!r}.")
    missing = [token for token in (*parts, parts[0] + parts[1]) if token not in vocabulary]
    if missing:
        raise ValueError(
            f"{source}, line {number}: the merge {line!r} names tokens that the vocabulary lacks: {missing} (are "
            f"vocab.json and merges.txt from the same tokenizer?)."
        )
    return line


# ----------------------------------------------------------------------------------------------------------------
# Pre-tokenization


def regex_split(text, pattern):
    """The matches of ``pattern`` in ``text`` (B,) and the text between them, as (begin, end) byte offsets, (B, None)
    int64 ragged each: tensorflow_text's ``regex_split_with_offsets``."""
    import tensorflow_text as tf_text

    _, begin, end = tf_text.regex_split_with_offsets(text, pattern, pattern)
    return begin, end


def core_regex_split(text, pattern):
    """:func:`regex_split` with core TensorFlow ops only (a SavedModel holding it loads without tensorflow_text):
    every match is wrapped in NUL bytes (``regex_replace``: RE2's leftmost-first matches, as regex_split's) and the
    text split at them. ``text`` must hold no NUL (the pre-tokenizer replaces them first)."""
    pieces = tf.strings.split(tf.strings.regex_replace(text, pattern, "\x00\\0\x00"), sep="\x00")
    lengths = tf.cast(tf.strings.length(pieces.flat_values), tf.int64)
    ends = tf.cumsum(lengths)
    row_start = tf.gather(tf.concat([[0], ends], axis=0), pieces.row_splits[:-1])  # bytes before each row
    ends -= tf.gather(row_start, row_ids(pieces))
    begin, end = pieces.with_flat_values(ends - lengths), pieces.with_flat_values(ends)
    keep = pieces.with_flat_values(lengths > 0)
    return tf.ragged.boolean_mask(begin, keep), tf.ragged.boolean_mask(end, keep)


def pretokenize(text, split=regex_split, *, keep_whole=()):
    """GPT-2's pre-tokens (its regex's matches, see the module docstring) as TensorFlow ops.

    Args:
        text: a (B,) tf.string tensor of UTF-8 text.
        split: the regex splitter, ``split(text, pattern) -> (begin, end)`` byte offsets: tensorflow_text's (the
            default) or :func:`core_regex_split` (core ops only, for SavedModels served without tensorflow_text;
            the same pre-tokens).
        keep_whole: strings that are each one pre-token wherever they occur (GPT-2's ``<|endoftext|>``).

    Returns:
        a tf.string `tf.RaggedTensor` (B, None): each text's pre-tokens, whose concatenation is the text.
    """
    whole = re2_alternatives(keep_whole)
    segment_pattern = "|".join(filter(None, (whole, _WHITESPACE_RUN)))  # stage 1: whole tokens, whitespace runs
    word_pattern = "|".join(filter(None, (whole, _WORDS)))  # stage 2: GPT-2's word alternatives
    text = tf.convert_to_tensor(text, tf.string)
    safe = tf.strings.regex_replace(text, r"\x00", "\x01")  # regex_split stops at NUL; \x01 is classed the same
    begin, end = split(safe, segment_pattern)
    rows, begin, end = row_ids(begin), begin.flat_values, end.flat_values
    unit_rows, unit_begin, unit_end = _units(tf.gather(safe, rows), rows, begin, end, whole)
    units = tf.strings.substr(tf.gather(safe, unit_rows), unit_begin, unit_end - unit_begin)
    begin, end = split(units, word_pattern)
    unit_of_piece = row_ids(begin)
    piece_rows, offset = tf.gather(unit_rows, unit_of_piece), tf.gather(unit_begin, unit_of_piece)
    begin, end = begin.flat_values + offset, end.flat_values + offset
    pieces = tf.strings.substr(tf.gather(text, piece_rows), begin, end - begin)
    return tf.RaggedTensor.from_value_rowids(pieces, piece_rows, nrows=tf.shape(text, out_type=tf.int64)[0])


def row_ids(ragged):
    """The row of each value of a 2-D ragged tensor, (N,) int64. ``RaggedTensor.value_rowids`` builds a dense
    (rows, longest row) tensor on the way (tf.repeat), which a batch of long documents cannot afford."""
    splits = ragged.row_splits
    return tf.searchsorted(splits[1:], tf.range(splits[-1], dtype=splits.dtype), side="right", out_type=splits.dtype)


def special_segment_ids(text, begin, end, rows, special_table, tokenize, *, key=None):
    """Token ids of ``text`` (B,) cut into segments [begin, end) (ragged (B, None) byte offsets; ``rows``: the row
    of each segment): a segment that ``special_table`` maps to an id (>= 0) is that one special token, the others
    are ``tokenize``d (a (N,) string tensor -> ragged ids). ``key`` (segments -> strings) is what the table looks
    up (default: the segments). Returns ragged (B, None) ids."""
    segments = tf.strings.substr(tf.gather(text, rows), begin.flat_values, end.flat_values - begin.flat_values)
    special = special_table.lookup(segments if key is None else key(segments))
    is_special = special >= 0
    plain = tokenize(tf.where(is_special, tf.constant(""), segments)).with_row_splits_dtype(tf.int64)
    specials = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(special, is_special), tf.cast(is_special, tf.int64))
    per_segment = tf.concat([specials, plain], axis=1)  # each segment is one or the other
    return tf.RaggedTensor.from_row_splits(per_segment.flat_values, tf.gather(per_segment.row_splits,
                                                                              begin.row_splits))


def _units(source, rows, begin, end, whole):
    """Stage 1 segments -> units that stage 2 splits: the look-ahead of GPT-2's ``\\s+(?!\\S)``.

    A whitespace run followed (in the same text) by a word gives up its last character: a space joins the word,
    another character becomes its own unit. Other segments are units as they are.

    Args:
        source: (N,) the text of each segment; rows, begin, end: (N,) its text's index and its byte offsets.
        whole: the pattern of the tokens kept whole ("" for none): such a segment is not a word.

    Returns:
        ``(rows, begin, end)`` of the units, (U,) each, in text order.
    """
    segment = tf.strings.substr(source, begin, end - begin)
    count = tf.size(segment)
    is_whitespace = tf.strings.regex_full_match(segment, _WHITESPACE_RUN)
    is_word = ~is_whitespace
    if whole:
        is_word &= ~tf.strings.regex_full_match(segment, whole)
    next_is_word = tf.concat([is_word[1:] & tf.equal(rows[1:], rows[:-1]), [False]], axis=0)[:count]
    gives_up = is_whitespace & next_is_word
    characters = tf.strings.length(segment, unit="UTF8_CHAR")
    last = tf.strings.substr(segment, tf.maximum(characters - 1, 0), tf.ones_like(characters), unit="UTF8_CHAR")
    last_bytes = tf.cast(tf.strings.length(last), begin.dtype)
    gives_space = gives_up & tf.equal(last, " ")
    # A word after a run that gives up a space starts one byte earlier (the space is ASCII).
    takes_space = tf.concat([[False], gives_space[:-1]], axis=0)[:count]
    first_begin = tf.where(takes_space, begin - 1, begin)
    first_end = tf.where(gives_up, end - last_bytes, end)
    second_valid = gives_up & ~gives_space
    begins = tf.stack([first_begin, end - last_bytes], axis=1)
    ends = tf.stack([first_end, end], axis=1)
    valid = tf.stack([first_end > first_begin, second_valid], axis=1)
    rows = tf.stack([rows, rows], axis=1)
    return tuple(tf.boolean_mask(tensor, valid) for tensor in (rows, begins, ends))


# ----------------------------------------------------------------------------------------------------------------
# The tokenizer's core


class ByteLevelBPE(TokenLookup):
    """What a byte-level BPE tokenizer runs: vocab.json and merges.txt in keras-hub's tables, the merges of
    pre-tokens (`merge`), and detokenizing to the exact bytes. A subclass defines ``_tokenize_batch`` (its
    pre-tokenization and special tokens).

    Args:
        vocabulary: the path of a vocab.json or a dict token -> id, holding the 256 byte symbols and `required`.
        merges: the path of a merges.txt or a list of "left right" rules, in rank order.
        required: ``{token: what it is}``: special tokens the vocabulary must hold.

    Attributes:
        bpe: the ``keras_hub.tokenizers.BytePairTokenizer`` whose tables run the merges.
        vocabulary_size: the number of tokens.

    Raises:
        ValueError: naming the file (and line) for a missing or malformed vocab.json or merges.txt.
    """

    def __init__(self, vocabulary, merges, *, required=None, name: str | None = None):
        super().__init__(name=name)
        import keras_hub

        vocabulary = read_vocabulary(vocabulary, required=required)
        merges = read_merges(merges, vocabulary)
        # Plain dict and list: tf.Module wraps its attributes' dicts, which keras-hub's `tokenizers` path refuses.
        self.bpe = keras_hub.tokenizers.BytePairTokenizer(vocabulary, merges, unsplittable_tokens=[], dtype="int32")
        keras_fixes.PRIVATE_USES["bpe_merge_into_cache"].require(self.bpe, type(self).__name__)  # now, not traced
        # keras-hub's tables, tracked here as well: under another Keras backend than TensorFlow its layer is not a
        # TensorFlow trackable, and a SavedModel must find every resource its functions capture.
        self._tables = [self.bpe.cache, self.bpe.byte2unicode, self.bpe.unicode2byte, self.bpe.token_to_id_map,
                        self.bpe.id_to_token_map, self.bpe.merge_ranks]
        self._token_ids, self._merges = vocabulary, merges
        self._tokens = tf.constant(sorted(self._token_ids, key=self._token_ids.get))

    def get_vocabulary(self) -> list:
        """The tokens (byte symbols, e.g. "Ġthe") in id order."""
        return sorted(self._token_ids, key=self._token_ids.get)

    def _merge(self, words):
        """(P,) pre-tokens -> their BPE ids, (P, None) int32: keras-hub's cached merge (what its ``tokenize`` does
        after its own pre-tokenization; ``core.runs.keras_fixes.bpe_merge_into_cache``)."""
        bpe = self.bpe
        cached = bpe.cache.lookup(words)
        unseen = tf.equal(cached, "") & tf.not_equal(words, "")

        def merge_unseen():
            # Each new word once: keras-hub's merge loop costs (words x longest word) per step.
            keras_fixes.bpe_merge_into_cache(bpe, tf.unique(tf.boolean_mask(words, unseen)).y)
            return bpe.cache.lookup(words)

        merged = tf.cond(tf.reduce_any(unseen), merge_unseen, lambda: cached)
        return bpe.token_to_id_map.lookup(tf.strings.split(merged, sep=" "))

    def _pretokenized_ids(self, pieces):
        """(B, None) pre-tokens -> (B, None) int32 ids."""
        ids = self._merge(pieces.flat_values)  # (P, None): each pre-token's ids
        return tf.RaggedTensor.from_row_splits(ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits))

    def _checked(self, values):
        """``values`` (ids) after in-graph assertions that each is in [0, vocabulary_size)."""
        checks = [
            tf.debugging.assert_non_negative(values, message="`ids` holds a negative id"),
            tf.debugging.assert_less(values, self.vocabulary_size, message="`ids` holds an id >= vocabulary_size"),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(values)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)])
    def _detokenize_batch(self, ids):
        return self.bpe.detokenize(ids.with_flat_values(self._checked(ids.flat_values)))
