"""A griffe extension (mkdocs.yml loads it) that reads attnlayers' docstring conventions as Google style.

Conventions of the project's docstrings that griffe's Google parser does not know, rewritten before parsing (the
source files are not changed):

- Parameters that share a description are listed together, ``a, b: description`` (the names may run over several
  lines): each name gets its own entry with that description, so the reference lists it and griffe still warns for
  a name the signature does not have.
- ``Example:`` (singular) is the Examples section, also when its lines are not indented under the heading.
- Sections griffe has no kind for (``Call arguments:``, ``Call arguments and returns:``, ...) with ``name: text``
  items: the items become a Markdown list (else they would run together as one paragraph).
- Sphinx roles (``:class:`~attnlayers.MultiHeadAttention```) become code (``MultiHeadAttention``).
"""

import re

import griffe

_PARAMETER_SECTIONS = {"args", "arguments", "params", "parameters", "keyword args", "keyword arguments",
                       "other parameters", "other args", "other arguments"}
_KNOWN_SECTIONS = _PARAMETER_SECTIONS | {
    "raises", "exceptions", "returns", "return", "yields", "yield", "receives", "receive", "examples", "warns",
    "warnings", "attributes", "functions", "methods", "classes", "modules", "type aliases", "note", "notes",
    "example", "deprecated"}
_HEADING = re.compile(r"^(\s*)([A-Z][\w()/-]*(?: [\w()/-]+){0,4}):\s*$")  # a title of at most five words
_NAME = r"\*{0,2}\w+(?: \([^)]*\))?"
_GROUPED = re.compile(rf"^({_NAME}(?:, {_NAME})+):\s*(.*)$", re.DOTALL)
_ITEM = re.compile(r"^(\*{0,2}\w+(?: \([^)]*\))?):\s+(.*)$", re.DOTALL)
_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|obj|exc):`(~?)([^`]+)`")


def _indent(line):
    return len(line) - len(line.lstrip())


def _sections(lines):
    """(heading index, heading indent, name in lower case) of each section heading."""
    found = []
    for i, line in enumerate(lines):
        match = _HEADING.match(line)
        if match and (i == 0 or not lines[i - 1].strip() or _indent(lines[i - 1]) <= len(match.group(1))):
            found.append((i, len(match.group(1)), match.group(2).lower()))
    return found


def _items(lines, start, indent):
    """The section's items after heading ``start``: [(first, end)] line ranges, and the section's end."""
    items, i = [], start + 1
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        if lines[i].strip() and _indent(lines[i]) == indent + 4:
            items.append([i, i + 1])
        elif items and lines[i].strip():
            items[-1][1] = i + 1
        i += 1
    return items, i


def _ungroup(lines, start, indent):
    """Splits ``a, b: text`` items of the section at ``start`` into one item per name; returns the new lines."""
    items, _ = _items(lines, start, indent)
    for first, end in reversed(items):
        joined = " ".join(line.strip() for line in lines[first:end] if line.strip())
        match = _GROUPED.match(joined)
        if match:
            names = [re.sub(r" \([^)]*\)$", "", name) for name in match.group(1).split(", ")]
            lines[first:end] = [f"{' ' * (indent + 4)}{name}: {match.group(2)}" for name in names]
    return lines


def _as_list(lines, start, indent):
    """The ``name: text`` items of the section at ``start`` as a Markdown list (other sections unchanged)."""
    items, _ = _items(lines, start, indent)
    if not items or not all(_ITEM.match(" ".join(l.strip() for l in lines[a:b])) for a, b in items):
        return lines
    for first, end in reversed(items):
        name, text = _ITEM.match(" ".join(line.strip() for line in lines[first:end] if line.strip())).groups()
        lines[first:end] = [f"{' ' * (indent + 4)}- `{name}`: {text}"]
    return lines


def _example(lines, start, indent):
    """``Example:`` -> ``Examples:``; its lines indented under it when they are not."""
    lines[start] = f"{' ' * indent}Examples:"
    following = next((i for i in range(start + 1, len(lines)) if lines[i].strip()), None)
    if following is not None and _indent(lines[following]) == indent:
        i = start + 1
        while i < len(lines) and not (_HEADING.match(lines[i]) and _indent(lines[i]) == indent):
            if lines[i].strip():
                lines[i] = "    " + lines[i]
            i += 1
    return lines


def rewrite(text):
    """The docstring ``text`` with the project's conventions rewritten as Google style (see the module)."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)
    lines = text.split("\n")
    for start, indent, name in reversed(_sections(lines)):
        if name in _PARAMETER_SECTIONS:
            lines = _ungroup(lines, start, indent)
        elif name == "example":
            lines = _example(lines, start, indent)
        elif name not in _KNOWN_SECTIONS:
            lines = _as_list(lines, start, indent)
    return "\n".join(lines)


class ProjectDocstrings(griffe.Extension):
    """Rewrites each docstring (:func:`rewrite`) when griffe creates its object, before any parsing."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
