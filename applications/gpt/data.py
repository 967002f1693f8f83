"""Language-model data for GPT training: documents -> one token stream -> fixed-length windows -> (x, y, weight)
batches, and the unigram baseline.

    texts = document_texts(bible_documents())                          # a chapter a document, a verse a line
    ids = tokenize_documents(texts, tokenizer)                         # list of (n_i,) int32 arrays
    windows, mask = lm_windows(token_stream(ids, tokenizer.end_token_id), 128, tokenizer.end_token_id)
    dataset = lm_dataset(windows, mask, batch_size=16, seed=0)         # ({"token_ids", "padding_mask"}, y, w)

The stream is ``<|endoftext|> d_1 <|endoftext|> d_2 <|endoftext|> ... d_n <|endoftext|>`` (GPT-2's document
separator; the first one is only context, so every document's first token is predicted from a document start and
every document's end is predicted too). It is cut into windows of ``L + 1`` tokens that overlap by one, starting
every ``L`` tokens: window k is ``stream[kL : kL + L + 1]``, its input the first L tokens and its labels the last
L (the labels shifted by one). Why this choice:

- every token of the stream after the first is a label exactly once, so an epoch is one pass over the corpus and
  the held-out perplexity is over every held-out token once (no token scored twice, none skipped at window edges,
  as non-overlapping windows of L + 1 would skip one per window);
- windows are packed across documents (GPT-2's and nanoGPT's training data), so no compute goes to padding: only
  the very last window is padded (with the end token, GPT-2's padding id) and its padding is masked out by the
  padding mask, never by id (the end token is a real label at every document's end);
- a window that starts mid-document sees no context before its start: the model learns from contexts of every
  length 1..L, as it is used when generating.
"""

from __future__ import annotations


import numpy as np

from attnlayers.validation import positive_int


def document_texts(documents, separator="\n"):
    """Documents given as lists of sentences (``bible_documents()``: a chapter of verses) as one string each,
    the sentences joined by ``separator`` (a newline: a verse a line). Strings are kept as they are."""
    return [document if isinstance(document, str) else separator.join(document) for document in documents]


def read_text_documents(path):
    """The documents of a UTF-8 text file: blocks of lines separated by blank lines, each block one document (its
    lines kept, joined by newlines). Raises ValueError naming the file when it holds fewer than 2 documents."""
    from ..core.inputs.corpora import text_file_documents

    return ["\n".join(lines) for lines in text_file_documents(path)]


def tokenize_documents(texts, tokenizer, chunk=64):
    """Each text's token ids (a list of int32 NumPy arrays), ``chunk`` texts per tokenizer call."""
    ids = []
    for start in range(0, len(texts), chunk):
        ragged = tokenizer.tokenize(list(texts[start:start + chunk]))
        ids += [np.asarray(row, np.int32) for row in ragged.to_list()]
    return ids


def token_stream(documents_ids, end_token_id):
    """``[end] d_1 [end] d_2 [end] ... d_n [end]`` as one int32 array (S,)."""
    end = np.asarray([end_token_id], np.int32)
    parts = [end]
    for ids in documents_ids:
        parts += [np.asarray(ids, np.int32), end]
    return np.concatenate(parts)


