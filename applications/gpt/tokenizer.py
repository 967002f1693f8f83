"""GPT-2's byte-level BPE tokenizer (Radford et al. 2019, section 2.2), run as TensorFlow ops.

    paths = train_byte_level_bpe(lines, 8000, "tokenizer/")           # offline: vocab.json + merges.txt
    tokenizer = GPT2Tokenizer(*paths)                                  # or GPT2Tokenizer.from_directory("gpt2/")
    ids = tokenizer.tokenize(["Hello, world!", "日本語 😀"])            # tf.RaggedTensor int32 (2, None)
    tokenizer.detokenize(ids)                                          # [b"Hello, world!", b"日本語 😀"] (UTF-8)

Text is split into pre-tokens by GPT-2's regex, each pre-token's UTF-8 bytes are written as the 256 printable
"byte symbols" of GPT-2 (a space is "Ġ", a newline "Ċ"), and the merges of merges.txt are applied in rank order.
Every byte has a symbol in the vocabulary, so any UTF-8 text (emoji, CJK, combining accents, tabs, runs of spaces,
leading and trailing whitespace, NUL, the empty string) round-trips exactly: ``detokenize(tokenize(t)) == t``,
byte for byte (byte strings that are not UTF-8 came back exactly too in our checks, though no reference tokenizes
them). The end-of-text token ``<|endoftext|>`` (`END_OF_TEXT`) is a special token: where the text holds
that string it becomes the one id ``end_token_id``, never split, as in Hugging Face's GPT-2 tokenizers.

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
``\\s`` is Unicode's White_Space, as in Python's ``regex`` and Hugging Face's ``tokenizers``. Pre-tokens equal to
``<|endoftext|>`` are split out first, so the text between two of them is pre-tokenized on its own (Hugging Face's
added-token rule). The merge step calls one private method of keras-hub's tokenizer (keras-hub 0.32, pinned in
pyproject.toml), through ``core.runs.keras_fixes.bpe_merge_into_cache``: the constructor raises an ImportError naming
the version if it is gone, and the tests compare the ids with Hugging Face's. It is given each new word once
(keras-hub passes every occurrence, and its merge loop costs words x longest word per merge step).

Differences from Hugging Face that remain: the Unicode tables of RE2 (TensorFlow's) and of Oniguruma (Hugging Face's)
may class a character added in a recent Unicode version differently (letter vs. other): the split, not the round
trip, changes. There is no padding token (GPT-2 has none; keras-hub's GPT2Tokenizer calls id 0, "!", its padding).

The tokenizer's tables are TensorFlow resources owned by this object (not by the Keras session), so it survives
``keras.backend.clear_session()``, and its ``tf.function``s export in a SavedModel that serves with ``tensorflow``
and ``tensorflow_text`` alone. keras-hub's cache of merged words grows with every new word it sees.

Training (`train_byte_level_bpe`) uses Hugging Face ``tokenizers`` (``models.BPE`` with the ``ByteLevel``
pre-tokenizer, i.e. GPT-2's regex and byte symbols, and a ``BpeTrainer``): it is maintained, fast (Rust),
deterministic, and writes exactly the vocab.json / merges.txt format of GPT-2's published files, which this class,
keras-hub and transformers' ``GPT2Tokenizer`` read. keras-hub has no BPE trainer. ``tokenizers`` is also a
dependency of keras-hub 0.32 itself; it is imported only when needed, with an error naming the pip package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable

import tensorflow as tf

from attnlayers.validation import is_int

from ..core.inputs.files import replace_atomically
from ..core.inputs.token_lookup import TokenLookup
from ..core.runs import keras_fixes
from .checkpoint import MERGES_FILE, VOCABULARY_FILE

END_OF_TEXT = "<|endoftext|>"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Unicode's White_Space characters: ``\s`` of Python's `regex` and of Hugging Face's GPT-2 pre-tokenizer (RE2's
# ``\s`` is ASCII only).
_WHITESPACE = r"\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
_SPECIAL = re.escape(END_OF_TEXT)
# Stage 1: the special token, whitespace runs, and (between the matches) everything else.
_SEGMENT_PATTERN = rf"{_SPECIAL}|[{_WHITESPACE}]+"
_WHITESPACE_RUN = rf"[{_WHITESPACE}]+"
# Stage 2: GPT-2's regex without its whitespace alternatives (the special token first, so it stays whole).
_WORD_PATTERN = (
    rf"{_SPECIAL}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{{L}}+| ?\p{{N}}+| ?[^{_WHITESPACE}\p{{L}}\p{{N}}]+"
)


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

# ----------------------------------------------------------------------------------------------------------------
# Reading vocab.json and merges.txt


def read_vocabulary(vocabulary) -> dict:
    """A byte-level BPE vocabulary as ``{token: id}``.

    Args:
        vocabulary: the path of a vocab.json (a JSON object token -> id, GPT-2's encoder.json) or a dict.

    Returns:
        The dict (a copy).

    Raises:
        ValueError: naming the file, when it is missing or not JSON, or the vocabulary is not ``{str: int}``, its
            ids are not 0 .. V-1 each once, it lacks one of the 256 byte symbols (some text could not be encoded)
            or lacks `END_OF_TEXT`.
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        source = f"vocabulary file {os.fspath(vocabulary)!r}"
        if not os.path.isfile(vocabulary):
            raise ValueError(f"`vocabulary`: {source} does not exist; expected GPT-2's vocab.json (token -> id).")
        try:
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"`vocabulary`: {source} is not valid UTF-8 JSON: {error}.") from None
    elif isinstance(vocabulary, dict):
        source = "the `vocabulary` dict"
    else:
        raise ValueError(f"`vocabulary` must be the path of a vocab.json or a dict; received {type(vocabulary)}.")
    _check_vocabulary(vocabulary, source)
    return dict(vocabulary)


