"""The public API is explicit and the API reference documents exactly it.

- Every public module of ``attnlayers`` and of ``applications/`` (``attnlayers.applications``) defines ``__all__``
  (a module is public when no part of its path starts with ``_``; a deprecated alias module, one whose names all
  come from ``moved_module``, has nothing of its own to list).
- The reference pages (``docs/reference/<package>/*.md`` for ``attnlayers``, ``docs/reference/applications/<app>.md``
  for each application) list, in their ``::: identifier`` lines, exactly the names of the package's ``__all__``:
  no exported name left out, none listed twice, no private or unexported one. An identifier is the name's path
  through the package (``attnlayers.MultiHeadAttention``) or through its home module where the package resolves it
  on first use (``attnlayers.applications.gpt.gguf.load_gguf``); either way it must be the exported object.
- A public module of attnlayers that holds names attnlayers does not export (``attnlayers.export``,
  ``attnlayers.viewer``, ...) is on a reference page too, and a block that picks ``members:`` picks exactly those.
- Every exported function or class that takes named arguments documents them (``Args:``, or ``Attributes:``).
- CHANGELOG.md's newest release is ``attnlayers.__version__``, and so is the installed distribution's version.
"""

import ast
import functools
import importlib
import importlib.metadata
import inspect
import re
import types
from pathlib import Path

import attnlayers
import attnlayers.applications
import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
DIRECTIVE = re.compile(r"^::: +([\w.]+)\s*$", re.MULTILINE)


def _directives(page):
    """[(identifier, members or None)] of the page's ``::: identifier`` blocks (``members:`` of their options)."""
    found = []
    for line in page.read_text().splitlines():
        match = DIRECTIVE.match(line)
        if match:
            found.append((match.group(1), None))
        elif found and line.startswith("    "):
            member = re.match(r"^\s+- (\w+)\s*$", line)
            if member:
                found[-1] = (found[-1][0], [*(found[-1][1] or []), member.group(1)])
        elif line.strip():
            found.append((None, None))  # the block ended
    return [item for item in found if item[0]]


def _public_modules():
    """(file, dotted name as installed) of every public module in attnlayers/ and applications/."""
    for top, package in (("attnlayers", "attnlayers"), ("applications", "attnlayers.applications")):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT / top).with_suffix("").parts
            if any(part.startswith("_") and part != "__init__" for part in parts):
                continue
            name = ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
            yield path, name


def _defines_all(tree):
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            return True
    return False


def test_every_public_module_defines_all():
    missing = []
    for path, name in _public_modules():
        source = path.read_text()
        if "moved_module(" in source:  # a deprecated alias module (core/lazy.py): every name is another module's
            continue
        if not _defines_all(ast.parse(source)):
            missing.append(f"{name} ({path.relative_to(ROOT)})")
    assert not missing, "public modules without __all__ (list the names a user imports):\n  " + "\n  ".join(missing)


def _pages():
    """{package: [reference pages]} for attnlayers and each application package."""
    pages = {"attnlayers": sorted((REFERENCE / "attnlayers").glob("*.md"))}
    for app in sorted(attnlayers.applications.__all__):
        pages[f"attnlayers.applications.{app}"] = [REFERENCE / "applications" / f"{app}.md"]
    return pages


