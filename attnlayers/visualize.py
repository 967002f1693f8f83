"""Attention heatmaps (matplotlib, an optional extra: ``pip install "attnlayers[examples]"``).

:func:`plot_attention` draws one alignment matrix the way Bahdanau et al. (2015, Fig. 3) do: source
tokens along the top, target tokens down the side, one cell per (target, source) weight.
:func:`plot_attention_heads` draws a grid of them for multi-head (and multi-layer) weights.

Both accept NumPy arrays or backend tensors, return the matplotlib ``Figure``, and save a PNG when
given a ``path``. matplotlib is imported on first use; without a display the non-interactive Agg
backend is used.
"""

import math
import os
import sys

import numpy as np

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


def _to_numpy(weights):
    if not isinstance(weights, np.ndarray):
        try:
            weights = np.asarray(weights)
        except (TypeError, ValueError, RuntimeError):  # e.g. tensors that need a device transfer
            from keras import ops

            weights = ops.convert_to_numpy(weights)
    weights = np.asarray(weights)
    if weights.dtype.kind not in "fiub" and weights.dtype.name != "bfloat16":
        raise ValueError(f"`weights` must be numeric; received dtype {weights.dtype}.")
    return weights.astype("float32")


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
    w = _to_numpy(weights)
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
    w = _to_numpy(weights)
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
