"""Attention heatmaps (matplotlib, an optional extra: ``pip install "attnlayers[examples]"``).

:func:`plot_attention` draws one alignment matrix the way Bahdanau et al. (2015, Fig. 3) do: source
tokens along the top, target tokens down the side, one cell per (target, source) weight.
:func:`plot_attention_heads` draws a grid of them for multi-head (and multi-layer) weights.

Both accept NumPy arrays or backend tensors, return the matplotlib ``Figure``, and save a PNG when
given a ``path``. matplotlib is imported on first use; without a display the non-interactive Agg
backend is used.

:func:`plot_image_attention` draws visual attention the way Xu et al. (2015, "Show, Attend and
Tell", Figs. 2-3) do: the image, then one panel per generated word with that word's attention map
upsampled to the image and smoothed by :func:`upsample_attention` (NumPy only, also used by the
captioning localization metric).

The interactive HTML viewer (head, model, matrix and image views in one self-contained page, no matplotlib
needed) lives in :mod:`attnlayers.viewer`; its entry points are re-exported here: :class:`AttentionViewer`,
:func:`write_attention_viewer` and :func:`read_attention_viewer`.
"""

import math
import os
import sys

import numpy as np

from ._pictures import image_to_rgb, weights_to_numpy
from .viewer import AttentionViewer, read_attention_viewer, write_attention_viewer  # noqa: F401

__all__ = ["plot_attention", "plot_attention_heads", "plot_image_attention", "upsample_attention"]

_INSTALL_HINT = (
    "attnlayers.visualize needs matplotlib, an optional dependency: "
    'pip install "attnlayers[examples]"'
)


