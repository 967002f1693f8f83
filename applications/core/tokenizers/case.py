"""Hugging Face's lower-casing as TensorFlow ops: what BERT's WordPiece and the SentencePiece tokenizers (ALBERT's,
XLNet's) share."""

import tensorflow as tf

__all__ = ["lower_case"]

# ICU's full lower-casing (`tf.strings.lower`; ICU's ucase_toFullLower) maps one character at a time, as Rust's
# `char::to_lowercase` (Hugging Face's tokenizers) does, but for these, mapped here before it: a word-final "Σ" -> "ς"
# in every locale; in the process's locale (LC_ALL, LANG), Turkish / Azeri "İ" -> "i" (and "I" -> "ı"), Lithuanian
# "Ì", "Í", "Ĩ" (and "I", "J", "Į" before an accent) -> with a dot above. ASCII letters go first, by an ASCII-only op.
_CONTEXT_FREE_LOWER = (("Σ", "σ"), ("İ", "i\u0307"), ("Į", "į"), ("Ì", "ì"), ("Í", "í"), ("Ĩ", "ĩ"))


def lower_case(text):
    """Each character of ``text`` (a tf.string tensor) mapped to its full lower case on its own, in every locale:
    Rust's ``char::to_lowercase``, what Hugging Face's lower-casing normalizers do ("Σ" -> "σ" at the end of a word
    too, "İ" -> "i̇"), as TensorFlow ops. NUL characters stay (ICU's lower-casing would end the text at the first)."""
    text = tf.convert_to_tensor(text, tf.string)
    parts = tf.strings.split(tf.reshape(text, [-1]), sep="\x00")  # (N, None): the text between NULs
    lowered = tf.strings.lower(parts.flat_values)  # ASCII letters, in every locale (ICU's Turkish "I" -> "ı" never
    for upper, lower in _CONTEXT_FREE_LOWER:      # sees an "I")
        lowered = tf.strings.regex_replace(lowered, upper, lower)
    lowered = tf.strings.lower(lowered, encoding="utf-8")  # ICU, left with only context- and locale-free mappings
    last = tf.range(tf.size(lowered), dtype=parts.row_splits.dtype) == tf.gather(parts.row_splits[1:] - 1,
                                                                                 parts.value_rowids())
    lowered = tf.strings.join([lowered, tf.where(last, "", "\x00")])  # the NULs back (a separator argument would
    joined = tf.strings.reduce_join(parts.with_flat_values(lowered), axis=-1)  # be read up to its NUL)
    return tf.reshape(joined, tf.shape(text))
