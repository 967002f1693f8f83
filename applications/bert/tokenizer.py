"""BERT's WordPiece tokenizer (Devlin et al. 2019, section 3; Wu et al. 2016), run as TensorFlow ops.

Why keras_hub's `WordPieceTokenizer` (and not `tensorflow_text.BertTokenizer`, which strips accents only when it
lower-cases, and lower-cases by NFKC case folding): it runs `tensorflow_text.FastWordpieceTokenizer` (linear-time
WordPiece, Song et al. 2020), whose vocabulary is a constant buffer rather than a lookup-table resource, so a
tokenizer survives `keras.backend.clear_session()` and exports in a SavedModel that serves with only `tensorflow` and
`tensorflow_text`; and its splitting rules (whitespace, punctuation, CJK characters) are BERT's. It only splits and
spells here: `normalize` does the rest, before it. The layer's eager calls run a Python path that returns lists;
`BertTokenizer` calls it inside a `tf.function`, so eagerly and in graphs alike it gives tensors from TensorFlow ops.

Normalisation is Hugging Face's `BertNormalizer` (its Rust `tokenizers`: transformers 5's `BertTokenizer`, what
sentence-transformers loads), as TensorFlow ops (`normalize`): control and format characters (category C, U+FFFD;
not tab / newline / return) are removed, whitespace (separators, tab, newline, return) becomes a space, lower-casing
maps one character at a time (Rust's `char::to_lowercase`: Unicode's full lower-casing with no context and no
locale, "İ" -> "i̇", "Σ" -> "σ" at the end of a word too), and accent stripping is NFD then dropping nonspacing marks
(Mn). There is no NFKC and no case folding (`tensorflow_text.case_fold_utf8`, which TensorFlow's BERT
preprocessing and keras_hub use): "Straße" keeps its "ß", "ﬁ", "²", "½", fullwidth letters and Roman numerals stay
as they are, as in the vocabularies of the checkpoints it loads. transformers' legacy Python `BertTokenizer`
(google-research/bert's `BasicTokenizer`) lower-cases with `str.lower()` instead, which spells a word-final "Σ"
"ς": "ΟΔΟΣ" is "ο ##δ ##ος" there, "ο ##δ ##ο ##σ" here and in the Rust one. Left to differ: characters newer than
one side's Unicode tables (capitals and format characters of Unicode 14 and later, unknown to TensorFlow's ICU;
combining marks of Unicode 9 and later, which tokenizers' accent stripping keeps); bert-base's vocabulary has none.

Special tokens, looked up by name (their ids depend on the vocabulary: 0, 100, 101, 102, 103 in bert-base's
vocab.txt; 0 to 4 in one written by `train_vocabulary`):

    [PAD]   padding after the last segment
    [UNK]   a word WordPiece cannot spell with the vocabulary
    [CLS]   first token of every input; its final hidden state feeds the next-sentence classifier
    [SEP]   ends each segment
    [MASK]  replaces the tokens the masked language model has to predict

Example:

    vocabulary = train_vocabulary(sentences, 8000, "vocab.txt")       # offline, special tokens first
    tokenizer = BertTokenizer("vocab.txt", lowercase=True)
    tokenizer = BertTokenizer.from_directory("path/to/hf_model")       # vocab.txt + do_lower_case
    ids = tokenizer.tokenize(["Hello, world!"])                         # tf.RaggedTensor int32 (1, None)
    tokenizer.detokenize(ids)                                           # [b"hello , world !"]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import tensorflow as tf

from attnlayers.validation import is_int

from ..core.inputs.token_lookup import TokenLookup
from ..core.tokenizers.case import lower_case

__all__ = ["BertTokenizer", "SPECIAL_TOKENS", "SUFFIX_INDICATOR", "lower_case", "normalize", "read_tokenizer_options",
           "read_vocabulary", "train_vocabulary"]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_TOKEN_ATTRIBUTES = dict(zip(SPECIAL_TOKENS, ("pad", "unk", "cls", "sep", "mask"), strict=True))
SUFFIX_INDICATOR = "##"  # a piece that starts with it continues the previous piece's word


def read_vocabulary(vocabulary) -> list:
    """A vocabulary as a list of tokens (id = position).

    Args:
        vocabulary: a path to a vocab.txt (one token a line, UTF-8) or an iterable of token strings.

    Raises:
        ValueError: when the vocabulary is empty, has an empty or repeated token, or misses a special token.
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        with open(vocabulary, encoding="utf-8") as f:
            tokens = [line.rstrip("\r\n") for line in f]
        source = f"the file {os.fspath(vocabulary)!r}"
    elif isinstance(vocabulary, Iterable):
        tokens = [str(token) for token in vocabulary]
        source = "the list"
    else:
        raise ValueError(f"`vocabulary` must be a path to a vocab.txt or a list of tokens; received {vocabulary!r}.")
    if not tokens:
        raise ValueError(f"`vocabulary` is empty ({source} has no tokens); expected one token per id.")
    if "" in tokens:
        raise ValueError(f"`vocabulary` has an empty token at id {tokens.index('')} ({source}).")
    seen, repeated = set(), []
    for token in tokens:
        if token in seen:
            repeated.append(token)
        seen.add(token)
    if repeated:
        raise ValueError(f"`vocabulary` has repeated tokens ({source}): {repeated[:5]}; each token needs one id.")
    missing = [token for token in SPECIAL_TOKENS if token not in seen]
    if missing:
        raise ValueError(
            f"`vocabulary` lacks the special token(s) {missing} ({source}); a BERT vocabulary needs all of "
            f"{list(SPECIAL_TOKENS)}."
        )
    return tokens


