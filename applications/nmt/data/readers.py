"""Readers of parallel text in two common layouts, each returning `Pairs`: one tab-separated file
(`read_tsv`, `read_tsv_with_header`) or two line-aligned files (`read_parallel`). A file that is missing, empty,
not decodable or not in the layout raises one line naming the file (and the line) before anything is returned."""

from __future__ import annotations

import os
import re

from ...core.inputs.files import read_lines
from .pairs import Pairs

__all__ = ["TsvFieldError", "looks_like_header", "read_parallel", "read_tsv", "read_tsv_with_header"]

_SHOWN_LINES = 5  # malformed line numbers listed in an error
_HEADERS = ("no", "yes", "auto")

# What a header row's fields are made of (`header="auto"`): column words, language names, ISO 639 codes.
_COLUMN_WORDS = {
    "source", "target", "src", "tgt", "trg", "input", "output", "text", "texts", "translation", "translations",
    "sentence", "sentences", "original", "reference", "phrase", "phrases", "lang", "language", "word", "words",
}
_LANGUAGE_NAMES = {
    "english", "french", "german", "spanish", "italian", "portuguese", "dutch", "russian", "chinese", "mandarin",
    "cantonese", "japanese", "korean", "arabic", "turkish", "polish", "czech", "slovak", "slovenian", "swedish",
    "danish", "norwegian", "finnish", "icelandic", "greek", "hebrew", "hindi", "urdu", "bengali", "persian",
    "farsi", "vietnamese", "thai", "indonesian", "malay", "tagalog", "ukrainian", "belarusian", "romanian",
    "hungarian", "bulgarian", "serbian", "croatian", "bosnian", "macedonian", "albanian", "lithuanian",
    "latvian", "estonian", "catalan", "basque", "galician", "irish", "welsh", "esperanto", "latin", "swahili",
    "afrikaans", "berber", "kabyle", "tatar", "armenian", "georgian", "kazakh", "uzbek", "mongolian", "tamil",
    "telugu", "marathi", "punjabi", "gujarati", "nepali", "sinhala", "khmer", "burmese", "lao", "yoruba", "zulu",
    "xhosa", "amharic", "somali", "hausa", "maori", "breton", "occitan", "frisian", "luxembourgish", "maltese",
    "deutsch", "francais", "français", "espanol", "español", "italiano", "portugues", "português", "nederlands",
    "русский", "中文", "日本語", "한국어",
}
_ISO_639_1 = set(
    "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee "
    "el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it "
    "iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt "
    "my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl "
    "sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo "
    "za zh zu".split()
)
_ISO_639_3 = set(  # the 639-3 (and 639-2/B) codes of the languages above; Tatoeba names its files with them
    "eng fra fre deu ger spa ita por nld dut rus zho chi cmn yue jpn kor ara tur pol ces cze slk slo slv swe dan "
    "nor nob nno fin isl ice ell gre heb hin urd ben fas per vie tha ind msa may tgl ukr bel ron rum hun bul srp "
    "hrv bos mkd mac sqi alb lit lav est cat eus baq glg gle cym wel epo lat swa afr ber kab tat hye arm kat geo "
    "kaz uzb mon tam tel mar pan guj nep sin khm mya bur lao yor zul xho amh som hau mri mao bre oci fry ltz mlt"
    .split()
)
_HEADER_WORDS = _COLUMN_WORDS | _LANGUAGE_NAMES | _ISO_639_1 | _ISO_639_3
_HEADER_FIELD = re.compile(r"[^\W\d]+(?:[ _\-/()]+[^\W\d]*)*")  # letters, with space _ - / ( ) between words


