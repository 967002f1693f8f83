"""XLNet pretraining on the corpora of BERT's recipe: permutation language modelling with partial prediction (Yang
et al. 2019, sections 2.2 - 2.3), the recipe of examples/pretrain_xlnet.py and benchmarks/xlnet_finetune.py:

    result = run_pretraining(XLNetPretrainingSettings(steps=2000), "artifacts/xlnet/pretrained",
                             documents=documents, make_tokenizer=make_tokenizer)

The tokenizer is NOT XLNet's SentencePiece (none is built here): ``make_tokenizer(train_documents, vocab_path)``
returns one, and examples/pretrain_xlnet.py passes the WordPiece vocabulary BERT's recipe trains on the same
training documents (lower-cased, 8,000 pieces), so that a comparison of the two models is about the objective, not
the tokens. Its [SEP] and [CLS] play XLNet's <sep> and <cls>, its [PAD] is the padding; [MASK] is never used.

Data, per step (:func:`pretraining_dataset`):

    documents -> pieces -> chunks of whole sentences of one document, at most T - 3 pieces (a longer sentence is cut)
      -> A | B split at a random sentence boundary (at a random piece for a one-sentence chunk)
      -> A <sep> B <sep> <cls>, segment ids 0 / 1 / 2, padded on the right (:mod:`.inputs`: fine-tuning's layout)
      -> a factorisation order z per row: <sep> and <cls> first (context of every token and never predicted, as
         XLNet's data preparation keeps its functional tokens), the other real tokens in a uniform random order,
         padding last; seeded by (seed, epoch, batch), so a resumed run draws the same orders
      -> XLNetPretrainer: the permutation masks of z and the last round(n / K) tokens of z as targets (K = 6)

Training: XLNet's AdamW (epsilon 1e-6, clipping at 1, decay 0.01) with the budgeted schedule of BERT's recipe
(linear warm-up over the first tenth, linear decay to zero at the end of --steps, --minutes or the last epoch).
At the end the held-out permutation-LM loss and accuracy (fixed orders) are printed beside the training unigram's
(the same targets), and the backbone and LM head are saved as a Hugging Face ``XLNetLMHeadModel`` checkpoint with
the vocab.txt: ``load_hf_checkpoint(out)`` gives the backbone that ``XLNetClassifier`` / ``XLNetTokenClassifier``
fine-tune.

Not built: XLNet's SentencePiece, two segments from different documents (the paper samples either; here B always
continues A), the memory between segments (``mems``), ``bi_data``, span prediction of Transformer-XL's recipe.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import keras
import numpy as np

from attnlayers.validation import positive_int

from ..core.runs.cli import budget_epochs
from .inputs import pack

DEFAULT_PRETRAINED = os.path.join("artifacts", "xlnet", "pretrained")


@dataclasses.dataclass
class XLNetPretrainingSettings:
    """A pretraining run's recipe.

    Attributes:
        config: the :data:`~attnlayers.applications.xlnet.PRESETS` size ("tiny": 2 layers, d 128, BERT tiny's).
        vocabulary_size: the most WordPiece tokens (for a trained vocabulary).
        sequence_length: T, pieces per A <sep> B <sep> <cls> input (BERT's recipe: 128).
        K: partial prediction's |z| / (|z| - c): the last round(n / K) tokens of each order are predicted.
        batch_size, learning_rate (the peak), warmup_fraction, weight_decay: XLNet's AdamW and the budgeted
            schedule (BERT's recipe's values).
        held_out: the share of documents held out for evaluation.
        minutes: a wall-clock budget, or None. steps: a step budget, or None (then ``epochs``: None = 10, or until
            ``minutes``). ``steps`` and ``epochs`` exclude each other.
        backup_every: back up every this many steps; None: every few minutes.
        seed: the split, the A | B cuts, the shuffling, the orders and the initialisation.
    """

    config: str = "tiny"
    vocabulary_size: int = 8000
    sequence_length: int = 128
    K: float = 6.0
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    held_out: float = 0.05
    minutes: float | None = None
    steps: int | None = None
    epochs: int | None = None
    backup_every: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.sequence_length < 5:
            raise ValueError(f"`sequence_length` must be at least 5 (A <sep> B <sep> <cls>); received "
                             f"{self.sequence_length}.")
        positive_int(self.steps, "steps", allow_none=True)
        if self.steps is not None and self.epochs is not None:
            raise ValueError(f"Give `steps` or `epochs`, not both; received steps={self.steps}, "
                             f"epochs={self.epochs}.")


def tokenize_documents(documents, tokenizer, chunk_size=4096):
    """Each document's sentences as lists of token ids (``tokenizer.tokenize`` over batches of sentences)."""
    sentences = [sentence for document in documents for sentence in document]
    ids = []
    for start in range(0, len(sentences), chunk_size):
        ids += tokenizer.tokenize(sentences[start:start + chunk_size]).to_list()
    out, at = [], 0
    for document in documents:
        out.append(ids[at:at + len(document)])
        at += len(document)
    return out


def segment_pairs(token_documents, sequence_length, seed=0):
    """The (A, B) token lists of the pretraining inputs: each document's sentences in order, in chunks of at most
    T - 3 pieces (a longer sentence cut to that), each chunk cut in two at a random sentence boundary (a
    one-sentence chunk at a random piece; a one-piece chunk is dropped)."""
    rng = np.random.default_rng(seed)
    room = sequence_length - 3
    pairs = []

    def emit(chunk):
        if len(chunk) > 1:
            cut = int(rng.integers(1, len(chunk)))
            pairs.append(([t for s in chunk[:cut] for t in s], [t for s in chunk[cut:] for t in s]))
        elif chunk and len(chunk[0]) > 1:
            cut = int(rng.integers(1, len(chunk[0])))
            pairs.append((chunk[0][:cut], chunk[0][cut:]))

    for document in token_documents:
        chunk, size = [], 0
        for sentence in document:
            sentence = sentence[:room]
            if not sentence:
                continue
            if size + len(sentence) > room:
                emit(chunk)
                chunk, size = [], 0
            chunk.append(sentence)
            size += len(sentence)
        emit(chunk)
    return pairs


def pretraining_features(token_documents, tokenizer, sequence_length, seed=0):
    """The packed inputs of :func:`segment_pairs` (:func:`.inputs.pack`): NumPy {"token_ids", "segment_ids",
    "padding_mask"} (N, T)."""
    pairs = segment_pairs(token_documents, sequence_length, seed)
    if not pairs:
        raise ValueError("The documents give no pretraining input (every chunk has a single piece).")
    features, _ = pack([a for a, _ in pairs], [b for _, b in pairs], sequence_length=sequence_length,
                       tokenizer=tokenizer)
    return features


def context_first_order(features, seed, context_tokens):
    """A factorisation order per row (TensorFlow ops, for a ``tf.data`` map): the real tokens whose id is in
    ``context_tokens`` (<sep>, <cls>) first in position order, the other real tokens in a uniform random order
    from the stateless ``seed`` ((2,) int), padding last. Partial prediction predicts the END of the order, so the
    context tokens are never targets and every token sees them.

    Args:
        features: {"token_ids" (B, T), "padding_mask" (B, T) bool}.

    Returns:
        (B, T) int32, each row a permutation of 0 .. T-1 (z_1 .. z_T).
    """
    import tensorflow as tf

    ids, real = features["token_ids"], tf.cast(features["padding_mask"], tf.bool)
    keys = tf.random.stateless_uniform(tf.shape(ids), seed=seed, dtype=tf.float32)  # [0, 1): uniform order
    context = tf.zeros_like(real)
    for token in context_tokens:
        context = tf.logical_or(context, tf.equal(ids, token))
    keys = tf.where(real, keys, 2.0)  # padding last
    keys = tf.where(tf.logical_and(real, context), -1.0, keys)  # context tokens first
    return tf.argsort(keys, axis=-1, stable=True, direction="ASCENDING")


def pretraining_dataset(features, *, batch_size, seed, context_tokens, shuffle=True, drop_remainder=False):
    """``(inputs,)`` batches for ``XLNetPretrainer.fit``: ``features`` (NumPy (N, T) arrays) shuffled in epoch e in
    (seed, e)'s order (:mod:`~attnlayers.applications.core.inputs.data_order`), with "order" added to each batch
    by :func:`context_first_order`, seeded by (seed, epoch, batch)."""
    import tensorflow as tf

    from ..core.inputs import data_order

    batches = data_order.shuffled_slices(features, seed, shuffle=shuffle).batch(batch_size,
                                                                                drop_remainder=drop_remainder)
    seeds = data_order.epoch_seeds(seed + 7919)  # another stream than the shuffle's

    def with_order(batch, draw):
        key = tf.stack([draw, tf.constant(0, tf.int64)])
        return ({**batch, "order": context_first_order(batch, key, context_tokens)},)

    return tf.data.Dataset.zip((batches, seeds)).map(with_order).prefetch(tf.data.AUTOTUNE)


def unigram_log_probabilities(token_documents, vocabulary_size):
    """log p(token) of the training pieces' frequencies, add-one smoothed over the vocabulary: (V,) float64."""
    counts = np.ones(vocabulary_size, np.float64)
    for document in token_documents:
        for sentence in document:
            np.add.at(counts, np.asarray(sentence, np.int64), 1.0)
    return np.log(counts / counts.sum())


def held_out_scores(model, dataset, unigram_log_p):
    """The permutation LM on ``dataset``'s targets (its fixed orders): mean negative log-likelihood per target
    (nats), perplexity and accuracy, beside the training unigram's NLL and most-frequent-token accuracy on the same
    targets."""
    from keras import ops

    nll = unigram = correct = frequent = count = 0.0
    most_frequent = int(np.argmax(unigram_log_p))
    for (inputs,) in dataset:
        out = model(inputs, training=False)
        positions = ops.convert_to_numpy(out["positions"])
        weights = ops.convert_to_numpy(out["weights"]).astype(np.float64)
        logits = ops.convert_to_numpy(ops.cast(out["logits"], "float32")).astype(np.float64)
        labels = np.take_along_axis(np.asarray(inputs["token_ids"]), positions, axis=1)
        log_p = logits - logits.max(-1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
        nll -= float((np.take_along_axis(log_p, labels[..., None], -1)[..., 0] * weights).sum())
        correct += float(((logits.argmax(-1) == labels) * weights).sum())
        unigram -= float((unigram_log_p[labels] * weights).sum())
        frequent += float(((labels == most_frequent) * weights).sum())
        count += float(weights.sum())
    count = max(count, 1.0)
    return ({"loss": nll / count, "perplexity": math.exp(nll / count), "accuracy": correct / count,
             "targets": int(count)},
            {"unigram_loss": unigram / count, "unigram_perplexity": math.exp(unigram / count),
             "most_frequent_token_accuracy": frequent / count})


def save_checkpoint(model, tokenizer, directory):
    """The pretrainer as a Hugging Face ``XLNetLMHeadModel`` checkpoint (config.json, model.safetensors) with the
    tokenizer's vocab.txt and a tokenizer_config.json (the WordPiece tokenizer, lower-casing or not)."""
    model.save_hf_checkpoint(directory)
    tokenizer.save_vocabulary(os.path.join(directory, "vocab.txt"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": bool(getattr(tokenizer, "lowercase", True))},
                  f, indent=2)
        f.write("\n")
    return directory


class _StopAtStep(keras.callbacks.Callback):
    """Ends ``fit`` once the optimizer has taken ``steps`` steps (mid-epoch; that epoch's validation still runs).
    The optimizer's count, which ``BackupAndRestore`` restores, so a resumed run stops at the same step."""

    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if keras.backend.backend() == "jax":
            self.model.jax_state_sync()  # the optimizer's count lives in the loop's state until synced
        if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) >= self.steps:
            self.model.stop_training = True


def run_pretraining(settings, out_dir, *, documents, make_tokenizer, strategy=None, verbose=1,
                    results_file="results.json", record=None, tensorboard=True, backup=True, corpus="kjv"):
    """Pretrains an XLNet (permutation LM) and saves it as a Hugging Face checkpoint in ``out_dir``.

    Args:
        settings: an :class:`XLNetPretrainingSettings`.
        out_dir: the run's folder: the checkpoint (config.json, model.safetensors, vocab.txt,
            tokenizer_config.json), results_file, TensorBoard logs (logs/) and BackupAndRestore checkpoints (backup/).
        documents: the documents, each a list of sentences (``core.runs.cli.load_corpus``).
        make_tokenizer: ``make_tokenizer(train_documents, vocab_path) -> tokenizer`` (``tokenize`` of a batch of
            strings to ragged ids, ``vocabulary_size``, ``pad_token_id``, ``sep_token_id``, ``cls_token_id``,
            ``save_vocabulary``): the training documents only, so the held-out text stays unseen.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        verbose: ``fit``'s verbosity (1: a progress bar).
        results_file, record: see :func:`~attnlayers.applications.core.run_recipe`.
        tensorboard, backup: add those callbacks. corpus: the corpus' name for the record.

    Returns:
        ``run_recipe``'s result, with "held_out" (loss, perplexity, accuracy, targets) and "baselines" (the
        training unigram on the same targets).
    """
    import tensorflow as tf

    from ..core import BudgetedLearningRate, describe_runtime, run_recipe, standard_callbacks, static_shapes
    from ..core.inputs import corpora
    from .backbone import XLNetBackbone
    from .config import XLNetConfig
    from .pretrainer import XLNetPretrainer

    strategy = strategy or tf.distribute.get_strategy()
    train_documents, held_documents = corpora.split_documents(documents, held_out=settings.held_out,
                                                              seed=settings.seed)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = make_tokenizer(train_documents, os.path.join(out_dir, "vocab.txt"))
    train_tokens = tokenize_documents(train_documents, tokenizer)
    length = settings.sequence_length
    train_features = pretraining_features(train_tokens, tokenizer, length, settings.seed)
    held_features = pretraining_features(tokenize_documents(held_documents, tokenizer), tokenizer, length,
                                         settings.seed + 1)
    context = (tokenizer.sep_token_id, tokenizer.cls_token_id)
    static = static_shapes(strategy)  # a TPU (and XLA under JAX) compiles static batches only
    train = pretraining_dataset(train_features, batch_size=settings.batch_size, seed=settings.seed,
                                context_tokens=context, drop_remainder=static)
    held = pretraining_dataset(held_features, batch_size=settings.batch_size, seed=settings.seed + 1,
                               context_tokens=context, shuffle=False, drop_remainder=static).cache()
    config = XLNetConfig.preset(settings.config, vocabulary_size=tokenizer.vocabulary_size,
                                pad_token_id=tokenizer.pad_token_id)
    with strategy.scope():
        backbone = XLNetBackbone(config)
        backbone({"token_ids": np.zeros((1, 2), "int32")})  # built on its own: its weights' names are its own
        model = XLNetPretrainer(backbone, K=settings.K, seed=settings.seed)
        model.compile_for_pretraining(float(settings.learning_rate), weight_decay=settings.weight_decay)
        schedule = BudgetedLearningRate(settings.learning_rate, settings.warmup_fraction,
                                        seconds=None if settings.minutes is None else settings.minutes * 60.0,
                                        steps=settings.steps)
    steps_per_epoch = len(train_features["token_ids"]) // settings.batch_size if static else math.ceil(
        len(train_features["token_ids"]) / settings.batch_size)
    print(f"data: {len(train_documents)} training / {len(held_documents)} held-out documents, "
          f"{len(train_features['token_ids'])} / {len(held_features['token_ids'])} inputs of {length} pieces "
          f"({steps_per_epoch} steps an epoch); WordPiece vocabulary of {tokenizer.vocabulary_size} tokens; model: "
          f"XLNet {settings.config} ({config.num_layers} layers, d {config.hidden_dim}), "
          f"{config.parameter_count():,} backbone parameters, K = {settings.K:g}; {describe_runtime(strategy)}",
          flush=True)

    def evaluate(model):
        held_out, baselines = held_out_scores(model, held, unigram_log_probabilities(train_tokens,
                                                                                     tokenizer.vocabulary_size))
        print(f"held out ({held_out['targets']} targets): permutation LM loss {held_out['loss']:.4f} (perplexity "
              f"{held_out['perplexity']:.1f}), accuracy {held_out['accuracy']:.4f}; training unigram: loss "
              f"{baselines['unigram_loss']:.4f} (perplexity {baselines['unigram_perplexity']:.1f}), most frequent "
              f"token accuracy {baselines['most_frequent_token_accuracy']:.4f}", flush=True)
        return {"held_out": held_out, "baselines": baselines}

    def export(model, out):
        save_checkpoint(model, tokenizer, out)
        print(f"saved the backbone and LM head as a Hugging Face XLNetLMHeadModel checkpoint in {out} "
              "(xlnet.load_hf_checkpoint -> XLNetClassifier / XLNetTokenClassifier)", flush=True)
        return out

    callbacks = standard_callbacks(out_dir if (tensorboard or backup) else None, minutes=settings.minutes,
                                   tensorboard=tensorboard, backup=backup, backup_every=settings.backup_every)
    callbacks.append(schedule)
    if settings.steps is not None:
        callbacks.append(_StopAtStep(settings.steps))
        epochs = math.ceil(settings.steps / steps_per_epoch)
    else:
        epochs = budget_epochs(settings.epochs, settings.minutes, 10)
    record = {"task": "pretraining", "model": "xlnet", "init": "random", "corpus": corpus,
              **dataclasses.asdict(settings), "train_documents": len(train_documents),
              "held_out_documents": len(held_documents), "train_inputs": len(train_features["token_ids"]),
              "vocabulary": tokenizer.vocabulary_size, "runtime": describe_runtime(strategy), **(record or {})}
    return run_recipe(model, train, validation=held, epochs=epochs, callbacks=callbacks, evaluate=evaluate,
                      export=export, out_dir=out_dir, record=record, verbose=verbose, strategy=strategy,
                      results_file=results_file)


__all__ = [
    "DEFAULT_PRETRAINED",
    "XLNetPretrainingSettings",
    "context_first_order",
    "held_out_scores",
    "pretraining_dataset",
    "pretraining_features",
    "run_pretraining",
    "save_checkpoint",
    "segment_pairs",
    "tokenize_documents",
    "unigram_log_probabilities",
]
