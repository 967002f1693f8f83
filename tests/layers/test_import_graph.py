"""No import circle inside attnlayers/ (DESIGN.md: the rooms import downwards, masking and scoring the ground floor).

A static walk (``ast`` only, nothing imported) of every ``import`` between the package's modules, those inside
functions included: a function-level import that closes a circle still ties two rooms together.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "attnlayers"


def _imports(path, modules):
    """The package's modules that ``path`` imports (``from .x import``, ``from attnlayers.x import``,
    ``from attnlayers import x``, ``import attnlayers.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1 and parts[0]:  # from .x import ...
                found.add(parts[0])
            elif parts[0] == "attnlayers" and len(parts) > 1:  # from attnlayers.x import ...
                found.add(parts[1])
            elif node.level == 1 or parts == ["attnlayers"]:  # from . import x, from attnlayers import x
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names if alias.name.startswith("attnlayers."))
    return (found & modules) - {path.stem, "__init__"}


def _circles(graph):
    """Every circle a depth-first walk of ``graph`` ({module: imported modules}) closes, as module lists."""
    state, path, circles = {}, [], []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                circles.append(path[path.index(other):] + [other])
            elif other not in state:
                visit(other)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return circles


def test_no_import_circle_in_attnlayers():
    paths = [p for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    modules = {p.stem for p in paths}
    graph = {p.stem: _imports(p, modules) for p in paths}
    assert sum(map(len, graph.values())) > 20  # the walk sees the package's imports
    assert _circles(graph) == []


def test_the_walk_finds_a_circle():
    assert _circles({"viewer": {"visualize"}, "visualize": {"viewer"}, "masking": set()}) == [
        ["viewer", "visualize", "viewer"]]