def _check_vocabulary(vocabulary, source):
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
            f"bytes could not be encoded. A byte-level BPE vocabulary holds all 256 (train_byte_level_bpe's does)."
        )
    if END_OF_TEXT not in vocabulary:
        raise ValueError(f"{source} lacks the end-of-text token {END_OF_TEXT!r}.")


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
            raise ValueError(f"`merges`: {source} does not exist; expected GPT-2's merges.txt (one merge a line).")
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
# The tokenizer


def _tensorflow_text_split(text, pattern):
    """The matches of ``pattern`` in ``text`` (B,) and the text between them, as (begin, end) byte offsets, (B, None)
    int64 ragged each: tensorflow_text's ``regex_split_with_offsets``."""
    import tensorflow_text as tf_text

    _, begin, end = tf_text.regex_split_with_offsets(text, pattern, pattern)
    return begin, end


def core_regex_split(text, pattern):
    """:func:`_tensorflow_text_split` with core TensorFlow ops only (a SavedModel holding it loads without
    tensorflow_text): every match is wrapped in NUL bytes (``regex_replace``: RE2's leftmost-first matches, as
    regex_split's) and the text split at them. ``text`` must hold no NUL (the pre-tokenizer replaces them first)."""
    pieces = tf.strings.split(tf.strings.regex_replace(text, pattern, "\x00\\0\x00"), sep="\x00")
    lengths = tf.cast(tf.strings.length(pieces.flat_values), tf.int64)
    ends = tf.cumsum(lengths)
    row_start = tf.gather(tf.concat([[0], ends], axis=0), pieces.row_splits[:-1])  # bytes before each row
    ends -= tf.gather(row_start, row_ids(pieces))
    begin, end = pieces.with_flat_values(ends - lengths), pieces.with_flat_values(ends)
    keep = pieces.with_flat_values(lengths > 0)
    return tf.ragged.boolean_mask(begin, keep), tf.ragged.boolean_mask(end, keep)


def pretokenize(text, split=_tensorflow_text_split):
    """GPT-2's pre-tokens (its regex's matches, see the module docstring) as TensorFlow ops.

    Args:
        text: a (B,) tf.string tensor of UTF-8 text.
        split: the regex splitter, ``split(text, pattern) -> (begin, end)`` byte offsets: tensorflow_text's (the
            default) or :func:`core_regex_split` (core ops only, for SavedModels served without tensorflow_text;
            the same pre-tokens).

    Returns:
        a tf.string `tf.RaggedTensor` (B, None): each text's pre-tokens, whose concatenation is the text.
    """
    text = tf.convert_to_tensor(text, tf.string)
    safe = tf.strings.regex_replace(text, r"\x00", "\x01")  # regex_split stops at NUL; \x01 is classed the same
    begin, end = split(safe, _SEGMENT_PATTERN)
    rows, begin, end = row_ids(begin), begin.flat_values, end.flat_values
    unit_rows, unit_begin, unit_end = _units(tf.gather(safe, rows), rows, begin, end)
    units = tf.strings.substr(tf.gather(safe, unit_rows), unit_begin, unit_end - unit_begin)
    begin, end = split(units, _WORD_PATTERN)
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


