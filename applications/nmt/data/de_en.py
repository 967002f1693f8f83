"""German-English pairs from the dictionary of the Debian package `trans-de-en` (`de :: en` lines): its example
sentences (`load_de_en`, the translation task) and its word and phrase entries (`load_de_en_lexicon`, optional
extra training data), both as `Pairs`. docs/guides/nmt-data.md is the data card: what the file holds, the parsing
rules, the counts."""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable

from attnlayers.validation import one_of, positive_int

from .pairs import Pairs
from .split import _content_key

__all__ = ["DE_EN_PATH", "load_de_en", "load_de_en_lexicon", "normalize_text", "parse_de_en_line"]

DE_EN_PATH = "/usr/share/trans/de-en"
_DIRECTIONS = ("de-en", "en-de")

_ANNOTATIONS = (
    re.compile(r"\{[^{}]*\}"),  # {f}, {vt}: gender, part of speech
    re.compile(r"\[[^\[\]]*\]"),  # [Br.], [ugs.], [med.]: region, register, domain
    re.compile(r"<[^<>]*>"),  # <Aalmolch>: spelling variants
)
_PARENTHESES = re.compile(r"\([^()]*\)")  # optional words and glosses (innermost first)
_QUOTES = str.maketrans({"’": "'", "‘": "'", "‚": "'", "“": '"', "”": '"', "„": '"'})
_SPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.!?;:])")
_SENTENCE_END = re.compile(r"[.!?][\"']?$")
_PLACEHOLDER = re.compile(r"(?<![\w.])(?:sb|sth|jd|jdm|jdn|jds|etw)\.|…|\.\.\.|/", re.IGNORECASE)


def _strip_annotations(text: str) -> str:
    for pattern in _ANNOTATIONS:
        text = pattern.sub(" ", text)
    previous = None
    while previous != text:  # nested parentheses
        previous, text = text, _PARENTHESES.sub(" ", text)
    return text


def normalize_text(text: str) -> str:
    """NFC, ASCII quotes (’ ‘ ‚ -> ', “ ” „ -> "), single spaces, no space before , . ! ? ; :

    Args:
        text: a string.
    """
    text = unicodedata.normalize("NFC", text).translate(_QUOTES)
    text = _SPACE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _is_sentence(text: str, min_words: int) -> bool:
    return (
        len(text.split(" ")) >= min_words
        and not text[0].islower()
        and _SENTENCE_END.search(text) is not None
        and _PLACEHOLDER.search(text) is None
    )


def _sentences(side: str, min_words: int) -> list:
    side = _strip_annotations(side)
    out = []
    for synonym in side.split(";"):
        synonym = normalize_text(synonym)
        if synonym and _is_sentence(synonym, min_words):
            out.append(synonym)
    return out


def _aligned_alternatives(line: str) -> list:
    """The (german, english) ` | ` alternatives of one line, raw; [] for comments, lines without ` :: ` and
    lines whose sides have different numbers of alternatives."""
    if line.startswith("#") or " :: " not in line:
        return []
    german, english = (side.split(" | ") for side in line.rstrip("\n").split(" :: ", 1))
    return list(zip(german, english)) if len(german) == len(english) else []


def parse_de_en_line(line: str, *, min_words: int = 4) -> list:
    """The cleaned (german, english) sentence pairs of one `trans-de-en` line.

    Annotations are removed, the text normalised (`normalize_text`), and every German sentence synonym is
    paired with every English one of the same ` | ` alternative (docs/guides/nmt-data.md has the rules). Comment
    lines, lines without ` :: ` and lines whose sides have different numbers of alternatives give `[]`.

    Args:
        line: one line of the dictionary file.
        min_words: the fewest words a sentence keeps.
    """
    pairs = []
    for de, en in _aligned_alternatives(line):
        # Cheap test first: a sentence alternative ends in . ! ? or a closing bracket / quote.
        if not (de.rstrip()[-1:] in ".!?\"')]}>”’“" and en.rstrip()[-1:] in ".!?\"')]}>”’“"):
            continue
        de_sentences = _sentences(de, min_words)
        if de_sentences:
            en_sentences = _sentences(en, min_words)
            pairs.extend((d, e) for d in de_sentences for e in en_sentences)
    return pairs


