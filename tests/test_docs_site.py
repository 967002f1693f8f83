"""The documentation site builds with warnings as errors and opens in a real browser, offline.

``mkdocs build --strict`` (mkdocs.yml) into a temporary folder: a broken link, an unknown reference in a docstring,
a page missing from the navigation or a docstring the reference cannot parse fails the build. The built site is then
served by a local ``http.server`` (Material's search runs in a web worker, which browsers refuse from file:// URLs)
and opened in Debian's headless Chromium with every host name unresolvable, as tests/test_viewer_browser.py does:
the home page, a guide and an API reference page load without a console error, and the search box finds a layer.

.ci/run installs chromium and chromium-driver; elsewhere, without them, the browser test skips and says so (under CI,
where they must be installed, it fails instead).
"""

import functools
import http.server
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built by ``mkdocs build --strict`` (the folder). Not ``--quiet``: it drops the warnings that
    ``--strict`` counts, and the build passes with a broken link."""
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def test_site_builds_strict_with_every_page(site):
    for page in ("index.html", "changelog.html", "reference/index.html"):
        assert (site / page).is_file(), f"the built site has no {page}"
    assert any((site / "guides").glob("*.html")), "the built site has no guide (docs/guides/*.md)"
    assert (site / "search" / "search_index.json").is_file()


@pytest.fixture(scope="module")
def server(site):
    """http://127.0.0.1:PORT serving the built site."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output is the browser's console, not the access log
        pass


def _chromium():
    """benchmarks/viewer_load.py's headless Chromium (no host name resolves), loaded by path."""
    spec = importlib.util.spec_from_file_location("viewer_load_benchmark", ROOT / "benchmarks" / "viewer_load.py")
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(os.environ):
        spec.loader.exec_module(module)
    return module.chromium(local_server=True)


def _missing():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return 'selenium is not installed (pip install -e ".[test]")'
    if not any(map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))) or not shutil.which("chromedriver"):
        return "Chromium and its driver are not installed (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        if os.environ.get("CI"):  # .ci/run installs them: there, a missing browser is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    driver = _chromium()
    yield driver
    driver.quit()


def _wait(condition, what, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _open(browser, url):
    """Loads ``url``, waits for Material's script to run; returns the console's errors."""
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(url)
    _wait(lambda: browser.execute_script("return document.readyState === 'complete' && !!window.document$"),
          f"{url} to load Material's script")
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def test_pages_open_and_search_finds_a_layer(site, server, browser):
    from selenium.webdriver.common.by import By

    guide = sorted((site / "guides").glob("*.html"))[0].relative_to(site).as_posix()
    for page in ("index.html", guide, "reference/attnlayers/multi-head.html"):
        errors = _open(browser, f"{server}/{page}")
        assert not errors, f"{page}: console errors {errors}"
        assert browser.find_elements(By.CSS_SELECTOR, "article h1"), f"{page} shows no title"
    assert browser.find_elements(By.CSS_SELECTOR, "[id='attnlayers.MultiHeadAttention']"), \
        "the API page has no MultiHeadAttention entry"

    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")  # in the header at this width
    box.click()
    box.send_keys("MultiHeadAttention")
    results = _wait(lambda: browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item"), "search results")
    assert any("MultiHeadAttention" in item.text for item in results), [item.text for item in results]
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, f"search: console errors {errors}"


def test_docstring_conventions_read_as_google_style():
    """docs/griffe_docstrings.py: grouped parameters split, ``Example:`` read as Examples, other sections' items a
    list, Sphinx roles code."""
    spec = importlib.util.spec_from_file_location("griffe_docstrings", ROOT / "docs" / "griffe_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = ("Sums, as :class:`~attnlayers.Attention`.\n\nArgs:\n    a, b (ints): the terms,\n        both.\n    c,\n"
            "        d: more.\n\nCall arguments:\n    x: (B, T).\n    mask: (B, T).\n\nExample:\n>>> f(1, 2)")
    assert module.rewrite(text) == (
        "Sums, as `Attention`.\n\nArgs:\n    a: the terms, both.\n    b: the terms, both.\n    c: more.\n"
        "    d: more.\n\nCall arguments:\n    - `x`: (B, T).\n    - `mask`: (B, T).\n\nExamples:\n    >>> f(1, 2)")
