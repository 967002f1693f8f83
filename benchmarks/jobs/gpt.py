"""GPT's small scale-out job for :mod:`benchmarks.jobs`: the GPT-2-style :class:`GPT` at a
tiny size, compiled by the recipe (:func:`recipes.compile_for_training`: the padding-masked causal LM loss, the
Perplexity metric, decoupled AdamW with clipping), on windows that :mod:`data` packs from token streams.

    token streams A, B (S,) -> data.lm_windows: 12 windows of L + 1 = 17 tokens each, the last one padded
      -> one global batch (8): 4 windows of A then 4 of B -> data.lm_examples / lm_dataset(drop_remainder=True)
      x {"token_ids", "padding_mask"} (8, 16), y (8, 16), sample_weight (8, 16)   3 steps

    python -m benchmarks.jobs gpt --placement mirrored
"""

from __future__ import annotations

import numpy as np

from attnlayers.applications.gpt import data

from .runner import TrainingJob

SEQUENCE_LENGTH = 16  # L
VOCABULARY_SIZE = 64  # token ids 0..62, 63 = the end token (GPT-2's <|endoftext|>: the last id)
END_TOKEN_ID = VOCABULARY_SIZE - 1
GLOBAL_BATCH, STEPS = 8, 3
PADDING = 7  # padded labels in each stream's last window
# AdamW's learning rate (the recipe's peak, 2e-3; kept constant: the recipe's schedule is a fit callback).
LEARNING_RATE = 2e-3
# float32 sums in another order (the gradients of 2 replicas' halves of a batch added, against one device's sums
# over the whole batch) differ by ~1e-7 relative; Adam divides each gradient by its own scale, so an update differs
# by ~lr x that relative error, plus more where a gradient is near 0 (m / (sqrt(v) + eps), eps 1e-8): 3 steps at
# lr 2e-3 move weights by up to ~6e-3, 100x this tolerance (measured: 2.3e-6 mirrored, 1.2e-6 two workers, ~1e-7
# JAX). The recipe clips the gradients' global norm at 1 (it is ~1.26 at the first step): equality needs the
# replicas' gradients summed before they are clipped; Keras 3's TensorFlow optimizer clips each replica's share
# first (7e-4 apart here), which core.runtime corrects.
TOLERANCE = 1e-5


def token_streams(seed=0, windows=12, sequence_length=SEQUENCE_LENGTH):
    """Two token streams ``[end] d_1 [end] ... d_n [end]`` (``data.token_stream``) of 4 documents of random ids
    each, both of the length that ``data.lm_windows`` cuts into ``windows`` windows whose last one ends with
    :data:`PADDING` padded labels.

    Returns:
        two int32 arrays (S,), S = (windows - 1) L + (L - PADDING) + 1.
    """
    rng = np.random.default_rng(seed)
    length = (windows - 1) * sequence_length + (sequence_length - PADDING) + 1
    streams = []
    for _ in range(2):
        tokens = length - 5  # 4 documents and 5 end tokens
        sizes = [tokens // 4] * 3 + [tokens - 3 * (tokens // 4)]
        documents = [rng.integers(0, END_TOKEN_ID, size) for size in sizes]
        streams.append(data.token_stream(documents, END_TOKEN_ID))
    return streams


def windows(global_batch=GLOBAL_BATCH, steps=STEPS, seed=0):
    """The windows of ``steps`` global batches: ``(windows, mask)`` (steps x global_batch, L + 1), as
    ``data.lm_windows`` gives them.

    Masked loss and replicas: the causal LM loss is a masked mean, ``sum(w NLL) / sum(w)`` over a replica's share
    of the batch, and Keras averages the replicas' losses: that is the global masked mean only when every share holds
    as many real labels. A packed stream has one padded window, its last; so here each global batch takes its first
    half from stream A and its second half from stream B, both of the same length: the halves that 2 replicas
    (MirroredStrategy, or 2 workers) get hold the same number of real labels at every step, the last step's included
    (one padded window each). JAX's DataParallel computes the loss over the global batch: exact for any split.
    """
    if global_batch % 2:
        raise ValueError(f"`global_batch` must be even (half a batch from each stream); received {global_batch}.")
    half = global_batch // 2
    streams = [data.lm_windows(s, SEQUENCE_LENGTH, END_TOKEN_ID) for s in token_streams(seed, steps * half)]
    order = [(s, k * half + i) for k in range(steps) for s in range(2) for i in range(half)]
    return (np.stack([streams[s][0][i] for s, i in order]), np.stack([streams[s][1][i] for s, i in order]))


def build_model(jit_compile="auto"):
    """A 2-layer GPT-2 (d 32, 2 heads, d_ff 128, V 64, 16 positions, no dropout: replicas would draw other
    dropout masks), compiled with the recipe's :func:`~attnlayers.applications.gpt.runs.compile_for_training`."""
    from attnlayers.applications.gpt.model import GPT, GPTConfig
    from attnlayers.applications.gpt.runs import TrainingSettings, compile_for_training

    config = GPTConfig(vocabulary_size=VOCABULARY_SIZE, max_sequence_length=SEQUENCE_LENGTH, num_layers=2,
                       num_heads=2, hidden_dim=32, intermediate_dim=128, dropout=0.0, end_token_id=END_TOKEN_ID,
                       pad_token_id=END_TOKEN_ID)
    model = GPT(config)
    settings = TrainingSettings(vocabulary_size=VOCABULARY_SIZE, sequence_length=SEQUENCE_LENGTH,
                                batch_size=GLOBAL_BATCH, learning_rate=LEARNING_RATE, jit_compile=jit_compile)
    compile_for_training(model, settings)  # its learning-rate callback is not used: a constant peak
    return model


def training_job(seed=0):
    """The GPT job: 3 steps of global batch 8 (see the module docstring)."""

    def dataset(global_batch):
        # in order (no shuffling), every batch full (drop_remainder): static (global_batch, L) shapes
        return data.lm_dataset(*windows(global_batch, STEPS, seed), global_batch, seed=None, drop_remainder=True)

    return TrainingJob(name="gpt", build=build_model, dataset=dataset, global_batch=GLOBAL_BATCH, steps=STEPS,
                           tolerance=TOLERANCE, seed=seed)
