"""The captioners' pixel rule on eager images (``encoder.check_pixel_values``): uint8 as is, integers and
floats in 0..255 taken, floats all within [0, 1] and values outside 0..255 refused with a ValueError naming the
argument; an empty batch gives no captions (caption_images) or a clear ValueError (model.generate)."""

import numpy as np
import pytest
from attnlayers.applications.captioning import ShowAttendTell, predict
from attnlayers.applications.captioning.encoder import check_pixel_values


class _Vocabulary:
    pad_token_id, start_token_id, end_token_id = 0, 1, 2

    def decode(self, row):
        return " ".join(str(t) for t in row if t > 2)


@pytest.fixture(scope="module")
def model():
    model = ShowAttendTell(8, image_size=16, filters=(4, 8), units=8, embedding_dim=4)
    model((np.zeros((1, 16, 16, 3), "uint8"), np.ones((1, 1), "int32")))  # built before generation (JAX)
    return model


def test_pixel_rule():
    rng = np.random.default_rng(0)
    uint8 = rng.integers(0, 256, (2, 4, 4, 3)).astype("uint8")
    assert check_pixel_values(uint8) is not None and check_pixel_values(uint8).dtype == np.uint8
    as_int64 = check_pixel_values(uint8.astype("int64"))
    assert as_int64.dtype == np.uint8 and (as_int64 == uint8).all()
    as_float = check_pixel_values(uint8.astype("float32"))  # pixel values as floats: taken as they are
    assert as_float.dtype == np.float32 and (as_float == uint8).all()
    assert check_pixel_values(np.zeros((1, 4, 4, 3), "float32")).shape == (1, 4, 4, 3)  # a black image
    with pytest.raises(ValueError, match=r"`pixels`.*within \[0, 1\].*Multiply them by 255"):
        check_pixel_values(uint8 / 255.0, "pixels")
    with pytest.raises(ValueError, match=r"`images`.*0\.\.255.*int64 values in \[1000, 1000\]"):
        check_pixel_values(np.full((1, 4, 4, 3), 1000, "int64"))
    with pytest.raises(ValueError, match=r"`images`.*int32 values in \[-1, -1\]"):
        check_pixel_values(np.full((1, 4, 4, 3), -1, "int32"))
    with pytest.raises(ValueError, match=r"`images`.*float32 values in \[300, 300\]"):
        check_pixel_values(np.full((1, 4, 4, 3), 300, "float32"))
    with pytest.raises(ValueError, match=r"`images`.*not finite"):
        check_pixel_values(np.full((1, 4, 4, 3), np.nan, "float32"))
    with pytest.raises(ValueError, match=r"`images`.*dtype bool"):
        check_pixel_values(np.ones((1, 4, 4, 3), bool))


def test_caption_entry_points_apply_the_rule_and_serve_empty_batches(model):
    images = np.random.default_rng(1).integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    vocabulary = _Vocabulary()
    expected = predict.caption_images(model, images, vocabulary, max_length=4)
    assert predict.caption_images(model, images.astype("int64"), vocabulary, max_length=4) == expected
    with pytest.raises(ValueError, match=r"`images`.*Multiply them by 255"):
        predict.caption_images(model, images / 255.0, vocabulary, max_length=4)
    with pytest.raises(ValueError, match=r"`images`.*int64 values in \[1000, 1000\]"):
        predict.caption_images(model, np.full((2, 16, 16, 3), 1000, "int64"), vocabulary, max_length=4)
    with pytest.raises(ValueError, match=r"`images`.*Multiply them by 255"):
        model.generate(images / 255.0, 4)
    # A ragged nested list used to skip the pixel check (any exception meant "symbolic"), then fail unnamed.
    with pytest.raises(ValueError, match=r"`images` must be a rectangular \(nested\) list or an array.*ragged"):
        model.generate([images[0].tolist(), images[1, :8].tolist()], 4)
    assert predict.caption_images(model, images[:0], vocabulary, max_length=4) == []
    with pytest.raises(ValueError, match=r"`images` is an empty batch"):
        model.generate(images[:0], 4)
