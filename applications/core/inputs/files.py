"""Reading the text files users hand to an application's readers, with errors that name the file and line, and
writing files that are never left half-written."""

from __future__ import annotations

import json
import os


__all__ = ["read_json", "read_lines", "replace_atomically"]


def read_lines(path, encoding: str, reader: str, expected: str) -> list:
    """The lines of a text file without their line endings ("\\n", "\\r\\n" or "\\r"; a final one optional,
    a leading byte-order mark dropped).

    Args:
        path: the file.
        encoding: its text encoding.
        reader: the public function reading it (named in the errors, e.g. "read_tsv").
        expected: what that function expects, for the "not found" error (e.g. "a file of source<TAB>target lines").

    Raises:
        FileNotFoundError: ``path`` is missing or a directory.
        ValueError: the file is not ``encoding`` text (the line of the first bad byte is named).
    """
    name = os.fspath(path)
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "not found"
        raise FileNotFoundError(f"{name} {what}: {reader} expects {expected}.")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{name}, line {line}: not {encoding} text ({error.reason}); pass the file's encoding, e.g. "
            f"{reader}(..., encoding='latin-1')."
        ) from None
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line ending
    return lines


def replace_atomically(path, write):
    """Calls ``write(temporary_path)`` and renames the result onto ``path`` (no half-written file at ``path``)."""
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def read_json(path, what):
    """The JSON document at ``path``; a ValueError naming the file and ``what`` it holds if it is not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path!r} ({what}) is not valid JSON: {error}.") from None
