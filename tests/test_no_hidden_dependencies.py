"""A broken install fails the suite instead of skipping it: no test skips for the absence of a package that
pyproject.toml requires (the dependencies and the test extra) or of attnlayers itself. ``pytest.importorskip`` and
``skipif(find_spec(...) is None)`` stay for real absences only: the jax extra, packages the tests never install."""

import ast
import importlib.metadata
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def required_distributions():
    """The distributions a `pip install -e ".[test]"` installs by name: the dependencies and the test extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["test"]
    return {_normalized(re.match(r"[A-Za-z0-9_.-]+", requirement).group()) for requirement in requirements}


def probed_modules(path):
    """(line, module) of every ``*.importorskip("m")`` and ``*.find_spec("m")`` call in a test file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("importorskip", "find_spec") and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.lineno, node.args[0].value


def test_required_packages_are_imported_not_probed():
    required = required_distributions() | {"attnlayers"}
    distributions = importlib.metadata.packages_distributions()  # top-level module -> distributions
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for line, module in probed_modules(path):
            top = module.split(".")[0]
            names = {_normalized(name) for name in distributions.get(top, [])} | {_normalized(top)}
            if names & required:
                found.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not found, "skips for a required package (import it plainly): " + "; ".join(found)
