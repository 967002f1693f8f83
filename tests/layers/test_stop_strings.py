"""attnlayers.stop_strings: checking stop strings, tokenizing them into stop sequences, and cutting text before
them, the Python str version and the tf.string version giving the same text. The tokenizing and tf.string parts
need TensorFlow (imported when they run), the rest runs under any backend."""

import numpy as np
import pytest

from attnlayers import decoding
from attnlayers.stop_strings import (
    check_stop_sequences,
    check_stop_strings,
    cut_at_stop_strings,
    cut_tensor_at_stop_strings,
    stop_sequences_for,
)

CASES = [
    ("abc\n\ndef", ["\n\n"], "abc"),
    ("abc", ["x"], "abc"),
    ("a.b;c", [";", "."], "a"),  # the first occurrence of any
    ("abc", [], "abc"),
    ("x (y) z", ["("], "x "),  # regular-expression characters are literal
    ("a\\b*c", ["\\b", "*"], "a"),
    ("ünïcödé → end", ["→"], "ünïcödé "),
    ("stop at the start", ["stop"], ""),
]


def test_check_stop_strings():
    assert check_stop_strings(None) == [] and check_stop_strings(("a", "b")) == ["a", "b"]
    for bad in ("\n", [""], ["a", 3], 5):
        with pytest.raises(ValueError, match=r"stop_strings.*non-empty strings"):
            check_stop_strings(bad)


def test_check_stop_sequences_is_decodings():
    assert check_stop_sequences is decoding.check_stop_sequences
    np.testing.assert_array_equal(check_stop_sequences([[3], [4, 5]]), [[-1, 3], [4, 5]])
    assert check_stop_sequences(None) is None
    with pytest.raises(ValueError, match="stop_sequences"):
        check_stop_sequences([[]])


@pytest.mark.parametrize("text, stops, expected", CASES)
def test_cut_at_stop_strings(text, stops, expected):
    assert cut_at_stop_strings(text, stops) == expected


def test_tensor_version_cuts_like_the_str_version():
    import tensorflow as tf

    for text, stops, expected in CASES:
        cut = cut_tensor_at_stop_strings(tf.constant([[text, text + text]]), stops)
        assert cut.shape == (1, 2)
        assert [s.decode() for s in cut.numpy().ravel()] == [expected, cut_at_stop_strings(text + text, stops)]
    cut = cut_tensor_at_stop_strings(tf.constant(["ab\xe2"]), ["b"])  # the text may end inside a character
    assert cut.numpy().tolist() == [b"a"]


class _Tokenizer:
    """Characters as ids (ord), returned dense, ragged (B, None) or ragged (B, words, pieces)."""

    def __init__(self, kind):
        self.kind = kind

    def tokenize(self, text):
        import tensorflow as tf

        rows = [[ord(c) for c in s.decode()] for s in text.numpy()]
        if self.kind == "dense":
            return tf.constant(rows)
        if self.kind == "ragged":
            return tf.ragged.constant(rows)
        return tf.ragged.constant([[row[:1], row[1:]] for row in rows])


@pytest.mark.parametrize("kind", ["dense", "ragged", "words"])
def test_stop_sequences_for(kind):
    tokenizer = _Tokenizer(kind)
    assert stop_sequences_for(tokenizer, ["ab", "\n"]) == [[97, 98], [10]]
    assert stop_sequences_for(tokenizer, None) == []
    with pytest.raises(ValueError, match="stop_strings"):
        stop_sequences_for(tokenizer, "ab")
