"""Image classification data that works offline, and the batches the ViT trains on.

- :func:`digits`: scikit-learn's handwritten digits (1,797 real 8 x 8 gray images, 10 classes, pixel values
  0..16; ``sklearn.datasets.load_digits``, shipped inside the package), split at random by seed.
- :func:`triangle_colours`: generated scenes (applications/core/inputs/scene_images.py) of 2 to 4 coloured shapes,
  exactly one of them a triangle; the class is the triangle's colour (5 classes). The answer needs the right object:
  the other objects have colours too, drawn the same way.
- :func:`triangle_colour_shared`: the same scenes, and the question "does another shape have the triangle's
  colour?" (yes / no, balanced): a relation between two objects anywhere in the image.
- :class:`ShiftedBatches`: shuffled batches with random translations of up to ``shift`` pixels (zero fill), the
  augmentation a ViT needs on so few images (it has no convolutional prior for translation).

Images are float32 in [0, 1], (N, H, W, C); labels int32 (N,).
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from attnlayers.validation import non_negative_int, positive_int

from ..core.inputs.data_order import current_epoch
from ..core.inputs.splits import split_items

DIGIT_CLASSES = tuple(str(d) for d in range(10))
TRIANGLE_SHAPE = "triangle"


@dataclasses.dataclass
class ImageSplits:
    """A classification task's splits: images float32 (N, H, W, C) in [0, 1], labels int32 (N,)."""

    train: tuple
    validation: tuple
    test: tuple
    class_names: tuple

    @property
    def image_shape(self):
        return tuple(self.train[0].shape[1:])


def split_indices(count, seed, validation_fraction, test_fraction):
    """A random split of ``range(count)`` into (train, validation, test) index arrays, each sorted
    (``core.inputs.splits.split_items`` with ``numpy.random.default_rng(seed)``: the test part first, then
    validation)."""
    for name, value in (("validation_fraction", validation_fraction), ("test_fraction", test_fraction)):
        if not 0 <= value < 1:
            raise ValueError(f"`{name}` must be in [0, 1); received {value!r}.")
    if validation_fraction + test_fraction >= 1:
        raise ValueError(f"`validation_fraction` + `test_fraction` must leave training examples; received "
                         f"{validation_fraction} + {test_fraction}.")
    sizes = [round(count * test_fraction), round(count * validation_fraction)]
    test, validation, train = split_items(range(count), sizes, np.random.default_rng(seed))
    return np.array(train, np.int64), np.array(validation, np.int64), np.array(test, np.int64)


def digits(seed=0, validation_fraction=0.1, test_fraction=0.2):
    """scikit-learn's digits as :class:`ImageSplits` of (8, 8, 1) images in [0, 1] (pixel value / 16)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:
        raise ImportError("the digits come with scikit-learn: pip install scikit-learn") from error
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[..., None]
    labels = data.target.astype(np.int32)
    train, validation, test = split_indices(len(images), seed, validation_fraction, test_fraction)
    return ImageSplits((images[train], labels[train]), (images[validation], labels[validation]),
                       (images[test], labels[test]), DIGIT_CLASSES)


def _one_triangle(py_rng, count):
    """(shape, colour, size) of `count` objects: one triangle at a random place in the list, the others of the
    other shapes; colours and sizes uniform."""
    from ..core.inputs.scene_images import COLOURS, SHAPES, SIZES

    others = [s for s in SHAPES if s != TRIANGLE_SHAPE]
    target = py_rng.randrange(count)
    return [(TRIANGLE_SHAPE if i == target else py_rng.choice(others), py_rng.choice(list(COLOURS)),
             py_rng.choice(list(SIZES))) for i in range(count)]


def _one_triangle_shared(py_rng, count):
    """As :func:`_one_triangle`, and with probability 1/2 another object of the triangle's colour, else none."""
    from ..core.inputs.scene_images import COLOURS

    objects = _one_triangle(py_rng, count)
    target = next(i for i, o in enumerate(objects) if o[0] == TRIANGLE_SHAPE)
    colour = objects[target][1]
    others = [i for i in range(count) if i != target]
    chosen = py_rng.choice(others) if py_rng.random() < 0.5 else None  # the object that shares the colour
    rest = [c for c in COLOURS if c != colour]
    result = []
    for i, (shape, c, size) in enumerate(objects):
        if i == chosen:
            c = colour
        elif chosen is None and i != target and c == colour:
            c = py_rng.choice(rest)
        result.append((shape, c, size))
    return result


def _scene_splits(num_train, num_validation, num_test, image_size, min_objects, max_objects, seed, attributes,
                  label, name):
    """(images in [0, 1], labels) for the three splits, each drawn with its own seed."""
    from ..core.inputs.scene_images import draw_scenes

    splits = []
    for index, count in enumerate((num_train, num_validation, num_test)):
        count = non_negative_int(count, ("num_train", "num_validation", "num_test")[index])
        split_seed = int(np.random.SeedSequence([non_negative_int(seed, "seed"), 10 + index]).generate_state(1)[0])
        images, objects = draw_scenes(count, image_size=image_size, min_objects=min_objects, max_objects=max_objects,
                                      seed=split_seed, attributes=attributes, name=name)
        splits.append(((images / np.float32(255.0)).astype(np.float32),
                       np.asarray([label(scene) for scene in objects], np.int32)))
    return splits


