"""A ViT's attention in the interactive viewer (:mod:`attnlayers.viewer`), in one call: the image with the map of
the patch under the cursor, and every layer and head of the self-attention over [CLS] and the patches.

    viewer = attention_viewer(model, image, "out/viewer.html")

Keras ops (any backend).
"""

from __future__ import annotations

import numpy as np

from attnlayers.viewer import AttentionViewer


def attention_viewer(model, image, path=None, *, class_names=None, title=None):
    """The self-attention of ``model`` on one image as an :class:`~attnlayers.viewer.AttentionViewer`:

    - "patches" (image view): hover a patch, see where it attends, per layer and head or their mean; [CLS] too;
    - "rollout" (image view): the attention rollout (Abnar & Zuidema 2020, :func:`attnlayers.attention_rollout`),
      what each position gathers through all the layers;
    - "self-attention" (head, model and matrix views): every layer and head over [CLS] and the patches, each
      patch named by its (row, column) in the grid.

    Args:
        model: a :class:`~attnlayers.applications.vision.ViT`.
        image: one image (H, W, C) of the model's ``image_shape``, as the model reads it.
        path: where to write the page (None: not written).
        class_names: names of the classes, for the title's prediction.
        title: the page's title.

    Returns:
        The viewer (``viewer.sets[0]["weights"]``: (L, N, 1 + P, 1 + P)); written to ``path`` when given.

    Raises:
        ValueError: an image of another shape than the model's.
    """
    from keras import ops

    from attnlayers.rollout import attention_rollout

    c = model.config
    image = np.asarray(image, "float32")
    if image.shape != tuple(c.image_shape):
        raise ValueError(f"`image` must have the model's image_shape {tuple(c.image_shape)}; received shape "
                         f"{image.shape} (one image, no batch axis).")
    encoded = model.encode(image[None], return_attention_scores=True)
    scores = [ops.convert_to_numpy(a) for a in encoded["attention_scores"]]
    maps = np.stack([a[0] for a in scores])  # (L, N, 1 + P, 1 + P)
    rollout = np.asarray(attention_rollout(scores))[0]  # (1 + P, 1 + P)
    grid = (c.image_shape[0] // c.patch_size, c.image_shape[1] // c.patch_size)
    tokens = ["[CLS]"] + [f"({r}, {col})" for r in range(grid[0]) for col in range(grid[1])]
    if title is None:
        predicted = int(np.argmax(ops.convert_to_numpy(model.head(model.pool(encoded["sequence_output"])))[0]))
        name = class_names[predicted] if class_names is not None else predicted
        title = f"ViT ({c.num_layers} layers, {c.num_heads} heads, {grid[0]} x {grid[1]} patches): predicted {name}"
    viewer = AttentionViewer(title)  # the image shown as plot_image_attention shows it (ranges rescaled)
    viewer.add_image("patches", image, maps, tokens, grid_shape=grid, grid_start=1, patch_queries=True)
    viewer.add_image("rollout", image, rollout, tokens, grid_shape=grid, grid_start=1, patch_queries=True)
    viewer.add_attention("self-attention", maps, tokens)
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_viewer"]
