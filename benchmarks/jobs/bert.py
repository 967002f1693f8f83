"""BERT's small scale-out job for :mod:`benchmarks.jobs`: the pretraining model
(:class:`BertPretrainer`: masked LM + next sentence prediction over a :class:`BertBackbone`) at a tiny size, compiled
by its own :meth:`~BertPretrainer.compile_for_pretraining` (the MLM cross-entropy averaged over the real predictions
+ the NSP cross-entropy; BERT's AdamW with warm-up and linear decay), on batches of the real pretraining pipeline
(:func:`pretraining_dataset`: NSP pairs, [CLS] A [SEP] B [SEP] packing, seeded stateless masking) over a few
sentences written here.

    sentences (3 documents) -> tokenize_documents -> next_sentence_pairs -> pack (L = 16) -> MaskedLMMasker (P = 4)
      features {"token_ids", "segment_ids", "padding_mask"} (8, 16), {"mask_positions"} (8, 4)
      labels {"mlm": (8, 4), "nsp": (8,)}, sample weights {"mlm": (8, 4), "nsp": (8,)}    3 steps

    python -m benchmarks.jobs bert --placement mirrored
"""

from __future__ import annotations

import functools
import random

from attnlayers.applications.bert.tokenizer import SPECIAL_TOKENS

from .runner import TrainingJob

SEQUENCE_LENGTH = 16  # L: [CLS] A [SEP] B [SEP] and padding
MAX_PREDICTIONS = 4  # P
GLOBAL_BATCH, STEPS = 8, 3
LEARNING_RATE = 1e-3  # BERT's AdamW; warm-up over 1 step, then linear decay to 0 at step 4
# float32 sums in another order (2 replicas' halves of a batch, or one device's whole batch) differ by ~1e-7
# relative; Adam divides each gradient by its own scale, so an update differs by ~lr x that, more where a gradient
# is near 0 (m / (sqrt(v) + eps), eps 1e-6): 3 steps at lr 1e-3 move weights by ~2.7e-3, 100x this tolerance
# (measured: 1.3e-8 mirrored, 2e-8 two workers, 1.2e-7 JAX). BERT's AdamW clips the gradients' global norm at 1 (it
# is ~2.4 at the first step): equality needs the replicas' gradients summed before they are clipped; Keras 3's
# TensorFlow optimizer clips each replica's share first (2.9e-3 apart here), which core.runtime corrects.
TOLERANCE = 1e-5

# A tiny grammar: every sentence is "ADJ NOUN VERB the NOUN [ADVERB]", 5 or 6 words (see `pretraining_documents`).
ADJECTIVES = ("old", "young", "small", "big", "red", "green", "quiet", "loud", "happy", "tired", "clever", "brave")
NOUNS = ("cat", "dog", "bird", "fish", "king", "queen", "child", "farmer", "horse", "river", "tree", "stone",
         "ship", "city", "garden", "house")
VERBS = ("sees", "likes", "follows", "finds", "helps", "carries", "watches", "calls", "leaves", "meets")
ADVERBS = ("today", "again", "slowly", "quickly", "often", "never")
WORDS = ("the",) + ADJECTIVES + NOUNS + VERBS + ADVERBS
VOCABULARY = list(SPECIAL_TOKENS) + list(WORDS)  # 5 + 45 = 50 tokens: a word each, no ## pieces, no [UNK]


def pretraining_documents(seed=0, num_documents=4, sentences=20):
    """``num_documents`` documents of ``sentences`` sentences of the grammar above, drawn with ``seed``.

    Masked loss and replicas: the MLM loss is a masked mean, ``sum(w NLL) / sum(w)`` over a replica's share of the
    batch, and Keras averages the replicas' losses: that is the global masked mean only when every share holds as
    many real predictions. The masker predicts round(15% of the non-special tokens), at least 1, at most P: 2 for
    10 to 16 of them. A pair has at least 2 sentences of 5 or more words, and at most the 13 tokens that fit
    (16 - [CLS] [SEP] [SEP]): 10 to 13, so every sequence has exactly 2 real predictions (and P - 2 padded ones,
    weight 0) and every share of any split holds 2 per row: exact for any number of replicas, while the sequences'
    lengths (their [PAD] positions) differ.
    """
    rng = random.Random(seed)

    def sentence():
        words = [rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(VERBS), "the", rng.choice(NOUNS)]
        return " ".join(words + ([rng.choice(ADVERBS)] if rng.random() < 0.5 else []))

    return [[sentence() for _ in range(sentences)] for _ in range(num_documents)]


def build_model(jit_compile="auto"):
    """A 2-layer BERT (d 32, 2 heads, d_ff 64, V 50, 16 positions, no dropout: replicas would draw other dropout
    masks) under the MLM and NSP heads, compiled with :meth:`BertPretrainer.compile_for_pretraining`."""
    from attnlayers.applications.bert.config import BertConfig
    from attnlayers.applications.bert.pretrainer import BertPretrainer
    from attnlayers.applications.bert.training import built_backbone

    config = BertConfig(vocabulary_size=len(VOCABULARY), max_sequence_length=SEQUENCE_LENGTH, num_layers=2,
                        num_heads=2, hidden_dim=32, intermediate_dim=64, dropout=0.0)
    model = BertPretrainer(built_backbone(config))
    model.compile_for_pretraining(LEARNING_RATE, warmup_steps=1, total_steps=STEPS + 1, jit_compile=jit_compile)
    return model


def training_job(seed=0):
    """The BERT job: 3 steps of global batch 8 (see the module docstring)."""
    from attnlayers.applications.bert.pretraining_data import pretraining_dataset
    from attnlayers.applications.bert.tokenizer import BertTokenizer

    tokenizer = BertTokenizer(VOCABULARY)
    documents = pretraining_documents(seed)

    @functools.lru_cache(maxsize=None)  # one pipeline per batch size: building it (tokenizing, tracing) takes seconds
    def dataset(global_batch):
        # Pairs in document order (shuffle=False); masks from `seed` by stateless ops, the same in every pass
        # (dynamic_masking=False: fit iterates the data once more under a strategy, to build the model), so every
        # placement sees the same batches; every batch full (drop_remainder): static shapes.
        return pretraining_dataset(documents, tokenizer, sequence_length=SEQUENCE_LENGTH,
                                   max_predictions=MAX_PREDICTIONS, batch_size=global_batch, seed=seed,
                                   short_sequence_probability=0.0, shuffle=False, drop_remainder=True,
                                   dynamic_masking=False)

    return TrainingJob(name="bert", build=build_model, dataset=dataset, global_batch=GLOBAL_BATCH, steps=STEPS,
                           tolerance=TOLERANCE, seed=seed)