def _triangle(scene):
    return next(o for o in scene if o.shape == TRIANGLE_SHAPE)


def triangle_colour_shared(num_train=20000, num_validation=1000, num_test=2000, *, image_size=32, min_objects=2,
                           max_objects=4, seed=0):
    """"Does another shape have the triangle's colour?" on generated scenes, as :class:`ImageSplits` of (S, S, 3)
    images in [0, 1], classes ("no", "yes"), each with probability 1/2.

    The scenes are :func:`triangle_colours`' (exactly one triangle among ``min_objects`` to ``max_objects``
    shapes); in "yes" scenes one other shape, chosen at random, has the triangle's colour, in "no" scenes none has.
    """
    def shared(scene):
        triangle = _triangle(scene)
        return int(any(o.colour == triangle.colour for o in scene if o is not triangle))

    return ImageSplits(*_scene_splits(num_train, num_validation, num_test, image_size, min_objects, max_objects, seed,
                                      _one_triangle_shared, shared, "triangle_colour_shared"), ("no", "yes"))


def triangle_colours(num_train=20000, num_validation=1000, num_test=2000, *, image_size=32, min_objects=2,
                     max_objects=4, seed=0):
    """"What colour is the triangle?" on generated scenes, as :class:`ImageSplits` of (S, S, 3) images in [0, 1].

    Each image holds ``min_objects`` to ``max_objects`` shapes (circles, squares, triangles, crosses in five
    colours, two sizes, anywhere), exactly one of them a triangle; its label is the triangle's colour, one of
    ``COLOURS`` (applications/core/inputs/scene_images.py). The splits are drawn with their own seeds, so no image
    repeats.
    """
    from ..core.inputs.scene_images import COLOURS

    class_names = tuple(COLOURS)
    return ImageSplits(*_scene_splits(num_train, num_validation, num_test, image_size, min_objects, max_objects, seed,
                                      _one_triangle, lambda scene: class_names.index(_triangle(scene).colour),
                                      "triangle_colours"), class_names)


def random_shift(images, shift, rng):
    """Each image moved by (dy, dx), each uniform in [-shift, shift], the uncovered border filled with zeros."""
    if shift == 0:
        return images
    n, h, w, _ = images.shape
    padded = np.pad(images, ((0, 0), (shift, shift), (shift, shift), (0, 0)))
    offsets = rng.integers(0, 2 * shift + 1, size=(n, 2))
    return np.stack([padded[i, dy:dy + h, dx:dx + w] for i, (dy, dx) in enumerate(offsets)])


class ShiftedBatches(keras.utils.PyDataset):
    """Batches of (images, labels), reshuffled each epoch, each image randomly shifted (:func:`random_shift`).

    Epoch e's order is a pure function of (seed, e) and batch i's shifts of (seed, e, i) (``core.inputs.data_order``:
    the epoch is ``fit``'s), so a run resumed at epoch e draws the batches an uninterrupted one drew.

    Args:
        images: float32 (N, H, W, C). labels: int (N,).
        batch_size: examples per batch (the last batch of an epoch may be smaller).
        shift: the largest translation in pixels (0: no augmentation).
        seed: the shuffling and shifting seed.
    """

    def __init__(self, images, labels, batch_size, shift=1, seed=0, **kwargs):
        super().__init__(**kwargs)
        if len(images) != len(labels) or len(images) == 0:
            raise ValueError(f"`images` and `labels` must be non-empty and of one length; received {len(images)} "
                             f"images and {len(labels)} labels.")
        self.images, self.labels = images, np.asarray(labels)
        self.batch_size = positive_int(batch_size, "batch_size")
        self.shift = non_negative_int(shift, "shift")
        self.seed = non_negative_int(seed, "seed")
        self._orders = {}  # epoch -> its permutation of the images

    def order(self, epoch):
        """The (N,) permutation of the images in ``epoch``."""
        if epoch not in self._orders:
            self._orders = {epoch: np.random.default_rng([self.seed, epoch, 0]).permutation(len(self.images))}
        return self._orders[epoch]

    def __len__(self):
        return -(-len(self.images) // self.batch_size)

    def __getitem__(self, index):
        epoch = current_epoch()
        chosen = self.order(epoch)[index * self.batch_size:(index + 1) * self.batch_size]
        shifts = np.random.default_rng([self.seed, epoch, 1, index])
        return random_shift(self.images[chosen], self.shift, shifts), self.labels[chosen]


__all__ = ["DIGIT_CLASSES", "ImageSplits", "ShiftedBatches", "TRIANGLE_SHAPE", "digits", "random_shift",
           "split_indices", "triangle_colour_shared", "triangle_colours"]
