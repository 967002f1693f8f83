"""Exposure bias, measured: next-token accuracy when the model reads the reference prefix (teacher forcing) against
position-by-position accuracy when it reads its own greedy tokens (free running), on held-out data.

    result = exposure_bias(model, test_batches, max_length=48)
    result["teacher_forced_accuracy"], result["free_running_accuracy"], result["gap"]

For a reference y_1 .. y_n (``target_out``: the words then the end token), teacher forcing scores
argmax p(. | y_<t, x) == y_t; free running scores yhat_t == y_t, where yhat is greedy decoding of x alone (the
decoder reads yhat_<t: its own errors). Both count the same tokens (the reference's, padding excluded), so
``gap = teacher_forced - free_running`` is the accuracy lost to reading its own tokens (Bengio et al. 2015, Ranzato
et al. 2016: errors compound along the sequence; ``by_position`` shows where). A free-running hypothesis that ends
early, or shifts by one word, loses every later position: the gap is an upper bound on what exposure costs, and
both accuracies come from the same model, weights and data.

Works for every :class:`~attnlayers.applications.core.Seq2SeqGenerator` (translators, captioners): ``model((source,
target_in))`` -> logits (B, T, V) and ``model.generate``. Backend-agnostic; under TensorFlow both are compiled with
``tf.function`` (imported on use).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from attnlayers.validation import positive_int


def _compiled(model, max_length):
    """(teacher_forced(inputs) -> logits, free_running(source) -> tokens), compiled once per model and length."""
    def teacher(inputs):
        return model(inputs, training=False)

    def free(source):
        return model.generate(source, max_length, "greedy").tokens

    if keras.backend.backend() != "tensorflow":
        return teacher, free
    import tensorflow as tf

    cache = model.__dict__.setdefault("_exposure_bias_functions", {})
    if max_length not in cache:
        cache[max_length] = (tf.function(teacher, reduce_retracing=True), tf.function(free, reduce_retracing=True))
    return cache[max_length]


def exposure_bias(model, batches, *, max_length=None, max_batches=None):
    """Teacher-forced and free-running token accuracy of ``model`` on ``batches``, and their gap.

    Args:
        model: a sequence-to-sequence generator of the applications (``model((source, target_in))`` -> logits,
            ``model.generate``, ``pad_token_id``).
        batches: an iterable (a ``tf.data.Dataset``) of ``((source, target_in), target_out)`` batches, the
            training format of ``nmt.make_dataset`` and ``captioning.data.make_dataset``; held-out data.
        max_length: L, the free-running output length, start token included (default: the model's longest, or
            ``default_max_length``). Free running cannot reach reference positions t >= L - 1: those tokens are
            left out of both accuracies and counted in "unreachable_tokens" (give L = the longest target_out + 1
            to score every token). Fixed shapes (e.g. ``pad_to_max_length``) avoid retracing.
        max_batches: read at most this many batches (None: all).

    Returns:
        ``{"teacher_forced_accuracy", "free_running_accuracy", "gap", "tokens", "unreachable_tokens", "sequences",
        "by_position":
        {"teacher_forced": [...], "free_running": [...], "tokens": [...]}}``: accuracies in [0, 1] over the
        reference tokens (target_out != pad), per position t = 0, 1, ... in ``by_position``.
    """
    max_length = model.generation_length(max_length)
    if max_batches is not None:
        max_batches = positive_int(max_batches, "max_batches")
    teacher, free = _compiled(model, max_length)
    pad = model.pad_token_id
    forced_hits, free_hits, counts, sequences, unreachable = np.zeros(0), np.zeros(0), np.zeros(0), 0, 0
    for i, batch in enumerate(batches):
        if max_batches is not None and i >= max_batches:
            break
        try:
            (source, target_in), target_out = batch
        except (TypeError, ValueError):
            raise ValueError("`batches` must yield ((source, target_in), target_out) batches; received "
                             f"{type(batch).__name__}.") from None
        target_out = np.asarray(ops.convert_to_numpy(target_out))
        real = target_out != pad
        unreachable += int(real[:, max_length - 1:].sum())
        real[:, max_length - 1:] = False  # beyond what free running can generate: scored by neither
        predicted = np.asarray(ops.convert_to_numpy(ops.argmax(teacher((source, target_in)), axis=-1)))
        generated = np.asarray(ops.convert_to_numpy(free(source)))[:, 1:]  # without the start token
        length = target_out.shape[1]
        generated = np.pad(generated[:, :length], ((0, 0), (0, max(0, length - generated.shape[1]))),
                           constant_values=pad)
        size = max(len(counts), length)
        forced_hits, free_hits, counts = (np.pad(a, (0, size - len(a))) for a in (forced_hits, free_hits, counts))
        forced_hits[:length] += ((predicted == target_out) & real).sum(0)
        free_hits[:length] += ((generated == target_out) & real).sum(0)
        counts[:length] += real.sum(0)
        sequences += target_out.shape[0]
    total = counts.sum()
    if total == 0:
        raise ValueError("`batches` held no reference tokens (every target_out position is padding, or no batch).")
    forced, free_running = forced_hits.sum() / total, free_hits.sum() / total

    def per_position(hits):
        return [round(float(h / c), 4) if c else None for h, c in zip(hits, counts)]

    return {"teacher_forced_accuracy": float(forced), "free_running_accuracy": float(free_running),
            "gap": float(forced - free_running), "tokens": int(total), "unreachable_tokens": unreachable,
            "sequences": int(sequences),
            "by_position": {"teacher_forced": per_position(forced_hits), "free_running": per_position(free_hits),
                            "tokens": [int(c) for c in counts]}}


__all__ = ["exposure_bias"]
