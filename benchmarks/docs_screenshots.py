"""Screenshots of the documentation site for docs/images/: the home page, a guide and an API reference page.

Builds the site (``mkdocs build --strict``) into a temporary folder, serves it on 127.0.0.1 and opens each page in
headless Chromium (benchmarks/viewer_load.py's browser: no host name resolves), then writes each screenshot as a
palette PNG (256 colours, optimised) under ``--out``; a page that logs a console error stops the script.

Run:  .venv/bin/python benchmarks/docs_screenshots.py                 (writes docs/images/site-*.png)
      .venv/bin/python benchmarks/docs_screenshots.py --guide guides/nmt.html --width 1440 --height 900
"""

import argparse
import functools
import http.server
import io
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from viewer_load import chromium  # noqa: E402

PAGES = {"home": "index.html", "api": "reference/attnlayers/multi-head.html"}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def build_site(out):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"mkdocs build --strict failed:\n{run.stdout}{run.stderr}")


def optimised_png(png_bytes, colours=256):
    """A palette PNG of the screenshot (``colours`` colours, zlib level 9)."""
    image = Image.open(io.BytesIO(png_bytes)).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
    return out.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"), help="folder of the PNGs")
    parser.add_argument("--guide", default="guides/gpt.html", help="the guide's page in the built site")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as directory:
        site = Path(directory)
        build_site(site)
        if not (site / args.guide).is_file():
            sys.exit(f"the built site has no {args.guide}; pass --guide PAGE")
        pages = dict(PAGES, guide=args.guide)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                functools.partial(_QuietHandler, directory=str(site)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        driver = chromium(args.width, args.height, local_server=True)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        try:
            for name, page in pages.items():
                driver.get_log("browser")
                driver.get(f"http://127.0.0.1:{httpd.server_address[1]}/{page}")
                deadline = time.monotonic() + 20
                while driver.execute_script("return document.readyState") != "complete":
                    if time.monotonic() > deadline:
                        sys.exit(f"{page} did not load")
                    time.sleep(0.05)
                time.sleep(0.5)  # fonts and the navigation's layout settle
                errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
                if errors:
                    sys.exit(f"{page}: console errors {errors}")
                data = optimised_png(driver.get_screenshot_as_png())
                path = out / f"site-{name}.png"
                path.write_bytes(data)
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {page}, "
                      f"{len(data) / 1024:.0f} KB")
        finally:
            driver.quit()
            httpd.shutdown()


if __name__ == "__main__":
    main()
