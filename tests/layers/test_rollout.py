"""Attention rollout (Abnar & Zuidema 2020) against the product written out by hand, its rows as distributions, the
head fusions, the class token's maps read row by row from the grid, and bad input named."""

import numpy as np
import pytest

from attnlayers import attention_rollout
from attnlayers.rollout import class_token_maps, patch_map


def _weights(rng, shape):
    w = rng.uniform(size=shape)
    return w / w.sum(-1, keepdims=True)


def test_two_layers_by_hand(rng):
    a1, a2 = _weights(rng, (2, 3, 5, 5)), _weights(rng, (2, 3, 5, 5))
    eye = np.eye(5)
    hat1 = 0.5 * a1.mean(1) + 0.5 * eye  # rows already sum to 1
    hat2 = 0.5 * a2.mean(1) + 0.5 * eye
    expected = np.einsum("bij,bjk->bik", hat2, hat1)  # A_2^ A_1^
    out = attention_rollout([a1, a2])
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)
    raw = attention_rollout([a1, a2], residual=False)
    np.testing.assert_allclose(raw, np.einsum("bij,bjk->bik", a2.mean(1), a1.mean(1)), rtol=1e-5)


def test_head_fusions_are_renormalised(rng):
    a = _weights(rng, (1, 4, 3, 3))
    for fusion, reduce in (("max", np.max), ("min", np.min)):
        fused = 0.5 * reduce(a, axis=1) + 0.5 * np.eye(3)
        np.testing.assert_allclose(attention_rollout([a], head_fusion=fusion),
                                   fused / fused.sum(-1, keepdims=True), rtol=1e-5)


def test_class_token_maps_follow_the_grid(rng):
    a = _weights(rng, (2, 3, 7, 7))  # a class token and a 2 x 3 grid
    maps = class_token_maps([a, a], (2, 3))
    assert maps.shape == (2, 2, 3, 2, 3)
    np.testing.assert_allclose(maps[1, 1, 2, 1, 0], a[1, 2, 0, 4], rtol=1e-6)  # patch (1, 0) is the 4th
    row = patch_map(a[0, 0, 0], (2, 3))
    assert row.shape == (2, 3) and row.max() == pytest.approx(1.0)


def test_bad_input_is_named(rng):
    with pytest.raises(ValueError, match="head_fusion"):
        attention_rollout([_weights(rng, (1, 1, 2, 2))], head_fusion="sum")
    with pytest.raises(ValueError, match=r"`attention_scores` must be a list of self-attention weights"):
        attention_rollout([_weights(rng, (1, 1, 2, 3))])
    with pytest.raises(ValueError, match="empty"):
        attention_rollout([])
    with pytest.raises(ValueError, match=r"T = 7 positions cannot be a class token and a 2 x 2 grid"):
        class_token_maps([_weights(rng, (1, 1, 7, 7))], (2, 2))