def _pyplot():
    """Imports pyplot, choosing Agg when there is no display and no backend was chosen yet."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - exercised by a test that hides matplotlib
        raise ImportError(_INSTALL_HINT) from e
    headless = sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if headless and "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _squeeze_batch(weights, rank):
    """Drops leading axes of size 1 until ``weights`` has at most ``rank`` dims."""
    while weights.ndim > rank and weights.shape[0] == 1:
        weights = weights[0]
    return weights


def _tokens(tokens, length, name, axis_name):
    if tokens is None:
        return None
    if isinstance(tokens, str):
        tokens = tokens.split()
    tokens = [
        t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in list(tokens)
    ]
    if len(tokens) != length:
        raise ValueError(
            f"`{name}` has {len(tokens)} tokens but the weights have {length} {axis_name} "
            f"positions; expected one token per position."
        )
    return tokens


def _color_limits(weights):
    finite = weights[np.isfinite(weights)]
    if finite.size == 0:
        return None, None
    low, high = float(finite.min()), float(finite.max())
    # Weights are >= 0: anchor the scale at 0 so that "no attention" is the darkest color.
    vmin = 0.0 if low >= 0 else low
    return vmin, max(high, vmin + 1e-12)


def _label_axes(ax, source_tokens, target_tokens, top=True, left=True, fontsize=None):
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    if source_tokens is not None:
        ax.set_xticks(range(len(source_tokens)))
        rotation = 90 if max(len(t) for t in source_tokens) > 2 else 0
        ax.set_xticklabels(source_tokens if top else [], rotation=rotation, fontsize=fontsize)
    elif not top:
        ax.set_xticklabels([])
    if target_tokens is not None:
        ax.set_yticks(range(len(target_tokens)))
        ax.set_yticklabels(target_tokens if left else [], fontsize=fontsize)
    elif not left:
        ax.set_yticklabels([])
    ax.tick_params(length=0)


def _finish(plt, fig, path, owns_figure=True):
    if path is not None:
        path = os.fspath(path)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        fig.savefig(path, dpi=fig.dpi, bbox_inches="tight")
        if owns_figure and plt.get_backend().lower() == "agg":
            plt.close(fig)  # saved, and nothing will show it: release pyplot's reference
    return fig


def plot_attention(
    weights,
    source_tokens=None,
    target_tokens=None,
    path=None,
    title=None,
    ax=None,
    cmap="viridis",
):
    """Draws an alignment matrix as a heatmap (Bahdanau et al. 2015, Fig. 3).

    Args:
        weights: (T, S) attention weights (a NumPy array or a tensor); a leading batch of size 1, as
            in (1, T, S), is squeezed, and a single step's (S,) weights are drawn as one row.
        source_tokens: S labels for the columns (shown along the top), or a whitespace-separated
            string.
        target_tokens: T labels for the rows.
        path: where to save a PNG (directories are created); nothing is saved if None.
        title: figure title.
        ax: a matplotlib ``Axes`` to draw into; a new figure is made if None.
        cmap: matplotlib colormap name (``"gray"`` looks like the paper).

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: if the weights are not 2-D after squeezing, or a token list has the wrong
            length.

    Example:
    >>> context, weights = attention(queries, encoder_states, return_attention_scores=True)
    >>> plot_attention(weights[0], source_tokens=src, target_tokens=tgt, path="alignment.png")
    """
    plt = _pyplot()
    w = weights_to_numpy(weights)
    w = _squeeze_batch(w, 2)
    if w.ndim == 1:
        w = w[None]
    if w.ndim != 2:
        raise ValueError(
            f"`weights` must have shape (target_length, source_length), optionally with a leading "
            f"batch of 1; received shape {tuple(np.shape(weights))}. For multi-head weights "
            f"(N, T, S) or (L, N, T, S) use plot_attention_heads, or select one example with "
            f"weights[i]."
        )
    t, s = w.shape
    source_tokens = _tokens(source_tokens, s, "source_tokens", "source (last axis)")
    target_tokens = _tokens(target_tokens, t, "target_tokens", "target (first axis)")

    owns_figure = ax is None
    if owns_figure:
        width = min(max(3.5, 0.3 * s + 2.0), 30.0)
        height = min(max(3.0, 0.3 * t + 1.2), 30.0)
        fig = plt.figure(figsize=(width, height), dpi=100, layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    vmin, vmax = _color_limits(w)
    image = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    _label_axes(ax, source_tokens, target_tokens)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    if title:
        ax.set_title(title, pad=12)
    return _finish(plt, fig, path, owns_figure)


def plot_attention_heads(
    weights,
    source_tokens=None,
    target_tokens=None,
    path=None,
    title=None,
    cmap="viridis",
    max_columns=4,
):
    """Draws multi-head weights as a grid of heatmaps with one shared color scale.

    Args:
        weights: (N, T, S) weights of N heads, one panel each (wrapped after ``max_columns``), or
            (L, N, T, S) weights of L layers, one row per layer. Leading axes of size 1 beyond these
            (e.g. a batch of 1, (1, N, T, S) from a multi-head layer) are squeezed; (1, N, T, S) is
            drawn as one row of N heads.
        source_tokens: S column labels (drawn on the top row), or a whitespace-separated string.
        target_tokens: T row labels (drawn on the left column).
        path: where to save a PNG; nothing is saved if None.
        title: figure title.
        cmap: matplotlib colormap name.
        max_columns: panels per row for (N, T, S) weights.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: if the weights are not 3-D or 4-D after squeezing, or a token list has the wrong
            length.

    Example:
    >>> _, scores = mha(x, x, return_attention_scores=True)     # (B, N, T, T)
    >>> plot_attention_heads(scores[0], source_tokens=words, target_tokens=words, path="heads.png")
    """
    plt = _pyplot()
    w = weights_to_numpy(weights)
    w = _squeeze_batch(w, 4)
    if w.ndim not in (3, 4):
        raise ValueError(
            f"`weights` must have shape (num_heads, target_length, source_length) or (num_layers, "
            f"num_heads, target_length, source_length); received shape {tuple(np.shape(weights))}. "
            f"For a single (T, S) map use plot_attention."
        )
    if not isinstance(max_columns, int) or max_columns < 1:
        raise ValueError(f"`max_columns` must be a positive integer; received {max_columns!r}.")
    t, s = w.shape[-2:]
    source_tokens = _tokens(source_tokens, s, "source_tokens", "source (last axis)")
    target_tokens = _tokens(target_tokens, t, "target_tokens", "target (second-to-last axis)")

    if w.ndim == 4:
        layers, heads = w.shape[:2]
        rows, cols = layers, heads
        panels = [
            (r, c, w[r, c], f"layer {r}, head {c}") for r in range(layers) for c in range(heads)
        ]
    else:
        heads = w.shape[0]
        cols = min(heads, max_columns)
        rows = math.ceil(heads / cols)
        panels = [(h // cols, h % cols, w[h], f"head {h}") for h in range(heads)]

    panel_w = min(max(2.2, 0.22 * s + 1.0), 8.0)
    panel_h = min(max(2.0, 0.22 * t + 0.8), 8.0)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(panel_w * cols + 1.0, panel_h * rows + (0.6 if title else 0.2)),
        dpi=100,
        squeeze=False,
        layout="constrained",
    )
    vmin, vmax = _color_limits(w)
    fontsize = 8 if max(s, t) <= 30 else 6
    image = None
    for r, c, panel, name in panels:
        ax = axes[r, c]
        image = ax.imshow(
            panel, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest"
        )
        _label_axes(
            ax, source_tokens, target_tokens, top=(r == 0), left=(c == 0), fontsize=fontsize
        )
        ax.set_xlabel(name, fontsize=9, labelpad=4)
        ax.xaxis.set_label_position("bottom")
    for r in range(rows):  # empty cells of the last row of a wrapped grid
        for c in range(cols):
            if not axes[r, c].images:
                axes[r, c].set_axis_off()
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.02)
    if title:
        fig.suptitle(title)
    return _finish(plt, fig, path)


# --- Visual attention over images (Xu et al. 2015, "Show, Attend and Tell") ---------------------


def _size_pair(value, name):
    pair = None
    if not isinstance(value, (str, bytes)):
        try:
            values = list(value)
            if len(values) == 2 and all(float(v) == int(v) and int(v) >= 1 for v in values):
                pair = (int(values[0]), int(values[1]))
        except (TypeError, ValueError, OverflowError):
            pair = None
    if pair is None:
        raise ValueError(f"`{name}` must be two positive integers (height, width); received {value!r}.")
    return pair


def _bilinear_matrix(out_size, in_size):
    """(out_size, in_size) linear interpolation with half-pixel centres, clamped at the edges."""
    coords = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
    coords = np.clip(coords, 0.0, in_size - 1)
    low = np.floor(coords).astype(int)
    high = np.minimum(low + 1, in_size - 1)
    frac = coords - low
    matrix = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    np.add.at(matrix, (rows, low), 1.0 - frac)
    np.add.at(matrix, (rows, high), frac)
    return matrix


def _gaussian_matrix(size, sigma):
    """(size, size) Gaussian blur, edges mirrored like scipy.ndimage's "reflect" (truncated at 4 sigma)."""
    if sigma <= 0:
        return np.eye(size)
    radius = max(1, math.ceil(4.0 * sigma))
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    index = np.arange(size)[:, None] + offsets[None, :]
    index = np.mod(index, 2 * size)  # mirror: d c b a | a b c d | d c b a
    index = np.where(index >= size, 2 * size - 1 - index, index)
    matrix = np.zeros((size, size))
    np.add.at(matrix, (np.repeat(np.arange(size), offsets.size), index.ravel()), np.tile(kernel, size))
    return matrix


