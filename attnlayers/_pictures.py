"""NumPy conversions shared by the PNG pictures (:mod:`attnlayers.visualize`) and the HTML viewer
(:mod:`attnlayers.viewer`): attention weights as a float array, an image as RGB in [0, 1]. NumPy only, no
matplotlib, so that the viewer does not need it.
"""

import numpy as np


def weights_to_numpy(weights):
    """Attention weights (NumPy, nested lists or a tensor of any backend) -> a float32 NumPy array of their
    shape; a ValueError for non-numeric ones."""
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


def image_to_rgb(image):
    """An image (H, W, 3), (H, W, 4) RGBA, (H, W) or (H, W, 1) gray; uint8 0-255 or float 0-1 (float 0-255 and
    normalised network inputs are rescaled for display) -> float64 (H, W, 3) in [0, 1]."""
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    if img.ndim != 3 or img.shape[-1] not in (3, 4) or img.dtype.kind not in "fiub":
        raise ValueError(
            f"`image` must be a numeric (H, W, 3) array (uint8 0-255 or float 0-1; (H, W) gray and "
            f"(H, W, 4) RGBA are accepted too); received shape {tuple(img.shape)} and dtype {img.dtype}."
        )
    img = img[..., :3]
    if img.dtype == np.uint8:
        return img.astype("float64") / 255.0
    img = img.astype("float64")
    finite = img[np.isfinite(img)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if low >= 0.0 and high <= 1.0:
        pass
    elif low >= 0.0 and high <= 255.0:
        img = img / 255.0
    else:  # e.g. mean/std-normalized network input: rescale for display
        img = (img - low) / max(high - low, 1e-12)
    return np.clip(np.nan_to_num(img), 0.0, 1.0)