def looks_like_header(fields) -> bool:
    """Whether a row's source and target fields look like column names rather than a sentence pair.

    Both fields must be short (at most 3 words, 40 characters), of letters only with `` _-/()`` between words
    (no sentence punctuation, no digits), different from each other (case-folded), and made only of column
    words (source, target, src, tgt, input, output, text, translation, sentence, ...), language names (English,
    French, Deutsch, ...) or ISO 639 language codes (en, de, eng, fra, ...): "source<TAB>target",
    "English<TAB>French", "en<TAB>de", "src_en<TAB>tgt_de".

    Args:
        fields: the two strings (source, target).
    """
    fields = [field.strip() for field in fields]
    if len(fields) != 2 or fields[0].casefold() == fields[1].casefold():
        return False
    for field in fields:
        if not field or len(field) > 40 or not _HEADER_FIELD.fullmatch(field):
            return False
        words = [word for word in re.split(r"[ _\-/()]+", field.casefold()) if word]
        if not words or len(words) > 3 or not all(word in _HEADER_WORDS for word in words):
            return False
    return True


class TsvFieldError(ValueError):
    """A `read_tsv` file whose lines do not have the fields asked for: a `ValueError` (one line naming the file,
    the first bad line and how many there are) whose attributes let a caller say it its own way (a script names
    its flag).

    Attributes:
        path: the file.
        line_number: the 1-based number of the first bad line.
        line: its text.
        field_count: how many tab-separated fields it has.
        needed: the fields a line needs: 2 (exactly) with the default columns, else ``max(columns) + 1`` (at least).
        exact: whether ``needed`` is an exact count (the default columns) or a minimum.
        malformed: how many lines are bad; ``total``: how many non-blank lines were read (header excluded).
    """

    def __init__(self, message, *, path, line_number, line, field_count, needed, exact, malformed, total):
        super().__init__(message)
        self.path, self.line_number, self.line, self.field_count = path, line_number, line, field_count
        self.needed, self.exact, self.malformed, self.total = needed, exact, malformed, total


def _check_columns(columns):
    if columns is None:
        return None
    try:
        source, target = columns
        ok = all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in (source, target))
    except (TypeError, ValueError):
        ok = False
    if not ok or source == target:
        raise ValueError(
            f"read_tsv's `columns` must be two different 0-based field numbers (source, target), e.g. "
            f"columns=(0, 1); received columns={columns!r}."
        )
    return int(source), int(target)


def read_tsv(path, *, encoding: str = "utf-8", skip_blank_lines: bool = True, columns=None,
             header: str = "no") -> Pairs:
    """Reads tab-separated `source<TAB>target` lines.

    Args:
        path: the file.
        encoding: its text encoding.
        skip_blank_lines: ignore lines that are empty or only whitespace.
        columns: which two 0-based tab-separated fields are the source and the target, e.g. ``(0, 1)`` for
            the first two fields of a Tatoeba / Anki file (``english<TAB>french<TAB>attribution``) or
            ``(1, 0)`` to translate the other way; every line must then have at least ``max(columns) + 1``
            fields. None (the default): fields 0 and 1 of lines with exactly two fields.
        header: whether the first non-blank line is a header row to skip: "no" (the default: it is a pair),
            "yes" (always skip it, whatever its fields) or "auto" (skip it when its source and target fields
            look like column names: `looks_like_header`). `read_tsv_with_header` also says which line, if any,
            was skipped.

    Returns:
        `Pairs`, in file order, with surrounding whitespace stripped from each side.

    Raises:
        FileNotFoundError: when `path` is not a file.
        TsvFieldError: a ValueError naming the file, the first line without the fields asked for (its number
            and field count) and how many such lines there are; with the default columns, a line of 3 or more
            fields is told to pass ``columns=(0, 1)``.
        ValueError: naming the file when it is empty or is not `encoding` text, or for `columns` / `header`
            values that are not among those above.

    Example:
        >>> pairs = read_tsv("eng-fra.tsv", columns=(0, 1), header="auto")  # doctest: +SKIP
    """
    return read_tsv_with_header(path, encoding=encoding, skip_blank_lines=skip_blank_lines, columns=columns,
                                header=header)[0]


