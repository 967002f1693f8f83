"""applications.core.lazy: every module of an application package is its attribute after
``from attnlayers.applications import <app>`` (README: ``bert.viewer.attention_viewer(...)``), imported on first
read, never when the package loads."""

import importlib
import pkgutil
import sys
import types

import pytest

import attnlayers.applications

APPLICATIONS = sorted(info.name for info in pkgutil.iter_modules(attnlayers.applications.__path__) if info.ispkg)


def test_the_applications_are_found_from_the_folders(monkeypatch):
    assert {"bert", "captioning", "core", "gpt", "nmt", "vision"} <= set(APPLICATIONS)
    for app in APPLICATIONS:  # `import attnlayers.applications` then `attnlayers.applications.bert`
        module = importlib.import_module(f"attnlayers.applications.{app}")
        monkeypatch.delattr(attnlayers.applications, app)
        assert getattr(attnlayers.applications, app) is module


@pytest.mark.parametrize("app", APPLICATIONS)
def test_every_module_file_is_an_attribute_of_its_package(app, monkeypatch):
    """As the README's viewer table reads: ``from attnlayers.applications import bert; bert.viewer``. A module that
    some earlier import (another test's) bound on the package is unbound first, so that the package's own hook
    answers. (Subpackages such as ``captioning.data`` import all their modules; ``core.corpora.tweets`` is the
    function of the module of that name, by design.)"""
    package = importlib.import_module(f"attnlayers.applications.{app}")  # what `from ... import <app>` binds
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))  # its files
    assert "lazy" in names if app == "core" else "viewer" in names, names  # the listing found the files
    for name in names:
        module = importlib.import_module(f"{package.__name__}.{name}")
        if name in vars(package):
            monkeypatch.delattr(package, name)
        assert getattr(package, name, None) is module, f"{package.__name__}.{name}"


def _make_package(tmp_path, name, table=None):
    """A package on disk with modules `heavy` (records its import) and `other`, whose __init__ uses the hook."""
    root = tmp_path / name
    root.mkdir()
    (root / "heavy.py").write_text("import sys\nsys.modules[__name__.rsplit('.', 1)[0]].LOADED.append('heavy')\n"
                                   "VALUE = 3\n")
    (root / "other.py").write_text("")
    (root / "__init__.py").write_text(
        "from attnlayers.applications.core.lazy import lazy_attributes\n"
        "LOADED = []\n"
        f"__getattr__ = lazy_attributes(__name__, {table!r})\n")
    return root


def test_the_hook_imports_a_module_on_first_read_not_before(tmp_path, monkeypatch):
    _make_package(tmp_path, "lazy_probe", {"VALUE": "heavy"})
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("lazy_probe", "lazy_probe.heavy", "lazy_probe.other"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    probe = importlib.import_module("lazy_probe")
    assert probe.LOADED == [] and "lazy_probe.heavy" not in sys.modules  # nothing imported at package import
    assert {"heavy", "other", "VALUE"}.isdisjoint(dir(probe))  # dir(): what is imported (help() imports nothing)
    assert isinstance(probe.other, types.ModuleType) and probe.LOADED == []
    assert probe.VALUE == 3 and probe.LOADED == ["heavy"]  # a table name: its module's attribute
    assert probe.heavy is sys.modules["lazy_probe.heavy"] and probe.LOADED == ["heavy"]  # imported once
    with pytest.raises(AttributeError, match="module 'lazy_probe' has no attribute 'missing'"):
        probe.missing


def test_a_table_name_that_is_also_a_module_is_refused(tmp_path, monkeypatch):
    _make_package(tmp_path, "lazy_clash", {"other": "heavy"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_clash", raising=False)
    with pytest.raises(ValueError, match=r"`table` of 'lazy_clash' names \['other'\], which are also modules"):
        importlib.import_module("lazy_clash")


@pytest.mark.parametrize("old, new, name", [
    ("nmt.recipes", "nmt.variants", "get_variant"),
    ("captioning.recipes", "captioning.builders", "build_captioner"),
    ("gpt.recipes", "gpt.runs", "TrainingSettings"),
    ("vision.recipes", "vision.runs", "TrainingSettings"),
    ("bert.recipes", "bert.runs", "PretrainingSettings"),
])
def test_renamed_recipe_modules_are_deprecated_aliases(old, new, name):
    """"recipe" is core's run_recipe only: the applications' modules of that name were renamed; the old ones warn."""
    old_module = importlib.import_module(f"attnlayers.applications.{old}")
    new_module = importlib.import_module(f"attnlayers.applications.{new}")
    with pytest.warns(DeprecationWarning, match=f"attnlayers.applications.{new}"):
        assert getattr(old_module, name) is getattr(new_module, name)


def test_core_modules_keep_their_former_names():
    """core/ grouped into sub-packages: ``core.runtime`` (and every former module name) is still the module, with a
    DeprecationWarning naming where it is now."""
    from attnlayers.applications import core

    assert set(core.MOVED) >= {"runtime", "distribution", "scenes", "generation", "scheduled_sampling", "corpora"}
    for old, new in core.MOVED.items():
        with pytest.warns(DeprecationWarning, match=f"core.{new}"):
            assert getattr(core, old) is importlib.import_module(f"attnlayers.applications.core.{new}"), old
