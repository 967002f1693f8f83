"""The generated scene task and the containers: determinism, layout (boxes inside the image, apart, drawn where
they say), the caption grammar and its word -> object map, a background that is not flat, disjoint splits, and
`CaptionSet`'s checks."""

import hashlib
import re

import numpy as np
import pytest
from attnlayers.applications.captioning import data

_OBJECT = r"a (small|big) (red|green|blue|yellow|white) (circle|square|triangle|cross)"
_CAPTION = re.compile(rf"^{_OBJECT}( (beside|above|below) {_OBJECT})*$")
_BACKGROUND_MAX = 90


@pytest.fixture(scope="module")
def scenes():
    return data.make_scenes(60, seed=5)


def _message(error):
    text = str(error.value)
    assert "\n" not in text, text
    return text


def _same(a, b):
    return (
        np.array_equal(a.images, b.images)
        and a.captions == b.captions
        and a.objects == b.objects
        and a.word_objects == b.word_objects
    )


def test_deterministic_by_seed(scenes):
    again = data.make_scenes(60, seed=5)
    assert _same(scenes, again)
    assert _same(data.make_scenes(7, seed=5), scenes.select(range(7)))  # a prefix does not depend on num_images
    other = data.make_scenes(60, seed=6)
    assert not np.array_equal(other.images, scenes.images) and other.captions != scenes.captions


def test_images_and_object_counts(scenes):
    assert scenes.images.dtype == np.uint8 and scenes.images.shape == (60, 64, 64, 3)
    assert scenes.image_paths is None and len(scenes) == 60 and scenes.num_captions == 60
    counts = [len(objects) for objects in scenes.objects]
    assert min(counts) == 1 and max(counts) == 4 and len(set(counts)) == 4
    three = data.make_scenes(10, min_objects=3, max_objects=3, image_size=32, seed=1)
    assert three.images.shape == (10, 32, 32, 3) and all(len(o) == 3 for o in three.objects)


