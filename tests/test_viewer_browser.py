"""The attention viewer in a real browser: Debian's headless Chromium driven by chromium-driver through selenium.

Each application's page (tests/viewer_pages.py: tiny models, the hooks' output) opens from a file URL with the
network cut (every host name unresolvable) and logs no console error in any view; then, view by view, the test
switches layer and head, hovers a token (a cell, a word, a patch), reads the weights the page shows from the DOM
and compares them with the model's numbers to 3 decimals. Screenshots of every view are kept in
``artifacts/viewer-browser/`` (or ``$VIEWER_ARTIFACTS``), ignored by git.

.ci/run installs chromium and chromium-driver; elsewhere, without them, the tests skip and say so (under CI, where
they must be installed, they fail instead).
"""

import importlib.util
import os
import shutil
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import viewer_pages

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("VIEWER_ARTIFACTS") or ROOT / "artifacts" / "viewer-browser")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")
TOLERANCE = 0.0005 + 1e-5  # "equal to 3 decimals": the shown 3-decimal number within half a unit of the true weight


def _viewer_load():
    """benchmarks/viewer_load.py, the benchmarks' browser helpers, loaded by path (the environment variables it
    sets by default are put back)."""
    spec = importlib.util.spec_from_file_location("viewer_load_benchmark", ROOT / "benchmarks" / "viewer_load.py")
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(os.environ):
        spec.loader.exec_module(module)
    return module


hover = _viewer_load().hover


def _missing():
    try:
        import selenium  # noqa: F401
    except ImportError:
        return 'selenium is not installed (pip install -e ".[test]")'
    if CHROMIUM is None or DRIVER is None:
        return "Chromium and its driver are not installed (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def driver():
    reason = _missing()
    if reason:
        if os.environ.get("CI"):  # .ci/run installs them: there, a missing browser is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--host-resolver-rules=MAP * ~NOTFOUND", "--no-first-run"):
        options.add_argument(argument)  # the last but one: no host name resolves, the page must need none
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(DRIVER))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield browser
    browser.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """name -> (path of the written page, viewer, the model's numbers)."""
    directory = tmp_path_factory.mktemp("viewer-pages")
    builders = {
        "nmt-bahdanau": lambda: viewer_pages.nmt_viewer("bahdanau"),
        "nmt-transformer": lambda: viewer_pages.nmt_viewer("transformer"),
        "bert": viewer_pages.bert_viewer,
        "gpt": viewer_pages.gpt_viewer,
        "captioning-soft": lambda: viewer_pages.captioning_viewer("soft"),
        "captioning-transformer": lambda: viewer_pages.captioning_viewer("transformer"),
        "vit": viewer_pages.vit_viewer,
    }
    out = {}
    for name, build in builders.items():
        viewer, expected = build()
        out[name] = (viewer.write(directory / f"{name}.html"), viewer, expected)
    return out


def _severe(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _open(driver, path):
    """Loads ``path`` from its file URL and waits for the page's ready marker; returns the console's errors."""
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(Path(path).as_uri())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = driver.execute_script("var d = document.documentElement; return [d.dataset.ready, d.dataset.error];")
        if state[0] or state[1]:
            break
        time.sleep(0.02)
    assert state[1] is None, f"the page failed: {state[1]}"
    assert state[0] == "true", "the page never set its ready marker"
    return _severe(driver)


def _by(css):
    from selenium.webdriver.common.by import By

    return By.CSS_SELECTOR, css


def _select(driver, element_id, value):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(*_by(f"#{element_id}"))).select_by_value(str(value))


def _shot(driver, name):
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 2_000
    return path


def _assert_shown(shown, true, what):
    shown, true = np.asarray(shown, float), np.asarray(true, float)
    assert shown.shape == true.shape, f"{what}: {shown.shape} numbers shown, {true.shape} expected"
    worst = np.abs(shown - true).max()
    assert worst <= TOLERANCE, f"{what}: shown {shown} vs the model's {np.round(true, 4)} (off by {worst:.5f})"


@pytest.mark.parametrize("name", ["nmt-bahdanau", "nmt-transformer", "bert", "gpt", "captioning-soft",
                                  "captioning-transformer", "vit"])
