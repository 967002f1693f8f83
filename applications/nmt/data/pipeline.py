"""The tf.data pipeline: tokenized, length-bucketed batches `((source_ids, target_in_ids), target_out_ids)`, int32
(B, length), padded with PAD_ID = 0, where target_in = [START] + y and target_out = y + [END] for the target
tokens y. The only module of the package that imports TensorFlow."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import tensorflow as tf

from attnlayers.validation import is_int, positive_int

from ...core.inputs import data_order
from ..tokenizer import END_ID, PAD_ID, START_ID
from .pairs import Pairs


__all__ = ["count_truncated", "default_bucket_boundaries", "encode_pairs", "make_dataset"]


def default_bucket_boundaries(max_length: int) -> list:
    """Length boundaries 8, 16, 24, 32, 48, 64, 96, 128, ... below `max_length`.

    Args:
        max_length: the longest sequence, in tokens.
    """
    steps = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    return [b for b in steps if b < max_length]


def _check_lengths(max_source_length, max_target_length):
    positive_int(max_source_length, "max_source_length")
    if not is_int(max_target_length) or max_target_length < 2:
        raise ValueError(
            "`max_target_length` must be an integer >= 2 (room for [START] or [END] and one token); received "
            f"max_target_length={max_target_length!r}."
        )


def _tokenize(pairs: Pairs, tokenizers):
    """All source and target token ids, untruncated: two int32 `tf.RaggedTensor`s (len(pairs), None)."""
    source = tokenizers.source.tokenize(tf.constant(list(pairs.source), tf.string))
    target = tokenizers.target.tokenize(tf.constant(list(pairs.target), tf.string))
    return source, target


def _truncated(source, target, max_source_length, max_target_length) -> dict:
    cut_source = source.row_lengths().numpy() > max_source_length
    cut_target = target.row_lengths().numpy() > max_target_length - 1  # [START] / [END] takes one place
    return {
        "sources": int(cut_source.sum()),
        "targets": int(cut_target.sum()),
        "pairs": int((cut_source | cut_target).sum()),
        "total": len(cut_source),
    }


def count_truncated(pairs: Pairs, tokenizers, max_source_length: int = 64, max_target_length: int = 64) -> dict:
    """How many pairs `encode_pairs` / `make_dataset` would cut at these lengths.

    A source is cut when it has more than `max_source_length` tokens; a target when it has more than
    `max_target_length - 1` (target_in and target_out add [START] / [END]).

    Args:
        pairs: the sentences.
        tokenizers: a `tokenizer.Tokenizers` (`.source` and `.target` with `tokenize`).
        max_source_length, max_target_length: the limits passed to `make_dataset`.

    Returns:
        A dict of ints: "sources" and "targets" (sides cut), "pairs" (pairs with either side cut) and
        "total" (`len(pairs)`).

    Example:
        >>> counts = count_truncated(splits.train, tokenizers, 64, 64)
        >>> print(f"{counts['pairs']} of {counts['total']} training pairs are cut")
    """
    _check_lengths(max_source_length, max_target_length)
    source, target = _tokenize(pairs, tokenizers)
    return _truncated(source, target, max_source_length, max_target_length)


def _encode(pairs: Pairs, tokenizers, max_source_length: int, max_target_length: int):
    """What `encode_pairs` and `make_dataset` share: tokenize, cut, and warn (at their caller) when anything is cut."""
    _check_lengths(max_source_length, max_target_length)
    source, y = _tokenize(pairs, tokenizers)
    counts = _truncated(source, y, max_source_length, max_target_length)
    if counts["pairs"]:
        warnings.warn(
            f"{counts['pairs']} of {counts['total']} sentence pairs ({100 * counts['pairs'] / counts['total']:.1f}%) "
            f"are truncated: {counts['sources']} sources longer than max_source_length={max_source_length} "
            f"tokens, {counts['targets']} targets longer than max_target_length - 1 = {max_target_length - 1} "
            "tokens (raise the limits to keep whole sentences; count_truncated() counts them).",
            UserWarning,
            stacklevel=3,
        )
    source = source[:, :max_source_length]
    y = y[:, : max_target_length - 1]
    rows = tf.shape(y.row_lengths())[0]
    start = tf.fill([rows, 1], tf.constant(START_ID, tf.int32))
    end = tf.fill([rows, 1], tf.constant(END_ID, tf.int32))
    target_in = tf.concat([start, y], axis=1)
    target_out = tf.concat([y, end], axis=1)
    return source, target_in, target_out


def encode_pairs(pairs: Pairs, tokenizers, *, max_source_length: int = 64, max_target_length: int = 64):
    """Tokenizes once: `(source_ids, target_in_ids, target_out_ids)` as int32 `tf.RaggedTensor`s (len(pairs), None).

    The source is truncated to `max_source_length` tokens; the target tokens y to `max_target_length - 1`,
    and then target_in = [START] + y, target_out = y + [END] (so both fit `max_target_length`; a truncated
    target still ends in [END]). When anything is cut, one `UserWarning` says how much (`count_truncated`).

    Args:
        pairs: the sentence pairs (`Pairs`).
        tokenizers: the source and target tokenizers (`Tokenizers`).
        max_source_length: the source's longest length in tokens.
        max_target_length: the target's, [START] or [END] included.
    """
    return _encode(pairs, tokenizers, max_source_length, max_target_length)


def make_dataset(
    pairs: Pairs,
    tokenizers,
    *,
    batch_size: int = 64,
    max_source_length: int = 64,
    max_target_length: int = 64,
    shuffle: bool = True,
    seed: int = 0,
    bucket_boundaries: Sequence[int] | None = None,
    pad_to_max_length: bool = False,
    drop_remainder: bool = False,
    sample_weight: bool = False,
):
    """Batches `((source_ids, target_in_ids), target_out_ids)` for `model.fit`.

    Sentences are tokenized once (`encode_pairs`), shuffled (seeded, reshuffled each epoch), grouped by
    length with `tf.data.Dataset.bucket_by_sequence_length` (each batch padded to its own longest sequence)
    and prefetched. All tensors are int32 (B, length), padded with `PAD_ID` = 0.

    Args:
        pairs: the sentences (for a `Splits`, pass `splits.train`).
        tokenizers: a `tokenizer.Tokenizers` (`.source` and `.target` with `tokenize`).
        batch_size: pairs per batch.
        max_source_length: source tokens kept; longer sources are cut (a warning counts them).
        max_target_length: length of target_in / target_out at most (the target tokens keep one less); longer
            targets are cut (a warning counts them, see `count_truncated`).
        shuffle: shuffle pairs and batch them by length (for training); False keeps the order (for
            evaluation), each batch padded to its longest sequence.
        seed: shuffle seed; tf.data combines it with the global seed (`keras.utils.set_random_seed`), so the order
            is fixed by both (and by how often the dataset was iterated before).
        bucket_boundaries: length boundaries of the buckets, on max(source length, target_in length); a
            bucket holds the lengths up to and including its boundary. None uses
            `default_bucket_boundaries(max(max_source_length, max_target_length))`.
        pad_to_max_length: pad every batch to (max_source_length, max_target_length), no bucketing: fixed
            shapes for XLA / TPU (add `drop_remainder=True` for a static batch dimension too).
        drop_remainder: drop the last smaller batch (of each bucket).
        sample_weight: also yield float32 weights `target_out != PAD_ID` as a third element.

    Returns:
        A `tf.data.Dataset`.
    """
    batch_size = positive_int(batch_size, "batch_size")
    source, target_in, target_out = _encode(pairs, tokenizers, max_source_length, max_target_length)
    # Rows of a ragged tensor come out as rank-1 RaggedTensorSpecs; a map turns them into plain tensors,
    # which padded_batch / bucket_by_sequence_length need.
    # Shuffled: epoch e in (seed, e)'s order, whichever process draws it (core.inputs.data_order).
    ds = data_order.shuffled_slices((source, target_in, target_out), seed, shuffle=shuffle and len(pairs) > 0)
    ds = ds.map(lambda s, ti, to: (s, ti, to))
    pad = tf.constant(PAD_ID, tf.int32)
    if pad_to_max_length:
        ds = ds.padded_batch(
            batch_size,
            padded_shapes=([max_source_length], [max_target_length], [max_target_length]),
            padding_values=(pad, pad, pad),
            drop_remainder=drop_remainder,
        )
    elif not shuffle:
        ds = ds.padded_batch(batch_size, padding_values=(pad, pad, pad), drop_remainder=drop_remainder)
    else:
        if bucket_boundaries is None:
            bucket_boundaries = default_bucket_boundaries(max(max_source_length, max_target_length))
        boundaries = [b + 1 for b in sorted(bucket_boundaries)]  # a bucket holds lengths < boundary
        ds = ds.bucket_by_sequence_length(
            lambda s, ti, to: tf.maximum(tf.shape(s)[0], tf.shape(ti)[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            padding_values=(pad, pad, pad),
            drop_remainder=drop_remainder,
        )

    def to_model_inputs(s, ti, to):
        if sample_weight:
            return (s, ti), to, tf.cast(tf.not_equal(to, PAD_ID), tf.float32)
        return (s, ti), to

    return ds.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
