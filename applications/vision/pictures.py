"""Pictures of where a ViT looks: maps over the patch grid drawn over the image, one panel each.

Each map is shown at patch resolution (a block per patch, nearest-neighbour: the model attends to whole patches)
in a heat colour over the image, normalised to its own maximum; the image alone comes first.
"""

from __future__ import annotations

import math
import os

import numpy as np


def plot_patch_maps(image, maps, names, path, *, columns=None, title=None, show_image=True):
    """Draws ``maps`` (T, grid_h, grid_w) over ``image`` (H, W, C) in [0, 1], titled ``names`` (after a panel of
    the image alone, with ``show_image``), ``columns`` panels a row; saves a PNG at ``path`` and returns it (None
    when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    image = np.asarray(image, np.float32)
    maps = np.asarray(maps, np.float32)
    if maps.ndim != 3 or len(names) != len(maps):
        raise ValueError(f"`maps` must be (T, grid_h, grid_w) with one name each; received shape {maps.shape} and "
                         f"{len(names)} names.")
    height, width = image.shape[:2]
    gh, gw = maps.shape[1:]
    if height % gh or width % gw:
        raise ValueError(f"the image ({height} x {width}) must be a whole number of patches of the {gh} x {gw} grid.")
    gray = image[..., 0] if image.shape[-1] == 1 else None
    first = 1 if show_image else 0
    panels = len(maps) + first
    cols = min(columns or panels, panels)
    rows = math.ceil(panels / cols)
    figure, axes = plt.subplots(rows, cols, figsize=(1.9 * cols, 2.1 * rows + (0.4 if title else 0)), dpi=100,
                                squeeze=False, layout="constrained")
    axes = axes.ravel()
    if show_image:
        axes[0].imshow(gray if gray is not None else image, cmap="gray" if gray is not None else None, vmin=0, vmax=1)
        axes[0].set_title("image", fontsize=9)
    for ax, name, heat in zip(axes[first:], names, maps):
        heat = heat / max(float(heat.max()), 1e-12)
        blocks = np.kron(heat, np.ones((height // gh, width // gw)))  # a block per patch
        ax.imshow(gray if gray is not None else image, cmap="gray" if gray is not None else None, vmin=0, vmax=1)
        ax.imshow(blocks, cmap="inferno", alpha=0.6, vmin=0, vmax=1)
        ax.set_title(name, fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[panels:]:
        ax.axis("off")
    if title:
        figure.suptitle(title, fontsize=10)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


__all__ = ["plot_patch_maps"]
