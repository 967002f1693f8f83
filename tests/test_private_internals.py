"""No private Keras / TensorFlow internals outside applications/core/runs/keras_fixes.py (DESIGN.md: nothing imports
private ``keras.src`` modules; private uses live there, behind named, documented, version-ranged functions).

A static scan (``ast`` only, nothing imported) of attnlayers/, applications/ and examples/ (what is shipped or
copied by users; benchmarks/ measure Keras' own machinery and are not scanned). It flags:

- a private module of a library (:data:`LIBRARIES`): ``import`` / ``from`` of ``keras.src``, ``tensorflow.python``,
  ``jax._src``..., the same through ``importlib.import_module("...")`` / ``__import__``, and reached as an attribute
  of an imported library (``keras.src.x``, ``tf.__internal__``, ``tf._x``, ``ops._x`` after ``from keras import
  ops``);
- a private attribute ``x._name`` (not a dunder; read, written or called; also ``getattr`` / ``hasattr`` /
  ``setattr`` / ``delattr`` / ``object.__setattr__`` with the name as a literal) that the project does not define.
  The project defines its module-level names, its classes' methods and class attributes, and what their methods
  assign on ``self`` (``self._name = ...``, ``object.__setattr__(self, "_name", ...)``). So:
    - ``self._name`` / ``cls._name`` is ours when the enclosing class or a project ancestor or descendant defines
      it (a base reading what its subclasses set); else, in a class deriving from a library's class, it is that
      class's private attribute (``self._model`` of a ``keras.callbacks.Callback``);
    - ``super()._name`` is ours when a project ancestor defines it;
    - on any other object (``model._initial_epoch``, ``strategy.extended._num_workers``) it is ours when the
      project defines ``_name`` anywhere (``module._helper``, ``layer._pop_log_probs()``); an assignment to a
      foreign object (``model._x = ...``) defines nothing.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCANNED = ("attnlayers", "applications", "examples")
ALLOWED = {"applications/core/runs/keras_fixes.py"}  # the one home of private uses
#: Exceptions, ``"path: use"`` (as the failure lists them, without the line) -> why. A private use belongs in
#: keras_fixes.py; attnlayers/, which cannot import it, uses public APIs, or, where none exists, is listed here.
EXCEPTIONS = {
    "attnlayers/fused.py: tf.__internal__": (
        "compiled_by_xla: no public TensorFlow API tells an XLA-compiled tf.function from a plain graph; "
        "tf.__internal__ is TensorFlow's namespace for Keras (no compatibility promise), read with getattr and a "
        "False default, which only costs speed"),
}

#: The libraries checked, each with its top-level names that are private modules without an underscore.
LIBRARIES = {"keras": {"src"}, "tensorflow": {"python", "core", "compiler", "__internal__"}, "tf_keras": {"src"},
             "keras_hub": {"src"}, "keras_nlp": {"src"}, "tensorflow_text": {"python", "core"}, "jax": set(),
             "jaxlib": set(), "numpy": {"core"}, "ml_dtypes": set(), "tokenizers": set(), "safetensors": set()}
#: Bases that are neither the project's nor a library's: a class deriving only from these inherits no private name.
BUILTIN_BASES = {"object", "ABC", "abc.ABC", "Generic", "Protocol", "NamedTuple", "typing.NamedTuple", "Enum",
                 "enum.Enum", "Exception", "ValueError", "RuntimeError", "TypeError", "KeyError", "Warning",
                 "UserWarning", "dict", "list", "tuple", "str", "int", "float"}


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(path):
    """Whether the dotted ``path`` is (in) a private module of one of the :data:`LIBRARIES` (``keras.src.x``,
    ``jax._src``); the project's own private modules (``attnlayers._loops``) are its own business."""
    parts = (path or "").split(".")
    if parts[0] not in LIBRARIES:
        return False
    return any(_private(part) for part in parts) or (len(parts) > 1 and parts[1] in LIBRARIES[parts[0]])


def _string(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_self(node):
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _is_super(node):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _named_attribute(call):
    """``(receiver, name, writes)`` of ``getattr(x, "_n")``, ``hasattr``, ``setattr``, ``delattr`` and
    ``object.__setattr__(x, "_n", v)`` / ``object.__getattribute__`` / ``object.__delattr__``, else None."""
    func, args = call.func, call.args
    if len(args) < 2 or not (name := _string(args[1])):
        return None
    if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr", "delattr"):
        return args[0], name, func.id in ("setattr", "delattr")
    if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "object"
            and func.attr in ("__setattr__", "__getattribute__", "__delattr__")):
        return args[0], name, func.attr != "__getattribute__"
    return None


