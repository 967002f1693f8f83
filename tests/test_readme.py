"""README.md's code runs as written.

- Each ```python block runs in a fresh namespace, in this process (TensorFlow is imported here already; a
  subprocess per block would import it again, ~8-10 s of CPU each), from an empty folder, with network connections
  refused. A block that needs what a test cannot have or afford (a corpus, a trained model, minutes of training) is
  marked in README.md on the line before it, ``<!-- readme-test: skip: REASON -->``, and reported skipped with that
  reason; its names are still checked without running it (each is bound by the block, by an earlier block of its
  section that it continues, or by Python). A block that reads a checkpoint from a path runs after
  ``<!-- readme-test: setup: NAME: ... -->`` has written a tiny random one there (SETUPS below).
- Each ```bash command that runs an ``examples/*.py`` script: the script exists and its own argparse parser, captured
  from the script without running it (a ``--help`` subprocess per script would import TensorFlow each time), accepts
  the command's flags, unabbreviated, and values.
- The viewer table's ``<app>.viewer.attention_viewer(...)`` calls: the attribute path resolves after
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
README = ROOT / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<kind>skip|setup):\s*(?P<text>.*?)\s*-->")


@dataclasses.dataclass(frozen=True)
class Block:
    language: str
    line: int  # of the opening fence, 1-based
    section: str
    code: str
    marker: tuple = ()  # ("skip", reason) or ("setup", "NAME: what it writes")
    marker_line: int = 0

    @property
    def id(self):
        section = re.sub(r"\(.*?\)", "", self.section)  # "GPT (`attnlayers.applications.gpt`)": "GPT"
        return f"L{self.line}-" + re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")


def _blocks():
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        fence = re.fullmatch(r"```(\w*)\s*", line)
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), 0)  # the line before, 0-based
            marker = MARKER.fullmatch(lines[before].strip())
            blocks.append(Block(fence.group(1), i + 1, section, "\n".join(lines[i + 1:end]) + "\n",
                                (marker["kind"], marker["text"]) if marker else (), before + 1 if marker else 0))
            i = end
        i += 1
    return blocks


BLOCKS = _blocks()
PYTHON = [b for b in BLOCKS if b.language == "python"]
BASH = [b for b in BLOCKS if b.language == "bash"]


def test_the_readme_blocks_are_found_and_every_marker_stands_before_a_block():
    assert len(PYTHON) >= 8 and len(BASH) >= 8, [(b.language, b.line) for b in BLOCKS]
    markers = {b.marker_line for b in BLOCKS if b.marker}
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if "readme-test" in line:
            assert MARKER.fullmatch(line.strip()), f"README.md:{number}: a readme-test marker this test cannot read"
            assert number in markers, f"README.md:{number}: the marker stands before no code block"


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


def _undefined_names(block):
    """Names the block reads that neither it, Python, nor an earlier block of its README section binds (a block
    may continue the one before it, as the text reads): what would raise NameError, found without running it."""
    bound = set(dir(builtins))
    for other in PYTHON:
        if other.section == block.section and other.line <= block.line:
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
    """Any network connection raises: a README block must not download anything."""

    def refuse(*args, **kwargs):
        raise OSError("README blocks must not use the network (tests/test_readme.py)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs_as_written(block, tmp_path, monkeypatch, offline):
    code = compile(block.code, f"README.md:{block.line}", "exec")  # a SyntaxError names the README line
    undefined = _undefined_names(block)
    assert not undefined, f"README.md:{block.line}: the block uses names it never defines: {undefined}"
    if block.marker and block.marker[0] == "skip":
        pytest.skip(f"README.md:{block.line}: {block.marker[1]}")
    monkeypatch.chdir(tmp_path)
    if block.marker:
        name = block.marker[1].split(":")[0].strip()
        assert name in SETUPS, f"README.md:{block.line}: unknown setup {name!r}; SETUPS has {sorted(SETUPS)}"
        path, write = SETUPS[name]
        write(tmp_path / path)
    exec(code, {"__name__": "__readme__"})  # noqa: S102 (README's own code)


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
    spec = importlib.util.spec_from_file_location(f"readme_{pathlib.Path(script).stem}", ROOT / script)
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
    assert (ROOT / script).is_file(), f"README runs {script}, which does not exist"
    parser = _script_parser(script, monkeypatch)
    parser.allow_abbrev = False  # a flag must be spelled out, as README's reader copies it
    for block, command_script, argv in SCRIPT_COMMANDS:
        if command_script != script:
            continue
        try:
            parser.parse_args(argv)
        except SystemExit:
            refused = capsys.readouterr().err.strip().splitlines()[-1]  # "PROG: error: ..."
        else:
            continue
        pytest.fail(f"README.md:{block.line}: {script} {shlex.join(argv)}\n{refused}", pytrace=False)


# ---- the viewer table ---------------------------------------------------------------------------------------------


def _viewer_calls():
    for number, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        match = re.fullmatch(r"\| (\w+) \| `((\w+)\.viewer\.attention_viewer\(.*\))` \|.*", line)
        if match:
            assert match[1] == match[3], f"README.md:{number}: the row of {match[1]} calls {match[3]}'s viewer"
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
            pytest.fail(f"README.md:{number}: {call}: {error}")
