"""keras' own tests of its MultiHeadAttention, shipped in the keras wheel, run unchanged against
attnlayers.MultiHeadAttention: the substantiation of README's "drop-in" (under TensorFlow and under JAX in .ci/run).

The skip list below is the only place a keras test may be skipped (at most three, each with its reason, none about
numbers, shapes or masks). keras' own backend skips (flash attention under TensorFlow) apply as they do to keras'
layer."""

import keras
import numpy as np
import pytest
from keras_suite import keras_test_file, load_keras_tests

import attnlayers

MULTI_HEAD_SKIPS = {}

_multi_head = load_keras_tests("multi_head_attention", {"MultiHeadAttention": attnlayers.MultiHeadAttention},
                               MULTI_HEAD_SKIPS)

if _multi_head is None:
    def test_keras_ships_its_multi_head_attention_tests():
        pytest.skip(f"keras {keras.__version__} ships no {keras_test_file('multi_head_attention')}")
else:
    MultiHeadAttentionTest = _multi_head.MultiHeadAttentionTest


GROUPED_QUERY_SKIPS = {}

_grouped_query = load_keras_tests("grouped_query_attention",
                                  {"GroupedQueryAttention": attnlayers.compat.GroupedQueryAttention},
                                  GROUPED_QUERY_SKIPS)

if _grouped_query is None:
    def test_keras_ships_its_grouped_query_attention_tests():
        pytest.skip(f"keras {keras.__version__} ships no {keras_test_file('grouped_query_attention')}")
else:
    GroupedQueryAttentionTest = _grouped_query.GroupedQueryAttentionTest


ATTENTION_SKIPS = {}

_attention = load_keras_tests("attention", {"Attention": attnlayers.compat.Attention}, ATTENTION_SKIPS)
_additive = load_keras_tests("additive_attention", {"AdditiveAttention": attnlayers.compat.AdditiveAttention},
                             ATTENTION_SKIPS)

if _attention is None or _additive is None:
    def test_keras_ships_its_attention_tests():
        pytest.skip(f"keras {keras.__version__} ships no {keras_test_file('attention')} or "
                    f"{keras_test_file('additive_attention')}")
else:
    AttentionTest = _attention.AttentionTest
    AdditiveAttentionTest = _additive.AdditiveAttentionTest


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
