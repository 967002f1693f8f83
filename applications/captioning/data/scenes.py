"""Generated "scenes": RGB images of 1 to 4 coloured shapes on a dim textured background, each with a caption from
a small grammar that names every object left to right, plus the ground truth (every object's attributes and
box, and the object each caption word describes) to check visual attention against. NumPy only; seeded.
docs/guides/captioning-data.md describes the grammar; 10,000 64x64 images take about 1.5 s on one CPU core (measured:
1.3-1.7 s; 128x128: 4.7 s), `load_scenes()` (9,500 images) 1.7 s.

    "a big red circle beside a small blue square above a big white cross"
"""

from __future__ import annotations

import numpy as np

from attnlayers.validation import non_negative_int, one_of

from ...core.inputs.scene_images import COLOURS, SHAPES, SIZES, SceneObject, centre, draw_scenes, object_sizes
from .caption_set import CaptionSet, CaptionSplits

RELATIONS = ("beside", "above", "below")


def relation(left: SceneObject, right: SceneObject) -> str:
    """The relation word between caption neighbours (`right` is not left of `left`): "above" / "below" when the
    vertical offset of their centres exceeds the horizontal one (`left` above / below `right`), else "beside"."""
    (lx, ly), (rx, ry) = centre(left), centre(right)
    dx, dy = rx - lx, ry - ly
    if abs(dy) > dx:
        return "above" if dy > 0 else "below"
    return "beside"


def word_kind(word: str):
    """"colour", "size" or "shape" for a word of the scene grammar that names an attribute of an object, else None."""
    return "colour" if word in COLOURS else "size" if word in SIZES else "shape" if word in SHAPES else None


def describe_scene(objects: list) -> tuple:
    """The caption of a scene and the object index of each of its words.

    Objects are named left to right (by box centre x, then y) as "a SIZE COLOUR SHAPE", neighbours joined by
    `relation`. Deterministic: the same objects always give the same caption.

    Args:
        objects: `SceneObject`s, in any order.

    Returns:
        `(caption, word_objects)`: the caption (str) and one int per word, the index in `objects` of the object
        the word names (its size, colour and shape words), or -1 ("a", relation words).

    Example:
        >>> describe_scene([SceneObject("cross", "white", "big", (4, 20, 23, 39)),
        ...                 SceneObject("circle", "red", "small", (30, 5, 41, 16))])
        ('a small red circle below a big white cross', [-1, 1, 1, 1, -1, -1, 0, 0, 0])
    """
    order = sorted(range(len(objects)), key=lambda i: (centre(objects[i]), i))
    words, word_objects = [], []
    for position, i in enumerate(order):
        if position:
            words.append(relation(objects[order[position - 1]], objects[i]))
            word_objects.append(-1)
        obj = objects[i]
        words += ["a", obj.size, obj.colour, obj.shape]
        word_objects += [-1, i, i, i]
    return " ".join(words), word_objects


def make_scenes(
    num_images: int, *, image_size: int = 64, min_objects: int = 1, max_objects: int = 4, seed: int = 0
) -> CaptionSet:
    """Generates captioned scenes (docs/guides/captioning-data.md): `applications.core.inputs.scene_images.draw_scenes`'
    images, each object of a uniformly drawn shape, colour and size, captioned by `describe_scene`.

    Args:
        num_images, image_size, min_objects, max_objects, seed: as `draw_scenes` (image_size >= 16; the same seed
            gives the same scenes in every process; the first k scenes do not depend on `num_images`).

    Returns:
        A `CaptionSet` with `images` uint8 (num_images, image_size, image_size, 3), one caption per image,
        `objects` (left to right, the caption's order) and `word_objects`.

    Raises:
        ValueError: for a bad count or size, or when `max_objects` objects do not fit in `image_size`.

    Example:
        >>> scenes = make_scenes(2, seed=1)
        >>> scenes.images.shape
        (2, 64, 64, 3)
        >>> caption = scenes.captions[0][0]    # e.g. "a small green triangle beside a big white circle"
    """
    images, objects = draw_scenes(num_images, image_size=image_size, min_objects=min_objects,
                                  max_objects=max_objects, seed=seed, name="make_scenes")
    described = [describe_scene(o) for o in objects]
    return CaptionSet(images=images, captions=[[caption] for caption, _ in described], objects=objects,
                      word_objects=[word_objects for _, word_objects in described])


def split_seed(seed: int, split: str) -> int:
    """The `make_scenes` seed of one split of `load_scenes(seed=seed)`: different for each split and seed."""
    index = {"train": 1, "validation": 2, "test": 3}[one_of(split, "split", ("train", "validation", "test"))]
    seed = non_negative_int(seed, "seed")
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def load_scenes(
    num_train: int = 8000,
    num_validation: int = 500,
    num_test: int = 1000,
    *,
    image_size: int = 64,
    min_objects: int = 1,
    max_objects: int = 4,
    seed: int = 0,
) -> CaptionSplits:
    """The scene task split three ways: each split is `make_scenes` with its own seed (`split_seed`), so no
    image repeats across splits (backgrounds are continuous noise; captions of few objects do repeat).

    Returns:
        `CaptionSplits(train, validation, test)` of `CaptionSet`s with images, captions and ground truth.
    """
    sizes = {"train": num_train, "validation": num_validation, "test": num_test}
    for name, value in sizes.items():
        non_negative_int(value, f"num_{name}")
    return CaptionSplits(
        **{
            name: make_scenes(
                count,
                image_size=image_size,
                min_objects=min_objects,
                max_objects=max_objects,
                seed=split_seed(seed, name),
            )
            for name, count in sizes.items()
        }
    )


__all__ = ["COLOURS", "RELATIONS", "SHAPES", "SIZES", "SceneObject", "describe_scene", "load_scenes", "make_scenes",
           "object_sizes", "relation", "split_seed", "word_kind"]