class _Class:
    """A project class: its bases, the names it defines, its project parents and children (by :func:`_link`)."""

    def __init__(self, node):
        self.bases = [ast.unparse(base).split("[")[0] for base in node.bases]
        self.parents, self.children, self.external = [], [], False  # external: derives from a library's class
        self.defined = set()
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(statement.name)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                    self.defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))

    def lineage(self, up=True):
        """The project ancestors (``up``) or descendants, transitively."""
        found, todo = [], list(self.parents if up else self.children)
        while todo:
            cls = todo.pop()
            if cls not in found:
                found.append(cls)
                todo += cls.parents if up else cls.children
        return found


class _File:
    """One pass over a file: its library aliases, its classes, and the uses to check with their enclosing class."""

    def __init__(self, path, tree):
        self.path, self.classes, self.aliases = path, [], {}  # aliases: local name -> library module path
        self.found, self.uses = [], []  # uses: (node, receiver, name, enclosing class or None)
        self.defined = set()  # module-level names
        for statement in tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defined.add(statement.name)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                    self.defined.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        stack = [(tree, None)]
        while stack:
            node, cls = stack.pop()
            if isinstance(node, ast.ClassDef):
                cls = _Class(node)
                self.classes.append((node.name, cls))
            elif isinstance(node, ast.Attribute):
                self.uses.append((node, node.value, node.attr, cls))
                if cls is not None and isinstance(node.ctx, ast.Store) and _is_self(node.value):
                    cls.defined.add(node.attr)
                if self._library_path(node.value) is not None:
                    continue  # a library's a.b.c: checked whole, once (its aliases are known: imports come first)
            elif isinstance(node, ast.Call):
                self._call(node, cls)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self._import(node)
            stack += [(child, cls) for child in reversed(list(ast.iter_child_nodes(node)))]

    def report(self, node, use, why=None):
        self.found.append((node.lineno, use, why))

    def _import(self, node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_module(alias.name):
                    self.report(node, f"import {alias.name}", "a private module")
                root = alias.name.split(".")[0]
                if root in LIBRARIES:
                    self.aliases[alias.asname or root] = alias.name if alias.asname else root
            return
        module = node.module or ""
        if node.level or module.split(".")[0] not in LIBRARIES:
            return
        for alias in node.names:
            if _private_module(f"{module}.{alias.name}"):
                self.report(node, f"from {module} import {alias.name}", "a private module")
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"

    def _call(self, node, cls):
        named = _named_attribute(node)
        if named:
            receiver, name, writes = named
            self.uses.append((node, receiver, name, cls))
            if writes and cls is not None and _is_self(receiver):
                cls.defined.add(name)
        func = node.func
        imports = (isinstance(func, ast.Name) and func.id == "__import__") or (
            isinstance(func, ast.Attribute) and func.attr == "import_module")
        if imports and node.args and _private_module(_string(node.args[0])):
            self.report(node, f"{ast.unparse(func)}({_string(node.args[0])!r})", "a private module")

    def _library_path(self, node):
        """``tensorflow.compat.v1`` for ``tf.compat.v1`` when ``tf`` is a library's alias, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            path = self._library_path(node.value)
            return path and f"{path}.{node.attr}"
        return None

    def check(self, defined):
        """Reports each use that is a library's private module or attribute, or a private attribute that the
        project (``defined``: every private name it defines) does not define."""
        for node, receiver, name, cls in self.uses:
            text = f"{ast.unparse(receiver)}.{name}"
            path = self._library_path(receiver)
            if path is not None:
                if _private_module(f"{path}.{name}"):
                    self.report(node, text, f"a private part of {path.split('.')[0]}")
            elif not _private(name):
                continue
            elif _is_self(receiver) and cls is not None:
                related = [cls] + cls.lineage() + cls.lineage(up=False)
                if not any(name in c.defined for c in related) and (
                        any(c.external for c in related) or name not in defined):
                    self.report(node, text, "defined neither by the class nor its project relatives: inherited")
            elif _is_super(receiver) and cls is not None:
                if not any(name in c.defined for c in cls.lineage()):
                    self.report(node, text, "defined by no project ancestor: inherited")
            elif name not in defined:
                self.report(node, text, "defined nowhere in the project")


def _link(files):
    """Links every project class to its project parents and children (by the base's last name) and returns every
    private name the project defines."""
    classes, defined = {}, set()
    for file in files:
        defined |= file.defined
        for name, cls in file.classes:
            classes.setdefault(name, []).append(cls)
    for file in files:
        for _, cls in file.classes:
            defined |= cls.defined
            for base in cls.bases:
                if base in BUILTIN_BASES:
                    continue
                parents = None if base.split(".")[0] in ("keras", "tf", "tensorflow") else classes.get(
                    base.split(".")[-1])
                cls.external = cls.external or not parents
                for parent in parents or ():
                    cls.parents.append(parent)
                    parent.children.append(cls)
    return {name for name in defined if _private(name)}


def private_uses(root=ROOT, tops=SCANNED, exceptions=EXCEPTIONS):
    """``path:line: use (why)`` for every private use in the Python files under ``root / top`` for each of ``tops``,
    file by file, line by line, but the ``exceptions``."""
    files = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative not in ALLOWED:
                files.append(_File(relative, ast.parse(path.read_text(encoding="utf-8"), relative)))
    defined = _link(files)
    found = []
    for file in files:
        file.check(defined)
        for line, use, why in sorted(dict.fromkeys(file.found), key=lambda report: report[0]):
            if f"{file.path}: {use}" not in exceptions:
                found.append(f"{file.path}:{line}: {use} ({why})")
    return found


def test_no_private_keras_or_tensorflow_internals_outside_keras_fixes():
    found = private_uses()
    assert not found, (
        "Private Keras / TensorFlow internals outside applications/core/runs/keras_fixes.py (use a public API, or a "
        "named, documented, version-ranged function there):\n" + "\n".join(found)
    )


def test_the_scan_tells_library_internals_from_the_projects_own_private_names(tmp_path):
    """The rules on a small project: each flagged line is a library internal, each other line is not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "import keras\n"
        "import tensorflow as tf\n"
        "from keras import ops\n"
        "from keras.src import backend\n"                                  # 4 flagged
        "def _helper():\n"
        "    return importlib.import_module('tensorflow.python.ops')\n"    # 6 flagged
        "class Callback(keras.callbacks.Callback):\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "        object.__setattr__(self, '_set', 2)\n"
        "    def on_epoch_end(self, epoch, logs=None):\n"
        "        return self._mine + self._set + self._model.x + _helper()\n"   # 12 flagged: self._model
        "class Base:\n"
        "    def use(self):\n"
        "        return self._filled + ops.relu(1)\n"  # a subclass fills it
        "class Sub(Base, keras.layers.Layer):\n"
        "    def __init__(self):\n"
        "        self._filled = tf.constant(1) + tf.__internal__.x\n"   # 18 flagged: tf.__internal__
        "    def call(self, x):\n"
        "        super()._load_model()\n"                                  # 20 flagged: super()._load_model
        "        x._pop = 1\n"                                             # 21 flagged: a foreign object's
        "        return a._helper(), x._set, x._keras_mask, getattr(x, '_num_workers', 1), keras.Model._fit\n"
    )  # 22 flagged: x._keras_mask, getattr(x, '_num_workers'), keras.Model._fit
    found = private_uses(tmp_path, ("pkg",), exceptions={"pkg/a.py: x._set": "never reported: ours"})
    assert [line.partition(": ")[2] for line in found] == [
        "from keras.src import backend (a private module)",
        "importlib.import_module('tensorflow.python.ops') (a private module)",
        "self._model (defined neither by the class nor its project relatives: inherited)",
        "tf.__internal__.x (a private part of tensorflow)",
        "super()._load_model (defined by no project ancestor: inherited)",
        "x._pop (defined nowhere in the project)",
        "x._keras_mask (defined nowhere in the project)",
        "x._num_workers (defined nowhere in the project)",
        "keras.Model._fit (a private part of keras)",
    ], found
    assert [int(line.split(":")[1]) for line in found] == [4, 6, 12, 18, 20, 21, 22, 22, 22]
    assert len(private_uses(tmp_path, ("pkg",), exceptions={"pkg/a.py: x._pop": "an exception"})) == len(found) - 1
