"""An interactive attention viewer: one self-contained HTML page, offline, from any attention maps.

    viewer = AttentionViewer("my model")
    viewer.add_attention("encoder self-attention", scores, tokens)                  # (L, N, T, T)
    viewer.add_attention("cross-attention", cross, source_tokens=src, target_tokens=tgt)   # (L, N, T, S)
    viewer.add_image("caption", image, weights, words, grid_shape=(8, 8))          # (T, 64) per word
    viewer.write("viewer.html")

    write_attention_viewer("viewer.html", scores, tokens)                            # one set, one call

The page has four views, each shown when the data has something for it:

- **head view** (after bertviz's, Vig 2019): the query tokens on the left, the key tokens on the right, a line per
  pair weighted by its attention weight, one colour per head; heads toggled (click; double-click keeps only that
  head), a layer selector; hovering a token draws its lines alone and writes the weights (the mean over the active
  heads: with one head active, that head's) beside the tokens on the other side. Self-attention and
  cross-attention (target on the left, source on the right) alike.
- **model view**: a grid of layers x heads of small maps (each normalised to its own maximum); a click opens
  that layer and head in the head view.
- **matrix view**: the alignment matrix of one layer and head (or the mean of the heads) as a heatmap, source
  along the top, target down the side (Bahdanau et al. 2015, Fig. 3); hovering a cell shows the pair and its
  weight.
- **image view** (Xu et al. 2015, Figs. 2-3; ViT patches): the image with the map of the word under the cursor
  over it; for patch queries (a ViT) the map of the patch under the cursor.

Everything is inline: the script and the style come from ``viewer.js`` and ``viewer.css`` beside this module
(package data), the data sits in non-executed ``<script>`` elements, images are PNG ``data:`` URLs, and a
Content-Security-Policy forbids every fetch. No library, no network.

**Data.** Each map set is quantized to uint16 over its value range ``[lo, hi]`` (``[0, 1]`` for softmax weights:
``q = round(65535 (w - lo) / (hi - lo))``, an absolute error of at most ``(hi - lo) / 131070``, 7.6e-6 for
weights; far inside the 3 decimals the page shows), its high and low bytes stored as two planes (the high plane,
mostly zeros for attention, compresses well), deflated (zlib) and base64-encoded; the page inflates it with the
browser's own ``DecompressionStream``. A 12-layer x 12-head BERT on 128 tokens is a few MB
(benchmarks/viewer_load.py).

The page sets ``document.documentElement.dataset.ready = "true"`` (and ``window.attnViewer.readyAt``, ms since
navigation start) once its data is decoded and the first view drawn; an error is shown in the page and logged
with ``console.error``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import struct
import zlib

import numpy as np

from ._pictures import image_to_rgb, weights_to_numpy

__all__ = ["AttentionViewer", "read_attention_viewer", "write_attention_viewer"]

_ASSETS = os.path.dirname(os.path.abspath(__file__))
_LEVELS = 65535  # uint16 quantization
_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
        "connect-src 'none'; base-uri 'none'; form-action 'none'")


def _asset(name):
    path = os.path.join(_ASSETS, name)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:  # pragma: no cover - a broken install
        raise RuntimeError(f"attnlayers' viewer asset {name} is missing at {path}; reinstall attnlayers.") from e


# --- input checks -----------------------------------------------------------------------------------------------


def _to_numpy(weights, name):
    """A NumPy float64 copy of weights (NumPy, nested lists or a backend tensor)."""
    if isinstance(weights, (list, tuple)) and weights and not np.isscalar(weights[0]):
        parts = [_to_numpy(w, name) for w in weights]
        for i, part in enumerate(parts):  # a layer's (1, N, T, S), a batch of one, as (N, T, S)
            while part.ndim > 3 and part.shape[0] == 1:
                part = part[0]
            parts[i] = part
        shapes = {p.shape for p in parts}
        if len(shapes) != 1:
            raise ValueError(
                f"`{name}`: the per-layer maps must share one shape; received shapes {[p.shape for p in parts]}."
            )
        return np.stack(parts)
    return weights_to_numpy(weights).astype("float64")  # the heatmaps' rule: NumPy, lists, tensors of any backend


def _check_finite(w, name):
    bad = ~np.isfinite(w)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"`{name}` holds {int(bad.sum())} non-finite value(s) (NaN or inf), the first at index {where} of shape "
            f"{w.shape}; attention weights must be finite (a fully masked query has weights 0, not NaN)."
        )


def _labels(tokens, length, name, axis):
    if tokens is None:
        return [str(i) for i in range(length)]
    if isinstance(tokens, str):
        tokens = tokens.split()
    if isinstance(tokens, np.ndarray):
        tokens = tokens.tolist()
    labels = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in list(tokens)]
    if len(labels) != length:
        raise ValueError(
            f"`{name}` has {len(labels)} tokens but the weights have {length} {axis} positions; expected one token "
            "per position."
        )
    return labels


def _layers_heads(w, name, expected):
    """(T, S) / (N, T, S) / (L, N, T, S), leading axes of size 1 beyond 4 squeezed -> (L, N, T, S)."""
    received = w.shape
    while w.ndim > 4 and w.shape[0] == 1:
        w = w[0]
    if w.ndim == 2:
        w = w[None, None]
    elif w.ndim == 3:
        w = w[None]
    if w.ndim != 4:
        raise ValueError(
            f"`{name}` must have shape {expected}; received shape {received}. For a batch, select one example "
            "(weights[i])."
        )
    if 0 in w.shape:
        raise ValueError(f"`{name}` is empty (shape {received}); every axis needs at least one position.")
    return w


def _names(names, count, name, default):
    if names is None:
        return [f"{default} {i + 1}" for i in range(count)]
    names = [str(n) for n in names]
    if len(names) != count:
        raise ValueError(f"`{name}` has {len(names)} names; the weights have {count}.")
    return names


def _grid(value, name):
    try:
        pair = tuple(int(v) for v in value)
        ok = len(pair) == 2 and all(p >= 1 for p in pair) and all(float(v) == int(v) for v in value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"`{name}` must be two positive integers (height, width); received {value!r}.")
    return pair


# --- encoding ---------------------------------------------------------------------------------------------------


def _quantize(w):
    """(L, N, T, S) -> (payload base64 str, lo, hi): uint16 over [min(0, min w), max(1, max w)], byte planes,
    deflated."""
    lo, hi = min(0.0, float(w.min())), max(1.0, float(w.max()))
    q = np.rint((w - lo) * (_LEVELS / (hi - lo))).astype(np.uint16).ravel()
    planes = (q >> 8).astype(np.uint8).tobytes() + (q & 0xFF).astype(np.uint8).tobytes()
    return base64.b64encode(zlib.compress(planes, 6)).decode("ascii"), lo, hi


def _dequantize(payload, lo, hi, shape):
    raw = np.frombuffer(zlib.decompress(base64.b64decode(payload)), np.uint8)
    n = raw.size // 2
    q = raw[:n].astype(np.uint32) * 256 + raw[n:]
    return (lo + q * ((hi - lo) / _LEVELS)).reshape(shape)


def _png(rgb):
    """(H, W, 3) uint8 -> PNG bytes (zlib + struct: no imaging library)."""
    height, width = rgb.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
            + chunk(b"IEND", b""))


def _json_for_script(value):
    """JSON that cannot end its <script> element: every '<', '>' and '&' escaped."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# --- the viewer -------------------------------------------------------------------------------------------------


