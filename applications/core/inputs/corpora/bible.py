"""The Bible: King James Version and World English Bible (Debian sword-text-kjv, sword-text-web), read by diatheke;
chapters as documents, document splits, and KJV / WEB verse pairs for paraphrase detection."""

from __future__ import annotations

import glob
import hashlib
import html
import json
import os
import random
import re
import shutil
import subprocess
from typing import NamedTuple

from ._shared import APT_COMMAND, _seed, _write_json_atomically, cache_dir


__all__ = ["BOOKS", "PARAPHRASE_SPLITS", "TRANSLATIONS", "Verse", "bible_documents", "bible_verses", "documents_of",
           "osis_to_text", "paraphrase_pairs", "parse_diatheke"]


class Verse(NamedTuple):
    """One Bible verse: ``book`` (an entry of :data:`BOOKS`), ``chapter`` and ``verse`` numbers, ``text``."""

    book: str
    chapter: int
    verse: int
    text: str


# The 66 books of the Protestant canon, in order (the names used in `Verse.book`).
BOOKS = (
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel", "2 Samuel",
    "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job", "Psalms", "Proverbs",
    "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel",
    "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah", "Malachi",
    "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians",
    "Philippians", "Colossians", "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon",
    "Hebrews", "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
)
_BOOK_INDEX = {book: i for i, book in enumerate(BOOKS)}


def _diatheke_name(book):
    """The name diatheke prints (English locale): roman numerals, "Revelation of John"."""
    number, _, rest = book.partition(" ")
    if number in ("1", "2", "3"):
        return {"1": "I", "2": "II", "3": "III"}[number] + " " + rest
    return "Revelation of John" if book == "Revelation" else book


_FROM_DIATHEKE = {_diatheke_name(book): book for book in BOOKS}
_NAMES = sorted(_FROM_DIATHEKE, key=len, reverse=True)  # "III John" before "John"
_CHAPTER_VERSE = re.compile(r"(\d+):(\d+): ")
_OTHER_BOOK = re.compile(r"(?:^|(?<=[\s>]))(?:(?:I|II|III|IV) )?[A-Z][A-Za-z ]*[a-z]$")  # Tobit, I Maccabees


def _verse_header(line):
    """(book or None for a book outside BOOKS, chapter, verse, end of the header) of a line's first
    "Book C:V: " header, or None. String tests, not one regex over the 66 names: lines can be long."""
    for match in _CHAPTER_VERSE.finditer(line):
        head = line[: match.start()]
        if not head.endswith(" "):
            continue
        head = head[:-1]
        for name in _NAMES:
            if head.endswith(name) and (len(head) == len(name) or head[-len(name) - 1] in " \t>"):
                return _FROM_DIATHEKE[name], int(match[1]), int(match[2]), match.end()
        if _OTHER_BOOK.search(head[-60:]):
            return None, int(match[1]), int(match[2]), match.end()
    return None


# SWORD module ids tried for each translation (Debian's), before the .conf files' Abbreviation= lines.
TRANSLATIONS = {"KJV": ("engKJV2006eb", "KJV"), "WEB": ("engWEB2015eb", "WEB")}
_PACKAGES = {"KJV": "sword-text-kjv", "WEB": "sword-text-web"}
_BIBLE_FORMAT = 1  # the cache files' format: bump when the parsing changes

