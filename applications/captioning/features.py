"""An on-disk cache of a frozen backbone's features, as users of the TensorFlow captioning tutorial expect: the
backbone runs over every image once, its (L, D) features go to one ``.npy`` file, and training reads them
instead of the images.

    encoder = model.encoder                                     # ImageEncoder(backbone="MobileNetV2", ...)
    train_features = cache_features(encoder, splits.train, "~/.cache/captions")
    train = data.make_dataset(splits.train, vocabulary, features=train_features)
    model.fit(train)                                            # model((features, caption_in)) skips the CNN

The file is named by a fingerprint of what the features depend on: the backbone's weight values, its name and
image size, and the images (their pixels, or their paths with sizes and modification times). Anything else
gets another file, never stale features. A file is written under a temporary name and renamed when complete,
so an interrupted run leaves no half-written cache.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

import keras
import numpy as np
from keras import ops

from .data.caption_set import CaptionSet
from .data.pipeline import image_batches
from .encoder import ImageEncoder


__all__ = ["cache_features", "fingerprint"]


def fingerprint(encoder: ImageEncoder, caption_set: CaptionSet) -> str:
    """A hex digest of the backbone's weights, name and image size and of the images."""
    digest = hashlib.sha1()
    digest.update(f"{encoder.backbone_name}|{encoder.image_size}|{len(caption_set)}".encode())
    for layer in encoder.layers_:
        for weight in layer.weights:
            digest.update(np.ascontiguousarray(ops.convert_to_numpy(weight)).tobytes())
    if caption_set.images is not None:
        digest.update(np.ascontiguousarray(caption_set.images).tobytes())
    else:
        for path in caption_set.image_paths:
            stat = os.stat(path)
            digest.update(f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


def cache_features(encoder: ImageEncoder, caption_set: CaptionSet, directory, *, batch_size: int = 32,
                   verbose: int = 1) -> np.ndarray:
    """The frozen backbone's features of every image of ``caption_set``, computed once and kept on disk.

    Args:
        encoder: a built or unbuilt :class:`ImageEncoder` with a frozen keras.applications backbone
            (``fine_tune=False``); the small CNN is trained with the captioner, so it has nothing to cache.
        caption_set: the images (arrays or files), decoded and resized as ``make_dataset`` does.
        directory: where the ``features-<fingerprint>.npy`` files live (created if missing).
        batch_size: images per backbone call.
        verbose: 1 shows a progress bar while computing, 0 is silent.

    Returns:
        float32 (N, L, D), memory-mapped read-only from the file, row i the features of image i (before the
        encoder's position embedding, which stays trainable).
    """
    if not encoder.frozen:
        raise ValueError("cache_features needs a frozen keras.applications backbone (fine_tune=False); the "
                         f"encoder's backbone is {encoder.backbone_name!r} with fine_tune={encoder.fine_tune}.")
    if not len(caption_set):
        raise ValueError("cache_features needs a CaptionSet with at least one image; received an empty one.")
    if not encoder.built:
        encoder.build()
    directory = pathlib.Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"features-{fingerprint(encoder, caption_set)}.npy"
    shape = (len(caption_set), encoder.grid_shape[0] * encoder.grid_shape[1], encoder.feature_dim)
    if path.exists():
        features = np.load(path, mmap_mode="r")
        if features.shape == shape and features.dtype == np.float32:
            return features
    partial = path.with_suffix(f".{os.getpid()}.partial")
    out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=shape)
    progress = keras.utils.Progbar(len(caption_set), verbose=verbose, unit_name="image")
    row = 0
    for images in image_batches(caption_set, encoder.image_size, batch_size):
        out[row : row + len(images)] = ops.convert_to_numpy(encoder.extract(images))
        row += len(images)
        progress.update(row)
    out.flush()
    del out
    os.replace(partial, path)  # atomic: the file is complete or absent
    return np.load(path, mmap_mode="r")
