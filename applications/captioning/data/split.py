"""Seeded splits by image (`split_caption_set`, every reference of an image goes with it) and the `--data`
argument of the captioning examples (`parse_data_argument`)."""

from __future__ import annotations

import glob
import os

import numpy as np

from attnlayers.validation import non_negative_int

from ...core.inputs.splits import split_items
from .caption_set import CaptionSet, CaptionSplits
from .readers import read_coco, read_flickr8k
from .scenes import load_scenes

__all__ = ["DATA_SCHEMES", "parse_data_argument", "split_caption_set"]

DATA_SCHEMES = ("scenes", "scenes:NUM_TRAIN", "flickr8k:DIR", "coco:DIR")


def split_caption_set(
    caption_set: CaptionSet, *, num_test: int = 1000, num_validation: int = 500, seed: int = 0
) -> CaptionSplits:
    """A seeded train / validation / test partition by image.

    Images are shuffled with `numpy.random.default_rng(seed)`; the test split takes the first
    `min(num_test, max(1, n // 5))` of the n images, validation the next `min(num_validation, max(1, n // 10))`
    (so small sets keep at least 70% for training), training the rest. A size of 0 gives an empty split. Each
    split keeps the original order of its images.

    Raises:
        ValueError: for negative sizes, or fewer than 3 images.
    """
    num_test = non_negative_int(num_test, "num_test")
    num_validation = non_negative_int(num_validation, "num_validation")
    seed = non_negative_int(seed, "seed")
    n = len(caption_set)
    if n < 3:
        raise ValueError(f"split_caption_set needs at least 3 images (one per split); received {n}.")
    test = min(num_test, max(1, n // 5))
    validation = min(num_validation, max(1, n // 10))
    # numpy's generator (not random.Random as for translation pairs): the splits recorded so far were drawn with it.
    test_indices, validation_indices, train_indices = split_items(range(n), [test, validation],
                                                                  np.random.default_rng(seed))
    return CaptionSplits(
        train=caption_set.select(train_indices),
        validation=caption_set.select(validation_indices),
        test=caption_set.select(test_indices),
    )


def _concatenate(a: CaptionSet, b: CaptionSet) -> CaptionSet:
    return CaptionSet(image_paths=a.image_paths + b.image_paths, captions=a.captions + b.captions)


def _coco_splits(location: str, split_options: dict, reader_options: dict) -> CaptionSplits:
    if os.path.isfile(location):
        return split_caption_set(read_coco(location, **reader_options), **split_options)
    if not os.path.isdir(location):
        raise FileNotFoundError(f"{location} not found: `coco:` expects a COCO folder or a captions JSON file.")
    files = sorted(glob.glob(os.path.join(location, "annotations", "captions_*.json")))
    files = files or sorted(glob.glob(os.path.join(location, "captions_*.json")))
    train = [f for f in files if "train" in os.path.basename(f)]
    val = [f for f in files if "val" in os.path.basename(f)]
    if not files:
        raise FileNotFoundError(
            f"{location} has no annotations/captions_*.json: `coco:` expects the COCO layout (or a JSON file)."
        )
    if len(train) > 1 or len(val) > 1:
        raise ValueError(
            f"{location} holds several COCO caption files ({', '.join(os.path.basename(f) for f in files)}); "
            "pass one with coco:PATH/TO/captions_XXX.json (2014 and 2017 share images)."
        )
    if train and val:  # Karpathy-style: held-out images from val, the rest of val ("restval") to training
        held_out = split_caption_set(read_coco(val[0], **reader_options), **split_options)
        return CaptionSplits(
            train=_concatenate(read_coco(train[0], **reader_options), held_out.train),
            validation=held_out.validation,
            test=held_out.test,
        )
    return split_caption_set(read_coco((train or val or files)[0], **reader_options), **split_options)


def parse_data_argument(
    argument: str,
    *,
    num_test: int = 1000,
    num_validation: int = 500,
    seed: int = 0,
    skip_missing: bool = False,
    skip_empty: bool = False,
) -> CaptionSplits:
    """The data a `--data` flag names, split three ways.

    - "scenes" or "scenes:NUM_TRAIN": `load_scenes(NUM_TRAIN or 8000, num_validation=num_validation,
      num_test=num_test, seed=seed)`.
    - "flickr8k:DIR": `read_flickr8k(DIR)`, split by its split files when present, else `split_caption_set`.
    - "coco:DIR": DIR/annotations/captions_*.json with the images in DIR/train2017, DIR/val2017 (or a single
      JSON file). With a train and a val file, validation and test images come from val
      (`split_caption_set`) and the rest of val joins training, as in Karpathy's split; one file is split with
      `split_caption_set`.

    Args:
        argument: "scenes", "scenes:NUM_TRAIN", "flickr8k:DIR" or "coco:DIR".
        num_test, num_validation, seed: split sizes and seed (see `split_caption_set` for small data sets).
        skip_missing, skip_empty: passed to the readers.

    Raises:
        ValueError: an unknown scheme or no directory; the readers' errors for bad files.
    """
    if not isinstance(argument, str):
        raise ValueError(f"`argument` must be a string, one of {list(DATA_SCHEMES)}; received {argument!r}.")
    scheme, _, location = argument.partition(":")
    split_options = {"num_test": num_test, "num_validation": num_validation, "seed": seed}
    reader_options = {"skip_missing": skip_missing, "skip_empty": skip_empty}
    if scheme == "scenes":
        num_train = 8000
        if location:
            if not location.isdigit():
                raise ValueError(
                    f"Data argument {argument!r}: expected 'scenes' or 'scenes:NUM_TRAIN' with a number of "
                    "training images."
                )
            num_train = int(location)
        return load_scenes(num_train, num_validation=num_validation, num_test=num_test, seed=seed)
    if scheme in ("flickr8k", "coco"):
        if not location:
            raise ValueError(f"Data argument {argument!r} names no directory; expected {scheme}:DIR.")
        location = os.path.expanduser(location)
        if scheme == "coco":
            return _coco_splits(location, split_options, reader_options)
        data = read_flickr8k(location, **reader_options)
        return data if isinstance(data, CaptionSplits) else split_caption_set(data, **split_options)
    raise ValueError(f"Unknown data argument {argument!r}; expected one of {list(DATA_SCHEMES)}.")
