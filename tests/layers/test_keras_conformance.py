"""keras' own tests of its MultiHeadAttention, GroupQueryAttention, Attention and AdditiveAttention, shipped in the
keras wheel, run unchanged against attnlayers.MultiHeadAttention and attnlayers.compat's classes: the substantiation of
README's "drop-in" (under TensorFlow and under JAX in .ci/run).

The skip list below is the only place a keras test may be skipped (at most three, each with its reason, none about
numbers, shapes or masks). keras' own backend skips (flash attention under TensorFlow) apply as they do to keras'
layer."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from keras_suite import keras_test_cases

import attnlayers

# The skip lists: {keras test method: reason}; empty today (keras' own backend skips are not listed here).
MULTI_HEAD_SKIPS, GROUPED_QUERY_SKIPS, ATTENTION_SKIPS = {}, {}, {}

globals().update(keras_test_cases("multi_head_attention", {"MultiHeadAttention": attnlayers.MultiHeadAttention},
                                  MULTI_HEAD_SKIPS))
globals().update(keras_test_cases("grouped_query_attention",
                                  {"GroupedQueryAttention": attnlayers.compat.GroupedQueryAttention},
                                  GROUPED_QUERY_SKIPS))
globals().update(keras_test_cases("attention", {"Attention": attnlayers.compat.Attention}, ATTENTION_SKIPS))
globals().update(keras_test_cases("additive_attention", {"AdditiveAttention": attnlayers.compat.AdditiveAttention},
                                  ATTENTION_SKIPS))


def test_group_query_attention_passes_the_layer_harness(rng):
    """attnlayers' own harness (functional model, .keras round trip, XLA, mixed precision, gradients) on the compat
    GroupQueryAttention. (compat.Attention / AdditiveAttention take list inputs, which the harness does not feed:
    keras' run_layer_test in their keras test files covers them.)"""
    query, value = rng.normal(size=(2, 3, 8)).astype("float32"), rng.normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(attnlayers.compat.GroupQueryAttention,
                   {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2, "use_gate": True},
                   {"query": query, "value": value}, expected_output_shape=(2, 3, 8),
                   expected_num_trainable_weights=10)


@pytest.mark.parametrize("name, kwargs, call", [
    ("Attention", {"use_scale": True, "score_mode": "concat"}, "list"),
    ("Attention", {"use_scale": True}, "list"),
    ("AdditiveAttention", {}, "list"),
    ("GroupQueryAttention", {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2, "use_gate": True,
                               "bias_initializer": "random_normal"}, "query_value"),
])
def test_keras_weights_load_into_the_compatible_class(name, kwargs, call):
    """keras' layer's weights, set into attnlayers' class: keras' outputs (and scores), masks included."""
    rng = np.random.default_rng(0)
    query, value = rng.normal(size=(2, 3, 8)).astype("float32"), rng.normal(size=(2, 5, 8)).astype("float32")
    value_mask = np.array([[True] * 5, [True, True, False, False, True]])
    theirs, ours = getattr(keras.layers, name)(**kwargs), getattr(attnlayers.compat, name)(**kwargs)
    if call == "list":
        arguments = dict(inputs=[query, value], mask=[None, value_mask], return_attention_scores=True)
    else:
        arguments = dict(query=query, value=value, value_mask=value_mask, return_attention_scores=True)
    for layer in (theirs, ours):
        layer(**arguments)
    # keras draws its "scale" from glorot-uniform; random weights for every layer, so none passes at its init.
    theirs.set_weights([rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    for got, expected in zip(ours(**arguments), theirs(**arguments)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(expected), atol=1e-5)