def special_segment_ids(text, begin, end, rows, special_table, tokenize):
    """Token ids of ``text`` (B,) cut into segments [begin, end) (ragged (B, None) byte offsets; ``rows``: the row
    of each segment): a segment that ``special_table`` maps to an id (>= 0) is that one special token, the others
    are ``tokenize``d (a (N,) string tensor -> ragged ids). Returns ragged (B, None) ids."""
    segments = tf.strings.substr(tf.gather(text, rows), begin.flat_values, end.flat_values - begin.flat_values)
    special = special_table.lookup(segments)
    is_special = special >= 0
    plain = tokenize(tf.where(is_special, tf.constant(""), segments)).with_row_splits_dtype(tf.int64)
    specials = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(special, is_special), tf.cast(is_special, tf.int64))
    per_segment = tf.concat([specials, plain], axis=1)  # each segment is one or the other
    return tf.RaggedTensor.from_row_splits(per_segment.flat_values, tf.gather(per_segment.row_splits,
                                                                              begin.row_splits))


def _units(source, rows, begin, end):
    """Stage 1 segments -> units that stage 2 splits: the look-ahead of GPT-2's ``\\s+(?!\\S)``.

    A whitespace run followed (in the same text) by a word gives up its last character: a space joins the word,
    another character becomes its own unit. Other segments are units as they are.

    Args:
        source: (N,) the text of each segment; rows, begin, end: (N,) its text's index and its byte offsets.

    Returns:
        ``(rows, begin, end)`` of the units, (U,) each, in text order.
    """
    segment = tf.strings.substr(source, begin, end - begin)
    count = tf.size(segment)
    is_whitespace = tf.strings.regex_full_match(segment, _WHITESPACE_RUN)
    is_word = ~is_whitespace & tf.not_equal(segment, END_OF_TEXT)
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


class GPT2Tokenizer(TokenLookup):
    """GPT-2's byte-level BPE tokenizer: UTF-8 text to token ids and back with TensorFlow ops (tf.data maps,
    SavedModels), exactly reversible.

    Args:
        vocabulary: the path of a vocab.json (GPT-2's encoder.json) or a dict token -> id, holding the 256 byte
            symbols and `END_OF_TEXT`.
        merges: the path of a merges.txt (GPT-2's vocab.bpe) or a list of "left right" rules, in rank order.

    Attributes:
        end_token_id: the id of ``<|endoftext|>``; ``start_token_id`` is the same id (GPT-2 uses it for both, as
            keras-hub's GPT2Tokenizer).
        vocabulary_size: the number of tokens.
        bpe: the ``keras_hub.tokenizers.BytePairTokenizer`` whose tables run the merges.

    Raises:
        ValueError: naming the file (and line) for a missing or malformed vocab.json or merges.txt.
    """

    def __init__(self, vocabulary, merges, *, name: str | None = None):
        super().__init__(name=name)
        import keras_hub

        vocabulary = read_vocabulary(vocabulary)
        merges = read_merges(merges, vocabulary)
        # Plain dict and list: tf.Module wraps its attributes' dicts, which keras-hub's `tokenizers` path refuses.
        self.bpe = keras_hub.tokenizers.BytePairTokenizer(vocabulary, merges, unsplittable_tokens=[], dtype="int32")
        keras_fixes.PRIVATE_USES["bpe_merge_into_cache"].require(self.bpe, "GPT2Tokenizer")  # now, not when tracing
        # keras-hub's tables, tracked here as well: under another Keras backend than TensorFlow its layer is not a
        # TensorFlow trackable, and a SavedModel must find every resource its functions capture.
        self._tables = [self.bpe.cache, self.bpe.byte2unicode, self.bpe.unicode2byte, self.bpe.token_to_id_map,
                        self.bpe.id_to_token_map, self.bpe.merge_ranks]
        self._token_ids, self._merges = vocabulary, merges
        self.end_token_id = self.start_token_id = vocabulary[END_OF_TEXT]
        # keras-hub's own way of keeping a special token whole: the cache maps it to itself.
        self.bpe.cache.insert(tf.constant([END_OF_TEXT]), tf.constant([END_OF_TEXT]))
        self._tokens = tf.constant(sorted(self._token_ids, key=self._token_ids.get))

    @classmethod
    def from_directory(cls, directory, **kwargs) -> GPT2Tokenizer:
        """The tokenizer of a Hugging Face GPT-2 directory: its vocab.json and merges.txt (the files
        `load_hf_checkpoint` records as ``info["vocabulary"]`` and ``info["merges"]``).

        Raises:
            ValueError: naming the missing file, or a tokenizer_config.json asking for ``add_prefix_space``
                (a space added before the text, which this tokenizer does not do).
        """
        paths = [os.path.join(directory, name) for name in (VOCABULARY_FILE, MERGES_FILE)]
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(
                    f"`directory` {os.fspath(directory)!r} has no {os.path.basename(path)}; a Hugging Face GPT-2 "
                    f"tokenizer directory holds {VOCABULARY_FILE} and {MERGES_FILE}."
                )
        config = os.path.join(directory, TOKENIZER_CONFIG_FILE)
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                if json.load(f).get("add_prefix_space"):
                    raise ValueError(f"{config!r} sets add_prefix_space, which GPT2Tokenizer does not support.")
        return cls(*paths, **kwargs)


    def get_vocabulary(self) -> list:
        """The tokens (byte symbols, e.g. "Ġthe") in id order."""
        return sorted(self._token_ids, key=self._token_ids.get)

    def tokenize(self, text):
        """UTF-8 strings to token ids (no special token added; ``<|endoftext|>`` in the text is ``end_token_id``).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.
        """
        return super().tokenize(text)

    __call__ = tokenize

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def _tokenize_batch(self, text):
        pieces = pretokenize(text)
        ids = self._merge(pieces.flat_values)  # (P, None): each pre-token's ids
        return tf.RaggedTensor.from_row_splits(ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits))

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

    def detokenize(self, ids):
        """Token ids to UTF-8 bytes: the exact text that `tokenize` read (``<|endoftext|>`` stays in the text).

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged; each in [0, vocabulary_size).

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T) (``.decode("utf-8")`` each).

        Raises:
            tf.errors.InvalidArgumentError: for an id outside [0, vocabulary_size).
        """
        return super().detokenize(ids)

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


