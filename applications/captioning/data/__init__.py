"""Captioned images, as plain Python / NumPy data (`CaptionSet`, `CaptionSplits`) until `make_dataset` turns them
into batches for `model.fit`; nothing is downloaded.

    caption_set.py  CaptionSet, CaptionSplits, SceneObject: the containers
    scenes.py       make_scenes, load_scenes, describe_scene: the generated scene task with its ground truth
    readers.py      read_flickr8k, read_coco: the users' formats, as image paths
    split.py        split_caption_set (seeded, by image), parse_data_argument ("scenes", "flickr8k:DIR", ...)
    vocabulary.py   CaptionVocabulary, normalize_caption: word-level ids, pad 0 / start 1 / end 2 / unk 3
    pipeline.py     make_dataset, encode_captions, count_truncated, image_batches: tf.data batches (TensorFlow
                    imported on use)

docs/guides/captioning-data.md is the data card: the scene grammar and sizes, the readers' formats and flags.
"""

from .caption_set import CaptionSet, CaptionSplits, SceneObject
from .pipeline import count_truncated, encode_captions, image_batches, make_dataset
from .readers import read_coco, read_flickr8k
from .scenes import (
    COLOURS,
    RELATIONS,
    SHAPES,
    SIZES,
    describe_scene,
    load_scenes,
    make_scenes,
    object_sizes,
    word_kind,
)
from .split import DATA_SCHEMES, parse_data_argument, split_caption_set
from .vocabulary import SPECIAL_TOKENS, CaptionVocabulary, normalize_caption

__all__ = [
    "COLOURS",
    "CaptionSet",
    "CaptionSplits",
    "CaptionVocabulary",
    "DATA_SCHEMES",
    "RELATIONS",
    "SHAPES",
    "SIZES",
    "SPECIAL_TOKENS",
    "SceneObject",
    "count_truncated",
    "describe_scene",
    "encode_captions",
    "image_batches",
    "load_scenes",
    "make_dataset",
    "make_scenes",
    "normalize_caption",
    "object_sizes",
    "parse_data_argument",
    "read_coco",
    "read_flickr8k",
    "split_caption_set",
    "word_kind",
]
