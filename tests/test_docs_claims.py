"""What README.md, the documentation's pages (docs/**/*.md) and benchmarks/README.md claim can be traced to the
repository.

- Every path to a repository file they name (``benchmarks/x.py``, ``examples/x.py``, ``tests/...``, ``docs/...``,
  ``applications/...``, ``attnlayers/...``) exists, and in benchmarks/README.md every script named bare
  (```bench_long.py```) exists in benchmarks/ or examples/, and so in the results pages (docs/results/*.md).
- Every markdown link to a local file resolves, and so does its ``#anchor`` (GitHub's heading slugs).
- Every paragraph, list or table (with its caption, the paragraph before it) of README.md and docs/**/*.md that states
  a measured number (MEASURED below: a time, a size, a percentage, a ratio, a speed, a count out of a count, a
  difference such as 2e-6, or a quality figure: BLEU, accuracy, perplexity, ...) names what reproduces it (REFERENCE:
  a benchmarks/ script, a benchmarks/README.md section or a results page's (docs/results/) by its anchor, whose
  commands reproduce it, a test, or in a data card its own "Reproducing the counts" snippet). A bare
  "benchmarks/README.md" or a docs page does not count.
  Fenced code blocks are commands, not claims; a paragraph right after a fenced block that runs an ``examples/``
  script describes that script's own output, and that block is its reference. Numbers that are not measurements
  (configuration values, arithmetic) are allowed one by one in NOT_MEASURED.

Whether the script named is the right one, and whether it still reproduces the number, is for review: this test
only makes every measured number say where it comes from.

The functions take the text, so they can be run on any version of a file (``git show HEAD:README.md``).
"""

import pathlib
import re
import unicodedata

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The results pages (docs/results/), like benchmarks/README.md, are references themselves: each section gives the
# command of its table. Their paths, bare script names and links are checked.
RESULTS_FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "results").rglob("*.md"))  # history/ too
CLAIM_FILES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
                                    if not str(p.relative_to(ROOT)).startswith("docs/results/"))]
LINK_FILES = [*CLAIM_FILES, *RESULTS_FILES, "benchmarks/README.md"]

# A path into the repository: one of its top-level folders, then path characters (a trailing "." or "," is prose).
REPO_PATH = re.compile(r"(?<![\w./-])(--[\w-]+[ =])?(?:\.\./)?((?:benchmarks|examples|tests|docs|applications|attnlayers)/[\w./-]*)")
BARE_SCRIPT = re.compile(r"`(\w+\.py)\b")
LINK_TARGET = re.compile(r"\]\([^)\s]+\)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")

_NUMBER = r"\d(?:[\d,]*\d)?(?:\.\d+)?"
MEASURED = re.compile(
    "|".join([
        rf"{_NUMBER}\s?(?:ms|s|seconds?|min|(?:CPU |GPU )?minutes?|hours?)\b",  # times ("90 seconds", "0.4 s")
        rf"{_NUMBER}\s?[KMGT]i?B\b",  # sizes
        rf"{_NUMBER}\s?(?:%|percent\b)",  # shares
        rf"{_NUMBER}x(?!\w)",  # ratios ("1.63x"; "8 x 8" and "64x64" are shapes)
        rf"{_NUMBER}\s?(?:tokens|steps)(?:/s\b| per second| a second)",  # speeds
        r"\b\d(?:\.\d+)?e-\d+\b",  # differences and tolerances ("to 3e-6")
        r"\b\d[\d,]+/\d[\d,]+\b",  # counts out of counts ("600/600")
        # quality figures: the word and a decimal in the same paragraph
        r"(?:BLEU|CIDEr|perplexity|accuracy|macro-F1|exact match|Pointing Game|MFU)\b.*?\d\.\d"
        r"|\d\.\d.*?(?:BLEU|CIDEr|perplexity|accuracy|macro-F1|exact match|Pointing Game|MFU)\b",
    ]),
    re.DOTALL,
)
# What reproduces a number: a benchmark script, a section of benchmarks/README.md or of a results page (docs/results/:
# its commands), a test, or in a data card the link to its own "Reproducing the counts" snippet (links are checked to
# resolve).
REFERENCE = re.compile(r"benchmarks/\w+\.py|benchmarks/README\.md#[\w-]+|results/[\w-]+\.md#[\w-]+|tests/[\w/]+\.py"
                       r"|\]\(#reproduc[\w-]*\)")

# Numbers that match MEASURED without being measurements: (file, the text that holds them, why). Keep it short.
NOT_MEASURED = [
    ("docs/guides/bert.md", "masked-LM masking (15%, 80/10/10", "BERT's masking recipe, a configuration"),
    ("docs/guides/vision.md", "(70 / 10 / 20 percent split by seed)", "the digits split, a configuration"),
    ("docs/guides/masks-and-conventions.md", "Float masks are rejected (0/-inf vs 1/0",
     "mask conventions, no measurement"),
    ("docs/guides/captioning-data.md", "8,000 x 64 x 64 x 3 bytes, 98 MB", "arithmetic"),
]


def _existing(path):
    return (ROOT / path.rstrip(".,:;")).exists()