class AttentionViewer:
    """Collects attention maps and writes them as one self-contained interactive HTML page.

    Args:
        title: the page's title.
        view: the view the page opens on: "head", "model", "matrix" or "image"; None: the image view when there
            are images, else the matrix view for a single map (an RNN's alignment), else the head view.

    Each ``add_*`` method checks its input (ValueErrors naming the argument, the shape received and the one
    expected) and returns the viewer, so calls chain. :meth:`to_html` gives the page as a string, :meth:`write`
    saves it. ``sets`` and ``images`` hold what was added (float64 NumPy arrays and labels), what a test compares
    the page with.

    Example:
    >>> _, scores = mha(x, x, return_attention_scores=True)                 # (1, N, T, T)
    >>> AttentionViewer("one layer").add_attention("self-attention", scores, words).write("viewer.html")
    """

    def __init__(self, title="attention", view=None):
        if view not in (None, "head", "model", "matrix", "image"):
            raise ValueError(f"`view` must be None, 'head', 'model', 'matrix' or 'image'; received {view!r}.")
        self.title = str(title)
        self.view = view
        self.sets = []
        self.images = []

    def _check_name(self, name):
        name = str(name)
        if not name.strip():
            raise ValueError("`name` must be a non-empty string.")
        if name in {s["name"] for s in self.sets + self.images}:
            raise ValueError(f"`name` {name!r} is already used in this viewer; give each map set its own name.")
        return name

    def add_attention(self, name, weights, tokens=None, *, source_tokens=None, target_tokens=None, layer_names=None,
                      head_names=None):
        """Adds a set of attention maps (head, model and matrix views).

        Args:
            name: the set's name ("encoder self-attention", "cross-attention", ...), unique in the viewer.
            weights: (L, N, T, S) for L layers of N heads, (N, T, S) for one layer, (T, S) for one map (e.g. a
                Bahdanau alignment), or a list of L per-layer (N, T, S) maps (as a Transformer stack returns them;
                a leading batch of 1, (1, N, T, S), is squeezed). Row t holds query (target) position t's weights
                over the S keys (source positions). NumPy arrays or tensors; finite.
            tokens: the T = S tokens of self-attention (a list, or a whitespace-separated string).
            source_tokens, target_tokens: the S key and T query tokens of cross-attention (instead of ``tokens``).
            layer_names, head_names: labels (default "layer 1".., "head 1"..).

        Returns:
            The viewer.

        Raises:
            ValueError: weights of another rank, empty or not finite; tokens whose count does not match the
                weights' axes; ``tokens`` given with ``source_tokens`` / ``target_tokens``; a name used twice.
        """
        name = self._check_name(name)
        w = _layers_heads(_to_numpy(weights, "weights"), "weights",
                          "(num_layers, num_heads, T, S), (num_heads, T, S) or (T, S)")
        _check_finite(w, "weights")
        layers, heads, t, s = w.shape
        if tokens is not None:
            if source_tokens is not None or target_tokens is not None:
                raise ValueError("Pass `tokens` (self-attention) or `source_tokens` / `target_tokens` "
                                 "(cross-attention), not both.")
            if t != s:
                raise ValueError(
                    f"`tokens` is for self-attention, whose weights are square (T, T); received weights of shape "
                    f"{w.shape} (T={t}, S={s}): pass source_tokens (S) and target_tokens (T) for cross-attention."
                )
            source_tokens = target_tokens = _labels(tokens, t, "tokens", "query (T) and key (S)")
            kind = "self"
        else:
            kind = "cross" if (source_tokens is not None or target_tokens is not None or t != s) else "self"
            source_tokens = _labels(source_tokens, s, "source_tokens", "key (last axis, S)")
            target_tokens = _labels(target_tokens, t, "target_tokens", "query (second-to-last axis, T)")
        self.sets.append({
            "name": name, "kind": kind, "weights": w, "source_tokens": source_tokens, "target_tokens": target_tokens,
            "layer_names": _names(layer_names, layers, "layer_names", "layer"),
            "head_names": _names(head_names, heads, "head_names", "head"),
        })
        return self

    def add_image(self, name, image, weights, queries=None, *, grid_shape=None, grid_start=0, patch_queries=False,
                  smooth=None, layer_names=None, head_names=None):
        """Adds attention over an image's feature grid (image view).

        Args:
            name: the set's name, unique in the viewer.
            image: (H, W, 3) uint8 0-255 or float 0-1 ((H, W) gray and RGBA accepted, as
                :func:`attnlayers.visualize.plot_image_attention` takes them).
            weights: the queries' weights over K keys, of which ``grid_shape`` (h, w) = h * w consecutive ones,
                from ``grid_start``, are the grid cells (row-major): (T, K), (N, T, K), (L, N, T, K) or a list of L
                (N, T, K); or (T, h, w) without ``grid_shape`` (one map per word, the grid read from the shape).
                (T, K) without ``grid_shape`` is read as a square grid of K - grid_start cells.
            queries: T labels: the words of a caption; for ``patch_queries`` the labels of the non-grid queries
                (the rest are named by their cell) may be given in full. Default: the positions.
            grid_shape: (h, w) of the feature grid.
            grid_start: how many keys come before the grid (1 for a ViT's class token).
            patch_queries: the queries are the sequence itself (a ViT's self-attention, T = K): hovering a
                patch of the image shows that patch's map.
            smooth: draw the maps smoothly upsampled (default: True for word queries, False for patches).
            layer_names, head_names: labels.

        Returns:
            The viewer.

        Raises:
            ValueError: an image that is not one, weights whose shape does not fit the grid or the queries, not
                finite weights, a name used twice.
        """
        name = self._check_name(name)
        rgb = np.rint(image_to_rgb(image) * 255.0).astype(np.uint8)
        w = _to_numpy(weights, "weights")
        received = w.shape
        grid_start = int(grid_start)
        if grid_start < 0:
            raise ValueError(f"`grid_start` must be >= 0; received {grid_start}.")
        if grid_shape is None and w.ndim == 3 and grid_start == 0 and not patch_queries:
            grid = w.shape[1:]
            w = w.reshape(w.shape[0], -1)
        elif grid_shape is None:
            cells = w.shape[-1] - grid_start
            side = math.isqrt(max(cells, 0))
            if cells <= 0 or side * side != cells:
                raise ValueError(
                    f"`weights` of shape {received} have {w.shape[-1]} keys; with grid_start={grid_start} that leaves "
                    f"{cells} grid cells, not a square number: pass grid_shape=(h, w)."
                )
            grid = (side, side)
        else:
            grid = _grid(grid_shape, "grid_shape")
        w = _layers_heads(w, "weights", "(T, K), (num_heads, T, K) or (num_layers, num_heads, T, K)")
        _check_finite(w, "weights")
        layers, heads, t, k = w.shape
        if grid_start + grid[0] * grid[1] > k:
            raise ValueError(
                f"`weights` of shape {received} have {k} keys, fewer than grid_start={grid_start} + the "
                f"{grid[0]} x {grid[1]} grid's {grid[0] * grid[1]} cells."
            )
        if patch_queries:
            if t != k:
                raise ValueError(
                    f"`patch_queries` needs self-attention weights (T = K); received shape {received}."
                )
            default = [f"({(i - grid_start) // grid[1]}, {(i - grid_start) % grid[1]})"
                       if grid_start <= i < grid_start + grid[0] * grid[1] else f"token {i}" for i in range(t)]
            labels = default if queries is None else _labels(queries, t, "queries", "query (T)")
        else:
            labels = _labels(queries, t, "queries", "query (T)")
        self.images.append({
            "name": name, "image": rgb, "weights": w, "queries": labels, "grid": tuple(grid),
            "grid_start": grid_start, "patch_queries": bool(patch_queries),
            "smooth": (not patch_queries) if smooth is None else bool(smooth),
            "layer_names": _names(layer_names, layers, "layer_names", "layer"),
            "head_names": _names(head_names, heads, "head_names", "head"),
        })
        return self

    def to_html(self):
        """The page as a string (see the module docstring)."""
        if not self.sets and not self.images:
            raise ValueError("The viewer is empty: add maps with add_attention or add_image first.")
        if self.view == "image" and not self.images or self.view not in (None, "image") and not self.sets:
            raise ValueError(f"view={self.view!r} needs {'images' if self.view == 'image' else 'attention sets'}; "
                             "this viewer has none.")
        meta = {"version": 1, "title": self.title, "view": self.view, "levels": _LEVELS, "sets": [], "images": []}
        blocks = []
        for kind, entries in (("sets", self.sets), ("images", self.images)):
            for entry in entries:
                block = f"attn-data-{len(blocks)}"
                payload, lo, hi = _quantize(entry["weights"])
                blocks.append((block, payload))
                layers, heads, t, s = entry["weights"].shape
                item = {"name": entry["name"], "data": block, "lo": lo, "hi": hi, "layers": layers, "heads": heads,
                        "layer_names": entry["layer_names"], "head_names": entry["head_names"]}
                if kind == "sets":
                    item.update(kind=entry["kind"], target=entry["target_tokens"], source=entry["source_tokens"])
                else:
                    png = base64.b64encode(_png(entry["image"])).decode("ascii")
                    item.update(queries=entry["queries"], keys=s, grid=list(entry["grid"]),
                                grid_start=entry["grid_start"], patch_queries=entry["patch_queries"],
                                smooth=entry["smooth"], size=list(entry["image"].shape[:2]),
                                png="data:image/png;base64," + png)
                meta[kind].append(item)
        script, style = _asset("viewer.js"), _asset("viewer.css")
        if re.search(r"</script", script, re.I) or re.search(r"</style", style, re.I):  # pragma: no cover
            raise RuntimeError("viewer.js / viewer.css must not contain a closing </script> / </style> tag.")
        data = "\n".join(f'<script type="application/octet-stream" id="{block}">{payload}</script>'
                         for block, payload in blocks)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(self.title)}</title>\n<style>\n{style}</style>\n</head>\n<body>\n"
            '<div id="app"><p class="loading">Loading attention maps&hellip;</p></div>\n'
            f'<script type="application/json" id="attn-meta">{_json_for_script(meta)}</script>\n{data}\n'
            f"<script>\n{script}</script>\n</body>\n</html>\n"
        )

    def write(self, path):
        """Writes the page to ``path`` (directories are created) and returns the path as a string."""
        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        page = self.to_html()
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
        return path