def _sigmas(smooth, grid_shape, image_size):
    if smooth is True:
        # skimage's pyramid_expand default (sigma = 2 * upscale / 6), which Xu et al.'s figures used.
        return tuple(big / small / 3.0 for big, small in zip(image_size, grid_shape))
    if smooth is False or smooth is None:
        return (0.0, 0.0)
    if isinstance(smooth, (int, float, np.number)) and np.isfinite(smooth) and smooth >= 0:
        return (float(smooth), float(smooth))
    raise ValueError(
        f"`smooth` must be True, False or a Gaussian sigma in pixels (a number >= 0); received {smooth!r}."
    )


def upsample_attention(weights_hw, image_size, smooth=True):
    """Upsamples an attention map over a feature grid to image pixels, optionally smoothed.

    The grid (h, w) of annotation vectors (e.g. 14 x 14 for a 224 x 224 image through VGG's conv5,
    Xu et al. 2015, section 4.3) is resized bilinearly to (H, W) with half-pixel centres (each cell's
    weight sits at the centre of the image patch it covers) and then blurred with a Gaussian, as Xu
    et al. upsample by 16 and smooth their maps for Figures 2-3. Pure NumPy: the resize and the blur
    are separable, so the whole thing is ``A_y @ weights @ A_x.T`` with two small matrices.

    Args:
        weights_hw: (h, w) attention weights of one step, or a stack (..., h, w) of them (a NumPy
            array, nested lists or a tensor).
        image_size: (H, W) in pixels. (``image.shape[:2]``.)
        smooth: True for the default Gaussian (sigma = one grid cell / 3 along each axis, skimage's
            ``pyramid_expand`` default), a number for a sigma in pixels, False for bilinear only.

    Returns:
        (H, W) float64 map, or (..., H, W) for a stack. Values are interpolated weights (each output
        pixel a convex combination of the input cells), so the map stays within the input's range.

    Raises:
        ValueError: if ``weights_hw`` has fewer than 2 dims, ``image_size`` is not two positive
            integers, or ``smooth`` is not a bool or a sigma >= 0.

    Example:
    >>> alpha = weights[0, t].reshape(14, 14)          # step t of image 0, (L,) -> (h, w)
    >>> heat = upsample_attention(alpha, image.shape[:2])   # (224, 224)
    """
    if isinstance(weights_hw, (np.ndarray, list, tuple)):
        w = np.asarray(weights_hw)
        if w.dtype.kind not in "fiub":
            raise ValueError(f"`weights_hw` must be numeric; received dtype {w.dtype}.")
    else:  # a backend tensor
        w = weights_to_numpy(weights_hw)
    w = w.astype("float64")
    if w.ndim < 2:
        raise ValueError(
            f"`weights_hw` must be an (h, w) attention map or a stack (..., h, w); received shape "
            f"{tuple(w.shape)}. Reshape (L,) weights to the feature grid first: weights.reshape(h, w)."
        )
    height, width = _size_pair(image_size, "image_size")
    grid = w.shape[-2:]
    sigma_y, sigma_x = _sigmas(smooth, grid, (height, width))
    along_y = _gaussian_matrix(height, sigma_y) @ _bilinear_matrix(height, grid[0])  # (H, h)
    along_x = _gaussian_matrix(width, sigma_x) @ _bilinear_matrix(width, grid[1])  # (W, w)
    return along_y @ w @ along_x.T