def test_boxes_inside_apart_and_drawn(scenes):
    sizes = data.object_sizes(64)
    assert sizes == {"small": 11, "big": 19} and data.object_sizes(128) == {"small": 22, "big": 38}
    for image, objects in zip(scenes.images, scenes.objects):
        outside = np.ones((64, 64), bool)
        for k, obj in enumerate(objects):
            assert obj.shape in data.SHAPES and obj.colour in data.COLOURS and obj.size in data.SIZES
            y0, x0, y1, x1 = obj.box
            assert 0 <= y0 < y1 <= 64 and 0 <= x0 < x1 <= 64
            assert y1 - y0 == x1 - x0 == sizes[obj.size]
            # drawn where the box says, in its colour: the centre pixel is the colour itself
            assert tuple(image[(y0 + y1) // 2, (x0 + x1) // 2]) == data.COLOURS[obj.colour]
            outside[y0:y1, x0:x1] = False
            for other in objects[k + 1 :]:  # at least 3 pixels apart along one axis
                b = other.box
                assert y0 >= b[2] + 3 or b[0] >= y1 + 3 or x0 >= b[3] + 3 or b[1] >= x1 + 3, (obj, other)
        assert image[outside].max() <= _BACKGROUND_MAX  # nothing drawn outside the boxes


def test_caption_names_every_object_left_to_right(scenes):
    for (caption,), objects, word_objects in zip(scenes.captions, scenes.objects, scenes.word_objects):
        assert _CAPTION.match(caption), caption
        words = caption.split()
        assert len(word_objects) == len(words)
        assert sorted({k for k in word_objects if k >= 0}) == list(range(len(objects)))
        for k, obj in enumerate(objects):
            named = [w for w, i in zip(words, word_objects) if i == k]
            assert named == [obj.size, obj.colour, obj.shape]
        assert all(w in ("a", *data.RELATIONS) for w, i in zip(words, word_objects) if i < 0)
        centres = [((o.box[1] + o.box[3]) / 2, (o.box[0] + o.box[2]) / 2) for o in objects]
        assert centres == sorted(centres)  # objects are listed, and named, left to right
        relations = [w for w in words if w in data.RELATIONS]
        for (lx, ly), (rx, ry), word in zip(centres, centres[1:], relations):
            expected = "beside" if abs(ry - ly) <= rx - lx else ("above" if ry > ly else "below")
            assert word == expected
        assert data.describe_scene(objects) == (caption, word_objects)
        assert data.describe_scene(objects[::-1])[0] == caption  # the caption depends on the layout only
    assert len(max(scenes.captions, key=lambda c: len(c[0].split()))[0].split()) <= 19  # fits max_length=20


def test_describe_scene_example():
    objects = [
        data.SceneObject("cross", "white", "big", (4, 20, 23, 39)),
        data.SceneObject("circle", "red", "small", (30, 5, 41, 16)),
    ]
    caption = "a small red circle below a big white cross"
    assert data.describe_scene(objects) == (caption, [-1, 1, 1, 1, -1, -1, 0, 0, 0])


def test_background_is_not_flat_and_dark(scenes):
    for image, objects in zip(scenes.images[:20], scenes.objects[:20]):
        outside = np.ones((64, 64), bool)
        for obj in objects:
            y0, x0, y1, x1 = obj.box
            outside[max(0, y0 - 1) : y1 + 1, max(0, x0 - 1) : x1 + 1] = False
        background = image[outside].astype(np.float64)
        assert background.std(axis=0).min() > 3.0  # every channel varies
        assert background.mean() < 60
        assert len(np.unique(background[:, 0])) > 10


def test_load_scenes_splits_are_disjoint():
    splits = data.load_scenes(40, 10, 20, image_size=32, seed=2)
    assert isinstance(splits, data.CaptionSplits)
    train, validation, test = splits
    assert (len(train), len(validation), len(test)) == (40, 10, 20)
    assert train.images.shape[1:] == (32, 32, 3)

    def digests(split):
        return {hashlib.sha1(image.tobytes()).hexdigest() for image in split.images}

    assert not digests(train) & digests(test) and not digests(train) & digests(validation)
    assert not digests(validation) & digests(test)
    assert _same(data.load_scenes(40, 10, 20, image_size=32, seed=2).test, test)
    assert not np.array_equal(data.load_scenes(40, 10, 20, image_size=32, seed=3).test.images, test.images)
    assert len(data.load_scenes(0, 0, 3).train) == 0


def test_scene_errors():
    with pytest.raises(ValueError, match="image_size"):
        data.make_scenes(2, image_size=8)
    with pytest.raises(ValueError, match="min_objects=3, max_objects=2"):
        data.make_scenes(2, min_objects=3, max_objects=2)
    with pytest.raises(ValueError, match="num_images"):
        data.make_scenes(-1)
    with pytest.raises(ValueError, match="seed"):
        data.make_scenes(2, seed=-1)
    with pytest.raises(ValueError) as error:
        data.make_scenes(2, image_size=16, min_objects=12, max_objects=12)
    assert "could not place 12 objects" in _message(error)
    with pytest.raises(ValueError, match="num_test"):
        data.load_scenes(10, 10, -1)


def test_caption_set_checks_and_select(scenes):
    picked = scenes.select([3, 0])
    assert np.array_equal(picked.images, scenes.images[[3, 0]])
    assert picked.captions == [scenes.captions[3], scenes.captions[0]]
    assert picked.objects[1] == scenes.objects[0] and picked.word_objects[0] == scenes.word_objects[3]
    assert len(scenes[2:5]) == 3 and len(scenes.select([])) == 0
    paths = data.CaptionSet(image_paths=["a.jpg", "b.jpg"], captions=[["one", "two"], ["three"]])
    assert len(paths) == 2 and paths.num_captions == 3 and paths.select([1]).image_paths == ["b.jpg"]

    images = np.zeros((2, 8, 8, 3), np.uint8)
    cases = [
        (dict(captions=[["x"]]), "exactly one of `images` and `image_paths`; received neither"),
        (dict(images=images, image_paths=["a", "b"], captions=[["x"], ["y"]]), "received both"),
        (dict(images=images.astype(np.float32), captions=[["x"], ["y"]]), "uint8"),
        (dict(images=images[..., :1], captions=[["x"], ["y"]]), r"\(N, H, W, 3\)"),
        (dict(images=images, captions=[["x"]]), "1 caption lists for 2 images"),
        (dict(images=images, captions=["x", "y"]), r"`captions\[0\]` must be a non-empty list"),
        (dict(images=images, captions=[["x"], []]), r"`captions\[1\]`"),
        (dict(images=images, captions=[["x"], ["y"]], objects=[[]]), "`objects` needs one entry per image"),
        (dict(images=images, captions=[["a b"], ["y"]], word_objects=[[0], [0]]), r"`word_objects\[0\]`"),
        (dict(image_paths="a.jpg", captions=[["x"]]), "single string"),
    ]
    for kwargs, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            data.CaptionSet(**kwargs)