def _resolve(identifier):
    """The object at a dotted path: the longest importable module prefix, then attributes."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return target
    raise ImportError(identifier)


@pytest.mark.parametrize("package", list(_pages()))
def test_reference_lists_exactly_what_the_package_exports(package):
    module = importlib.import_module(package)
    exported = set(module.__all__)
    problems, listed = [], []
    for page in _pages()[package]:
        if not page.exists():
            problems.append(f"no reference page {page.relative_to(ROOT)}")
            continue
        for identifier, _ in _directives(page):
            where = f"{page.relative_to(ROOT)}: ::: {identifier}"
            name = identifier.rsplit(".", 1)[-1]
            if identifier in _modules_by_path(package):
                continue  # a public module not exported by name (test_modules_by_path_are_documented)
            if not identifier.startswith(package + "."):
                problems.append(f"{where} is not under {package}")
            elif name.startswith("_"):
                problems.append(f"{where} documents a private name")
            elif name not in exported:
                problems.append(f"{where} documents a name {package}.__all__ does not export")
            elif _resolve(identifier) is not getattr(module, name):
                problems.append(f"{where} is not the object {package}.{name}")
            listed.append(name)
    twice = sorted({name for name in listed if listed.count(name) > 1})
    if twice:
        problems.append(f"listed more than once: {twice}")
    left_out = sorted(exported - set(listed))
    if left_out:
        problems.append(f"exported by {package} but in no reference page: {left_out}")
    assert not problems, "\n".join(problems)


@functools.cache
def _modules_by_path(package):
    """{dotted name: module} of the public modules directly in ``package`` that it does not export by name."""
    folder = Path(importlib.import_module(package).__file__).parent
    names = [path.stem for path in folder.glob("*.py") if not path.stem.startswith("_")]
    exported = set(importlib.import_module(package).__all__)
    return {f"{package}.{name}": importlib.import_module(f"{package}.{name}") for name in names
            if name not in exported}


def _undocumented_members(module, package):
    """The names of ``module.__all__`` that are not objects ``package`` exports (so documented elsewhere)."""
    top = [getattr(package, name) for name in package.__all__]
    return [name for name in module.__all__ if not any(getattr(module, name) is value for value in top)]


def test_modules_by_path_are_documented():
    """Every public module of attnlayers appears on a reference page when it holds names attnlayers does not export
    (``::: attnlayers.<module>``), and a block that lists ``members:`` lists exactly those names."""
    directives = dict(item for page in _pages()["attnlayers"] for item in _directives(page))
    problems = []
    for name, module in {**_modules_by_path("attnlayers"),
                         **{f"attnlayers.{n}": getattr(attnlayers, n) for n in attnlayers.__all__
                            if isinstance(getattr(attnlayers, n), types.ModuleType)}}.items():
        own = _undocumented_members(module, attnlayers)
        if name not in directives:
            if own:
                problems.append(f"{name} holds {own} but no reference page has ::: {name}")
        elif directives[name] is not None and sorted(directives[name]) != sorted(own):
            problems.append(f"::: {name} lists members {sorted(directives[name])}; its own names are {sorted(own)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("package", list(_pages()))
def test_exported_callables_document_their_arguments(package):
    """Every exported function or class that takes named arguments has a docstring with an ``Args:`` section
    (``Attributes:`` for a dataclass); one that only passes ``*args, **kwargs`` on (to keras) need not."""
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        target = getattr(module, name)
        if not (inspect.isfunction(target) or inspect.isclass(target)):
            continue
        try:
            parameters = [name for name, p in inspect.signature(target).parameters.items()  # *args, **kwargs:
                          if name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        except (TypeError, ValueError):  # a class whose signature inspect cannot read: nothing to check
            continue
        sections = set(re.findall(r"^\s*(Args|Attributes):$", inspect.getdoc(target) or "", re.MULTILINE))
        if parameters and not sections:
            missing.append(f"{name}({', '.join(parameters)})")
    assert not missing, f"{package}: exported without an Args section: {missing}"


#: Keras' own hooks, overridden under Keras' contract (the class docstring's "Call arguments" documents ``call``).
KERAS_OVERRIDES = frozenset({
    "build", "call", "compute_output_shape", "compute_output_spec", "compute_mask", "get_config", "from_config",
    "build_from_config", "get_build_config", "compute_loss", "set_model",
})

#: Public methods allowed without an Args section, each with the reason (none now: applications/bert/pretrainer.py's,
#: listed here while the pretraining objectives rewrote it, are documented).
METHODS_WITHOUT_ARGS = frozenset()


def _public_methods(cls):
    """{"module.Class.method": function} of the public methods that ``cls`` and its bases from this library define
    (instance, class and static methods; not properties, not Keras' hooks)."""
    methods = {}
    for owner in cls.__mro__:
        if not owner.__module__.startswith("attnlayers"):
            continue
        for name, value in vars(owner).items():
            function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            if name.startswith("_") or name in KERAS_OVERRIDES or not inspect.isfunction(function):
                continue
            methods.setdefault(f"{owner.__module__}.{owner.__qualname__}.{name}", function)
    return methods


@pytest.mark.parametrize("package", list(_pages()))
def test_public_methods_document_their_arguments(package):
    """Every public method of an exported class that takes arguments (besides self / cls, a ``**kwargs`` and a
    ``*args`` passed on) has an ``Args:`` section; an override without a docstring of its own shows its base's
    (``inspect.getdoc``), which must have one. ``METHODS_WITHOUT_ARGS`` lists the exceptions, each with its reason."""
    module = importlib.import_module(package)
    missing, allowed = {}, set()
    for name in module.__all__:
        target = getattr(module, name)
        if not inspect.isclass(target):
            continue
        for path, function in _public_methods(target).items():
            parameters = [p for p, spec in inspect.signature(function).parameters.items()
                          if p not in ("self", "cls") and spec.kind is not spec.VAR_KEYWORD
                          and not (spec.kind is spec.VAR_POSITIONAL and p == "args")]
            if not parameters or re.search(r"^\s*Args:$", inspect.getdoc(function) or "", re.MULTILINE):
                continue
            if path in METHODS_WITHOUT_ARGS:
                allowed.add(path)
            else:
                missing[path] = f"{path}({', '.join(parameters)})"
    assert not missing, f"{package}: public methods without an Args section:\n  " + "\n  ".join(missing.values())
    # An entry belongs to the longest package that holds it (attnlayers.applications.bert, not attnlayers).
    stale = {path for path in METHODS_WITHOUT_ARGS
             if max((p for p in _pages() if path.startswith(p + ".")), key=len) == package} - allowed
    assert not stale, f"METHODS_WITHOUT_ARGS lists methods that are documented (or gone) now: {sorted(stale)}"


def test_changelog_and_version_agree():
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(),
                          re.MULTILINE)
    assert releases, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' release heading"
    assert releases[0] == attnlayers.__version__, f"CHANGELOG.md's newest release {releases[0]} != __version__"
    installed = importlib.metadata.version("attnlayers")
    assert installed == attnlayers.__version__, (
        f"the installed distribution says {installed}, attnlayers.__version__ {attnlayers.__version__}: "
        "pyproject.toml reads the version from attnlayers/__init__.py; reinstall (pip install -e .)")