def missing_paths(text, name):
    """The repository paths that `text` (the file `name`) names and that do not exist."""
    missing = []
    text = LINK_TARGET.sub("]", text)  # a link's target is relative to the file: broken_links checks it
    for match in REPO_PATH.finditer(text):
        flag, path = match.group(1), match.group(2).rstrip(".,:;")
        if flag or path.startswith("benchmarks/results/"):  # what a command writes (--plot PATH, results/)
            continue
        if path.endswith("/...") or "..." in path:  # "tests/layers/...": a pattern, its folder is checked
            path = path.split("...")[0]
        if path and not _existing(path):
            missing.append(path)
    if name == "benchmarks/README.md" or name.startswith("docs/results/"):
        for script in BARE_SCRIPT.findall(text):
            if not any((ROOT / folder / script).exists() for folder in ("benchmarks", "examples")):
                missing.append(script)
    return sorted(set(missing))


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()  # a link: its text
    text = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(text):
    """Every heading's anchor, numbered as GitHub numbers repeats ("x", "x-1", ...), outside code blocks."""
    seen, result, fenced = {}, set(), False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r" {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(text, name):
    """The links of `text` (the file `name`) to a local file or anchor that does not resolve."""
    broken, here = [], (ROOT / name).parent
    prose = re.sub(r"(?ms)^\s*```.*?^\s*```", "", text)
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (here / path).resolve() if path else ROOT / name
        if not file.exists():
            broken.append(target)
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file.read_text(encoding="utf-8"))):
            broken.append(target)
    return broken


def units(text):
    """(first line, text, the fenced block just before it) of each paragraph, list or table with its caption."""
    result, block, start, fenced, code, last_code, pending_caption = [], [], 0, False, [], "", None

    def close():
        nonlocal block, pending_caption
        if block:
            body = "\n".join(block)
            if block[0].startswith("|") and pending_caption is not None:  # a table: its caption goes with it
                caption_line, caption, caption_code = pending_caption
                result[:] = [u for u in result if u[0] != caption_line]
                result.append((caption_line, caption + "\n" + body, caption_code))
            else:
                result.append((start, body, last_code))
            pending_caption = None if block[0].startswith("|") else result[-1]
        block = []

    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if not fenced:
                close()
                code = []
            else:
                last_code = "\n".join(code)
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
        elif not line.strip() or line.startswith("#"):
            close()
            if line.startswith("#"):
                pending_caption, last_code = None, ""
        else:
            if block and block[-1].startswith("|") != line.startswith("|"):
                close()
            if not block:
                start = number
            block.append(line)
    close()
    return result


def unreferenced_measurements(text, name):
    """The paragraphs, lists and tables of `text` that state a measured number and name nothing that reproduces it."""
    problems = []
    for line, body, code_before in units(text):
        scrubbed = body
        for file, allowed, _ in NOT_MEASURED:
            if file == name:
                scrubbed = scrubbed.replace(allowed, "")
        found = MEASURED.search(scrubbed)
        if not found or REFERENCE.search(body) or re.search(r"examples/\w+\.py", code_before):
            continue
        problems.append(f"{name}:{line}: {found.group(0)[:40]!r} in {body[:100]!r}...")
    return problems


def read(name):
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", LINK_FILES)
def test_every_named_repository_path_exists(name):
    assert missing_paths(read(name), name) == []


@pytest.mark.parametrize("name", LINK_FILES)
def test_every_local_link_and_anchor_resolves(name):
    assert broken_links(read(name), name) == []


@pytest.mark.parametrize("name", CLAIM_FILES)
def test_every_measured_number_names_what_reproduces_it(name):
    assert unreferenced_measurements(read(name), name) == []


def test_the_allowed_numbers_are_still_there():
    """An entry of NOT_MEASURED whose text is gone allows nothing any more: remove it."""
    assert [text for file, text, _ in NOT_MEASURED if text not in read(file)] == []


def test_the_checks_catch_what_they_are_for():
    assert missing_paths("see `benchmarks/no_such_script.py`.", "README.md") == ["benchmarks/no_such_script.py"]
    assert slug("GPU (H100, `--size full`, mixed_bfloat16 training)") == "gpu-h100---size-full-mixed_bfloat16-training"
    assert broken_links("[x](benchmarks/README.md#no-such-section)", "README.md") == ["benchmarks/README.md#no-such-section"]
    assert broken_links("[x](docs/results/attention-speed.md#long-sequences-bench_longpy)", "README.md") == []
    assert broken_links("[x](../results/nmt.md#nmt-quality)", "docs/guides/nmt.md") == []  # relative to the file
    assert missing_paths("[core](applications/core.md)", "docs/reference/index.md") == []  # relative to its file
    assert unreferenced_measurements("It takes 79 ms a step.\n", "README.md")
    assert not unreferenced_measurements("It takes 79 ms a step (`benchmarks/gpu_training.py`).\n", "README.md")
    assert not unreferenced_measurements("It takes 79 ms a step ([x](../results/training.md#gpu)).\n", "docs/guides/a.md")
    table = "Caption (`benchmarks/nmt_quality.py`):\n\n| model | BLEU |\n|---|---|\n| a | 5.13 |\n"
    assert not unreferenced_measurements(table, "README.md")
    assert unreferenced_measurements(table.replace("(`benchmarks/nmt_quality.py`)", ""), "README.md")
    assert not unreferenced_measurements("```bash\nB=8 x 8 takes 3 s\n```\n", "README.md")  # commands
