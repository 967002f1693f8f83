"""Generated "scenes": RGB images of 1 to 4 coloured shapes on a dim textured background, each with a caption from
a small grammar that names every object left to right, plus the ground truth (every object's attributes and
box, and the object each caption word describes) to check visual attention against. NumPy only; seeded.
docs/captioning-data.md describes the grammar; 10,000 64x64 images take about 1.5 s on one CPU core (measured:
1.3-1.7 s; 128x128: 4.7 s), `load_scenes()` (9,500 images) 1.7 s.

    "a big red circle beside a small blue square above a big white cross"
"""

from __future__ import annotations

import functools
import random

import numpy as np

from attnlayers.validation import non_negative_int, one_of, positive_int

from .caption_set import CaptionSet, CaptionSplits, SceneObject

SHAPES = ("circle", "square", "triangle", "cross")
COLOURS = {  # saturated, far apart, all much brighter than the background in at least one channel
    "red": (230, 40, 40),
    "green": (40, 210, 60),
    "blue": (60, 110, 255),
    "yellow": (240, 220, 40),
    "white": (245, 245, 245),
}
SIZES = {"small": 11, "big": 19}  # pixels across at 64x64; scaled with image_size
RELATIONS = ("beside", "above", "below")
MIN_IMAGE_SIZE = 16

_SUPERSAMPLE = 4  # anti-aliased masks: the mean of 4x4 samples per pixel
_TRIES_PER_OBJECT = 50
_RESTARTS = 50


@functools.lru_cache(maxsize=None)
def _mask(shape: str, size: int) -> np.ndarray:
    """Coverage in [0, 1] of `shape` drawn in a (size, size) cell; every shape touches all four sides."""
    k = _SUPERSAMPLE
    t = (np.arange(size * k, dtype=np.float64) + 0.5) / k  # sample positions in pixels
    y, x = np.meshgrid(t, t, indexing="ij")
    c = size / 2
    if shape == "circle":
        inside = (y - c) ** 2 + (x - c) ** 2 <= c * c
    elif shape == "square":
        inside = np.ones_like(y, dtype=bool)
    elif shape == "triangle":  # apex up, base along the bottom
        inside = np.abs(x - c) <= c * y / size
    elif shape == "cross":  # a plus sign, arms a third of the size thick
        half = size / 6
        inside = (np.abs(x - c) <= half) | (np.abs(y - c) <= half)
    else:
        raise ValueError(f"Unknown shape {shape!r}; expected one of {list(SHAPES)}.")
    return inside.reshape(size, k, size, k).mean(axis=(1, 3)).astype(np.float32)


def object_sizes(image_size: int = 64) -> dict:
    """Pixels across of "small" and "big" objects at `image_size`: 11 and 19 at 64, scaled linearly."""
    small = max(3, round(SIZES["small"] * image_size / 64))
    big = max(small + 2, round(SIZES["big"] * image_size / 64))
    return {"small": small, "big": big}


@functools.lru_cache(maxsize=None)
def _upsample_matrix(image_size: int, grid: int) -> np.ndarray:
    """(image_size, grid) bilinear interpolation weights from a coarse grid to pixel centres."""
    position = (np.arange(image_size) + 0.5) / image_size * (grid - 1)
    low = np.minimum(np.floor(position).astype(int), grid - 2)
    frac = position - low
    matrix = np.zeros((image_size, grid), np.float32)
    matrix[np.arange(image_size), low] = 1 - frac
    matrix[np.arange(image_size), low + 1] = frac
    return matrix


def _background(rng: np.random.Generator, image_size: int) -> np.ndarray:
    """Dim low-frequency colour noise plus a faint per-pixel texture, float32 (S, S, 3) in [0, 90]."""
    up = _upsample_matrix(image_size, 5)
    base = rng.uniform(8.0, 40.0, size=3).astype(np.float32)
    coarse = rng.normal(0.0, 16.0, size=(5, 5, 3)).astype(np.float32)
    smooth = (up @ coarse.transpose(2, 0, 1) @ up.T).transpose(1, 2, 0)  # bilinear upsampling, per channel
    image = rng.random((image_size, image_size, 3), dtype=np.float32)  # texture: uniform, std 4
    image *= 14.0
    image += smooth
    image += base - 7.0
    return np.clip(image, 0.0, 90.0, out=image)


def _place(py_rng: random.Random, sizes: list, image_size: int, gap: int, border: int):
    """Top-left corners for square cells of `sizes`, inside the border and at least `gap` pixels apart
    (rejection sampling, restarted when an object finds no room); None when no layout was found."""
    for _ in range(_RESTARTS):
        boxes = []
        for size in sizes:
            high = image_size - border - size
            for _ in range(_TRIES_PER_OBJECT):
                y0, x0 = py_rng.randint(border, high), py_rng.randint(border, high)
                y1, x1 = y0 + size, x0 + size
                if all(
                    y0 >= b[2] + gap or b[0] >= y1 + gap or x0 >= b[3] + gap or b[1] >= x1 + gap for b in boxes
                ):
                    boxes.append((y0, x0, y1, x1))
                    break
            else:
                break
        else:
            return boxes
    return None


