"""The code of README.md and of the documentation's pages (docs/index.md, docs/getting-started.md, docs/guides/*.md)
runs as written.

- Each page's ```python blocks run in order in one namespace (a block may continue the one before it, as the page
  reads), in this process (TensorFlow is imported here already; a subprocess per page would import it again, ~8-10 s
  of CPU each, several times the whole budget of this file), from an empty folder, with network connections refused.
  Keras' global state a block may set (the dtype policy, the distribution) is restored after each page.
- A block that needs what a test cannot have or afford (a GPU, a corpus, a trained model, minutes of training) is
  marked on the line before it, ``<!-- not run: REASON -->`` (the first test checks each gives a reason); its names are
  still checked without running it (each is bound by the block, by an earlier block of its page, or by Python). A
  fragment that uses the reader's own objects (``model.fit(...)``) is marked ``<!-- fragment: REASON -->``: neither
  run nor checked. A block that reads a checkpoint from a path runs after ``<!-- setup: NAME: ... -->`` has written
  a tiny random one there (SETUPS below).
- Each ```bash command that runs an ``examples/*.py`` script: the script exists and its own argparse parser, captured
  from the script without running it (a ``--help`` subprocess per script would import TensorFlow each time), accepts
  the command's flags, unabbreviated, and values.
- The viewer guide's table of ``<app>.viewer.attention_viewer(...)`` calls: the attribute path resolves after
  ``from attnlayers.applications import <app>`` and the arguments bind to the function's signature.
"""

import argparse
import ast
import builtins
import dataclasses
import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import shlex
import socket

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/index.md", "docs/getting-started.md",
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guides").glob("*.md"))]
VIEWER_PAGE = "docs/guides/viewer.md"
MARKER = re.compile(r"<!--\s*(?P<kind>not run|fragment|setup):\s*(?P<text>.*?)\s*-->")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    language: str
    line: int  # of the opening fence, 1-based
    code: str
    marker: tuple = ()  # ("not run" | "fragment", reason) or ("setup", "NAME: what it writes")
    marker_line: int = 0

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def _blocks(page):
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\w*)\s*", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), 0)  # the line before, 0-based
            marker = MARKER.fullmatch(lines[before].strip())
            blocks.append(Block(page, fence.group(1), i + 1, "\n".join(lines[i + 1:end]) + "\n",
                                (marker["kind"], marker["text"]) if marker else (), before + 1 if marker else 0))
            i = end
        i += 1
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]
PYTHON = [b for b in BLOCKS if b.language == "python"]
BASH = [b for b in BLOCKS if b.language == "bash"]
PYTHON_PAGES = sorted({b.page for b in PYTHON}, key=PAGES.index)


def test_the_blocks_are_found_and_every_marker_stands_before_a_block_and_gives_a_reason():
    assert len(PYTHON) >= 15 and len(BASH) >= 15, [(b.where, b.language) for b in BLOCKS]
    for page in PAGES:
        markers = {b.marker_line for b in BLOCKS if b.page == page and b.marker}
        for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1):
            if re.match(r"\s*<!--\s*(not run|fragment|setup)\b", line):
                found = MARKER.fullmatch(line.strip())
                assert found and found["text"], f"{page}:{number}: a marker without its reason: <!-- not run: WHY -->"
                assert number in markers, f"{page}:{number}: the marker stands before no code block"


# ---- python blocks ----------------------------------------------------------------------------------------------


def _names(code):
    """(names bound, names read) of a block: assignments, imports, defs, loop and with targets, parameters."""
    bound, read = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def undefined_names(block, blocks):
    """Names the block reads that neither it, Python, nor an earlier block of its page binds: what would raise
    NameError, found without running it."""
    bound = set(dir(builtins))
    for other in blocks:
        if other.page == block.page and other.line <= block.line and other.marker[:1] != ("fragment",):
            bound |= _names(other.code)[0]
    return sorted(_names(block.code)[1] - bound)


def _tiny_bert_checkpoint(directory):
    from attnlayers.applications import bert

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "sentence", "."]
    backbone = bert.BertBackbone(bert.BertConfig(vocabulary_size=len(words), max_sequence_length=16, num_layers=1,
                                                 num_heads=2, hidden_dim=8, intermediate_dim=16))
    bert.save_hf_checkpoint(backbone, directory, vocabulary=words)


def _tiny_gpt2_checkpoint(directory):
    from attnlayers.applications import gpt
    from attnlayers.applications.gpt.tokenizer import train_byte_level_bpe

    texts = ["The meaning of life is a question.\nThe answer is forty-two.", "Life is what happens."] * 4
    vocabulary, merges = train_byte_level_bpe(texts, 280, directory.parent / "bpe")
    tokenizer = gpt.GPT2Tokenizer(vocabulary, merges)
    model = gpt.GPT(gpt.GPTConfig(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=64, num_layers=1,
                                  num_heads=2, hidden_dim=8, intermediate_dim=16, end_token_id=tokenizer.end_token_id))
    gpt.save_hf_checkpoint(model, directory, vocabulary=vocabulary, merges=merges)


# NAME -> (the path the block reads, what writes a tiny random checkpoint there)
SETUPS = {"hf-bert": ("path/to/hf-bert", _tiny_bert_checkpoint), "hf-gpt2": ("path/to/gpt2", _tiny_gpt2_checkpoint)}


