"""Attention and AttentionPooling: harness, numerics against NumPy, masks, bad input."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras import ops

import attnlayers as al
from attnlayers.scoring import LocationScore

B, T, S, D = 2, 3, 5, 4
SCORES = ["dot", "scaled_dot", "general", "additive", "cosine", "mlp", "location"]


def _score(name):
    return LocationScore(max_length=8) if name == "location" else name


@pytest.mark.parametrize("score", SCORES)
def test_attention_harness(score, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        al.Attention,
        {"score": _score(score)},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, T, S)),
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
    )