def read_tokenizer_options(directory) -> dict:
    """`BertTokenizer` options from a Hugging Face model directory.

    Reads `tokenizer_config.json`, then `config.json` for what the first does not say, then the normalizer of
    `tokenizer.json`: `do_lower_case` (or the normalizer's `lowercase`) -> `lowercase`, `strip_accents` ->
    `strip_accents` (null: follow `lowercase`, as Hugging Face does), `tokenize_chinese_chars` (or
    `handle_chinese_chars`) -> `split_on_cjk`. Missing files and keys give Hugging Face's `BertTokenizer` defaults:
    lower-case, strip accents, split CJK characters.

    Returns:
        A dict with the keys "lowercase", "strip_accents" (bool or None) and "split_on_cjk".
    """
    found = {}
    for name, keys in (
        ("tokenizer_config.json", ("do_lower_case", "strip_accents", "tokenize_chinese_chars")),
        ("config.json", ("do_lower_case", "strip_accents", "tokenize_chinese_chars")),
    ):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            for key in keys:
                if key in config and key not in found:
                    found[key] = config[key]
    path = os.path.join(directory, "tokenizer.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            normalizer = json.load(f).get("normalizer") or {}
        if normalizer.get("type") == "BertNormalizer":
            for key, name in (("lowercase", "do_lower_case"), ("strip_accents", "strip_accents"),
                              ("handle_chinese_chars", "tokenize_chinese_chars")):
                if key in normalizer and name not in found:
                    found[name] = normalizer[key]
    return {
        "lowercase": bool(found.get("do_lower_case", True)),
        "strip_accents": found.get("strip_accents"),
        "split_on_cjk": bool(found.get("tokenize_chinese_chars", True)),
    }


# BasicTokenizer._is_whitespace (tab, newline, return, Zs), and the line / paragraph separators str.split splits on
_WHITESPACE = r"[\t\n\r\p{Z}]"
# BasicTokenizer._clean_text: control, format and private-use characters and U+FFFD (removed after _WHITESPACE)
_REMOVED = r"[\p{C}\x{FFFD}]"


def normalize(text, *, lowercase: bool = True, strip_accents: bool | None = None):
    """BERT's `BasicTokenizer` clean-up, lower-casing and accent stripping, as TensorFlow ops.

    Whitespace characters become spaces; other control and format characters (category C: "\\x07", zero-width
    "\\u200b", a byte-order mark) and U+FFFD are removed; `lowercase` maps each character to its full lower case
    on its own, in every locale (Hugging Face's `tokenizers`: a final "Σ" is "σ", where `str.lower()` gives "ς"; not
    NFKC case folding); `strip_accents` decomposes (NFD) and drops nonspacing marks (Mn). Splitting on whitespace,
    punctuation and CJK characters is left to the WordPiece tokenizer.

    Args:
        text: a tf.string tensor (any shape).
        lowercase: lower-case (Hugging Face's `do_lower_case`).
        strip_accents: strip accents; None follows `lowercase`.

    Returns:
        a tf.string tensor of `text`'s shape.
    """
    import tensorflow_text as tf_text

    strip_accents = lowercase if strip_accents is None else strip_accents
    text = tf.strings.regex_replace(text, _WHITESPACE, " ")
    text = tf.strings.regex_replace(text, _REMOVED, "")
    if lowercase:
        text = lower_case(text)
    if strip_accents:
        text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
    return text


class BertTokenizer(TokenLookup):
    """BERT's WordPiece tokenizer: text to token ids with TensorFlow ops (tf.data maps, SavedModels).

    Text is split on whitespace and punctuation (each punctuation mark a token, CJK characters one token each),
    optionally lower-cased and stripped of accents, and each word is spelled with the longest matching vocabulary
    pieces, pieces after the first marked "##" (greedy longest-match-first). A word it cannot spell becomes one
    [UNK]. No special token is added: `pretraining_data.pack` adds [CLS] and [SEP].

    Args:
        vocabulary: a path to a vocab.txt or a list of tokens, holding the five `SPECIAL_TOKENS`.
        lowercase: lower-case the text (Hugging Face's `do_lower_case`; True for "uncased" models).
        strip_accents: remove accents (NFD, then drop combining marks); None follows `lowercase`, as Hugging Face's
            `strip_accents=None` does.
        split_on_cjk: make each CJK character a word (Hugging Face's `tokenize_chinese_chars`).

    Attributes:
        pad_token_id, unk_token_id, cls_token_id, sep_token_id, mask_token_id: the special tokens' ids.
        special_token_ids: those five ids, in that order.

    Raises:
        ValueError: for an empty vocabulary, a repeated token or a missing special token.
    """

    def __init__(self, vocabulary, *, lowercase: bool = True, strip_accents: bool | None = None,
                 split_on_cjk: bool = True, name: str | None = None):
        super().__init__(name=name)
        import keras_hub

        self._vocabulary = read_vocabulary(vocabulary)
        self.lowercase = bool(lowercase)
        self.strip_accents = self.lowercase if strip_accents is None else bool(strip_accents)
        self.split_on_cjk = bool(split_on_cjk)
        self._token_ids = {token: i for i, token in enumerate(self._vocabulary)}
        for token, attribute in _TOKEN_ATTRIBUTES.items():
            setattr(self, f"{attribute}_token_id", self._token_ids[token])
        # keras_hub only splits and spells: `normalize` lower-cases and strips accents (keras_hub's lower-casing is
        # NFKC case folding, which BERT's vocabularies do not use).
        self.wordpiece = keras_hub.tokenizers.WordPieceTokenizer(
            vocabulary=self._vocabulary,
            lowercase=False,
            strip_accents=False,
            split_on_cjk=self.split_on_cjk,
            suffix_indicator=SUFFIX_INDICATOR,
            oov_token="[UNK]",
            dtype="int32",
        )
        self._tokens = tf.constant(self._vocabulary)

    @classmethod
    def from_directory(cls, directory, **kwargs) -> BertTokenizer:
        """The tokenizer of a Hugging Face BERT directory: its vocab.txt, with `read_tokenizer_options`' options
        (keyword arguments override them).

        Args:
            directory: the Hugging Face tokenizer directory.
            **kwargs: constructor arguments, overriding those read from the directory.

        Returns:
            The tokenizer.

        Raises:
            ValueError: naming the missing file.
        """
        path = os.path.join(directory, "vocab.txt")
        if not os.path.exists(path):
            raise ValueError(f"`directory` must hold a vocab.txt; {path!r} does not exist.")
        return cls(path, **{**read_tokenizer_options(directory), **kwargs})

    @property
    def special_token_ids(self) -> tuple:
        return (self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id)

    def pack(self, segments_a, segments_b=None, *, sequence_length: int):
        """`pretraining_data.pack` with this tokenizer: ``[CLS] A [SEP] (B [SEP])``, segment ids 0 / 1, [PAD].

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


    def get_vocabulary(self) -> list:
        """The tokens in id order."""
        return list(self._vocabulary)

    def save_vocabulary(self, path) -> None:
        """Writes vocab.txt: one token a line, in id order (readable by this class and by Hugging Face).

        Args:
            path: the file to write.
        """
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(token + "\n" for token in self._vocabulary)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def _tokenize_batch(self, text):
        # Traced, so keras_hub takes its TensorFlow path (eager calls would run its Python path and return lists).
        return self.wordpiece.tokenize(normalize(text, lowercase=self.lowercase, strip_accents=self.strip_accents))

    def tokenize(self, text):
        """Strings to token ids (no special token added).

        Args:
            text: a string, or a 1-D batch of strings (Python, NumPy or tf.string tensor).

        Returns:
            int32 ids: a 1-D tensor for a string; a `tf.RaggedTensor` (B, None) for a batch.

        Raises:
            ValueError: when `text` is not a string or a list / tensor of strings.
        """
        if isinstance(text, tf.Tensor):
            if text.dtype != tf.string:
                raise ValueError(f"`text` must be a string or a list / tensor of strings; received a tensor of dtype "
                                 f"{text.dtype.name} and shape {text.shape}.")
        elif not isinstance(text, (str, bytes)):
            try:
                text = tf.convert_to_tensor(text, tf.string)
            except (TypeError, ValueError) as error:
                raise ValueError(f"`text` must be a string or a list / tensor of strings; received {text!r:.100}."
                                 ) from error
        return super().tokenize(text)

    def detokenize(self, ids):
        """Token ids to text: pieces joined into words ("##" dropped), words joined by spaces, [PAD] dropped.

        Other special tokens stay visible ("[CLS] the [MASK] sat . [SEP]"). Lower-casing, accents and the spacing
        around punctuation are not restored.

        Args:
            ids: int ids, (T,) or (B, T), dense or ragged.

        Returns:
            a tf.string scalar for (T,), a (B,) tf.string tensor for (B, T).
        """
        return super().detokenize(ids)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, row_splits_dtype=tf.int64)])
    def _detokenize_batch(self, ids):
        ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, self.pad_token_id))
        return self.wordpiece.detokenize(ids)


def train_vocabulary(
    texts: Iterable[str],
    vocabulary_size: int,
    path=None,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    split_on_cjk: bool = True,
) -> list:
    """Learns a WordPiece vocabulary offline (keras_hub's `compute_word_piece_vocabulary`).

    Args:
        texts: training text (strings: sentences, lines or documents).
        vocabulary_size: the most tokens, the five special tokens included; little text gives fewer.
        path: where to write vocab.txt (one token a line); None writes nothing.
        lowercase, strip_accents, split_on_cjk: the normalisation, as for `BertTokenizer` (use the same there).

    Returns:
        The tokens: `SPECIAL_TOKENS` first ([PAD] = 0, [UNK] = 1, [CLS] = 2, [SEP] = 3, [MASK] = 4), then the
        learned pieces.

    Raises:
        ValueError: when `texts` has no non-empty string or `vocabulary_size` leaves no room past the special
            tokens.
    """
    import keras_hub

    texts = [text for text in texts if text and text.strip()]
    if not texts:
        raise ValueError("`texts` must hold at least one non-empty string; received none.")
    if not is_int(vocabulary_size) or vocabulary_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"`vocabulary_size` must be an integer above the {len(SPECIAL_TOKENS)} special tokens; received "
            f"vocabulary_size={vocabulary_size!r}."
        )
    strip_accents = lowercase if strip_accents is None else strip_accents
    # a dataset (a list would be read as file names), normalised as `BertTokenizer` does; keras_hub only splits
    texts = tf.data.Dataset.from_tensor_slices(texts).map(
        lambda text: normalize(text, lowercase=lowercase, strip_accents=strip_accents))
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        texts,
        vocabulary_size,
        lowercase=False,
        strip_accents=False,
        split_on_cjk=split_on_cjk,
        suffix_indicator=SUFFIX_INDICATOR,
        reserved_tokens=list(SPECIAL_TOKENS),
    )
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(token + "\n" for token in vocabulary)
    return vocabulary