@pytest.fixture
def offline(monkeypatch):
    """Any network connection raises: a page's block must not download anything."""

    def refuse(*args, **kwargs):
        raise OSError("the documentation's blocks must not use the network (tests/test_guides.py)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def keras_state():
    """A block may set Keras' dtype policy or distribution, as a reader's program does: restored afterwards."""
    import keras

    policy, distribution = keras.config.dtype_policy(), keras.distribution.distribution()
    yield
    keras.config.set_dtype_policy(policy)
    keras.distribution.set_distribution(distribution)


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_of_the_page_run_as_written(page, tmp_path, monkeypatch, offline, keras_state):
    blocks = [b for b in PYTHON if b.page == page]
    namespace, not_run = {"__name__": "__guide__"}, []
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        code = compile(block.code, block.where, "exec")  # a SyntaxError names the page and line
        if block.marker[:1] == ("fragment",):
            not_run.append(f"{block.where}: {block.marker[1]}")
            continue
        undefined = undefined_names(block, blocks)
        assert not undefined, f"{block.where}: the block uses names it and its page never define: {undefined}"
        if block.marker[:1] == ("not run",):
            not_run.append(f"{block.where}: {block.marker[1]}")
            continue
        if block.marker:
            name = block.marker[1].split(":")[0].strip()
            assert name in SETUPS, f"{block.where}: unknown setup {name!r}; SETUPS has {sorted(SETUPS)}"
            path, write = SETUPS[name]
            write(tmp_path / path)
        try:
            exec(code, namespace)  # noqa: S102 (the documentation's own code)
        except Exception as error:
            raise AssertionError(f"{block.where}: the block raised {type(error).__name__}: {error}") from error
    # A page whose blocks are all marked still had each block compiled (and the unmarked ones' names checked): it
    # passes rather than skips (a skip is for a real absence); its markers' reasons are checked by the first test.


# ---- bash blocks: the example scripts and their flags -------------------------------------------------------------


def _script_commands(block):
    """(script path, argv) for each command of a bash block that runs examples/NAME.py."""
    text = block.code.replace("\\\n", " ")  # continuation lines
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        tokens = list(lexer)
        for index, token in enumerate(tokens):
            if re.fullmatch(r"(.*/)?examples/\w+\.py", token):
                argv = []
                for arg in tokens[index + 1:]:
                    if arg in ("&&", "||", ";", "|", ")", "&"):
                        break
                    argv.append(arg)
                yield token[token.index("examples/"):], argv


SCRIPT_COMMANDS = [(block, script, argv) for block in BASH for script, argv in _script_commands(block)]


class _Parser(Exception):
    def __init__(self, parser):
        super().__init__()
        self.parser = parser


@pytest.fixture
def restored_environment():
    """The example scripts set os.environ defaults when imported (KERAS_BACKEND, ...): undone afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _script_parser(script, monkeypatch):
    """The argparse parser the script builds, captured at its parse_args call, before it runs anything."""
    spec = importlib.util.spec_from_file_location(f"guides_{pathlib.Path(script).stem}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def capture(self, args=None, namespace=None):
        raise _Parser(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(_Parser) as captured:
            (module.parse_args if hasattr(module, "parse_args") else module.main)([])
    return captured.value.parser


def test_the_bash_blocks_run_every_example_script():
    ran = {script for _, script, _ in SCRIPT_COMMANDS}
    assert ran >= {"examples/quickstart.py", "examples/train_nmt.py", "examples/train_captioning.py",
                   "examples/pretrain_bert.py", "examples/finetune_bert.py", "examples/train_gpt.py",
                   "examples/generate.py", "examples/chat.py", "examples/train_vit.py"}, sorted(ran)


@pytest.mark.parametrize("script", sorted({s for _, s, _ in SCRIPT_COMMANDS}))
def test_bash_commands_of_the_script_parse(script, monkeypatch, capsys, restored_environment):
    assert (ROOT / script).is_file(), f"the documentation runs {script}, which does not exist"
    parser = _script_parser(script, monkeypatch)
    parser.allow_abbrev = False  # a flag must be spelled out, as the reader copies it
    for block, command_script, argv in SCRIPT_COMMANDS:
        if command_script != script:
            continue
        try:
            parser.parse_args(argv)
        except SystemExit:
            refused = capsys.readouterr().err.strip().splitlines()[-1]  # "PROG: error: ..."
        else:
            continue
        pytest.fail(f"{block.where}: {script} {shlex.join(argv)}\n{refused}", pytrace=False)


# ---- the viewer table ---------------------------------------------------------------------------------------------


def _viewer_calls():
    for number, line in enumerate((ROOT / VIEWER_PAGE).read_text(encoding="utf-8").splitlines(), 1):
        match = re.fullmatch(r"\| (\w+) \| `((\w+)\.viewer\.attention_viewer\(.*\))` \|.*", line)
        if match:
            assert match[1] == match[3], f"{VIEWER_PAGE}:{number}: the row of {match[1]} calls {match[3]}'s viewer"
            yield number, match[1], match[2]


VIEWER_CALLS = list(_viewer_calls())


def test_the_viewer_table_calls_resolve_and_bind():
    assert {app for _, app, _ in VIEWER_CALLS} == {"nmt", "bert", "gpt", "captioning", "vision"}, VIEWER_CALLS
    for number, app, call in VIEWER_CALLS:
        package = importlib.import_module(f"attnlayers.applications.{app}")  # from attnlayers.applications import app
        node = ast.parse(call, mode="eval").body
        function = package
        for attribute in ("viewer", "attention_viewer"):
            function = getattr(function, attribute)
        try:
            inspect.signature(function).bind(*node.args, **{k.arg: k.value for k in node.keywords})
        except TypeError as error:
            pytest.fail(f"{VIEWER_PAGE}:{number}: {call}: {error}")
