"""BERT pretraining on the King James Bible (masked LM + next sentence prediction; or ALBERT's sentence-order
prediction, or the masked LM alone as RoBERTa: ``PretrainingSettings.sentence_objective``), the recipe of
examples/pretrain_bert.py and benchmarks/bert_pretraining.py:

    result = run_pretraining(PretrainingSettings(minutes=20), "artifacts/bert/pretrained")

:func:`run_pretraining`: a WordPiece vocabulary trained on the training documents (or a given vocab.txt), a
:class:`BertPretrainer` of a named size, :func:`pretraining_dataset` batches, BERT's AdamW whose learning rate
warms up over the first tenth of the run and decays linearly to zero when the run ends
(:class:`~attnlayers.applications.core.BudgetedLearningRate`: the end is the time budget when there is one, else
the last step of the last epoch), then the held-out masked-LM and next-sentence (or sentence-order) accuracies
beside their baselines (the most frequent training token at every masked position; chance, 0.5, for NSP / SOP), a
curve picture,
and the backbone saved as a Hugging Face checkpoint with its vocab.txt.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import numpy as np

from ..core.runs.cli import budget_epochs
from .training import built_backbone, compile_budgeted, run_callbacks

DEFAULT_PRETRAINED = os.path.join("artifacts", "bert", "pretrained")


@dataclasses.dataclass
class PretrainingSettings:
    """A pretraining run's recipe (the defaults are the recommended one for 2 CPU cores and 20 minutes).

    Attributes:
        config: the :data:`~attnlayers.applications.bert.PRESETS` size. "tiny" (2 layers, d 128; ~1M weights with
            the KJV's vocabulary) because 20 minutes of 2 CPU cores is ~1e14 floating-point operations: tiny runs
            a step of 32 x 128 tokens in ~0.12-0.15 s there, ~8,000 steps or ~25 passes over the KJV's ~9,500
            pairs, while "mini" (4 layers, d 256) is ~4.5x slower per step (~2,000 steps) and still near the
            start of learning when the budget ends; the compute-optimal size for this budget is about a
            million weights outside the embeddings (Hoffmann et al. 2022): tiny has 0.4M, mini 3.2M.
        vocabulary_size: the most WordPiece tokens (a learner may return fewer: benchmarks/README.md, BERT).
        sequence_length: L of the [CLS] A [SEP] B [SEP] pairs (BERT's 128; also the position table's size).
        max_predictions: P, masked tokens per sequence (BERT's 20 for L = 128).
        batch_size, learning_rate (the peak), warmup_fraction (of the run), weight_decay: BERT's AdamW (the
            peak's measurement: benchmarks/README.md, BERT).
        nsp_weight: the loss is MLM + nsp_weight x NSP (or SOP). BERT sums the two (1.0); at 1.0 the masked LM of
            a small BERT stays at the unigram stage for thousands of steps, and 0.1 lets it learn from context
            (benchmarks/README.md, BERT). Not used with ``sentence_objective=None``.
        sentence_objective: "nsp" (BERT's next sentence prediction), "sop" (ALBERT's sentence-order prediction)
            or None (the masked LM alone, RoBERTa's; single segments of consecutive sentences): see
            :mod:`~attnlayers.applications.bert.objectives`. Masks are dynamic (drawn anew each epoch) for all three.
        whole_word_masking: mask every piece of a chosen word.
        held_out: the share of documents (chapters) held out for evaluation.
        minutes: the training budget, or None. epochs: passes over the pairs (None: 10, or until the budget).
        backup_every: back up every this many steps (and at epoch ends); None: every few minutes
            (``core.training.callbacks.BACKUP_SECONDS``).
        seed: the split, the pairs, the masks, the shuffling and the initialization.
    """

    config: str = "tiny"
    vocabulary_size: int = 8000
    sequence_length: int = 128
    max_predictions: int = 20
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    nsp_weight: float = 0.1
    sentence_objective: str | None = "nsp"
    whole_word_masking: bool = False
    held_out: float = 0.05
    minutes: float | None = None
    backup_every: int | None = None
    epochs: int | None = None
    seed: int = 0


def read_text_documents(path):
    """Documents from a text file in the format of BERT's create_pretraining_data.py: one sentence a line,
    documents separated by blank lines. Returns a list of documents, each a list of sentences."""
    from ..core.inputs.corpora import text_file_documents

    expected = "a UTF-8 text file, one sentence a line, a blank line between documents"
    return [[line.strip() for line in lines] for lines in text_file_documents(path, expected)]


def pretraining_tokenizer(train_documents, vocabulary_size, vocabulary=None, path=None):
    """The WordPiece tokenizer: ``vocabulary`` (a vocab.txt) when given, else one trained on the sentences of
    ``train_documents`` (lower-cased) and written to ``path``."""
    from .tokenizer import BertTokenizer, train_vocabulary

    if vocabulary is None:
        vocabulary = train_vocabulary([s for document in train_documents for s in document], vocabulary_size, path)
    return BertTokenizer(vocabulary, lowercase=True)


def token_counts(documents, tokenizer):
    """How often each token id occurs in ``documents`` (a NumPy array of ``vocabulary_size`` counts)."""
    from .pretraining_data import tokenize_documents

    ids = [t for document in tokenize_documents(documents, tokenizer) for sentence in document for t in sentence]
    return np.bincount(np.asarray(ids, np.int64), minlength=tokenizer.vocabulary_size)


def most_frequent_token(counts, tokenizer):
    """The most frequent token id that can be masked (not a special token)."""
    counts = np.array(counts, np.int64)
    counts[list(tokenizer.special_token_ids)] = -1
    return int(np.argmax(counts))


def pretraining_baselines(dataset, token_id):
    """The baselines on a pretraining dataset's masked positions: the accuracy of predicting ``token_id``
    everywhere, and the share of the sentence objective's majority label ("nsp_chance" / "nsp_majority", or
    "sop_..."; none for the masked LM alone). "pairs" counts the sequences."""
    hits = masked = 0.0
    sentence, key, sequences = [], None, 0
    for _, labels, weights in dataset:
        w = weights["mlm"].numpy()
        hits += float(((labels["mlm"].numpy() == token_id) * w).sum())
        masked += float(w.sum())
        sequences += len(w)
        key = next((name for name in ("nsp", "sop") if name in labels), None)
        if key is not None:
            sentence.append(labels[key].numpy())
    result = {"mlm_most_frequent_token": hits / max(masked, 1.0), "pairs": sequences, "masked_tokens": int(masked)}
    if key is not None:
        sentence = np.concatenate(sentence)
        result.update({f"{key}_chance": 0.5,
                       f"{key}_majority": float(max(np.mean(sentence == 0), np.mean(sentence == 1)))})
    return result


def plot_pretraining_curves(history, baselines, path):
    """MLM and NSP (or SOP) accuracy per epoch (training and held-out) beside the baselines, as a PNG (MLM alone
    for a run without a sentence objective); returns the path (None when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = [("mlm", "masked LM accuracy", baselines.get("mlm_most_frequent_token"), "most frequent token")]
    panels += [(task, title, 0.5, "chance") for task, title in (("nsp", "next sentence accuracy"),
                                                                ("sop", "sentence-order accuracy"))
               if f"{task}_accuracy" in history]
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for axis, (task, title, baseline, label) in zip(axes[0], panels):
        for key, style, name in ((f"{task}_accuracy", "-o", "training"), (f"val_{task}_accuracy", "-s", "held out")):
            values = history.get(key)
            if values:
                axis.plot(range(1, len(values) + 1), values, style, markersize=3, label=name)
        if baseline is not None:
            axis.axhline(baseline, color="gray", linestyle="--", label=label)
        axis.set_title(title)
        axis.set_xlabel("epoch")
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def save_checkpoint(backbone, tokenizer, directory, sequence_length):
    """The backbone as a Hugging Face checkpoint (config.json, model.safetensors, vocab.txt) plus the
    tokenizer_config.json that tells Hugging Face's ``AutoTokenizer`` (and :func:`load_hf_checkpoint`) to
    lower-case."""
    from .checkpoint import save_hf_checkpoint

    save_hf_checkpoint(backbone, directory, vocabulary=tokenizer.get_vocabulary())
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.lowercase,
                   "model_max_length": sequence_length}, f, indent=2)
        f.write("\n")
    return directory


def run_pretraining(settings, out_dir, *, documents=None, vocabulary=None, strategy=None, verbose=1,
                    results_file="results.json", record=None, tensorboard=True, backup=True, corpus="kjv",
                    viewer=False):
    """Pretrains a BERT and saves its backbone as a Hugging Face checkpoint in ``out_dir``.

    Args:
        settings: a :class:`PretrainingSettings`.
        out_dir: the run's folder: the checkpoint (config.json, model.safetensors, vocab.txt,
            tokenizer_config.json), results.json, curves.png, TensorBoard logs (logs/) and the
            BackupAndRestore checkpoints (backup/).
        documents: the documents (each a list of sentences); None: the KJV (``corpora.bible_documents()``).
        vocabulary: a vocab.txt to use instead of training one.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        verbose: ``fit``'s verbosity.
        results_file, record: see :func:`~attnlayers.applications.core.run_recipe`.
        tensorboard, backup: add those callbacks.
        corpus: the corpus' name for the record.
        viewer: also write viewer.html, the interactive attention viewer (:mod:`attnlayers.viewer`) of the first
            held-out document's first two sentences.

    Returns:
        ``run_recipe``'s result, with "held_out" (mlm_accuracy, nsp_accuracy or sop_accuracy (none without a
        sentence objective), loss) and "baselines".
    """
    import tensorflow as tf

    from ..core.inputs import corpora
    from ..core import describe_runtime, run_recipe, static_shapes
    from ..core.runs.recipe import describe_vocabulary
    from ..core.runs.replicas import held_out_batch_size
    from .config import BertConfig
    from .pretrainer import BertPretrainer
    from .pretraining_data import pretraining_dataset

    strategy = strategy or tf.distribute.get_strategy()
    if documents is None:
        documents = corpora.bible_documents()
    train_documents, held_documents = corpora.split_documents(documents, held_out=settings.held_out,
                                                              seed=settings.seed)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = pretraining_tokenizer(train_documents, settings.vocabulary_size, vocabulary,
                                      path=os.path.join(out_dir, "vocab.txt"))
    static = static_shapes(strategy)  # a TPU (and XLA under JAX) compiles static batches only
    objective = settings.sentence_objective
    options = dict(sequence_length=settings.sequence_length, max_predictions=settings.max_predictions,
                   whole_word_masking=settings.whole_word_masking, sentence_objective=objective)
    train = pretraining_dataset(train_documents, tokenizer, seed=settings.seed, batch_size=settings.batch_size,
                                drop_remainder=static, **options)
    # One pass, cached: every epoch and the final evaluation see the same held-out masks.
    held = pretraining_dataset(held_documents, tokenizer, seed=settings.seed + 1, shuffle=False,
                               batch_size=settings.batch_size, **options).cache()
    if static:  # whole batches of a multiple of the replicas, one at least when the held-out pairs are fewer
        pairs = int(held.reduce(0, lambda count, batch: count + tf.shape(batch[1]["mlm"])[0]))
        size = held_out_batch_size(strategy, settings.batch_size, pairs)
        held = held.unbatch().batch(size, drop_remainder=True).cache().apply(
            tf.data.experimental.assert_cardinality(pairs // size))
    config = BertConfig.preset(settings.config, vocabulary_size=tokenizer.vocabulary_size,
                               max_sequence_length=settings.sequence_length)
    with strategy.scope():
        model = BertPretrainer(built_backbone(config), sentence_objective=objective)
        weighting = {} if objective is None else {"nsp_weight": settings.nsp_weight}
        schedule = compile_budgeted(model, functools.partial(model.compile_for_pretraining, **weighting),
                                    settings.learning_rate, settings.warmup_fraction, settings.weight_decay,
                                    settings.minutes)
    learned = None if vocabulary else settings.vocabulary_size
    print(f"data: {len(train_documents)} training / {len(held_documents)} held-out documents; "
          f"{describe_vocabulary(tokenizer.vocabulary_size, learned, 'WordPiece')}; model: BERT {settings.config} ({config.num_layers} layers, d "
          f"{config.hidden_dim}), {config.parameter_count():,} backbone parameters; {describe_runtime(strategy)}",
          flush=True)
    baselines = {}

    def evaluate(model):
        scores = model.evaluate(held, return_dict=True, verbose=0)
        counts = token_counts(train_documents, tokenizer)
        frequent = most_frequent_token(counts, tokenizer)
        baselines.update(pretraining_baselines(held, frequent),
                         most_frequent_token=tokenizer.get_vocabulary()[frequent])
        held_out = {"mlm_accuracy": float(scores["mlm_accuracy"]), "loss": float(scores["loss"])}
        sentence = ""
        if objective is not None:
            held_out[f"{objective}_accuracy"] = float(scores[f"{objective}_accuracy"])
            sentence = (f"; {objective.upper()} accuracy {held_out[f'{objective}_accuracy']:.4f} (chance 0.5, "
                        f"majority label {baselines[f'{objective}_majority']:.4f})")
        sequences = "pairs" if objective is not None else "sequences"
        print(f"held out ({baselines['pairs']} {sequences}, {baselines['masked_tokens']} masked tokens): MLM "
              f"accuracy {held_out['mlm_accuracy']:.4f} (most frequent token {baselines['most_frequent_token']!r}: "
              f"{baselines['mlm_most_frequent_token']:.4f}){sentence}", flush=True)
        return {"held_out": held_out, "baselines": dict(baselines)}

    def pictures(model, out):
        path = plot_pretraining_curves(model.history.history, baselines, os.path.join(out, "curves.png"))
        paths = [path] if path else []
        sentences = next((document for document in held_documents if document), None)
        if viewer and sentences:
            from .viewer import attention_viewer

            paths.append(os.path.join(out, "viewer.html"))
            attention_viewer(model.backbone, tokenizer, sentences[0], paths[-1],
                             pair=sentences[1] if len(sentences) > 1 else None,
                             sequence_length=settings.sequence_length)
        if paths:
            print(f"wrote {', '.join(paths)}")
        return paths

    def export(model, out):
        save_checkpoint(model.backbone, tokenizer, out, settings.sequence_length)
        print(f"saved the backbone as a Hugging Face checkpoint in {out} (load_hf_checkpoint, "
              "transformers.BertModel.from_pretrained)")
        return out

    record = {"task": "pretraining", "init": "random", "corpus": corpus, **dataclasses.asdict(settings),
              "train_documents": len(train_documents), "held_out_documents": len(held_documents),
              "vocabulary": tokenizer.vocabulary_size, "runtime": describe_runtime(strategy), **(record or {})}
    epochs = budget_epochs(settings.epochs, settings.minutes, 10)
    return run_recipe(model, train, validation=held, epochs=epochs,
                      callbacks=run_callbacks(out_dir, settings.minutes, None, schedule, tensorboard, backup,
                                              settings.backup_every),
                      evaluate=evaluate, pictures=pictures, export=export, out_dir=out_dir, record=record,
                      verbose=verbose, strategy=strategy, results_file=results_file)


__all__ = [
    "DEFAULT_PRETRAINED",
    "PretrainingSettings",
    "most_frequent_token",
    "plot_pretraining_curves",
    "pretraining_baselines",
    "pretraining_tokenizer",
    "read_text_documents",
    "run_pretraining",
    "save_checkpoint",
    "token_counts",
]