def _dictionary_lines(path):
    """Yields the lines of a `trans-de-en` file; raises FileNotFoundError / ValueError naming the file when it is
    missing, not UTF-8 or holds no `german :: english` line."""
    name = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{name} not found: install the Debian package trans-de-en (apt-get install trans-de-en)."
        )
    entries = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError as error:
                raise ValueError(f"{name}, line {number}: not UTF-8 text ({error.reason}).") from None
            entries += " :: " in line
            yield line
    if not entries:
        raise ValueError(f"{name} has no `german :: english` line: it is not a trans-de-en dictionary file.")


def load_de_en(path=DE_EN_PATH, *, direction: str = "de-en", min_words: int = 4) -> Pairs:
    """The German-English sentence pairs of `trans-de-en`, cleaned and deduplicated.

    Each line is parsed with `parse_de_en_line`; docs/guides/nmt-data.md has the rules and the counts. Takes about 2 s
    on 2 CPU cores; nothing is cached.

    Args:
        path: the dictionary file (`apt-get install trans-de-en` puts it at `/usr/share/trans/de-en`).
        direction: "de-en" (German source, English target) or "en-de".
        min_words: the fewest words a sentence may have, on each side.

    Returns:
        `Pairs` in file order: exact duplicates removed, and of several pairs with the same source the
        first kept (pairs that only share a target are kept).

    Raises:
        FileNotFoundError: when the file is missing, with the package that provides it.
        ValueError: for an unknown direction, or a file that is not UTF-8 or holds no `de :: en` line.
    """
    direction = one_of(direction, "direction", _DIRECTIONS)
    min_words = positive_int(min_words, "min_words")
    source, target, seen = [], [], set()
    for line in _dictionary_lines(path):
        for de, en in parse_de_en_line(line, min_words=min_words):
            s, t = (de, en) if direction == "de-en" else (en, de)
            if s in seen:
                continue
            seen.add(s)
            source.append(s)
            target.append(t)
    return Pairs(source, target)


def load_de_en_lexicon(
    path=DE_EN_PATH, *, direction: str = "de-en", held_out: Iterable[Pairs] = (), max_words: int = 6
) -> Pairs:
    """The word and phrase entries of `trans-de-en` (everything `load_de_en` does not keep), to add to the
    training sentences as a bilingual lexicon (optional data augmentation; `load_de_en` alone is the task).

    One pair per aligned alternative: the first synonym of each side, annotations removed and normalised as
    for sentences ("Haus {n}; Gebäude {n} :: house; building" gives ("Haus", "house")). Entries with
    placeholders (sb. sth. jdm. ...), `/` or ellipses, sentences, and phrases of more than `max_words` words
    are left out; duplicates are removed. Takes about 8 s on 2 CPU cores (13 s with `held_out`).

    Args:
        path: the dictionary file.
        direction: "de-en" or "en-de".
        held_out: `Pairs` never to learn from (pass the validation and test splits): every line of the file
            that holds one of their sentences, on either side, is skipped whole, so no word entry written
            next to a held-out sentence reaches training.
        max_words: the most words an entry may have, on each side.

    Returns:
        `Pairs` in file order.

    Raises:
        FileNotFoundError: when the file is missing, with the package that provides it.
        ValueError: for an unknown direction, or a file that is not UTF-8 or holds no `de :: en` line.
    """
    direction = one_of(direction, "direction", _DIRECTIONS)
    max_words = positive_int(max_words, "max_words")
    held = {_content_key(text) for pairs in held_out for pair in pairs for text in pair}
    source, target, seen = [], [], set()
    for line in _dictionary_lines(path):
        if held and any(_content_key(d) in held or _content_key(e) in held for d, e in parse_de_en_line(line)):
            continue
        for de, en in _aligned_alternatives(line):
            entry = [normalize_text(_strip_annotations(side).split(";")[0]) for side in (de, en)]
            if not all(entry) or any(
                _PLACEHOLDER.search(text) or len(text.split(" ")) > max_words or _is_sentence(text, 1) for text in entry
            ):
                continue
            pair = tuple(entry) if direction == "de-en" else tuple(entry[::-1])
            if pair not in seen:
                seen.add(pair)
                source.append(pair[0])
                target.append(pair[1])
    return Pairs(source, target)