def lm_windows(stream, sequence_length, pad_token_id):
    """The stream cut into windows of ``L + 1`` tokens overlapping by one (window k: ``stream[kL : kL + L + 1]``);
    the last one padded with ``pad_token_id``.

    Args:
        stream: (S,) int ids, S >= 2.
        sequence_length: L, the model's input length.
        pad_token_id: the id written after the stream's end.

    Returns:
        ``(windows, mask)``: (N, L + 1) int32 and (N, L + 1) bool (True at real tokens), N = ceil((S - 1) / L).
    """
    length = positive_int(sequence_length, "sequence_length")
    stream = np.asarray(stream, np.int32)
    if stream.ndim != 1 or len(stream) < 2:
        raise ValueError(f"`stream` must be a 1-D array of at least 2 token ids; received shape {stream.shape}.")
    count = -(-(len(stream) - 1) // length)
    padded = np.full(count * length + 1, pad_token_id, np.int32)
    padded[:len(stream)] = stream
    real = np.zeros(len(padded), bool)
    real[:len(stream)] = True
    index = np.arange(count)[:, None] * length + np.arange(length + 1)[None, :]
    return padded[index], real[index]


def lm_examples(windows, mask):
    """Windows -> ``(x, y, sample_weight)`` NumPy arrays: x = ``{"token_ids": w[:, :-1], "padding_mask":
    m[:, :-1]}`` (B, L), y = ``w[:, 1:]`` (the next tokens), sample_weight = ``m[:, 1:]`` as float32 (1 at real
    labels, 0 at padding)."""
    windows, mask = np.asarray(windows, np.int32), np.asarray(mask, bool)
    x = {"token_ids": windows[:, :-1], "padding_mask": mask[:, :-1]}
    return x, windows[:, 1:], mask[:, 1:].astype(np.float32)


def lm_dataset(windows, mask, batch_size, seed=None, drop_remainder=False):
    """A ``tf.data.Dataset`` of :func:`lm_examples` batches; epoch e shuffled in (``seed``, e)'s order (None: in order;
    ``core.inputs.data_order``).
    The last batch may be smaller, unless ``drop_remainder`` drops it (every batch (batch_size, L): static shapes,
    as TPUs and ``jit_compile`` want)."""
    import tensorflow as tf

    x, y, weights = lm_examples(windows, mask)
    from ..core.inputs import data_order

    # Shuffled: epoch e in (seed, e)'s order, whichever process draws it (core.inputs.data_order).
    dataset = data_order.shuffled_slices((x, y, weights), 0 if seed is None else seed, shuffle=seed is not None)
    batched = dataset.batch(positive_int(batch_size, "batch_size"), drop_remainder=bool(drop_remainder))
    return batched.prefetch(tf.data.AUTOTUNE)


def stateful_windows(stream, batch_size, segment_length, pad_token_id):
    """The stateful order of Transformer-XL's training (Dai et al. 2019, section 3.2): the stream split into B
    contiguous streams, each cut into segments of T, so that row b of batch s + 1 continues row b of batch s.

    Stream b holds labels ``[b n, (b + 1) n)`` of the stream's S - 1 labels, n = ceil((S - 1) / B) (the last streams
    padded); each is cut as :func:`lm_windows` cuts a stream (windows of T + 1 overlapping by one), so every label is
    a label exactly once and a segment's first input token is the previous segment's last label.

    Args:
        stream: (S,) int ids, S >= 2. batch_size: B. segment_length: T. pad_token_id: written after each stream's end.

    Returns:
        ``(windows, mask)``: (K B, T + 1) int32 and bool (True at real tokens), K = ceil(n / T) steps; row
        ``s B + b`` is segment s of stream b. Batch them in this order, unshuffled (:func:`stateful_dataset`).
    """
    batch_size = positive_int(batch_size, "batch_size")
    length = positive_int(segment_length, "segment_length")
    stream = np.asarray(stream, np.int32)
    if stream.ndim != 1 or len(stream) < 2:
        raise ValueError(f"`stream` must be a 1-D array of at least 2 token ids; received shape {stream.shape}.")
    labels = len(stream) - 1
    per_stream = -(-labels // batch_size)
    steps = max(1, -(-per_stream // length))
    windows = np.full((steps, batch_size, length + 1), pad_token_id, np.int32)
    mask = np.zeros((steps, batch_size, length + 1), bool)
    for b in range(batch_size):
        part = stream[b * per_stream:min((b + 1) * per_stream, labels) + 1]
        if len(part) < 2:  # more streams than labels: this row stays padding (weight 0)
            continue
        w, m = lm_windows(part, length, pad_token_id)
        windows[:len(w), b], mask[:len(w), b] = w, m
    return windows.reshape(-1, length + 1), mask.reshape(-1, length + 1)


def stateful_dataset(windows, mask, batch_size):
    """A ``tf.data.Dataset`` of :func:`lm_examples` batches of :func:`stateful_windows`, in order (no shuffling:
    batch s + 1 continues batch s row by row), every batch ``batch_size`` rows."""
    if len(windows) % batch_size:
        raise ValueError(f"`windows` must hold whole batches of batch_size={batch_size} rows (stateful_windows "
                         f"makes them); received {len(windows)} rows.")
    return lm_dataset(windows, mask, batch_size, seed=None, drop_remainder=True)


def label_counts(windows, mask, vocabulary_size):
    """How often each id is a (real) label of the windows: a (V,) int64 array."""
    _, y, weights = lm_examples(windows, mask)
    return np.bincount(y[weights > 0].astype(np.int64), minlength=vocabulary_size)


def unigram_perplexity(train_counts, labels):
    """The perplexity of a unigram model of the training labels on ``labels`` (any 1-D array of ids):
    ``exp(-mean_t log p(y_t))`` with add-one smoothing ``p(v) = (c_v + 1) / (N + V)`` (every id of the vocabulary,
    seen in training or not, gets a probability). The baseline a language model must beat: it knows how often each
    token occurs and nothing of context."""
    counts = np.asarray(train_counts, np.float64)
    log_p = np.log(counts + 1.0) - np.log(counts.sum() + len(counts))
    labels = np.asarray(labels, np.int64)
    return float(np.exp(-log_p[labels].mean())) if len(labels) else float("nan")


__all__ = ["document_texts", "label_counts", "lm_dataset", "lm_examples", "lm_windows", "read_text_documents",
           "stateful_dataset", "stateful_windows", "token_stream", "tokenize_documents", "unigram_perplexity"]
