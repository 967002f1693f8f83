"""The containers every loader returns: `CaptionSet` (images or image paths, each with one or more reference
captions, plus the scenes' ground truth when known), `SceneObject` (one object of a generated scene) and
`CaptionSplits` (train / validation / test)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from ...core.inputs.scene_images import SceneObject  # re-exported: the objects of a generated scene


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptionSet:
    """Images with reference captions; exactly one of `images` and `image_paths` is set.

    Attributes:
        images: uint8 array (N, H, W, 3), or None.
        image_paths: list of N image file paths (str), or None.
        captions: list of N lists of reference captions (str); at least one per image. Generated scenes have
            one each; Flickr8k has five, COCO five or more.
        objects: optional, per image the list of its `SceneObject`s (generated scenes: left to right, in
            caption order).
        word_objects: optional, per image one int per word of its first caption (`captions[i][0].split()`): the
            index in `objects[i]` of the object the word describes, or -1 for words that name none ("a",
            relation words).
    """

    images: np.ndarray | None = None
    image_paths: list | None = None
    captions: list
    objects: list | None = None
    word_objects: list | None = None

    def __post_init__(self):
        if (self.images is None) == (self.image_paths is None):
            which = "neither" if self.images is None else "both"
            raise ValueError(f"CaptionSet needs exactly one of `images` and `image_paths`; received {which}.")
        if self.images is not None:
            images = self.images
            is_array = isinstance(images, np.ndarray)
            if not is_array or images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
                received = (
                    f"{type(images).__name__} of dtype {images.dtype} and shape {images.shape}"
                    if is_array
                    else type(images).__name__
                )
                raise ValueError(f"`images` must be a uint8 numpy array (N, H, W, 3); received a {received}.")
            count = len(images)
        else:
            if isinstance(self.image_paths, str):
                raise ValueError("`image_paths` must be a list of file paths; received a single string.")
            count = len(self.image_paths)
        if len(self.captions) != count:
            raise ValueError(
                f"CaptionSet needs one list of captions per image; received {len(self.captions)} caption lists for "
                f"{count} images."
            )
        for i, references in enumerate(self.captions):
            if isinstance(references, str) or not len(references) or not all(isinstance(c, str) for c in references):
                raise ValueError(
                    f"`captions[{i}]` must be a non-empty list of strings (the references of image {i}); received "
                    f"{references!r}."
                )
        for name in ("objects", "word_objects"):
            value = getattr(self, name)
            if value is not None and len(value) != count:
                raise ValueError(f"`{name}` needs one entry per image; received {len(value)} for {count} images.")
        if self.word_objects is not None:
            for i, (indices, references) in enumerate(zip(self.word_objects, self.captions)):
                if len(indices) != len(references[0].split()):
                    raise ValueError(
                        f"`word_objects[{i}]` needs one index per word of captions[{i}][0] "
                        f"({len(references[0].split())} words); received {len(indices)}."
                    )

    def __len__(self):
        return len(self.captions)

    @property
    def num_captions(self) -> int:
        """How many (image, reference) pairs: the examples `make_dataset` yields per epoch."""
        return sum(len(references) for references in self.captions)

    def select(self, indices: Iterable[int]) -> CaptionSet:
        """The images at `indices` (with their captions and ground truth), in that order."""
        indices = [int(i) for i in indices]

        def pick(values):
            return None if values is None else [values[i] for i in indices]

        return CaptionSet(
            images=None if self.images is None else self.images[np.asarray(indices, dtype=np.int64)],
            image_paths=pick(self.image_paths),
            captions=pick(self.captions),
            objects=pick(self.objects),
            word_objects=pick(self.word_objects),
        )

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.select(range(len(self))[index])
        raise TypeError("CaptionSet supports slices and select(indices); index one image with select([i]).")


class CaptionSplits(NamedTuple):
    """A train / validation / test partition by image (no image is in two splits)."""

    train: CaptionSet
    validation: CaptionSet
    test: CaptionSet


__all__ = ["CaptionSet", "CaptionSplits", "SceneObject"]