def read_tsv_with_header(path, *, encoding: str = "utf-8", skip_blank_lines: bool = True, columns=None,
                         header: str = "no") -> tuple:
    """`read_tsv` that also returns the header row it skipped.

    Returns:
        ``(pairs, skipped)``: the `Pairs` of `read_tsv`, and the skipped header row as a list of its
        tab-separated fields (stripped), or None when no line was skipped (``header="no"``, or "auto" on a
        first line that is a pair).
    """
    if header not in _HEADERS:
        raise ValueError(f"read_tsv's `header` must be one of {', '.join(_HEADERS)}; received header={header!r}.")
    selected = _check_columns(columns)
    source_column, target_column = selected or (0, 1)
    needed = 2 if selected is None else max(selected) + 1

    def usable(count):
        return count == 2 if selected is None else count >= needed

    name = os.fspath(path)
    expected = "one `source<TAB>target` pair per line"
    lines = read_lines(path, encoding, "read_tsv", expected)
    source, target, malformed, skipped = [], [], [], None
    first = True
    for number, line in enumerate(lines, start=1):
        if skip_blank_lines and not line.strip():
            continue
        fields = line.split("\t")
        if first:
            first = False
            if header == "yes" or (
                header == "auto" and len(fields) >= needed
                and looks_like_header([fields[source_column], fields[target_column]])
            ):
                skipped = [field.strip() for field in fields]
                continue
        if not usable(len(fields)):
            malformed.append((number, len(fields), line))
            continue
        source.append(fields[source_column].strip())
        target.append(fields[target_column].strip())
    if not source and not malformed:
        if skipped is not None:
            raise ValueError(f"{name} has a header row ({chr(9).join(skipped)[:60]!r}) and no pairs: read_tsv "
                             f"expects {expected}.")
        blank = f" (only {len(lines)} blank lines)" if lines else ""
        raise ValueError(f"{name} is empty{blank}: read_tsv expects {expected}.")
    if malformed:
        number, count, line = malformed[0]
        plural = "s" if count != 1 else ""
        info = dict(path=name, line_number=number, line=line, field_count=count, needed=needed,
                    exact=selected is None, malformed=len(malformed), total=len(source) + len(malformed))
        hint = ""
        if selected is None and count > 2:
            hint = " To read such lines, pass columns=(0, 1) to take the first two fields (or choose others)."
        if not source:
            raise TsvFieldError(
                f"{name}: none of its {len(malformed)} lines is a tab-separated pair (line {number} has {count} "
                f"field{plural}: {line[:60]!r}); read_tsv expects {expected}.{hint}", **info
            )
        numbers = ", ".join(str(n) for n, _, _ in malformed[:_SHOWN_LINES])
        more = ", ..." if len(malformed) > _SHOWN_LINES else ""
        wanted = ("2 tab-separated fields (source, target)" if selected is None else
                  f"at least {needed} tab-separated fields (columns={selected})")
        raise TsvFieldError(
            f"{name}, line {number}: expected {wanted}, received {count}: {line[:80]!r} ({len(malformed)} of "
            f"{len(source) + len(malformed)} lines malformed: line {numbers}{more}).{hint}", **info
        )
    return Pairs(source, target), skipped


def read_parallel(source_path, target_path, *, encoding: str = "utf-8") -> Pairs:
    """Reads two aligned files: line i of `target_path` translates line i of `source_path`.

    Blank lines are kept (they stay aligned); a final newline is optional; each line is stripped.

    Args:
        source_path: the source sentences, one a line.
        target_path: their translations, one a line.
        encoding: the files' text encoding.

    Raises:
        FileNotFoundError: when either path is not a file.
        ValueError: naming the file when one is empty or not `encoding` text, and naming both files and
            their line counts when the counts differ.
    """
    sides = []
    for path, other in ((source_path, target_path), (target_path, source_path)):
        expected = f"one sentence per line, line i translating line i of {os.fspath(other)}"
        lines = read_lines(path, encoding, "read_parallel", expected)
        if not lines:
            raise ValueError(f"{os.fspath(path)} is empty: read_parallel expects {expected}.")
        sides.append([line.strip() for line in lines])
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"read_parallel needs files with the same number of lines; received {len(sides[0])} lines in "
            f"{os.fspath(source_path)} and {len(sides[1])} lines in {os.fspath(target_path)}."
        )
    return Pairs(sides[0], sides[1])