def test_each_application_page_opens_offline_without_console_errors(driver, pages, name):
    path, viewer, _ = pages[name]
    assert _open(driver, path) == []
    tabs = driver.find_elements(*_by("nav.tabs button"))
    expected_tabs = (["head", "model", "matrix"] if viewer.sets else []) + (["image"] if viewer.images else [])
    assert [t.get_attribute("data-view") for t in tabs] == expected_tabs
    for tab in tabs:
        view = tab.get_attribute("data-view")
        tab.click()
        assert driver.find_element(*_by(f"#view-{view}")).is_displayed()
        _shot(driver, f"{name}-{view}")
    assert _severe(driver) == []


def test_head_view_layer_head_and_hovered_weights(driver, pages):
    path, viewer, _ = pages["bert"]
    weights = viewer.sets[0]["weights"]  # (3, 4, 15, 15): the model's, before the page's quantization
    _open(driver, path)
    assert driver.execute_script("return document.documentElement.dataset.view") == "head"
    _select(driver, "hv-layer", 1)
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).double_click(driver.find_element(*_by('.head-toggle[data-head="2"]'))).perform()
    legend = driver.find_element(*_by("#hv-legend"))
    assert legend.get_attribute("data-heads") == "2" and legend.get_attribute("data-layer") == "1"
    hover(driver, driver.find_element(*_by('#hv-queries .tok[data-index="3"]')))
    assert legend.get_attribute("data-side") == "query" and legend.get_attribute("data-index") == "3"
    keys = driver.find_elements(*_by("#hv-keys .tok"))
    _assert_shown([k.get_attribute("data-weight") for k in keys], weights[1, 2, 3], "layer 2, head 3, query 3")
    assert [k.find_element(*_by(".w")).text for k in keys] == [k.get_attribute("data-weight") for k in keys]
    _shot(driver, "bert-head-hover")
    # the other direction: a key's weights from every query; then all heads: their mean
    hover(driver, driver.find_element(*_by('#hv-keys .tok[data-index="9"]')))
    queries = driver.find_elements(*_by("#hv-queries .tok"))
    _assert_shown([q.get_attribute("data-weight") for q in queries], weights[1, 2, :, 9], "to key 9")
    driver.find_element(*_by("#hv-all")).click()
    _select(driver, "hv-layer", 2)
    hover(driver, driver.find_element(*_by('#hv-queries .tok[data-index="0"]')))
    _assert_shown([k.get_attribute("data-weight") for k in driver.find_elements(*_by("#hv-keys .tok"))],
                  weights[2, :, 0].mean(axis=0), "layer 3, mean of the heads, query 0")
    assert _severe(driver) == []


def test_model_view_click_opens_the_head(driver, pages):
    path, viewer, _ = pages["bert"]
    _open(driver, path)
    driver.find_element(*_by("#tab-model")).click()
    cells = driver.find_elements(*_by("#mv-grid canvas.mv-cell"))
    assert len(cells) == 3 * 4
    driver.find_element(*_by('canvas.mv-cell[data-layer="2"][data-head="1"]')).click()
    assert driver.execute_script("return document.documentElement.dataset.view") == "head"
    legend = driver.find_element(*_by("#hv-legend"))
    assert legend.get_attribute("data-layer") == "2" and legend.get_attribute("data-heads") == "1"
    hover(driver, driver.find_element(*_by('#hv-queries .tok[data-index="5"]')))
    _assert_shown([k.get_attribute("data-weight") for k in driver.find_elements(*_by("#hv-keys .tok"))],
                  viewer.sets[0]["weights"][2, 1, 5], "layer 3, head 2, query 5")
    assert _severe(driver) == []


def _hover_cell(driver, canvas, rows, cols, t, s):
    rect = canvas.rect
    hover(driver, canvas, (s + 0.5) * rect["width"] / cols, (t + 0.5) * rect["height"] / rows)


