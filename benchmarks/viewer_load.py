"""The attention viewer's size and load time at BERT-base scale: 12 layers x 12 heads on 128 tokens.

Builds softmax maps (12, 12, 128, 128) (random logits ~ N(0, 2^2): many weights above the head view's line floor,
little for deflate to squeeze; real BERT maps are peakier and compress better), writes the page with
``attnlayers.viewer`` and loads it from its file URL in headless Chromium (Debian's chromium + chromium-driver,
through selenium), the network cut as in tests/test_viewer_browser.py. Reports:

- the file size and the time to write it;
- the load time: navigation start to the page's ready marker (``window.attnViewer.readyAt``, set in the first
  animation frame after the data is decoded and the head view drawn), the first (cold) load and the median of the
  others;
- the time to open the model view (144 maps) and to redraw the head view for a hovered token.

Run:  .venv/bin/python benchmarks/viewer_load.py                    (--help for flags)
      .venv/bin/python benchmarks/viewer_load.py --layers 6 --heads 12 --tokens 64 --loads 3
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")

import numpy as np  # noqa: E402

from attnlayers.viewer import AttentionViewer  # noqa: E402


def chromium(width=1280, height=900, local_server=False):
    """A headless Chromium driven by chromium-driver (selenium); no host name resolves (but 127.0.0.1 with
    ``local_server``: a site served on this machine)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        sys.exit("needs Chromium and its driver: apt-get install chromium chromium-driver")
    options = Options()
    options.binary_location = binary
    rules = "MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if local_server else "")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", f"--host-resolver-rules={rules}", "--no-first-run"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver))


def open_page(driver, path, timeout=60):
    """Loads ``path``; returns (ms from navigation start to the ready marker, wall seconds, console errors)."""
    driver.get("about:blank")
    driver.get_log("browser")
    start = time.perf_counter()
    driver.get(Path(path).resolve().as_uri())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, error = driver.execute_script("return [window.attnViewer && window.attnViewer.readyAt, "
                                             "document.documentElement.dataset.error || null]")
        if ready is not None or error:
            break
        time.sleep(0.005)
    wall = time.perf_counter() - start
    if error or ready is None:
        raise RuntimeError(f"the page did not become ready: {error or 'timed out'}")
    severe = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return float(ready), wall, severe


def hover(driver, element, x=None, y=None):
    """Moves the mouse over ``element`` (its centre, or the point (x, y) px from its top left corner)."""
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver, duration=0)
    if x is None:
        chain.move_to_element(element)
    else:
        rect = element.rect
        chain.move_to_element_with_offset(element, round(x - rect["width"] / 2), round(y - rect["height"] / 2))
    chain.perform()


def maps(layers, heads, tokens, seed=0):
    logits = np.random.default_rng(seed).normal(size=(layers, heads, tokens, tokens)).astype("float32") * 2
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--loads", type=int, default=5, help="page loads (the first is reported apart)")
    parser.add_argument("--keep", default=None, help="also copy the page here")
    args = parser.parse_args(argv)

    weights = maps(args.layers, args.heads, args.tokens)
    tokens = [f"tok{i}" for i in range(args.tokens)]
    directory = tempfile.mkdtemp(prefix="viewer-load-")
    path = os.path.join(directory, "viewer.html")
    start = time.perf_counter()
    AttentionViewer("viewer_load").add_attention("self-attention", weights, tokens).write(path)
    write_seconds = time.perf_counter() - start
    size = os.path.getsize(path)
    if args.keep:
        shutil.copy(path, args.keep)

    driver = chromium()
    try:
        loads = [open_page(driver, path) for _ in range(max(args.loads, 2))]
        errors = [m for _, _, severe in loads for m in severe]
        start = time.perf_counter()
        driver.find_element("id", "tab-model").click()
        driver.execute_script("return document.querySelectorAll('#mv-grid canvas').length")
        model_view = time.perf_counter() - start
        driver.find_element("id", "tab-head").click()
        hover = driver.execute_script(
            "var v = window.attnViewer.app.views.head, t = performance.now();"
            "v.setFocus({side: 'query', index: 5}); return performance.now() - t;")
    finally:
        driver.quit()
        shutil.rmtree(directory, ignore_errors=True)

    ready = [r for r, _, _ in loads]
    print(f"maps ({args.layers}, {args.heads}, {args.tokens}, {args.tokens}) = {weights.size:,} weights")
    print(f"page: {size / 1e6:.2f} MB ({size / weights.size:.2f} bytes per weight), written in {write_seconds:.2f} s")
    print(f"load, navigation start -> ready: first {ready[0]:.0f} ms, then median "
          f"{statistics.median(ready[1:]):.0f} ms (min {min(ready[1:]):.0f}, max {max(ready[1:]):.0f}) "
          f"over {len(ready) - 1} loads; "
          f"wall time from driver.get to ready seen: median {statistics.median(w for _, w, _ in loads[1:]):.2f} s")
    print(f"model view ({args.layers * args.heads} maps) opened in {model_view * 1000:.0f} ms; head view hover "
          f"redraw {hover:.0f} ms (script time)")
    print(f"console errors: {len(errors)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
