"""BERT fine-tuning, the recipe of examples/finetune_bert.py and benchmarks/bert_finetune.py:

    result = run_finetuning(FinetuningSettings("pos", init="artifacts/bert/pretrained", minutes=4),
                            "artifacts/bert/finetune/pos", export_dir="artifacts/bert/finetune/pos/model")

:func:`run_finetuning` starts from a Hugging Face BERT directory (ours or any other) or from a random
initialization of the same architecture and vocabulary ("scratch"), with the same recipe and budget, on a task of
:mod:`.tasks`, and scores it beside the task's non-neural baseline (:mod:`.baselines`, NumPy):

- sentiment: BertClassifier; test macro-F1 and accuracy; baseline: bag-of-words logistic regression.
- paraphrase: BertClassifier on the pair; test accuracy; baseline: logistic regression on the words the two share
  and do not share, and their overlap.
- pos: BertTokenClassifier; test word accuracy; baseline: each word's most frequent training tag.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from attnlayers.validation import one_of, positive_int

from ..core.runs.cli import budget_epochs
from .baselines import classification_scores, task_baseline
from .pretraining import DEFAULT_PRETRAINED
from .tasks import TASK_SEQUENCE_LENGTH, TASKS, load_task
from .training import built_backbone, compile_budgeted, run_callbacks


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
        backup_every: back up every this many steps (and at epoch ends); None: every few minutes
            (``core.training.callbacks.BACKUP_SECONDS``).
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
    backup_every: int | None = None
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


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What :func:`run_finetuning` builds and feeds a model with: BERT's (:func:`bert_family`) unless another
    encoder family is passed (benchmarks/xlnet_finetune.py passes XLNet's), so the same tasks, splits, budgets,
    baselines and scores compare them.

    Attributes:
        name: the family's name in the record ("bert").
        load_initialization: ``(init, architecture, strategy, sequence_length) -> (backbone, tokenizer)``, as
            :func:`load_initialization`.
        encode_texts: ``(examples, tokenizer, sequence_length) -> (features, labels, cut)``, as :func:`encode_texts`.
        encode_tagged: ``(sentences, tokenizer, sequence_length, tags) -> (features, labels, word_ids, cut)``, as
            :func:`encode_tagged`.
        classifier: ``(backbone, num_classes) -> model`` with ``compile_for_finetuning``.
        tagger: ``(backbone, num_tags) -> model`` with ``compile_for_finetuning``.
    """

    name: str
    load_initialization: object
    encode_texts: object
    encode_tagged: object
    classifier: object
    tagger: object


def bert_family():
    """BERT's :class:`ModelFamily`: Hugging Face BERT directories, [CLS] A [SEP] B [SEP] inputs, BertClassifier and
    BertTokenClassifier."""
    from .heads import BertClassifier, BertTokenClassifier

    return ModelFamily("bert", load_initialization, encode_texts, encode_tagged,
                       lambda backbone, n: BertClassifier(backbone, num_classes=n),
                       lambda backbone, n: BertTokenClassifier(backbone, num_tags=n))


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

    from ..core.inputs import data_order

    # Shuffled: epoch e in (seed, e)'s order, whichever process draws it (core.inputs.data_order).
    ds = data_order.shuffled_slices((features, labels), 0 if seed is None else seed, shuffle=seed is not None)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def run_finetuning(settings, out_dir, *, export_dir=None, strategy=None, verbose=1, results_file="results.json",
                   record=None, tensorboard=True, backup=True, data=None, family=None):
    """Fine-tunes a BERT on ``settings.task``, evaluates it on the test split beside the task's baseline, and
    exports it as a string-in SavedModel.

    Args:
        settings: a :class:`FinetuningSettings`.
        out_dir: the run's folder (results_file, TensorBoard logs/, backup/).
        export_dir: where :func:`~attnlayers.applications.bert.export.export_text_model` writes the SavedModel
            (a classifier for sentiment / paraphrase, a tagger for pos), or None for no export.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        data: a :class:`TaskData` to use instead of :func:`load_task`'s.
        family: the :class:`ModelFamily` (None: :func:`bert_family`); another family's runs need ``export_dir``
            None (the export is BERT's).
        verbose, results_file, record, tensorboard, backup: as for :func:`run_pretraining`.

    Returns:
        ``run_recipe``'s result with "test" (the model's scores) and "baseline" (the baseline's).
    """
    import tensorflow as tf

    from ..core import BestWeights, describe_runtime, run_recipe, saved_model_export, static_shapes
    from ..core.runs.replicas import held_out_batch_size, pad_to_replicas
    from .heads import word_predictions

    family = family or bert_family()
    if family.name != "bert" and export_dir is not None:
        raise ValueError(f"`export_dir` writes BERT's SavedModel; pass None for the {family.name!r} family.")
    strategy = strategy or tf.distribute.get_strategy()
    task, length = settings.task, settings.sequence_length
    backbone, tokenizer = family.load_initialization(settings.init, settings.architecture, strategy, length)
    data = data or load_task(task, settings.seed)
    sizes = {split: len(getattr(data, split)) for split in ("train", "validation", "test")}
    data = dataclasses.replace(data, test=sample(data.test, settings.test_examples, settings.seed))
    encoded, cut = {}, {}
    for split in ("train", "validation", "test"):
        examples = getattr(data, split)
        if split == "validation":
            examples = sample(examples, settings.validation_examples, settings.seed)
        if data.head == "tagger":
            features, labels, word_ids, cut[split] = family.encode_tagged(examples, tokenizer, length, data.labels)
            encoded[split] = (features, labels, word_ids)
        else:
            features, labels, cut[split] = family.encode_texts(examples, tokenizer, length)
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
            model = family.tagger(backbone, len(data.labels))
        else:
            model = family.classifier(backbone, len(data.labels))
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
                      callbacks=run_callbacks(out_dir, settings.minutes, BestWeights("val_accuracy"), schedule,
                                           tensorboard, backup, settings.backup_every),
                      evaluate=evaluate, out_dir=out_dir,
                      export=None if export_dir is None else saved_model_export(
                          export, os.path.basename(os.path.normpath(export_dir)) + ".weights.h5"),
                      record=record, verbose=verbose, strategy=strategy, results_file=results_file)


__all__ = [
    "FinetuningSettings",
    "ModelFamily",
    "bert_family",
    "check_initialization",
    "encode_tagged",
    "encode_texts",
    "load_initialization",
    "run_finetuning",
    "sample",
]
