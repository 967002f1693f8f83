"""Readers of parallel text in two common layouts, each returning `Pairs`: one `source<TAB>target` file
(`read_tsv`) or two line-aligned files (`read_parallel`). A file that is missing, empty, not decodable or not
in the layout raises one line naming the file (and the line) before anything is returned."""

from __future__ import annotations

import os

from ...core.files import read_lines
from .pairs import Pairs

_SHOWN_LINES = 5  # malformed line numbers listed in an error


def read_tsv(path, *, encoding: str = "utf-8", skip_blank_lines: bool = True) -> Pairs:
    """Reads `source<TAB>target` lines.

    Args:
        path: the file.
        encoding: its text encoding.
        skip_blank_lines: ignore lines that are empty or only whitespace.

    Returns:
        `Pairs`, in file order, with surrounding whitespace stripped from each side.

    Raises:
        FileNotFoundError: when `path` is not a file.
        ValueError: naming the file when it is empty, is not `encoding` text, or has lines without exactly
            one tab (the first such line, its number, and how many there are).
    """
    name = os.fspath(path)
    expected = "one `source<TAB>target` pair per line"
    lines = read_lines(path, encoding, "read_tsv", expected)
    source, target, malformed = [], [], []
    for number, line in enumerate(lines, start=1):
        if skip_blank_lines and not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            malformed.append((number, len(fields), line))
            continue
        source.append(fields[0].strip())
        target.append(fields[1].strip())
    if not source and not malformed:
        blank = f" (only {len(lines)} blank lines)" if lines else ""
        raise ValueError(f"{name} is empty{blank}: read_tsv expects {expected}.")
    if malformed:
        number, count, line = malformed[0]
        if not source:
            raise ValueError(
                f"{name}: none of its {len(malformed)} lines is a tab-separated pair (line {number} has {count} "
                f"field{'s' if count != 1 else ''}: {line[:60]!r}); read_tsv expects {expected}."
            )
        numbers = ", ".join(str(n) for n, _, _ in malformed[:_SHOWN_LINES])
        more = ", ..." if len(malformed) > _SHOWN_LINES else ""
        raise ValueError(
            f"{name}, line {number}: expected 2 tab-separated fields (source, target), received {count}: "
            f"{line[:80]!r} ({len(malformed)} of {len(source) + len(malformed)} lines malformed: "
            f"line {numbers}{more})."
        )
    return Pairs(source, target)


def read_parallel(source_path, target_path, *, encoding: str = "utf-8") -> Pairs:
    """Reads two aligned files: line i of `target_path` translates line i of `source_path`.

    Blank lines are kept (they stay aligned); a final newline is optional; each line is stripped.

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