def _image_weights(weights, grid_shape):
    """(T, L) + grid_shape or (T, h, w) -> (T, h, w)."""
    w = weights_to_numpy(weights)
    received = tuple(np.shape(w))
    if grid_shape is not None:
        grid = _size_pair(grid_shape, "grid_shape")
        if w.ndim == 3 and w.shape[1:] != grid:
            raise ValueError(
                f"`weights` of shape {received} do not match `grid_shape` {grid}; expected "
                f"(T, {grid[0]}, {grid[1]}) or (T, {grid[0] * grid[1]})."
            )
        if w.ndim == 2:
            if w.shape[1] != grid[0] * grid[1]:
                raise ValueError(
                    f"`weights` have {w.shape[1]} locations per word (shape {received}) but "
                    f"`grid_shape` {grid} has {grid[0] * grid[1]}; expected (T, h * w)."
                )
            w = w.reshape(w.shape[0], *grid)
    elif w.ndim == 2:
        side = math.isqrt(w.shape[1])
        if side * side != w.shape[1]:
            raise ValueError(
                f"`weights` of shape {received} are (T, L) with L = {w.shape[1]} not a square number; "
                f"pass grid_shape=(h, w) with h * w = {w.shape[1]}, or weights of shape (T, h, w)."
            )
        w = w.reshape(w.shape[0], side, side)
    if w.ndim != 3:
        raise ValueError(
            f"`weights` must have shape (T, L) with grid_shape=(h, w), h * w = L, or (T, h, w); "
            f"received shape {received}. For a batch, select one image: weights[i]."
        )
    return w


