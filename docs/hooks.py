"""MkDocs hooks of the documentation site (mkdocs.yml names this file; it is not a page).

The API reference is read from the sources by mkdocstrings' Python handler (griffe, statically: nothing is
imported). Installed, ``applications/`` is ``attnlayers.applications``; in the repository the two are side by side.
Before each build, :func:`on_config` lays out a temporary ``attnlayers/`` as the installed package is (a copy of the
Python files of ``attnlayers/`` with ``applications/`` copied in under it) and points the handler at it, so that
griffe sees one package tree with the installed names (``attnlayers.applications.gpt.GPT``) and relative imports
resolve. A copy, not links: griffe follows a link back to its target and would find ``attnlayers/`` without
``applications``. Each build has its own folder (two builds at once do not share one), removed after the build.
"""

import os
import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
_folders = []


def lay_out_package(destination):
    """Writes ``destination/attnlayers``, the package as installed, from the repository's Python files."""

    def not_python(folder, names):
        return [name for name in names if name == "__pycache__"
                or not (name.endswith(".py") or os.path.isdir(os.path.join(folder, name)))]

    shutil.copytree(ROOT / "attnlayers", Path(destination) / "attnlayers", ignore=not_python)
    shutil.copytree(ROOT / "applications", Path(destination) / "attnlayers" / "applications", ignore=not_python)


@event_priority(100)  # before mkdocstrings' own on_config, which makes the handler from these options
def on_config(config):
    folder = tempfile.mkdtemp(prefix="attnlayers-api-sources-")
    _folders.append(folder)
    lay_out_package(folder)
    config.plugins["mkdocstrings"].config.handlers["python"]["paths"] = [folder]
    return config


def on_post_build(config):
    while _folders:
        shutil.rmtree(_folders.pop(), ignore_errors=True)


def on_build_error(error):
    on_post_build(None)