@functools.lru_cache(maxsize=None)
def _mask_box(shape: str, size: int) -> tuple:
    """The tight box `(y0, x0, y1, x1)` of the mask's covered pixels, inside its cell."""
    alpha = _mask(shape, size)
    rows, cols = np.flatnonzero(alpha.any(axis=1)), np.flatnonzero(alpha.any(axis=0))
    return int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1


def _centre(obj: SceneObject) -> tuple:
    y0, x0, y1, x1 = obj.box
    return (x0 + x1) / 2, (y0 + y1) / 2


def relation(left: SceneObject, right: SceneObject) -> str:
    """The relation word between caption neighbours (`right` is not left of `left`): "above" / "below" when the
    vertical offset of their centres exceeds the horizontal one (`left` above / below `right`), else "beside"."""
    (lx, ly), (rx, ry) = _centre(left), _centre(right)
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
    order = sorted(range(len(objects)), key=lambda i: (_centre(objects[i]), i))
    words, word_objects = [], []
    for position, i in enumerate(order):
        if position:
            words.append(relation(objects[order[position - 1]], objects[i]))
            word_objects.append(-1)
        obj = objects[i]
        words += ["a", obj.size, obj.colour, obj.shape]
        word_objects += [-1, i, i, i]
    return " ".join(words), word_objects


def _check_counts(image_size, min_objects, max_objects):
    image_size = positive_int(image_size, "image_size")
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"`image_size` must be at least {MIN_IMAGE_SIZE} pixels; received image_size={image_size}.")
    min_objects = positive_int(min_objects, "min_objects")
    max_objects = positive_int(max_objects, "max_objects")
    if min_objects > max_objects:
        raise ValueError(
            f"make_scenes needs 1 <= min_objects <= max_objects; received min_objects={min_objects}, "
            f"max_objects={max_objects}."
        )
    return image_size, min_objects, max_objects


def make_scenes(
    num_images: int, *, image_size: int = 64, min_objects: int = 1, max_objects: int = 4, seed: int = 0
) -> CaptionSet:
    """Generates captioned scenes (docs/captioning-data.md).

    Each image holds `min_objects` to `max_objects` objects (uniform), each of a uniformly drawn shape, colour
    and size, at random positions inside the image with at least 3 pixels (at 64x64; scaled) between boxes.

    Args:
        num_images: how many images.
        image_size: height and width in pixels (>= 16); object sizes and gaps scale with it.
        min_objects, max_objects: the range of objects per image.
        seed: the same seed gives the same scenes in every process; the first k scenes do not depend on
            `num_images`.

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
    num_images = non_negative_int(num_images, "num_images")
    seed = non_negative_int(seed, "seed")
    image_size, min_objects, max_objects = _check_counts(image_size, min_objects, max_objects)
    sizes = object_sizes(image_size)
    gap = max(1, round(3 * image_size / 64))
    border = max(1, round(2 * image_size / 64))
    colours = {name: np.asarray(rgb, np.float32) for name, rgb in COLOURS.items()}
    colour_names, size_names = list(COLOURS), list(SIZES)

    sequence = np.random.SeedSequence(seed)
    np_rng = np.random.default_rng(sequence)
    py_rng = random.Random(int(sequence.generate_state(1, np.uint64)[0]))  # fast scalar draws for the layout
    images = np.empty((num_images, image_size, image_size, 3), np.uint8)
    captions, all_objects, all_word_objects = [], [], []
    for n in range(num_images):
        count = py_rng.randint(min_objects, max_objects)
        attributes = [
            (py_rng.choice(SHAPES), py_rng.choice(colour_names), py_rng.choice(size_names)) for _ in range(count)
        ]
        cells = _place(py_rng, [sizes[a[2]] for a in attributes], image_size, gap, border)
        if cells is None:
            raise ValueError(
                f"make_scenes could not place {count} objects without overlap in a {image_size}x{image_size} image; "
                f"lower max_objects={max_objects} or raise image_size."
            )
        image = _background(np_rng, image_size)
        objects = []
        for (shape, colour, size), (y0, x0, y1, x1) in zip(attributes, cells):
            alpha = _mask(shape, y1 - y0)[..., None]
            region = image[y0:y1, x0:x1]
            region += alpha * (colours[colour] - region)  # alpha blending, in place
            b = _mask_box(shape, y1 - y0)
            objects.append(SceneObject(shape, colour, size, (y0 + b[0], x0 + b[1], y0 + b[2], x0 + b[3])))
        objects.sort(key=lambda o: _centre(o))
        caption, word_objects = describe_scene(objects)
        np.rint(image, out=image)
        images[n] = image
        captions.append([caption])
        all_objects.append(objects)
        all_word_objects.append(word_objects)
    return CaptionSet(images=images, captions=captions, objects=all_objects, word_objects=all_word_objects)


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
