"""The GPT training run, written once for examples/train_gpt.py and benchmarks/gpt_training.py: a GPT-2-style
language model trained from scratch on the King James Bible (or any text), evaluated on held-out documents beside
a unigram baseline, and saved as a Hugging Face GPT-2 checkpoint.

    result = run_training(TrainingSettings(minutes=15), "artifacts/gpt/kjv")
    result["held_out"]["perplexity"], result["baselines"]["unigram_perplexity"]

:func:`run_training`:

- data: documents (the KJV: a chapter a document, a verse a line; or a text file, blank lines between documents),
  a seeded split of whole documents into training and held-out ones (``core.inputs.corpora.split_documents``);
- tokenizer: a byte-level BPE (GPT-2's, :func:`~attnlayers.applications.gpt.tokenizer.train_byte_level_bpe`)
  trained on the training documents, or a given vocab.json + merges.txt;
- examples: :mod:`~attnlayers.applications.gpt.data` (one stream with ``<|endoftext|>`` between documents, cut into
  windows of L + 1 tokens overlapping by one; why, in its docstring);
- loss: the causal LM cross-entropy of each next token, averaged over the real labels of the batch
  (:func:`causal_lm_loss`: the padding mask is the sample weight; GPT-2's padding id is its end id, so masking by id
  would drop every document's end); with ``loss_chunk_size`` computed from the hidden states chunk by chunk, never
  forming the float32 (B, T, V) logits (:class:`~attnlayers.applications.core.training.losses.ChunkedCrossEntropy`);
- metric: the token-weighted perplexity, exact over an epoch
  (:class:`~attnlayers.applications.core.training.metrics.Perplexity`);
- optimizer: AdamW with GPT-3's betas, epsilon, weight decay 0.1 on the weight matrices only, global gradient-norm
  clipping at 1.0 (:func:`~attnlayers.applications.core.training.optimizers.decoupled_adamw`), its learning rate
  warming up linearly then decaying with a cosine to zero at the end of the run: the time budget (``minutes``), else
  the last step of the last epoch
  (:class:`~attnlayers.applications.core.training.optimizers.BudgetedCosineLearningRate`);
- callbacks: ``core.standard_callbacks`` (TensorBoard in OUT/logs, BackupAndRestore in OUT/backup: run the same
  command again after an interruption and training resumes; the time budget; the weights of the epoch of lowest
  held-out perplexity, ``core.BestWeights``, restored when training ends: a run that overfits a small text, or
  diverges, reports and exports its best epoch, not its last; with a time budget, ``core.ProgressLog``'s lines
  say the step and the time against the budget instead of ``fit``'s progress bar);
- at the end, on the kept weights: the held-out perplexity beside the unigram baseline (training label frequencies,
  add-one smoothed, on the same held-out labels), a few sampled continuations of held-out prompts, OUT/curves.png (training and
  held-out perplexity per epoch), and the model in Hugging Face's layout in OUT/checkpoint (config.json,
  model.safetensors, vocab.json, merges.txt: ``transformers.GPT2LMHeadModel.from_pretrained`` and
  :func:`~attnlayers.applications.gpt.checkpoint.load_hf_checkpoint` load it); with ``export_dir`` also a
  SavedModel (:func:`attnlayers.applications.gpt.export.export_gpt`).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from attnlayers.validation import non_negative_int, one_of, positive_int
from ..core.runs.cli import budget_epochs
from ..core.runs.recipe import PROGRESS_SECONDS

CHECKPOINT_DIR, TOKENIZER_DIR = "checkpoint", "tokenizer"
DEFAULT_OUT = os.path.join("artifacts", "gpt", "kjv")
#: The held-out metric whose best epoch's weights are kept (exact and token-weighted, unlike "val_loss", keras' mean
#: of the batches' losses).
BEST_MONITOR = "val_perplexity"


def default_out(corpus):
    """The run's folder for ``--corpus``: artifacts/gpt/SLUG, the slug "kjv" for kjv (:data:`DEFAULT_OUT`), "tweets"
    for tweets, the file's stem for text:PATH (text:~/notes/My Book.txt -> "my-book": lower case, runs of other
    characters than letters, digits, "." and "_" as one "-"), the parts' slugs joined by "+" for several
    (kjv+text:psalms.txt -> "kjv+psalms")."""
    import re

    def slug(part):
        scheme, _, path = part.partition(":")
        if scheme != "text" or not path:
            return part
        stem = os.path.splitext(os.path.basename(os.path.normpath(os.path.expanduser(path))))[0]
        return re.sub(r"[^a-z0-9._]+", "-", stem.lower()).strip("-.") or "text"

    return os.path.join("artifacts", "gpt", "+".join(slug(part) for part in corpus.split("+")))


@dataclasses.dataclass
class TrainingSettings:
    """A training run's settings (the defaults: the recommended run for 2 CPU cores and 15 minutes).

    Attributes:
        config: the :data:`~attnlayers.applications.gpt.GPT_PRESETS` size ("tiny": 2 layers, d 128, 2 heads, d_ff
            512), with the tokenizer's vocabulary and ``sequence_length`` positions.
        vocabulary_size: the most BPE tokens (256 bytes + <|endoftext|> + merges); small, because the tied output
            layer is most of tiny's compute (benchmarks/README.md, GPT).
        sequence_length: L, tokens per window (the model's position table).
        batch_size: windows per step.
        learning_rate: AdamW's peak. warmup_fraction: the share of the run spent warming up.
        weight_decay: AdamW's decoupled decay (GPT-3's 0.1), on weight matrices only.
        dropout: GPT-2's 0.1 regularizes long runs; a run of a few epochs underfits, so none by default.
        held_out: the share of documents held out.
        minutes: the training budget, or None. epochs: passes over the training windows (None: 10, or as many as
            the budget allows).
        backup_every: back up every this many steps (and at epoch ends); None: every few minutes
            (``core.training.callbacks.BACKUP_SECONDS``).
        jit_compile: compile the training step with XLA (``Model.compile``'s flag).
        seed: the split, the shuffling, the initialization and the samples.
        vocabulary_padding: GPTConfig's: the output projection holds the vocabulary rounded up to a multiple of
            this (1: none; 128 on accelerators). The checkpoint keeps the real vocabulary.
        loss_chunk_size: None: the loss from the logits; an int: the chunked loss from the hidden states, this many
            tokens a chunk (:func:`causal_lm_loss`).
        position: "learned" (GPT) or "transformer_xl": a :class:`~attnlayers.applications.gpt.transformer_xl.
            TransformerXL` of the same sizes (relative positions in every block, a memory kept between batches),
            trained on the stateful order (:func:`~attnlayers.applications.gpt.data.stateful_windows`), evaluated
            also with memories of 0, 1x and 4x the segment, and saved as OUT/model.keras.
        memory_length: "transformer_xl": M, the training memory (None: ``sequence_length``).
    """

    config: str = "tiny"
    vocabulary_size: int = 4096
    sequence_length: int = 128
    batch_size: int = 16
    learning_rate: float = 2e-3
    warmup_fraction: float = 0.05
    weight_decay: float = 0.1
    dropout: float = 0.0
    held_out: float = 0.05
    minutes: float | None = None
    backup_every: int | None = None
    epochs: int | None = None
    jit_compile: bool = True
    seed: int = 0
    vocabulary_padding: int = 1
    loss_chunk_size: int | None = None
    position: str = "learned"
    memory_length: int | None = None

    def __post_init__(self):
        one_of(self.position, "position", ("learned", "transformer_xl"))
        if self.memory_length is not None:
            non_negative_int(self.memory_length, "memory_length")
        if self.position == "transformer_xl" and (self.loss_chunk_size is not None or self.vocabulary_padding != 1):
            raise ValueError("position='transformer_xl' computes its loss from the logits over the real vocabulary; "
                             "`loss_chunk_size` and `vocabulary_padding` are GPT's options (leave them unset).")
        for name in ("vocabulary_size", "sequence_length", "batch_size", "vocabulary_padding"):
            positive_int(getattr(self, name), name)
        positive_int(self.loss_chunk_size, "loss_chunk_size", allow_none=True)
        positive_int(self.epochs, "epochs", allow_none=True)
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"`minutes` must be a positive number or None; received minutes={self.minutes!r}.")
        if not 0.0 < self.held_out < 1.0:
            raise ValueError(f"`held_out` must be in (0, 1); received held_out={self.held_out!r}.")


def causal_lm_loss(chunk_size=None):
    """The next-token cross-entropy averaged over the real labels of a batch: ``sum_t w_t NLL_t / sum_t w_t`` with
    the padding mask as the sample weight ``w`` (Keras' "mean_with_sample_weight" reduction; scaled for the
    replicas of a ``tf.distribute`` strategy by Keras). Computed in float32 whatever the logits' dtype.

    ``chunk_size`` None: from the logits (any model). An int: the same loss, which a :class:`GPT` computes in
    training from its hidden states ``chunk_size`` tokens at a time without forming the (B, T, V) logits
    (:class:`~attnlayers.applications.core.training.losses.ChunkedCrossEntropy`; equal to float32 rounding)."""
    import keras

    if chunk_size is not None:
        from ..core.training.losses import ChunkedCrossEntropy

        return ChunkedCrossEntropy(chunk_size, name="causal_lm_loss")
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight",
                                                      name="causal_lm_loss")


def compile_for_training(model, settings):
    """Compiles ``model`` (ours or keras-hub's GPT2CausalLM) with the run's loss, perplexity metric and AdamW
    (learning rate set by :class:`BudgetedCosineLearningRate`; returned). Call it under the strategy's scope."""
    from ..core.training.metrics import Perplexity
    from ..core.training.optimizers import BudgetedCosineLearningRate, decoupled_adamw

    model.compile(optimizer=decoupled_adamw(settings.learning_rate, settings.weight_decay),
                  loss=causal_lm_loss(settings.loss_chunk_size), weighted_metrics=[Perplexity()],
                  jit_compile=settings.jit_compile)
    seconds = None if settings.minutes is None else settings.minutes * 60.0
    return BudgetedCosineLearningRate(settings.learning_rate, settings.warmup_fraction, seconds=seconds)


def training_tokenizer(train_texts, vocabulary_size, directory, vocabulary=None):
    """The tokenizer: ``vocabulary`` (a directory holding vocab.json and merges.txt) when given, else a byte-level
    BPE trained on ``train_texts`` and written to ``directory``. Returns ``(tokenizer, vocab.json, merges.txt)``."""
    from .checkpoint import MERGES_FILE, VOCABULARY_FILE
    from .tokenizer import GPT2Tokenizer, train_byte_level_bpe

    if vocabulary is None:
        paths = train_byte_level_bpe(train_texts, vocabulary_size, directory)
    else:
        paths = tuple(os.path.join(vocabulary, name) for name in (VOCABULARY_FILE, MERGES_FILE))
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(f"`vocabulary` {os.fspath(vocabulary)!r} has no {os.path.basename(path)}; expected a "
                                 "directory holding a GPT-2 tokenizer's vocab.json and merges.txt.")
    return GPT2Tokenizer(*paths), paths[0], paths[1]


def plot_perplexity_curves(history, baseline, path, kept_epoch=None):
    """Training and held-out perplexity per epoch, with the unigram baseline and, when given, the (1-based) epoch
    whose weights were kept, as a PNG (log scale); returns the path (None when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(6, 4))
    for key, style, name in (("perplexity", "-o", "training"), ("val_perplexity", "-s", "held out")):
        values = history.get(key)
        if values:
            axis.plot(range(1, len(values) + 1), values, style, markersize=3, label=name)
    if baseline is not None:
        axis.axhline(baseline, color="gray", linestyle="--", label="unigram (held out)")
    if kept_epoch is not None:
        axis.axvline(kept_epoch, color="green", linestyle=":", label=f"kept: epoch {kept_epoch}")
    axis.set_yscale("log")
    axis.set_xlabel("epoch")
    axis.set_ylabel("perplexity (tokens)")
    axis.set_title("GPT language model")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def sample_continuations(model, tokenizer, held_ids, count=3, prompt_tokens=12, new_tokens=48, seed=0):
    """``count`` held-out documents' first ``prompt_tokens`` tokens continued by ``new_tokens`` tokens of nucleus
    sampling (top-p 0.9), stopping at <|endoftext|>: a list of ``{"prompt", "continuation"}`` strings."""
    documents = [ids for ids in held_ids if len(ids) >= prompt_tokens][:count]
    if not documents:
        return []
    prompts = np.stack([ids[:prompt_tokens] for ids in documents]).astype(np.int32)
    length = min(prompt_tokens + new_tokens, getattr(model.config, "max_sequence_length", prompt_tokens + new_tokens))
    tokens = np.asarray(model.generate(prompts, length, "top_p", seed).tokens)
    samples = []
    for prompt, row in zip(prompts, tokens):
        new = list(row[prompt_tokens:])
        if tokenizer.end_token_id in new:
            new = new[:new.index(tokenizer.end_token_id)]

        def text(ids):
            return tokenizer.detokenize(np.asarray(ids, np.int32)).numpy().decode("utf-8", "replace") if ids else ""

        samples.append({"prompt": text(list(prompt)), "continuation": text(new)})
    return samples


def save_checkpoint(model, directory, vocabulary, merges):
    """The model as a Hugging Face GPT-2 checkpoint with its tokenizer (config.json, model.safetensors,
    vocab.json, merges.txt, and a tokenizer_config.json for ``transformers.AutoTokenizer``)."""
    from .checkpoint import save_hf_checkpoint
    from .tokenizer import END_OF_TEXT, TOKENIZER_CONFIG_FILE

    save_hf_checkpoint(model, directory, vocabulary=vocabulary, merges=merges)
    with open(os.path.join(directory, TOKENIZER_CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False, "bos_token": END_OF_TEXT,
                   "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT,
                   "model_max_length": model.config.max_sequence_length}, f, indent=2)
        f.write("\n")
    return directory


def export_saved_model(model, tokenizer, directory):
    """The hook of ``--export``: :func:`attnlayers.applications.gpt.export.export_gpt` (a SavedModel that serves
    strings); raises a ValueError saying so when that module is not there."""
    try:
        from .export import export_gpt
    except ImportError as error:
        raise ValueError(f"the SavedModel export (attnlayers.applications.gpt.export.export_gpt) is not available: "
                         f"{error}") from None
    export_gpt(directory, model, tokenizer, model.config.max_sequence_length)
    return directory


def _trainable_count(model):
    """The number of trained weights (a TransformerXL's memory variables are weights too, not trained)."""
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def _transformer_xl(config, settings):
    """A :class:`~attnlayers.applications.gpt.transformer_xl.TransformerXL` of ``config``'s sizes (a GPTConfig) for
    ``settings``' batch, segment and memory."""
    from .transformer_xl import TransformerXL, TransformerXLConfig

    memory = settings.sequence_length if settings.memory_length is None else settings.memory_length
    return TransformerXL(TransformerXLConfig(
        vocabulary_size=config.vocabulary_size, segment_length=settings.sequence_length, memory_length=memory,
        batch_size=settings.batch_size, num_layers=config.num_layers, num_heads=config.num_heads,
        hidden_dim=config.hidden_dim, intermediate_dim=config.intermediate_dim, dropout=config.dropout,
        layer_norm_epsilon=config.layer_norm_epsilon, end_token_id=config.end_token_id,
        pad_token_id=config.pad_token_id))


def _whole_batches(windows, mask, batch_size, pad_token_id):
    """The windows followed by fully masked ones (weight 0 at every label) up to a multiple of ``batch_size``: with
    ``drop_remainder`` every held-out token is still evaluated, and the perplexity stays exact."""
    extra = -len(windows) % batch_size
    return (np.concatenate([windows, np.full((extra, windows.shape[1]), pad_token_id, windows.dtype)]),
            np.concatenate([mask, np.zeros((extra, mask.shape[1]), bool)]))


def run_training(settings, out_dir, *, documents=None, vocabulary=None, strategy=None, verbose=1,
                 results_file="results.json", record=None, tensorboard=True, backup=True, corpus="kjv",
                 export_dir=None, samples=3, callbacks=(), viewer=False):
    """Trains a GPT on ``documents`` and saves it as a Hugging Face checkpoint in ``out_dir/checkpoint``.

    Args:
        settings: a :class:`TrainingSettings`.
        out_dir: the run's folder: results_file, curves.png, tokenizer/ (the trained BPE), checkpoint/, TensorBoard
            logs/ and the BackupAndRestore backup/.
        documents: the documents (strings, or lists of sentences joined by newlines); None: the KJV
            (``core.inputs.corpora.bible_documents()``).
        vocabulary: a directory holding a vocab.json and merges.txt to use instead of training a BPE.
        strategy: the ``tf.distribute`` strategy (None: the default one).
        verbose: ``fit``'s verbosity; with a time budget (``settings.minutes``), 1 and 2 print
            ``core.ProgressLog``'s lines instead (an epoch's steps, the step and the time against the budget, and
            the metrics: at each epoch's end, and with 1 also every ``core.runs.recipe.PROGRESS_SECONDS`` seconds
            mid-epoch).
        results_file, record: see :func:`~attnlayers.applications.core.run_recipe`.
        tensorboard, backup: add those callbacks.
        corpus: the corpus' name for the record.
        export_dir: where :func:`export_saved_model` writes a SavedModel, or None.
        samples: how many held-out prompts to continue at the end.
        callbacks: more callbacks for ``fit``.
        viewer: also write viewer.html, the interactive attention viewer (:mod:`attnlayers.viewer`) of a held-out
            prompt (a document's first 12 tokens) and 24 greedy tokens after it.

    Returns:
        ``run_recipe``'s result (its "weights": the kept epoch, by :data:`BEST_MONITOR`) with "held_out"
        (perplexity, loss, tokens, and "epoch": the kept weights' 1-based epoch, None if none was validated),
        "baselines" (unigram perplexity on the held-out and training labels), "samples" and "export" (the
        checkpoint folder, and the SavedModel's).
    """
    import tensorflow as tf

    from ..core import BestWeights, describe_runtime, run_recipe, standard_callbacks, static_shapes
    from ..core.runs.recipe import describe_vocabulary
    from ..core.inputs.corpora import split_documents
    from . import data
    from .model import GPT, GPTConfig

    strategy = strategy or tf.distribute.get_strategy()
    if documents is None:
        from ..core.inputs.corpora import bible_documents

        documents = bible_documents()
    texts = data.document_texts(documents)
    if len(texts) < 2:
        raise ValueError(f"`documents` holds {len(texts)} document(s); training needs at least 2 (one is held out).")
    train_texts, held_texts = split_documents(texts, held_out=settings.held_out, seed=settings.seed)
    os.makedirs(out_dir, exist_ok=True)
    tokenizer, vocab_path, merges_path = training_tokenizer(
        train_texts, settings.vocabulary_size, os.path.join(out_dir, TOKENIZER_DIR), vocabulary)
    end = tokenizer.end_token_id
    train_ids, held_ids = data.tokenize_documents(train_texts, tokenizer), data.tokenize_documents(held_texts, tokenizer)
    xl = settings.position == "transformer_xl"
    if xl and (viewer or export_dir is not None):
        raise ValueError("position='transformer_xl' saves OUT/model.keras; the attention viewer and the SavedModel "
                         "export are GPT's (leave `viewer` and `export_dir` unset).")
    if xl:  # Transformer-XL's stateful order: batch s + 1 continues batch s row by row, unshuffled
        train_windows, held_windows = (data.stateful_windows(data.token_stream(ids, end), settings.batch_size,
                                                             settings.sequence_length, end)
                                       for ids in (train_ids, held_ids))
        train, held = (data.stateful_dataset(*w, settings.batch_size) for w in (train_windows, held_windows))
    else:
        train_windows = data.lm_windows(data.token_stream(train_ids, end), settings.sequence_length, end)
        held_windows = data.lm_windows(data.token_stream(held_ids, end), settings.sequence_length, end)
        static = static_shapes(strategy)  # a TPU (and XLA under JAX) compiles static batches only
        train = data.lm_dataset(*train_windows, settings.batch_size, seed=settings.seed, drop_remainder=static)
        held = data.lm_dataset(*(_whole_batches(*held_windows, settings.batch_size, end) if static else held_windows),
                               settings.batch_size, drop_remainder=static)
    counts = data.label_counts(*train_windows, tokenizer.vocabulary_size)
    held_labels = data.lm_examples(*held_windows)[1][held_windows[1][:, 1:]]
    config = GPTConfig.preset(settings.config, vocabulary_size=tokenizer.vocabulary_size,
                              max_sequence_length=settings.sequence_length, dropout=settings.dropout,
                              end_token_id=end, pad_token_id=end, vocabulary_padding=settings.vocabulary_padding)
    with strategy.scope():
        model = _transformer_xl(config, settings) if xl else GPT(config)
        schedule = compile_for_training(model, settings)
    kind = (f"Transformer-XL (memory {model.config.memory_length}, relative positions)" if xl else "GPT")
    print(f"data: {len(train_texts)} training / {len(held_texts)} held-out documents, {int(counts.sum()):,} / "
          f"{len(held_labels):,} label tokens, {len(train_windows[0]):,} / {len(held_windows[0]):,} windows of "
          f"{settings.sequence_length} + 1; "
          f"{describe_vocabulary(tokenizer.vocabulary_size, None if vocabulary else settings.vocabulary_size, 'BPE')}"
          f"; model: {kind} "
          f"{settings.config} ({config.num_layers} layers, d {config.hidden_dim}, {config.num_heads} heads), "
          f"{_trainable_count(model) if xl else config.parameter_count():,} parameters; {describe_runtime(strategy)}",
          flush=True)
    baselines = {"unigram_perplexity": data.unigram_perplexity(counts, held_labels),
                 "unigram_training_perplexity": data.unigram_perplexity(counts, np.repeat(np.arange(len(counts)),
                                                                                          counts))}

    best = BestWeights(BEST_MONITOR)  # restores the best epoch's weights when training ends

    def kept_epoch():
        return None if best.best_epoch is None else best.best_epoch + 1

    def evaluate(model):
        if xl:
            model.reset_memory()  # the held-out text from its start, not after the training text's end
        scores = model.evaluate(held, return_dict=True, verbose=0)
        held_out = {"perplexity": float(scores["perplexity"]), "loss": float(scores["loss"]),
                    "tokens": len(held_labels), "epoch": kept_epoch()}
        if xl:  # the held-out text read with evaluation memories of 0, 1x and 4x the segment
            from .transformer_xl import memory_perplexity

            held_out["memory_perplexity"] = {
                m: memory_perplexity(model, *held_windows, settings.batch_size, m)["perplexity"]
                for m in (0, settings.sequence_length, 4 * settings.sequence_length)}
            print("held out, Transformer-XL with an evaluation memory of " + ", ".join(
                f"{m}: perplexity {p:.2f}" for m, p in held_out["memory_perplexity"].items()), flush=True)
        kept = "" if held_out["epoch"] is None else f", the weights of epoch {held_out['epoch']}, its best"
        print(f"held out ({held_out['tokens']:,} tokens of {len(held_texts)} documents{kept}): loss "
              f"{held_out['loss']:.4f}, perplexity {held_out['perplexity']:.2f} (unigram baseline "
              f"{baselines['unigram_perplexity']:.2f}; the unigram model on its own training tokens: "
              f"{baselines['unigram_training_perplexity']:.2f})", flush=True)
        continuations = sample_continuations(model, tokenizer, held_ids, count=samples, seed=settings.seed)
        for sample in continuations:
            print(f"--- held-out prompt: {sample['prompt']!r}\n    sampled (top-p 0.9): {sample['continuation']!r}")
        return {"held_out": held_out, "baselines": dict(baselines), "samples": continuations}

    def pictures(model, out):
        path = plot_perplexity_curves(model.history.history, baselines["unigram_perplexity"],
                                      os.path.join(out, "curves.png"), kept_epoch())
        paths = [path] if path else []
        prompt = next((ids[:12] for ids in held_ids if len(ids)), None)
        if viewer and prompt is not None:
            from .viewer import attention_viewer

            paths.append(os.path.join(out, "viewer.html"))
            text = tokenizer.detokenize(np.asarray(prompt, np.int32)).numpy().decode("utf-8", "replace")
            attention_viewer(model, tokenizer, text, paths[-1], max_new_tokens=24)
        if paths:
            print(f"wrote {', '.join(paths)}")
        return paths

    def export(model, out):
        if xl:
            path = os.path.join(out, "model.keras")
            model.save(path)
            print(f"saved {path} (keras.saving.load_model; its memory variables included)")
            return {"keras": path}
        directory = save_checkpoint(model, os.path.join(out, CHECKPOINT_DIR), vocab_path, merges_path)
        print(f"saved a Hugging Face GPT-2 checkpoint in {directory} (load_hf_checkpoint, "
              "transformers.GPT2LMHeadModel.from_pretrained)")
        exported = {"checkpoint": directory}
        if export_dir is not None:
            exported["saved_model"] = export_saved_model(model, tokenizer, export_dir)
            print(f"exported a SavedModel in {export_dir}")
        return exported

    record = {"task": "language_model", "corpus": corpus, **dataclasses.asdict(settings),
              "train_documents": len(train_texts), "held_out_documents": len(held_texts),
              "vocabulary": tokenizer.vocabulary_size, "train_windows": len(train_windows[0]),
              "held_out_windows": len(held_windows[0]), "runtime": describe_runtime(strategy), **(record or {})}
    # With a budget, fit's epoch count is a bound nobody reaches ("Epoch 1/100000"): the progress lines say the
    # step and the time against the budget instead.
    progress = settings.minutes is not None and verbose in (1, 2)
    fit_callbacks = standard_callbacks(out_dir if (tensorboard or backup) else None, minutes=settings.minutes,
                                       backup_every=settings.backup_every,
                                       tensorboard=tensorboard, backup=backup, best=best,
                                       progress=progress and (PROGRESS_SECONDS if verbose == 1 else True))
    if xl:
        from .transformer_xl import ResetMemory

        fit_callbacks.append(ResetMemory())  # each epoch and each evaluation reads its text from the start
    return run_recipe(model, train, validation=held, epochs=budget_epochs(settings.epochs, settings.minutes, 10),
                      callbacks=fit_callbacks + [schedule, *callbacks], evaluate=evaluate, pictures=pictures,
                      export=export, out_dir=out_dir, record=record, verbose=0 if progress else verbose,
                      strategy=strategy, results_file=results_file)


__all__ = ["BEST_MONITOR", "CHECKPOINT_DIR", "DEFAULT_OUT", "TOKENIZER_DIR", "TrainingSettings", "causal_lm_loss",
           "compile_for_training", "default_out", "export_saved_model", "plot_perplexity_curves", "run_training",
           "sample_continuations", "save_checkpoint", "training_tokenizer"]