def plot_image_attention(
    image,
    words,
    weights,
    *,
    grid_shape=None,
    path=None,
    smooth=True,
    columns=5,
    sampled=False,
    title=None,
):
    """Draws where a captioner looked for each word (Xu et al. 2015, Figs. 2-3).

    The first panel is the image; then one panel per generated word, titled with the word, shows the
    image dimmed everywhere except where that word's attention map (upsampled to the image and
    smoothed by :func:`upsample_attention`) is high, which is highlighted in white. Each map is
    normalized by its own maximum, so every panel uses the full range.

    Args:
        image: (H, W, 3) image, uint8 in 0-255 or float in 0-1 (float images in 0-255 are divided by
            255; other ranges, e.g. mean/std-normalized inputs, are min-max rescaled for display).
            (H, W) gray and (H, W, 4) RGBA images are accepted too.
        words: T generated words (strings or bytes), or one whitespace-separated string.
        weights: (T, L) attention weights over L = h * w feature locations with
            ``grid_shape=(h, w)`` (row-major, as a (B, h, w, C) feature map flattened to
            (B, h * w, C)), or (T, h, w). (T, L) without ``grid_shape`` is read as a square grid when L
            is a square number. NumPy arrays or tensors.
        grid_shape: (h, w) of the feature grid, for (T, L) weights.
        path: where to save a PNG (directories are created); nothing is saved if None.
        smooth: Gaussian smoothing of the upsampled maps: True (sigma = a grid cell / 3), a sigma in
            pixels (Xu et al.'s demo used 20 for 16x upsampling), or False for bilinear only.
        columns: panels per row (the image counts as one).
        sampled: hard ("stochastic") attention: also outline the argmax cell of each map, the
            location that was sampled, with a rectangle.
        title: figure title.

    Returns:
        The matplotlib ``Figure``: 1 + T image panels (the image, then the words in order), empty
        grid cells switched off.

    Raises:
        ValueError: if the image is not an image, the weights' shape does not fit ``grid_shape``,
            ``words`` does not have one word per row of ``weights``, or ``columns`` is not a positive
            integer.

    Example:
    >>> # weights: (T, 196) from the decoder's attention over a 14 x 14 VGG conv5 grid
    >>> plot_image_attention(image, caption.split(), weights, grid_shape=(14, 14),
    ...                      path="attention.png")
    """
    plt = _pyplot()
    img = image_to_rgb(image)
    w = _image_weights(weights, grid_shape)
    steps = w.shape[0]
    if isinstance(words, str):
        words = words.split()
    words = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in list(words)]
    if len(words) != steps:
        raise ValueError(
            f"`words` has {len(words)} words but `weights` has {steps} rows (shape "
            f"{tuple(np.shape(weights))}); expected one word per row (per decoding step)."
        )
    if not isinstance(columns, (int, np.integer)) or isinstance(columns, bool) or columns < 1:
        raise ValueError(f"`columns` must be a positive integer; received {columns!r}.")
    height, width = img.shape[:2]
    grid_h, grid_w = w.shape[1:]
    maps = upsample_attention(np.nan_to_num(w), (height, width), smooth=smooth)  # (T, H, W)

    panels = steps + 1
    cols = min(int(columns), panels)
    rows = math.ceil(panels / cols)
    panel_w = 2.2
    panel_h = min(max(panel_w * height / width, 1.0), 6.0) + 0.3
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(panel_w * cols + 0.2, panel_h * rows + (0.5 if title else 0.1)),
        dpi=100,
        squeeze=False,
        layout="constrained",
    )
    axes = axes.ravel()
    axes[0].imshow(img, interpolation="bilinear")
    for t in range(steps):
        ax = axes[t + 1]
        heat = np.clip(maps[t], 0.0, None)
        peak = heat.max()
        heat = heat / peak if peak > 0 else heat
        # White highlight on a dimmed image: attended pixels keep their colour and are lifted
        # towards white, the rest fades to 20%.
        shown = img * (0.2 + 0.8 * heat[..., None]) + 0.25 * heat[..., None] * (1.0 - img)
        ax.imshow(np.clip(shown, 0.0, 1.0), interpolation="bilinear")
        ax.set_title(words[t], fontsize=10)
        if sampled:
            from matplotlib.patches import Rectangle

            r, c = np.unravel_index(int(np.argmax(np.nan_to_num(w[t], nan=-np.inf))), (grid_h, grid_w))
            cell_h, cell_w = height / grid_h, width / grid_w
            ax.add_patch(
                Rectangle(
                    (c * cell_w - 0.5, r * cell_h - 0.5),  # imshow puts pixel centres on integers
                    cell_w,
                    cell_h,
                    fill=False,
                    edgecolor="red",
                    linewidth=1.5,
                )
            )
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[panels:]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title)
    return _finish(plt, fig, path)