def test_matrix_view_alignment_and_cross_attention(driver, pages):
    path, viewer, expected = pages["nmt-bahdanau"]
    _open(driver, path)
    assert driver.execute_script("return document.documentElement.dataset.view") == "matrix"  # one map: its matrix
    rows, cols = expected["alignment"].shape
    info = driver.find_element(*_by("#mx-info"))
    for t, s in ((0, 0), (2, 3), (rows - 1, cols - 1)):
        _hover_cell(driver, driver.find_element(*_by("#mx-canvas")), rows, cols, t, s)
        assert (info.get_attribute("data-target-index"), info.get_attribute("data-source-index")) == (str(t), str(s))
        _assert_shown([info.get_attribute("data-weight")], [expected["alignment"][t, s]], f"alignment ({t}, {s})")
    entry = viewer.sets[0]  # the pair is named too
    assert f'\u201c{entry["target_tokens"][-1]}\u201d' in info.text and entry["source_tokens"][-1] in info.text
    _shot(driver, "nmt-bahdanau-matrix-hover")

    path, viewer, expected = pages["nmt-transformer"]
    _open(driver, path)
    driver.find_element(*_by("#tab-matrix")).click()
    _select(driver, "mx-set", 2)  # cross-attention
    _select(driver, "mx-layer", 1)
    _select(driver, "mx-head", 1)
    cross = expected["cross-attention"]  # (2, 2, T, S), from model.attention_maps
    rows, cols = cross.shape[-2:]
    _hover_cell(driver, driver.find_element(*_by("#mx-canvas")), rows, cols, 3, 1)
    _assert_shown([info.get_attribute("data-weight") for info in [driver.find_element(*_by("#mx-info"))]],
                  [cross[1, 1, 3, 1]], "cross-attention layer 2, head 2, (3, 1)")
    _select(driver, "mx-head", -1)  # the mean of the heads
    _hover_cell(driver, driver.find_element(*_by("#mx-canvas")), rows, cols, 4, 2)
    _assert_shown([driver.find_element(*_by("#mx-info")).get_attribute("data-weight")],
                  [cross[1, :, 4, 2].mean()], "cross-attention layer 2, mean of heads, (4, 2)")
    assert _severe(driver) == []


def test_image_view_word_maps(driver, pages):
    path, viewer, _ = pages["captioning-transformer"]
    weights = viewer.images[0]["weights"]  # (2 layers, 2 heads, 4 words and <end>, 16 cells)
    _open(driver, path)
    assert driver.execute_script("return document.documentElement.dataset.view") == "image"
    _select(driver, "im-layer", 1)
    _select(driver, "im-head", 0)
    overlay = driver.find_element(*_by("#im-overlay"))
    info = driver.find_element(*_by("#im-info"))
    for word, (r, c) in ((2, (1, 2)), (0, (3, 0)), (4, (2, 2))):
        hover(driver, driver.find_element(*_by(f'.im-query[data-index="{word}"]')))
        _hover_cell(driver, overlay, 4, 4, r, c)
        assert info.get_attribute("data-query") == str(word) and info.get_attribute("data-cell") == f"{r},{c}"
        _assert_shown([info.get_attribute("data-weight")], [weights[1, 0, word, r * 4 + c]], f"word {word} ({r}, {c})")
        _assert_shown([info.get_attribute("data-peak")], [weights[1, 0, word].max()], f"word {word} peak")
    _shot(driver, "captioning-transformer-image-hover")
    _select(driver, "im-head", -1)
    hover(driver, driver.find_element(*_by('.im-query[data-index="1"]')))
    _hover_cell(driver, overlay, 4, 4, 0, 1)
    _assert_shown([info.get_attribute("data-weight")], [weights[1, :, 1, 1].mean()], "mean of heads, word 1")
    assert _severe(driver) == []


def test_image_view_patch_queries(driver, pages):
    path, viewer, expected = pages["vit"]
    maps = expected["maps"]  # (2, 2, 17, 17): [CLS] + 4 x 4 patches, from model.encode
    _open(driver, path)
    overlay, info = driver.find_element(*_by("#im-overlay")), driver.find_element(*_by("#im-info"))
    assert info.get_attribute("data-query") == "0"  # [CLS] first
    for r, c in ((2, 1), (0, 3)):
        _hover_cell(driver, overlay, 4, 4, r, c)
        query = 1 + r * 4 + c
        assert info.get_attribute("data-query") == str(query)
        row = maps[0, :, query].mean(axis=0)  # layer 1, the mean of the heads (the default)
        _assert_shown([info.get_attribute("data-peak")], [row[1:].max()], f"patch ({r}, {c}) peak")
        pr, pc = map(int, info.get_attribute("data-peak-cell").split(","))
        assert row[1 + pr * 4 + pc] >= row[1:].max() - 2e-5, "the peak is not where the page says"
    _shot(driver, "vit-image-hover")
    assert _severe(driver) == []
