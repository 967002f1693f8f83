"""The captioning application's small scale-out job (:mod:`benchmarks.jobs`): Show, Attend and Tell with soft
attention (the "soft" recipe of :func:`~attnlayers.applications.captioning.builders.build_captioner` at a tiny
size: a 2-block CNN over 16 x 16 images, a 4 x 4 grid of 8 features, embeddings 16, LSTM 32, no dropout), its
masked cross-entropy plus the doubly stochastic penalty (the recipe's, fading over 1000 steps), on generated scenes
batched by the application's own ``make_dataset`` (images held in memory: a ``tf.gather`` from a constant, no
Python op).

    python -m benchmarks.jobs captioning --placement mirrored
"""

from __future__ import annotations

import functools

import keras
import numpy as np

from attnlayers.applications.captioning.data import CaptionSet, CaptionVocabulary, make_dataset, make_scenes
from attnlayers.applications.captioning.builders import build_captioner
from attnlayers.applications.core.training.losses import MaskedCrossEntropy
from attnlayers.applications.core.training.metrics import MaskedAccuracy

from .runner import TrainingJob

GLOBAL_BATCH = 8
STEPS = 3
IMAGE_SIZE = 16
MAX_LENGTH = 11  # caption_in / caption_out tokens, padded
# Objects per scene, repeated down every batch: a 1-object caption has 4 words ("a small red circle"), a
# 2-object one 9 ("a big red circle above a small blue cross"). Any 2 or 4 consecutive rows hold as many real
# tokens (words + [end]) as any other such rows, so with 1, 2 or 4 replicas each replica's share of a global
# batch has the same number of real tokens: each replica's masked mean (MaskedCrossEntropy divides by the
# replica's own count), averaged over the replicas, is then exactly the global masked mean. The doubly
# stochastic penalty is a mean over examples, exact for any equal split. Every caption_out keeps padding.
OBJECTS = (1, 2)
assert GLOBAL_BATCH % len(OBJECTS) == 0


def _scenes(num_images, seed):
    """``num_images`` generated scenes whose object counts cycle through :data:`OBJECTS`."""
    per_count = -(-num_images // len(OBJECTS))
    pools = [make_scenes(per_count, image_size=IMAGE_SIZE, min_objects=k, max_objects=k, seed=seed + 1000 * k)
             for k in OBJECTS]
    rows = [(i % len(OBJECTS), i // len(OBJECTS)) for i in range(num_images)]
    return CaptionSet(images=np.stack([pools[p].images[i] for p, i in rows]),
                      captions=[pools[p].captions[i] for p, i in rows])


def _build(vocabulary_size, jit_compile="auto"):
    # No dropout: replicas would draw other masks. The recipe's penalty, fading over its first 1000 steps (a step
    # counter that every replica reads alike: attnlayers.training_step).
    model = build_captioner("soft", vocabulary_size, image_size=IMAGE_SIZE, filters=(4, 8), embedding_dim=16,
                            units=32, dropout=0.0)
    # A symbolic call creates the weights (to compare them before training) without running or compiling.
    model((keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), dtype="uint8"), keras.Input((MAX_LENGTH,), dtype="int32")))
    # SGD without clipping, not the recipe's Adam(clipnorm=5): a gradient that is exactly zero in exact
    # arithmetic (a score bias that the softmax ignores) is round-off noise in float32, which Adam's first step
    # lr * g / (|g| + eps) turns into +-lr.
    # The recipe's loss (masked cross-entropy; the penalty is the model's add_loss).
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=MaskedCrossEntropy(pad_token_id=model.pad_token_id),
                  metrics=[MaskedAccuracy(pad_token_id=model.pad_token_id)], jit_compile=jit_compile)
    return model


def _dataset(scenes, vocabulary, global_batch):
    """``((images uint8 (global_batch, 16, 16, 3), caption_in), caption_out)``, captions int32 (global_batch,
    MAX_LENGTH), in order."""
    return make_dataset(scenes, vocabulary, batch_size=global_batch, image_size=IMAGE_SIZE, max_length=MAX_LENGTH,
                        shuffle=False, drop_remainder=True)


def training_job(seed=0):
    """3 steps of a tiny soft-attention Show, Attend and Tell on batches of 8 scenes (:class:`TrainingJob`).

    Tolerance 1e-5: the replicas sum the same per-example gradients in another order (float32 round-off,
    ~1e-7 relative), which 3 SGD steps carry into the weights (measured: 3e-8 at most).
    """
    scenes = _scenes(GLOBAL_BATCH * STEPS, seed)
    vocabulary = CaptionVocabulary.build(scenes)
    return TrainingJob(
        name="captioning",
        build=functools.partial(_build, vocabulary.vocabulary_size),
        dataset=functools.partial(_dataset, scenes, vocabulary),
        global_batch=GLOBAL_BATCH,
        steps=STEPS,
        tolerance=1e-5,
        seed=seed,
    )
