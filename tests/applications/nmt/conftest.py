"""Fixtures shared by the NMT tests: the German-English corpus and its seed-0 split, loaded once per session."""

import os

import pytest
from attnlayers.applications import nmt


@pytest.fixture(scope="session")
def de_en():
    if not os.path.exists(nmt.DE_EN_PATH):
        # A real absence on a user's machine; CI installs the corpus (.ci/run), so there it is a failure.
        message = f"German-English pairs not installed at {nmt.DE_EN_PATH}: apt-get install trans-de-en"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return nmt.load_de_en()


@pytest.fixture(scope="session")
def de_en_splits(de_en):
    return nmt.split_pairs(de_en)