# ----------------------------------------------------------------------------------------------------------------
# Training


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "train_byte_level_bpe needs Hugging Face's tokenizers: `pip install tokenizers`."
        ) from None
    return tokenizers


def train_byte_level_bpe(
    texts: Iterable[str],
    vocabulary_size: int,
    directory,
    *,
    min_frequency: int = 2,
) -> tuple:
    """Learns a GPT-2-style byte-level BPE offline and writes its vocab.json and merges.txt.

    Hugging Face ``tokenizers``' ``BpeTrainer`` on GPT-2's pre-tokens (the ``ByteLevel`` pre-tokenizer: GPT-2's
    regex, no prefix space), starting from all 256 byte symbols, with `END_OF_TEXT` as the special token (id 0).
    The same texts and arguments give the same files.

    Args:
        texts: training text (strings: lines or documents).
        vocabulary_size: the most tokens: 256 byte symbols + ``<|endoftext|>`` + the merges (little text gives
            fewer merges).
        directory: created if missing; its ``vocab.json`` and ``merges.txt`` are replaced, each written to a
            temporary name and renamed into place.
        min_frequency: a pair merges only if it occurs at least this often.

    Returns:
        ``(vocabulary_path, merges_path)``: `GPT2Tokenizer`'s arguments.

    Raises:
        ValueError: when `texts` has no non-empty string, `vocabulary_size` is below 257 or `min_frequency` below 1.
        ImportError: naming the pip package, when ``tokenizers`` is not installed.
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError("`texts` must be an iterable of strings, not one string.")
    texts = [text for text in texts if text]
    if not texts:
        raise ValueError("`texts` must hold at least one non-empty string; received none.")
    minimum = len(BYTE_SYMBOLS) + 1
    if not is_int(vocabulary_size) or vocabulary_size < minimum:
        raise ValueError(
            f"`vocabulary_size` must be an integer >= {minimum} (the 256 byte symbols and {END_OF_TEXT}); "
            f"received vocabulary_size={vocabulary_size!r}."
        )
    if not is_int(min_frequency) or min_frequency < 1:
        raise ValueError(f"`min_frequency` must be an integer >= 1; received min_frequency={min_frequency!r}.")
    model = _train(_import_tokenizers(), texts, int(vocabulary_size), int(min_frequency))
    return _save(model, directory)


def _train(tokenizers, texts, vocabulary_size, min_frequency):
    """The trained ``tokenizers.models.BPE``."""
    byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocabulary_size, min_frequency=min_frequency, special_tokens=[END_OF_TEXT],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.model


def _save(model, directory):
    """Writes the model's vocab.json and merges.txt into ``directory`` atomically; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    with tempfile.TemporaryDirectory() as scratch:
        written = dict(zip((VOCABULARY_FILE, MERGES_FILE), model.save(scratch), strict=True))
        for name in (VOCABULARY_FILE, MERGES_FILE):
            source, target = written[name], os.path.join(directory, name)
            if os.path.basename(source) != name:
                raise RuntimeError(f"tokenizers saved {source!r} where {name} was expected.")
            replace_atomically(target, lambda path, source=source: shutil.copyfile(source, path))
            paths.append(target)
    return tuple(paths)
