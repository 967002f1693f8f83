"""The tf.data pipeline: batches `((images, caption_in), caption_out)` of one (image, reference caption) pair per
example, with static shapes for XLA: images uint8 (B, S, S, 3), captions int32 (B, max_length) padded with 0,
caption_in = [start] + words and caption_out = words + [end]. TensorFlow is imported on use."""

from __future__ import annotations

import warnings

import numpy as np

from attnlayers.validation import is_int, positive_int

from ...core.inputs import data_order
from .caption_set import CaptionSet
from .vocabulary import CaptionVocabulary

__all__ = ["count_truncated", "encode_captions", "image_batches", "make_dataset"]

_RESIZE_CHUNK = 512  # images resized per TensorFlow call


def _check_max_length(max_length):
    if not is_int(max_length) or max_length < 2:
        raise ValueError(
            "`max_length` must be an integer >= 2 (room for [start] or [end] and one word); received "
            f"max_length={max_length!r}."
        )
    return int(max_length)


def _encode(caption_set: CaptionSet, vocabulary: CaptionVocabulary):
    """(image index, word ids) for every (image, reference) pair, in image order."""
    index, tokens = [], []
    for i, references in enumerate(caption_set.captions):
        for caption in references:
            index.append(i)
            tokens.append(vocabulary.encode(caption))
    return np.asarray(index, np.int64), tokens


def _truncated(tokens: list, max_length: int) -> dict:
    lengths = np.asarray([len(t) for t in tokens], np.int64)
    return {
        "captions": int((lengths > max_length - 1).sum()),
        "total": len(tokens),
        "longest": int(lengths.max()) if len(lengths) else 0,
    }


def count_truncated(caption_set: CaptionSet, vocabulary: CaptionVocabulary, max_length: int = 20) -> dict:
    """How many reference captions `make_dataset` would cut at `max_length`.

    A caption is cut when it has more than `max_length - 1` words (caption_in and caption_out add [start] /
    [end]).

    Returns:
        A dict of ints: "captions" (references cut), "total" (`caption_set.num_captions`) and "longest" (the
        most words of any reference).

    Example:
        >>> counts = count_truncated(splits.train, vocabulary, 20)
        >>> print(f"{counts['captions']} of {counts['total']} training captions are cut")
    """
    max_length = _check_max_length(max_length)
    return _truncated(_encode(caption_set, vocabulary)[1], max_length)


def encode_captions(caption_set: CaptionSet, vocabulary: CaptionVocabulary, *, max_length: int = 20):
    """Every (image, reference) pair as arrays: `(image_index, caption_in, caption_out)`.

    image_index is int64 (M,) (the pair's image in `caption_set`); caption_in = [start] + words and
    caption_out = words + [end] are int32 (M, max_length), padded with `vocabulary.pad_token_id`, the words cut to
    `max_length - 1` (a cut caption still ends in [end]). M is `caption_set.num_captions`. No warning (see
    `count_truncated`).
    """
    max_length = _check_max_length(max_length)
    image_index, tokens = _encode(caption_set, vocabulary)
    return (image_index, *_pad(tokens, vocabulary, max_length))


def _pad(tokens: list, vocabulary: CaptionVocabulary, max_length: int):
    caption_in = np.full((len(tokens), max_length), vocabulary.pad_token_id, np.int32)
    caption_out = np.full((len(tokens), max_length), vocabulary.pad_token_id, np.int32)
    for row, words in enumerate(tokens):
        words = words[: max_length - 1]
        caption_in[row, 0] = vocabulary.start_token_id
        caption_in[row, 1 : len(words) + 1] = words
        caption_out[row, : len(words)] = words
        caption_out[row, len(words)] = vocabulary.end_token_id
    return caption_in, caption_out


def _to_uint8(tf, image):
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def _resize_arrays(tf, images: np.ndarray, image_size: int) -> np.ndarray:
    if images.shape[1:3] == (image_size, image_size):
        return images
    out = np.empty((len(images), image_size, image_size, 3), np.uint8)
    for start in range(0, len(images), _RESIZE_CHUNK):
        chunk = tf.image.resize(images[start : start + _RESIZE_CHUNK], [image_size, image_size], antialias=True)
        out[start : start + _RESIZE_CHUNK] = _to_uint8(tf, chunk).numpy()
    return out


