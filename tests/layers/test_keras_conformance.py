"""keras' own tests of its MultiHeadAttention, shipped in the keras wheel, run unchanged against
attnlayers.MultiHeadAttention: the substantiation of README's "drop-in" (under TensorFlow and under JAX in .ci/run).

The skip list below is the only place a keras test may be skipped (at most three, each with its reason, none about
numbers, shapes or masks). keras' own backend skips (flash attention under TensorFlow) apply as they do to keras'
layer."""

import keras
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