# OSIS markup -> text. Footnotes, headings and speaker labels are not verse text; line, paragraph and list
# elements separate words; adjacent <w> elements are separate words (the WEB writes "<w>God</w><w>created</w>").
_DROPPED_ELEMENTS = re.compile(r"<(note|title|speaker)\b[^>]*>.*?</\1\s*>", re.DOTALL)
_ADJACENT_WORDS = re.compile(r"</w>(?=<w\b)")
_SEPARATING_TAGS = re.compile(r"</?(?:l|lg|lb|p|div|milestone|item|list|chapter|verse|br)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def osis_to_text(markup: str) -> str:
    """The plain text of one verse of SWORD's OSIS markup (``diatheke -f internal``): notes, headings and speaker
    labels dropped, other tags removed (line and paragraph tags become spaces), entities unescaped, the KJV's
    paragraph signs (¶) removed, whitespace collapsed. Anything after the verse's end of chapter (the WEB's
    glossary after Revelation 22:21) is dropped."""
    markup = markup.split("<chapter eID", 1)[0]
    markup = _DROPPED_ELEMENTS.sub(" ", markup)
    markup = _ADJACENT_WORDS.sub("</w> ", markup)
    markup = _SEPARATING_TAGS.sub(" ", markup)
    text = html.unescape(_TAG.sub("", markup)).replace("\u00b6", " ")  # the KJV's paragraph signs
    return _SPACE.sub(" ", text).strip()


def parse_diatheke(output: str) -> list:
    """Verses from ``diatheke -f internal`` output (one "Book C:V: markup" line per verse, in English; a verse's
    pre-verse headings may precede its header on the line, and a line without a header continues the verse
    before it). Verses of books outside :data:`BOOKS` and verses without text are left out.

    Returns:
        A list of :class:`Verse`, in canonical order.
    """
    verses, current = [], None  # current: [book, chapter, verse, markup parts] or None (a skipped book)
    for line in output.replace("\r\n", "\n").split("\n"):
        header = _verse_header(line)
        if header:
            if current:
                verses.append(current)
            book, chapter, verse, end = header
            current = [book, chapter, verse, [line[end:]]] if book else None
        elif current and line.strip() and not re.fullmatch(r"\s*\([^()<>]*\)\s*", line):  # "(engKJV2006eb)"
            current[3].append(line)
    if current:
        verses.append(current)
    out = []
    for book, chapter, verse, parts in verses:
        text = osis_to_text("\n".join(parts))
        if text:
            out.append(Verse(book, chapter, verse, text))
    out.sort(key=lambda v: (_BOOK_INDEX[v.book], v.chapter, v.verse))
    return out


def _sword_conf_dirs():
    dirs = []
    if os.environ.get("SWORD_PATH"):
        dirs.append(os.path.join(os.environ["SWORD_PATH"], "mods.d"))
    dirs += [os.path.expanduser("~/.sword/mods.d"), "/usr/share/sword/mods.d", "/usr/local/share/sword/mods.d"]
    return dirs


def _find_module(translation):
    """(module id, version) of the installed SWORD module for ``translation``, or None."""
    preferred = TRANSLATIONS[translation]
    found = {}
    for directory in _sword_conf_dirs():
        for conf in sorted(glob.glob(os.path.join(directory, "*.conf"))):
            try:
                with open(conf, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            name = re.search(r"^\[([^\]]+)\]", text, re.MULTILINE)
            if not name:
                continue
            abbreviation = re.search(r"^Abbreviation=(.*)$", text, re.MULTILINE)
            version = re.search(r"^Version=(.*)$", text, re.MULTILINE)
            found.setdefault(name[1], (abbreviation[1].strip() if abbreviation else "",
                                       version[1].strip() if version else ""))
    for module in preferred:
        if module in found:
            return module, found[module][1]
    for module, (abbreviation, version) in found.items():
        if abbreviation.upper() == translation:
            return module, version
    return None


def _check_translation(translation):
    key = str(translation).upper() if isinstance(translation, str) else translation
    if key not in TRANSLATIONS:
        raise ValueError(f"`translation` must be one of {sorted(TRANSLATIONS)}; received translation={translation!r}.")
    return key


def _diatheke_command(translation):
    if shutil.which("diatheke") is None:
        raise FileNotFoundError(f"diatheke not found: install the Bible texts and their reader with `{APT_COMMAND}`.")
    module = _find_module(translation)
    if module is None:
        raise FileNotFoundError(
            f"No SWORD module for the {translation} is installed: install it with `apt-get install -y "
            f"{_PACKAGES[translation]}` (all the Bible corpora: `{APT_COMMAND}`)."
        )
    name, version = module
    return ["diatheke", "-b", name, "-l", "en", "-f", "internal", "-k", "Gen 1:1-Rev 22:21"], f"{name}-{version}"


def bible_verses(translation: str = "KJV", *, command=None, cache=True) -> list:
    """The verses of a Bible translation, read with diatheke from the Debian SWORD modules.

    The text is the verse's words with its punctuation: footnotes, section headings (and the canonical psalm
    titles, which SWORD stores as headings), and Strong's numbers are left out. The WEB module (NRSVA
    versification) also holds the deuterocanonical books; only the 66 books of :data:`BOOKS` are returned, as for
    the KJV, so the two translations cover the same books. Their verse numbers agree (the same verse has the same
    number in both); the WEB leaves out 7 of the KJV's verses (Luke 17:36, Acts 8:37, 15:34, 24:7; Romans
    16:25-27, whose doxology it gives at Romans 14:23): 31,102 KJV verses, 31,095 WEB verses.

    Args:
        translation: "KJV" (King James Version, 1769 text; sword-text-kjv) or "WEB" (World English Bible;
            sword-text-web). Both public domain.
        command: the command (a list of arguments) whose standard output is diatheke's ``-f internal`` output for
            the whole Bible; default ``diatheke -b <module> -l en -f internal -k "Gen 1:1-Rev 22:21"``.
        cache: reuse and write the parsed verses under :func:`cache_dir` (a JSON file per translation and module
            version, or per command); False always runs the command.

    Returns:
        A list of :class:`Verse` (book, chapter, verse, text), in canonical order (KJV: 31,102 verses).

    Raises:
        FileNotFoundError: diatheke or the translation's module is missing (the message names the apt command).
        ValueError: an unknown translation, or a command that fails or gives no verse.
    """
    translation = _check_translation(translation)
    if command is None:
        command, key = _diatheke_command(translation)
    else:
        command = [os.fspath(part) for part in command]
        key = "command-" + hashlib.sha1(json.dumps(command).encode()).hexdigest()[:12]
    path = os.path.join(cache_dir(), "bible", f"{translation}-{key}.json")
    if cache and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if data.get("format") == _BIBLE_FORMAT:
                return [Verse(book, chapter, verse, text) for book, chapter, verse, text in data["verses"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache file is rebuilt
    try:
        run = subprocess.run(command, capture_output=True, check=False)
    except OSError as error:
        raise ValueError(f"`command` {command!r} could not run: {error}.") from None
    if run.returncode != 0:
        raise ValueError(f"`command` {command!r} failed (exit status {run.returncode}): "
                         f"{run.stderr.decode('utf-8', 'replace')[-500:]}")
    verses = parse_diatheke(run.stdout.decode("utf-8", "replace"))
    if not verses:
        raise ValueError(f"`command` {command!r} printed no verse of {translation}; expected diatheke's "
                         "'-f internal' output, one 'Book C:V: text' line per verse.")
    if cache:
        _write_json_atomically(path, {"format": _BIBLE_FORMAT, "translation": translation, "command": command,
                                      "verses": [list(v) for v in verses]})
    return verses


def bible_documents(translation: str = "KJV", **kwargs) -> list:
    """The Bible as documents for next-sentence-prediction pre-training: one document per chapter (1,189), its
    verses (in order) the sentences. ``kwargs`` go to :func:`bible_verses`."""
    return documents_of(bible_verses(translation, **kwargs))


def documents_of(verses) -> list:
    """Groups verses (in order) into one list of verse texts per (book, chapter)."""
    documents, previous = [], None
    for verse in verses:
        if (verse.book, verse.chapter) != previous:
            documents.append([])
            previous = (verse.book, verse.chapter)
        documents[-1].append(verse.text)
    return documents


# Books (indices into BOOKS) of the paraphrase splits: every 10th book from Genesis to test, each next book to
# validation. Test: Genesis, 1 Kings, Proverbs, Hosea, Haggai, Romans, 1 Timothy; validation: Exodus, 2 Kings,
# Ecclesiastes, Joel, Zechariah, 1 Corinthians, 2 Timothy; the other 52 books train.
PARAPHRASE_SPLITS = {
    "train": tuple(b for i, b in enumerate(BOOKS) if i % 10 not in (0, 1)),
    "validation": tuple(b for i, b in enumerate(BOOKS) if i % 10 == 1),
    "test": tuple(b for i, b in enumerate(BOOKS) if i % 10 == 0),
}


def paraphrase_pairs(seed: int = 0, *, kjv=None, web=None) -> dict:
    """Paraphrase pairs from two translations of the same verses (a sentence-pair task for
    :class:`~attnlayers.applications.bert.heads.BertClassifier`, like MRPC).

    For each verse in both translations: (KJV text, WEB text, 1), and (KJV text, WEB text of another verse of
    the same book, 0) -- a negative from the same book shares its names and subject, so the task is not solved by
    topic alone. Exactly half the pairs of every split are positive. The splits are by book
    (:data:`PARAPHRASE_SPLITS`), so no verse, in either translation, is in two splits.

    Args:
        seed: chooses the negatives and the order of the pairs.
        kjv, web: the verses (:func:`bible_verses`' lists); default: read them.

    Returns:
        {"train": [...], "validation": [...], "test": [...]}, each a shuffled list of (kjv_text, web_text, label).
    """
    seed = _seed(seed)
    kjv = bible_verses("KJV") if kjv is None else kjv
    web = bible_verses("WEB") if web is None else web
    web_text = {(v.book, v.chapter, v.verse): v.text for v in web}
    by_book = {}
    for verse in kjv:
        key = (verse.book, verse.chapter, verse.verse)
        if key in web_text:
            by_book.setdefault(verse.book, []).append((verse.text, web_text[key]))
    rng = random.Random(seed)
    splits = {}
    for split, books in PARAPHRASE_SPLITS.items():
        pairs = []
        for book in books:
            verses = by_book.get(book, [])
            for i, (kjv_text, web_same) in enumerate(verses):
                pairs.append((kjv_text, web_same, 1))
                other = _other_verse(verses, i, rng)
                if other is not None:
                    pairs.append((kjv_text, other, 0))
                else:
                    pairs.pop()  # a book with one distinct verse gives no negative: drop its positive too
        rng.shuffle(pairs)
        splits[split] = pairs
    return splits


def _other_verse(verses, i, rng):
    """The WEB text of a random verse of the same book other than verse i (with another text), or None."""
    if len(verses) < 2:
        return None
    own = verses[i][1]
    for _ in range(20):
        j = rng.randrange(len(verses) - 1)
        j += j >= i
        if verses[j][1] != own:
            return verses[j][1]
    others = [text for j, (_, text) in enumerate(verses) if j != i and text != own]
    return rng.choice(others) if others else None