def _load_file(tf, path, image_size):
    """One image file -> uint8 (image_size, image_size, 3): decoded (JPEG, PNG, GIF's first frame, BMP; grayscale
    and RGBA to RGB) and resized (bilinear, antialiased)."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image = _to_uint8(tf, tf.image.resize(image, [image_size, image_size], antialias=True))
    image.set_shape([image_size, image_size, 3])
    return image


def image_batches(caption_set: CaptionSet, image_size: int = 64, batch_size: int = 64):
    """The images of `caption_set` in order, decoded and resized as `make_dataset` does: yields uint8 NumPy
    batches (b, image_size, image_size, 3), b <= batch_size."""
    import tensorflow as tf

    image_size, batch_size = positive_int(image_size, "image_size"), positive_int(batch_size, "batch_size")
    for start in range(0, len(caption_set), batch_size):
        if caption_set.images is not None:
            yield _resize_arrays(tf, caption_set.images[start : start + batch_size], image_size)
        else:
            paths = caption_set.image_paths[start : start + batch_size]
            yield np.stack([_load_file(tf, path, image_size).numpy() for path in paths])


def make_dataset(
    caption_set: CaptionSet,
    vocabulary: CaptionVocabulary,
    *,
    batch_size: int = 64,
    image_size: int = 64,
    max_length: int = 20,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
    features=None,
):
    """Batches `((images, caption_in), caption_out)` for `model.fit`.

    Every (image, reference) pair is one example (Flickr8k's five references give five examples per image).
    Captions are encoded once (`encode_captions`); examples are shuffled (seeded, reshuffled each epoch) before
    images are read, so a file is decoded only when its batch is made.

    Args:
        caption_set: images or image files with their captions (for a `CaptionSplits`, pass `splits.train`).
        vocabulary: a `CaptionVocabulary` built from the training captions.
        batch_size: examples per batch.
        image_size: images are resized to (image_size, image_size) (bilinear, antialiased; the aspect ratio is
            not kept). Files are decoded with `tf.io.decode_image` (JPEG, PNG, GIF's first frame, BMP),
            grayscale and RGBA converted to RGB. Arrays of another size are resized once, up front; arrays are
            held in the dataset as one constant (8,000 64x64 scenes: 98 MB), so large data sets are best files.
        max_length: length of caption_in / caption_out; references of more than `max_length - 1` words are cut
            (one `UserWarning` per call counts them, see `count_truncated`).
        shuffle: shuffle the examples (for training); False keeps image order, references in file order.
        seed: shuffle seed.
        drop_remainder: drop the last smaller batch, so the batch dimension is static too.
        features: instead of the images, a frozen backbone's precomputed features, float (N, L, D) in image
            order (`captioning.features.cache_features`, a memory-mapped file): each batch reads its rows from
            it (through `tf.numpy_function`, so the whole array never sits in memory).

    Returns:
        A `tf.data.Dataset` of `((images, caption_in), caption_out)`: images uint8 (B, image_size,
        image_size, 3) (with `features`: float32 (B, L, D)); caption_in and caption_out int32 (B, max_length),
        padded with `pad_token_id` = 0 (a loss must ignore positions where caption_out == 0).
    """
    import tensorflow as tf

    batch_size = positive_int(batch_size, "batch_size")
    image_size = positive_int(image_size, "image_size")
    max_length = _check_max_length(max_length)
    if not len(caption_set):
        raise ValueError("make_dataset needs a CaptionSet with at least one image; received an empty one.")
    image_index, tokens = _encode(caption_set, vocabulary)
    counts = _truncated(tokens, max_length)
    if counts["captions"]:
        warnings.warn(
            f"{counts['captions']} of {counts['total']} captions ({100 * counts['captions'] / counts['total']:.1f}%) "
            f"are longer than max_length - 1 = {max_length - 1} words and are truncated (the longest has "
            f"{counts['longest']}; raise max_length to keep whole captions; count_truncated() counts them).",
            UserWarning,
            stacklevel=2,
        )
    caption_in, caption_out = _pad(tokens, vocabulary, max_length)

    if features is not None:
        if getattr(features, "ndim", None) != 3 or len(features) != len(caption_set):
            raise ValueError(f"`features` must be an array (N, L, D) with one row per image (N = "
                             f"{len(caption_set)}); received shape {getattr(features, 'shape', None)}.")
        row_shape = tuple(int(d) for d in features.shape[1:])

        def load(i):
            row = tf.numpy_function(lambda j: np.asarray(features[j], np.float32), [i], tf.float32)
            row.set_shape(row_shape)
            return row

        sources = image_index
    elif caption_set.images is not None:
        images = tf.constant(_resize_arrays(tf, caption_set.images, image_size))

        def load(i):
            return tf.gather(images, i)

        sources = image_index
    else:
        sources = np.asarray([caption_set.image_paths[i] for i in image_index], dtype=object).astype(str)

        def load(path):
            return _load_file(tf, path, image_size)

    # Shuffled: epoch e in (seed, e)'s order, whichever process draws it (core.inputs.data_order).
    ds = data_order.shuffled_slices((sources, caption_in, caption_out), seed, shuffle=shuffle)
    ds = ds.map(lambda s, ci, co: ((load(s), ci), co), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
