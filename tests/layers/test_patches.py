"""PatchEmbedding and ClassToken (ViT's eq. 1): the harness; the patch projection equals the flattened patches times
E (the paper's form, written in NumPy); the grid is read row by row; the class token comes first; bad input."""

import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

from attnlayers import ClassToken, PatchEmbedding


def test_harness(rng):
    images = rng.normal(size=(2, 8, 6, 3)).astype("float32")
    run_layer_test(PatchEmbedding, {"patch_size": (4, 2), "hidden_dim": 5}, images, expected_output_shape=(2, 6, 5),
                   expected_num_trainable_weights=2)
    run_layer_test(ClassToken, {"initializer": "random_normal"}, rng.normal(size=(2, 3, 4)).astype("float32"),
                   expected_output_shape=(2, 4, 4), expected_num_trainable_weights=1)


def test_patches_times_e_row_by_row(rng):
    """x_p^n E with x_p^n the n-th P x P x C patch flattened (row-major grid), E: (P^2 C, D)."""
    images = rng.normal(size=(2, 4, 6, 3)).astype("float32")
    layer = PatchEmbedding(2, 5)
    out = ops.convert_to_numpy(layer(images))
    kernel, bias = (ops.convert_to_numpy(w) for w in layer.projection.weights)  # (P, P, C, D), (D,)
    e = kernel.reshape(-1, 5)
    expected = np.stack([
        np.stack([images[b, 2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(-1) @ e + bias
                  for i in range(2) for j in range(3)]) for b in range(2)])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_class_token_is_prepended(rng):
    x = rng.normal(size=(3, 4, 2)).astype("float32")
    layer = ClassToken(initializer="ones")
    out = ops.convert_to_numpy(layer(x))
    np.testing.assert_array_equal(out[:, 0], 1.0)
    np.testing.assert_array_equal(out[:, 1:], x)


@pytest.mark.parametrize("shape, message", [
    ((2, 5, 4, 3), r"`images` height must be a multiple of the patch size \(2, 2\); received images of shape "
                   r"\(2, 5, 4, 3\)"),
    ((2, 4, 4), r"`images` must have shape \(batch, height, width, channels\)"),
])
def test_bad_images_are_named(shape, message):
    with pytest.raises(ValueError, match=message):
        PatchEmbedding(2, 4)(np.zeros(shape, "float32"))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="patch_size"):
        PatchEmbedding((2, 2, 2), 4)
    with pytest.raises(ValueError, match="hidden_dim"):
        PatchEmbedding(2, 0)
    with pytest.raises(ValueError, match=r"`inputs` must have shape \(batch, length, dim\)"):
        ClassToken()(np.zeros((2, 3), "float32"))