def write_attention_viewer(path, weights, tokens=None, *, source_tokens=None, target_tokens=None,
                           name="attention", title=None):
    """Writes one set of attention maps as a viewer page: ``AttentionViewer(title).add_attention(name, weights,
    tokens, ...).write(path)``. Returns the path. See :meth:`AttentionViewer.add_attention` for the shapes.

    Example:
    >>> scores = encoder(x, return_attention_scores=True)["attention_scores"]   # L x (1, N, T, T)
    >>> write_attention_viewer("viewer.html", scores, tokens)
    """
    viewer = AttentionViewer(title or name)
    viewer.add_attention(name, weights, tokens, source_tokens=source_tokens, target_tokens=target_tokens)
    return viewer.write(path)


def read_attention_viewer(path_or_html):
    """Reads a page written by :class:`AttentionViewer` back: ``{"title", "sets": {name: {"weights" (L, N, T, S)
    as the page stores them (quantized), "source_tokens", "target_tokens", "kind"}}, "images": {name: {"weights",
    "queries", "grid", "grid_start"}}}``. For tests and tools; it runs no script."""
    text = path_or_html
    if "<html" not in str(text)[:200]:
        with open(os.fspath(path_or_html), encoding="utf-8") as f:
            text = f.read()
    found = re.search(r'<script type="application/json" id="attn-meta">(.*?)</script>', text, re.S)
    if found is None:
        raise ValueError("Not an attnlayers viewer page: no attn-meta element.")
    meta = json.loads(found.group(1))
    blocks = dict(re.findall(r'<script type="application/octet-stream" id="([\w-]+)">([^<]*)</script>', text))
    result = {"title": meta["title"], "sets": {}, "images": {}}
    for item in meta["sets"]:
        shape = (item["layers"], item["heads"], len(item["target"]), len(item["source"]))
        result["sets"][item["name"]] = {
            "weights": _dequantize(blocks[item["data"]], item["lo"], item["hi"], shape), "kind": item["kind"],
            "source_tokens": item["source"], "target_tokens": item["target"],
        }
    for item in meta["images"]:
        shape = (item["layers"], item["heads"], len(item["queries"]), item["keys"])
        result["images"][item["name"]] = {
            "weights": _dequantize(blocks[item["data"]], item["lo"], item["hi"], shape), "queries": item["queries"],
            "grid": tuple(item["grid"]), "grid_start": item["grid_start"],
        }
    return result
