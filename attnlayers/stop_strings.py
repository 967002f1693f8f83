"""Stop strings (Hugging Face's ``stop_strings``): checking them, tokenizing them into stop sequences for
:func:`attnlayers.decoding.generate`, and cutting generated text before the first of them.

Stop strings work at two levels:

- in the decoding loop, each stop string is tokenized once, on its own, into a stop sequence
  (:func:`~attnlayers.decoding.generate`'s ``stop_sequences``): a row stops as soon as its generated tokens end
  with it;
- in the returned text, which is cut before the first occurrence of any stop string.

A tokenizer may spell a stop string with other tokens in context (BPE merges across its boundary): the loop then
does not see it and the row runs on to another stop or the length limit, but the text is still cut at it.

The text is cut in two worlds, side by side here with the same rule: :func:`cut_at_stop_strings` on a Python
``str`` (in-process generation) and :func:`cut_tensor_at_stop_strings` on a ``tf.string`` tensor (inside an
exported SavedModel). Tokenizing and the tensor version use TensorFlow, imported when they run (so this module
imports under every backend).
"""

from attnlayers.decoding import check_stop_sequences
from attnlayers.validation import string_list

__all__ = [
    "check_stop_sequences",
    "check_stop_strings",
    "cut_at_stop_strings",
    "cut_tensor_at_stop_strings",
    "stop_sequences_for",
]


def check_stop_strings(stop_strings):
    """``stop_strings`` as a list of non-empty strings ([] for None); else a ValueError naming the argument."""
    return string_list(stop_strings, "stop_strings")


def stop_sequences_for(tokenizer, stop_strings):
    """The token ids of each stop string (its tokenization on its own, eager), for
    :func:`~attnlayers.decoding.generate`'s ``stop_sequences``; stop strings with no token are left out.

    Args:
        tokenizer: an object whose ``tokenize(strings)`` takes a (1,) tf.string tensor and returns int ids, dense
            or ragged (a (batch, words, pieces) ragged result is flattened per string).
        stop_strings: None or a list of non-empty strings.

    Returns:
        A list of lists of ints ([] for no stop strings).
    """
    import tensorflow as tf

    sequences = []
    for text in check_stop_strings(stop_strings):
        ids = tokenizer.tokenize(tf.constant([text]))
        if isinstance(ids, tf.RaggedTensor):
            while ids.ragged_rank > 1:
                ids = ids.merge_dims(1, 2)
            ids = ids[0]
        else:
            ids = tf.reshape(ids, (-1,))
        sequences.append([int(i) for i in ids.numpy().ravel()])
    return [s for s in sequences if s]


def cut_at_stop_strings(text, stop_strings):
    """``text`` (a Python str) up to, not including, the first occurrence of any of ``stop_strings``."""
    cut = len(text)
    for stop in stop_strings or ():
        found = text.find(stop)
        if found != -1:
            cut = min(cut, found)
    return text[:cut]


def _literal(text):
    """An RE2 pattern matching ``text`` literally: every character as ``\\x{code point}``."""
    return "".join(f"\\x{{{ord(character):x}}}" for character in text)


def cut_tensor_at_stop_strings(text, stop_strings):
    """:func:`cut_at_stop_strings` in TensorFlow ops: strings cut before the first occurrence of any of
    ``stop_strings``.

    One leftmost regular-expression match of the stop strings (written literally) followed by ``\\C*`` (any
    bytes: the text may end inside a UTF-8 character), replaced by nothing.

    Args:
        text: a tf.string tensor, any shape. stop_strings: a list of non-empty Python strings.

    Returns:
        A tf.string tensor of the shape of ``text``.
    """
    if not stop_strings:
        return text
    import tensorflow as tf

    pattern = "(?:" + "|".join(_literal(s) for s in stop_strings) + r")\C*"
    return tf.strings.regex_replace(text, pattern, "", replace_global=False)
