"""The translation application's small scale-out job (:mod:`benchmarks.jobs`): the Transformer translator at a tiny
size (the "tiny" recipe, 1 + 1 layers, d_model 32, no dropout), its masked, label-smoothed cross-entropy and
SGD with momentum, on synthetic pairs tokenized by the application's own word-level tokenizers and batched by its own
``make_dataset``, padded to fixed lengths.

    python -m benchmarks.jobs nmt --placement mirrored
"""

from __future__ import annotations

import functools

import keras

from attnlayers.applications.nmt.data import Pairs, make_dataset, synthetic_pairs
from attnlayers.applications.nmt.model import MaskedAccuracy, MaskedCrossEntropy, TransformerTranslator
from attnlayers.applications.nmt.variants import get_variant
from attnlayers.applications.nmt.tokenizer import build_tokenizers

from .runner import TrainingJob

GLOBAL_BATCH = 8
STEPS = 3
MAX_LENGTH = 8  # source and target_in / target_out tokens, padded
# Words per sentence, repeated down every batch. Any 1, 2 or 4 consecutive rows hold as many words (and real
# target tokens, words + [END]) as any other such rows, so with 1, 2 or 4 replicas each replica's share of a
# global batch has the same number of real tokens: each replica's masked mean, averaged over the replicas, is
# then exactly the global masked mean (MaskedCrossEntropy divides by the replica's own count). Every row keeps
# at least one padding position, so the mask matters.
LENGTHS = (3, 6, 4, 5)
assert GLOBAL_BATCH % len(LENGTHS) == 0


def _pairs(num_pairs, seed):
    """``num_pairs`` synthetic pairs whose source (and target) word counts cycle through :data:`LENGTHS`."""
    per_length = -(-num_pairs // len(LENGTHS))
    pools = [synthetic_pairs(per_length, seed=seed + 1000 * k, min_length=k, max_length=k) for k in LENGTHS]
    rows = [pools[i % len(LENGTHS)][i // len(LENGTHS)] for i in range(num_pairs)]
    return Pairs([s for s, _ in rows], [t for _, t in rows])


def _build(tokenizers, jit_compile="auto"):
    config = {**get_variant("transformer", "tiny").model, "num_layers": 1, "d_model": 32, "num_heads": 2,
              "intermediate_dim": 64, "dropout": 0.0}  # no dropout: replicas would draw other masks
    model = TransformerTranslator(tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size,
                                  max_length=MAX_LENGTH, name="transformer", **config)
    # A symbolic call creates the weights (to compare them before training) without running or compiling.
    model((keras.Input((MAX_LENGTH,), dtype="int32"), keras.Input((MAX_LENGTH,), dtype="int32")))
    # SGD, not the recipe's Adam: some gradients are exactly zero in exact arithmetic (the attention's key bias
    # adds the same q.b_k to every score of a query, which the softmax ignores), so in float32 they are round-off
    # noise that differs between placements, and Adam's first step, lr * g / (|g| + eps), turns that noise into
    # +-lr. SGD keeps it at lr * noise. The recipe's loss: masked cross-entropy with label smoothing 0.1.
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=MaskedCrossEntropy(0.1, pad_token_id=model.pad_token_id),
                  metrics=[MaskedAccuracy(pad_token_id=model.pad_token_id)], jit_compile=jit_compile)
    return model


def _dataset(pairs, tokenizers, global_batch):
    """``((source_ids, target_in_ids), target_out_ids)``, int32 (global_batch, MAX_LENGTH) each, in order."""
    return make_dataset(pairs, tokenizers, batch_size=global_batch, max_source_length=MAX_LENGTH,
                        max_target_length=MAX_LENGTH, shuffle=False, pad_to_max_length=True, drop_remainder=True)


def training_job(seed=0):
    """3 steps of the tiny Transformer translator on batches of 8 synthetic pairs (:class:`TrainingJob`).

    Tolerance 1e-5: the replicas sum the same per-example gradients in another order (float32 round-off,
    ~1e-7 relative), which 3 SGD steps carry into the weights (measured: 1.2e-7 at most).
    """
    pairs = _pairs(GLOBAL_BATCH * STEPS, seed)
    tokenizers = build_tokenizers(pairs, source_vocabulary_size=128, target_vocabulary_size=128, model_type="word")
    return TrainingJob(
        name="nmt",
        build=functools.partial(_build, tokenizers),
        dataset=functools.partial(_dataset, pairs, tokenizers),
        global_batch=GLOBAL_BATCH,
        steps=STEPS,
        tolerance=1e-5,
        seed=seed,
    )
