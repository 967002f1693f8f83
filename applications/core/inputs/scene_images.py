"""Generated scenes: RGB images of coloured shapes (circle, square, triangle, cross; five colours; two sizes) on a
dim textured background, with every object's attributes and tight box. NumPy only; seeded. The captioning task
(applications/captioning/data/scenes.py) and the vision task (applications/vision/data.py) both draw from here;
docs/guides/captioning-data.md describes the scenes. 10,000 64x64 images take about 1.5 s on one CPU core.

    images, objects = draw_scenes(100, image_size=64, seed=0)   # uint8 (100, 64, 64, 3); per image its SceneObjects
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

import numpy as np

from attnlayers.validation import non_negative_int, positive_int


class SceneObject(NamedTuple):
    """One object of a generated scene.

    Attributes:
        shape: "circle", "square", "triangle" or "cross".
        colour: "red", "green", "blue", "yellow" or "white".
        size: "small" or "big".
        box: `(y0, x0, y1, x1)` in pixels of the image, y1 and x1 exclusive: the tight box of the drawn shape.
    """

    shape: str
    colour: str
    size: str
    box: tuple


SHAPES = ("circle", "square", "triangle", "cross")
COLOURS = {  # saturated, far apart, all much brighter than the background in at least one channel
    "red": (230, 40, 40),
    "green": (40, 210, 60),
    "blue": (60, 110, 255),
    "yellow": (240, 220, 40),
    "white": (245, 245, 245),
}
SIZES = {"small": 11, "big": 19}  # pixels across at 64x64; scaled with image_size
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


def centre(obj: "SceneObject") -> tuple:
    """The (x, y) centre of an object's box."""
    y0, x0, y1, x1 = obj.box
    return (x0 + x1) / 2, (y0 + y1) / 2


def _check_counts(image_size, min_objects, max_objects, name):
    image_size = positive_int(image_size, "image_size")
    if image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"`image_size` must be at least {MIN_IMAGE_SIZE} pixels; received image_size={image_size}.")
    min_objects = positive_int(min_objects, "min_objects")
    max_objects = positive_int(max_objects, "max_objects")
    if min_objects > max_objects:
        raise ValueError(
            f"{name} needs 1 <= min_objects <= max_objects; received min_objects={min_objects}, "
            f"max_objects={max_objects}."
        )
    return image_size, min_objects, max_objects


def uniform_attributes(py_rng: random.Random, count: int) -> list:
    """`count` (shape, colour, size) triples, each drawn uniformly: the scenes' default."""
    colour_names, size_names = list(COLOURS), list(SIZES)
    return [(py_rng.choice(SHAPES), py_rng.choice(colour_names), py_rng.choice(size_names)) for _ in range(count)]


def draw_scenes(
    num_images: int,
    *,
    image_size: int = 64,
    min_objects: int = 1,
    max_objects: int = 4,
    seed: int = 0,
    attributes=uniform_attributes,
    name: str = "draw_scenes",
) -> tuple:
    """Draws `num_images` scenes of `min_objects` to `max_objects` objects (uniform), at random positions inside
    the image with at least 3 pixels (at 64x64; scaled) between boxes.

    Args:
        num_images: how many images.
        image_size: height and width in pixels (>= 16); object sizes and gaps scale with it.
        min_objects, max_objects: the range of objects per image.
        seed: the same seed gives the same scenes in every process; the first k scenes do not depend on
            `num_images`.
        attributes: `(py_rng, count) -> [(shape, colour, size)] * count`, the objects' attributes
            (default: `uniform_attributes`).
        name: the caller's name in error messages.

    Returns:
        `(images, objects)`: uint8 (num_images, image_size, image_size, 3) and per image its `SceneObject`s, left
        to right (by box centre x, then y).

    Raises:
        ValueError: for a bad count or size, or when `max_objects` objects do not fit in `image_size`.
    """
    num_images = non_negative_int(num_images, "num_images")
    seed = non_negative_int(seed, "seed")
    image_size, min_objects, max_objects = _check_counts(image_size, min_objects, max_objects, name)
    sizes = object_sizes(image_size)
    gap = max(1, round(3 * image_size / 64))
    border = max(1, round(2 * image_size / 64))
    colours = {colour: np.asarray(rgb, np.float32) for colour, rgb in COLOURS.items()}

    sequence = np.random.SeedSequence(seed)
    np_rng = np.random.default_rng(sequence)
    py_rng = random.Random(int(sequence.generate_state(1, np.uint64)[0]))  # fast scalar draws for the layout
    images = np.empty((num_images, image_size, image_size, 3), np.uint8)
    all_objects = []
    for n in range(num_images):
        count = py_rng.randint(min_objects, max_objects)
        chosen = attributes(py_rng, count)
        cells = _place(py_rng, [sizes[a[2]] for a in chosen], image_size, gap, border)
        if cells is None:
            raise ValueError(
                f"{name} could not place {count} objects without overlap in a {image_size}x{image_size} image; "
                f"lower max_objects={max_objects} or raise image_size."
            )
        image = _background(np_rng, image_size)
        objects = []
        for (shape, colour, size), (y0, x0, y1, x1) in zip(chosen, cells):
            alpha = _mask(shape, y1 - y0)[..., None]
            region = image[y0:y1, x0:x1]
            region += alpha * (colours[colour] - region)  # alpha blending, in place
            b = _mask_box(shape, y1 - y0)
            objects.append(SceneObject(shape, colour, size, (y0 + b[0], x0 + b[1], y0 + b[2], x0 + b[3])))
        objects.sort(key=centre)
        np.rint(image, out=image)
        images[n] = image
        all_objects.append(objects)
    return images, all_objects


__all__ = ["COLOURS", "MIN_IMAGE_SIZE", "SHAPES", "SIZES", "SceneObject", "centre", "draw_scenes", "object_sizes",
           "uniform_attributes"]
