"""A word-level caption vocabulary as in Show, Attend and Tell (and Karpathy's preprocessing): lower-cased words
with punctuation deleted, the words seen at least `min_count` times in the training captions, and four special
tokens with fixed ids (pad 0, start 1, end 2, unk 3). Plain Python; saved as one word per line."""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable

from attnlayers.validation import is_int, positive_int

from .caption_set import CaptionSet, CaptionSplits

__all__ = ["CaptionVocabulary", "SPECIAL_TOKENS", "normalize_caption"]

SPECIAL_TOKENS = ("<pad>", "<start>", "<end>", "<unk>")
_PUNCTUATION = re.compile(r"[^\w\s]|_")


def normalize_caption(text: str) -> list:
    """The words of a caption: lower-cased, punctuation deleted (so "T-shirt," becomes "tshirt", as Karpathy's
    `prepro` does), split on whitespace."""
    return _PUNCTUATION.sub("", text.lower()).split()


def _caption_texts(captions) -> Iterable:
    if isinstance(captions, CaptionSplits):
        captions = captions.train
    if isinstance(captions, CaptionSet):
        return (c for references in captions.captions for c in references)
    if isinstance(captions, str):
        raise ValueError("`captions` must be a CaptionSet or an iterable of captions; received a single string.")
    return (c for item in captions for c in ([item] if isinstance(item, str) else item))


class CaptionVocabulary:
    """Word <-> id mapping for captions, with the special ids as attributes.

    Ids 0 to 3 are `<pad>`, `<start>`, `<end>` and `<unk>` (`pad_token_id`, `start_token_id`, `end_token_id`,
    `unk_token_id`); the words follow. Build one from the training captions only (`CaptionVocabulary.build`).

    Args:
        words: the ordinary words, in id order (ids 4, 5, ...): distinct, lower-case, no whitespace, none a
            special token.

    Example:
        >>> vocabulary = CaptionVocabulary.build(splits.train)          # or CaptionVocabulary.build(splits)
        >>> ids = vocabulary.encode("A big red circle.")                # 4 word ids, no specials
        >>> vocabulary.decode([vocabulary.start_token_id, *ids, vocabulary.end_token_id, 0])
        'a big red circle'
    """

    pad_token_id = 0
    start_token_id = 1
    end_token_id = 2
    unk_token_id = 3

    def __init__(self, words: Iterable[str]):
        words = list(words)
        index = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
        for word in words:
            if not isinstance(word, str) or not word or word != word.strip() or len(word.split()) != 1:
                raise ValueError(f"`words` must hold non-empty strings without whitespace; received {word!r}.")
            if word in index:
                what = "a special token" if index[word] < len(SPECIAL_TOKENS) else "a duplicate"
                raise ValueError(f"`words` must hold distinct ordinary words; received {word!r} ({what}).")
            index[word] = len(index)
        self._words = list(SPECIAL_TOKENS) + words
        self._index = index

    @classmethod
    def build(cls, captions, *, min_count: int = 1, max_words: int | None = None) -> CaptionVocabulary:
        """The vocabulary of `captions`: every word seen at least `min_count` times, most frequent first (ties in
        alphabetical order), at most `max_words` of them.

        Args:
            captions: a `CaptionSet` (every reference counts), a `CaptionSplits` (its `train` only), or an
                iterable of captions (str) or of lists of captions.
            min_count: 1 keeps every word (the scenes); Xu et al. and Karpathy keep words seen at least 5 times
                in Flickr8k / COCO training captions.
            max_words: cap on the ordinary words (None: no cap).
        """
        min_count = positive_int(min_count, "min_count")
        max_words = positive_int(max_words, "max_words", allow_none=True)
        counts = collections.Counter(w for text in _caption_texts(captions) for w in normalize_caption(text))
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        if not words:
            raise ValueError(
                f"CaptionVocabulary.build found no word seen at least min_count={min_count} times in "
                f"{sum(counts.values())} words of captions."
            )
        return cls(words[:max_words] if max_words else words)

    @property
    def words(self) -> list:
        """Index -> word, the four special tokens first."""
        return list(self._words)

    @property
    def vocabulary_size(self) -> int:
        """Number of ids, the special tokens included."""
        return len(self._words)

    def __len__(self):
        return len(self._words)

    def __contains__(self, word):
        return word in self._index

    def __eq__(self, other):
        return isinstance(other, CaptionVocabulary) and self._words == other._words

    def __repr__(self):
        return f"CaptionVocabulary(vocabulary_size={self.vocabulary_size})"

    def token_to_id(self, word: str) -> int:
        """The id of `word` (`unk_token_id` when unknown)."""
        return self._index.get(word, self.unk_token_id)

    def id_to_token(self, token_id: int) -> str:
        """The word (or special token) of `token_id`."""
        if not is_int(token_id) or not 0 <= token_id < len(self._words):
            raise ValueError(f"`token_id` must be an integer in [0, {len(self._words)}); received {token_id!r}.")
        return self._words[int(token_id)]

    def encode(self, text: str) -> list:
        """The ids of the caption's words (`normalize_caption`), unknown words as `unk_token_id`; no specials."""
        return [self._index.get(w, self.unk_token_id) for w in normalize_caption(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Words separated by spaces: stops at the first `end_token_id`, skips pad and start, shows unknown words
        as "<unk>". Accepts a list, a 1-D NumPy array or a tensor's `.numpy()`."""
        words = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == self.end_token_id:
                break
            if token_id in (self.pad_token_id, self.start_token_id):
                continue
            words.append(self.id_to_token(token_id))
        return " ".join(words)

    def save(self, path) -> None:
        """Writes the words, one per line in id order (the special tokens first), UTF-8."""
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(self._words) + "\n")

    @classmethod
    def load(cls, path) -> CaptionVocabulary:
        """Reads a file written by `save`. Raises FileNotFoundError / ValueError naming the file."""
        name = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name} not found: CaptionVocabulary.load expects a file written by save().")
        with open(path, encoding="utf-8") as f:
            words = f.read().splitlines()
        if tuple(words[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"{name}: a caption vocabulary starts with the lines {list(SPECIAL_TOKENS)}; received "
                f"{words[: len(SPECIAL_TOKENS)]}."
            )
        try:
            return cls(words[len(SPECIAL_TOKENS) :])
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
