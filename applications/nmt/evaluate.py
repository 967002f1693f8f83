"""Translating text with a trained model, corpus BLEU, and alignment pictures.

    texts = translate(model, tokenizers, ["Ich habe keine Zeit."], search=BeamSearch(4))
    bleu, hypotheses = evaluate_bleu(model, tokenizers, splits.test)         # sacrebleu, 0-100
    plot_alignment(model, tokenizers, source, reference, "alignment.png")     # Bahdanau et al. Fig. 3

TensorFlow's tf.data and tokenizers; the models themselves are backend-agnostic (under JAX, decoding runs
``model.generate`` directly instead of in a ``tf.function``).
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
import tensorflow as tf

from attnlayers.decoding import BeamSearch, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.validation import non_negative_int, positive_int

from ..core.evaluation.bleu import corpus_bleu
from .tokenizer import END_ID, PAD_ID, START_ID


__all__ = ["alignment", "alignment_accuracy", "encode_sources", "evaluate_bleu", "plot_alignment", "strip_special",
           "translate", "translate_ids"]


def encode_sources(tokenizer, texts, max_length):
    """Tokenizes ``texts`` into (B, max_length) int32 ids, truncating longer ones.

    Returns ``(ids, truncated)``: ``truncated`` (B,) bool marks the inputs that lost tokens.
    """
    texts = _check_texts(texts)
    max_length = non_negative_int(max_length, "max_length")
    ids = tokenizer.tokenize(tf.constant(texts, tf.string)) if texts else tf.ragged.constant([[]], tf.int32)[:0]
    lengths = ids.row_lengths().numpy()
    truncated = lengths > max_length
    ids = ids[:, :max_length].to_tensor(default_value=PAD_ID, shape=[len(texts), max_length])
    return tf.cast(ids, tf.int32), truncated


def _check_texts(texts):
    """``texts`` (a list / tuple / 1-D array or string tensor of str) as a list of str; else a ValueError naming it."""
    if isinstance(texts, (str, bytes)):
        raise ValueError("`texts` must be a list of strings, not one string; wrap it: [text].")
    if tf.is_tensor(texts) or isinstance(texts, np.ndarray):
        strings = texts.dtype == tf.string if tf.is_tensor(texts) else texts.dtype.kind in "UO"
        if not strings or len(texts.shape) != 1:
            raise ValueError(f"`texts` must be strings of shape (batch,); received dtype {texts.dtype.name} and shape "
                             f"{tuple(texts.shape)}.")
        texts = ([t.decode("utf-8", "replace") for t in texts.numpy().tolist()] if tf.is_tensor(texts)
                 else texts.tolist())
    if texts is None or not hasattr(texts, "__iter__"):
        raise ValueError(f"`texts` must be a list of strings (batch,); received {texts!r}.")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(f"`texts` must contain only strings; received texts[{bad[0]}]={texts[bad[0]]!r} "
                         f"({type(texts[bad[0]]).__name__}).")
    return texts


def _decode_function(model, max_length, search, jit_compile):
    if keras.backend.backend() != "tensorflow":  # JAX: generate runs its loop in ops.while_loop (compiled)
        return lambda ids: model.generate(np.asarray(ids), max_length, search)
    key = ("_nmt_decode", max_length, repr(search), jit_compile)
    cache = model.__dict__.setdefault("_nmt_decode_functions", {})
    if key not in cache:
        cache[key] = tf.function(lambda ids: model.generate(ids, max_length, search), jit_compile=jit_compile,
                                 reduce_retracing=True)
    return cache[key]


def strip_special(token_ids, *, start_id=START_ID, end_id=END_ID, pad_id=PAD_ID):
    """One decoded row -> its target ids, without [START] tokens, stopping at [END] / padding (as the export)."""
    out = []
    for t in token_ids:
        t = int(t)
        if t == start_id:
            continue
        if t in (end_id, pad_id):
            break
        out.append(t)
    return out


def _special_ids(model):
    end = model.end_token_id if model.end_token_id is not None else -1
    return dict(start_id=model.start_token_id, end_id=end, pad_id=model.pad_token_id)


@renamed_keyword("strategy", "search")
def translate_ids(model, source_ids, *, max_length=64, search="greedy", batch_size=100, jit_compile=False):
    """Decodes (N, S) source ids in batches -> list of N lists of target ids (the best beam for beam search)."""
    batch_size = positive_int(batch_size, "batch_size")
    max_length = model.generation_length(max_length)  # a named error here, not from inside the tf.function
    search = get_search(search)
    decode = _decode_function(model, max_length, search, jit_compile)
    special = _special_ids(model)
    results = []
    for start in range(0, len(source_ids), batch_size):
        tokens = np.asarray(decode(source_ids[start : start + batch_size]).tokens)
        if isinstance(search, BeamSearch):
            tokens = tokens[:, 0]
        results.extend(strip_special(row, **special) for row in tokens)
    return results


@renamed_keyword("strategy", "search")
def translate(model, tokenizers, texts, *, max_source_length=64, max_length=64, search="greedy",
              batch_size=100, warn_truncation=True, jit_compile=False):
    """Translates a list of strings.

    Empty strings translate to ""; characters the tokenizer never saw become [UNK] pieces; sources longer
    than ``max_source_length`` tokens are truncated with a warning naming them (``warn_truncation``).

    Returns:
        A list of strings, one per input.
    """
    texts = _check_texts(texts)
    max_source_length = positive_int(max_source_length, "max_source_length")
    batch_size = positive_int(batch_size, "batch_size")
    max_length = model.generation_length(max_length)
    ids, truncated = encode_sources(tokenizers.source, texts, max_source_length)
    if warn_truncation and truncated.any():
        which = np.flatnonzero(truncated).tolist()
        warnings.warn(
            f"{len(which)} input(s) longer than max_source_length={max_source_length} tokens were truncated "
            f"(indices {which[:10]}{'...' if len(which) > 10 else ''}).",
            stacklevel=2,
        )
    rows = translate_ids(model, ids, max_length=max_length, search=search, batch_size=batch_size,
                         jit_compile=jit_compile)
    if not rows:
        return []
    # One batched detokenize; rows are already cut at [END], so an empty row detokenizes to "".
    decoded = tokenizers.target.detokenize(tf.ragged.constant(rows, tf.int32, ragged_rank=1)).numpy()
    return ["" if not text.strip() else out.decode("utf-8") for text, out in zip(texts, decoded)]


@renamed_keyword("strategy", "search")
def evaluate_bleu(model, tokenizers, pairs, *, search="greedy", max_source_length=64, max_length=64,
                  batch_size=100):
    """Translates ``pairs.source`` and scores against ``pairs.target``: ``(bleu, hypotheses)``."""
    hypotheses = translate(model, tokenizers, list(pairs.source), max_source_length=max_source_length,
                           max_length=max_length, search=search, batch_size=batch_size, warn_truncation=False)
    return corpus_bleu(hypotheses, list(pairs.target)), hypotheses


def alignment(model, tokenizers, source, target, *, max_length=64):
    """The attention of ``model`` when it reads ``source`` and is fed ``target`` (teacher forcing).

    Returns ``(weights, source_pieces, target_pieces)``: weights (T, S) for the RNN models; for the
    Transformer a list over decoder layers of (heads, T, S). Rows are the target pieces followed by [END],
    columns the source pieces.
    """
    source_ids = tokenizers.source.tokenize(tf.constant([source]))[:, :max_length].to_tensor()
    target_ids = tokenizers.target.tokenize(tf.constant([target]))[:, : max_length - 1].to_tensor()
    target_in = tf.concat([tf.fill([1, 1], model.start_token_id), tf.cast(target_ids, tf.int32)], axis=1)
    maps = model.attention_maps(tf.cast(source_ids, tf.int32), target_in)
    if maps is None:
        raise ValueError(f"model {model.name!r} has no attention to plot.")
    source_pieces = [p.decode() for p in tokenizers.source.id_to_token(source_ids[0]).numpy()]
    target_pieces = [p.decode() for p in tokenizers.target.id_to_token(target_ids[0]).numpy()]
    source_pieces, target_pieces = _readable(source_pieces), _readable(target_pieces) + ["[END]"]
    if isinstance(maps, list):
        return [np.asarray(m)[0] for m in maps], source_pieces, target_pieces
    return np.asarray(maps)[0], source_pieces, target_pieces


def _readable(pieces, marker="\u2581"):
    """Drops SentencePiece's word-start marker when every piece is a whole word (word-level vocabularies)."""
    return [p[1:] for p in pieces] if all(p.startswith(marker) for p in pieces) else pieces


def plot_alignment(model, tokenizers, source, target, path, *, max_length=64):
    """Saves the alignment heatmap(s) of one sentence pair as PNG: one map for the RNN models (Bahdanau et
    al. 2015, Fig. 3), one figure per decoder layer with a panel per head for the Transformer (``path`` gets a
    ``_layer{i}`` suffix per layer). Returns the list of written paths."""
    from attnlayers import visualize

    weights, source_pieces, target_pieces = alignment(model, tokenizers, source, target, max_length=max_length)
    if not isinstance(weights, list):
        _close(visualize.plot_attention(weights, source_pieces, target_pieces, path=path,
                                        title=f"{model.name}: alignment"))
        return [str(path)]
    paths = []
    stem, dot, suffix = str(path).rpartition(".")
    for i, layer in enumerate(weights):
        out = f"{stem}_layer{i + 1}.{suffix}" if dot else f"{path}_layer{i + 1}"
        _close(visualize.plot_attention_heads(layer, source_pieces, target_pieces, path=out,
                                              title=f"{model.name}: decoder layer {i + 1} cross-attention"))
        paths.append(out)
    return paths


def _close(figure):
    import matplotlib.pyplot as plt

    plt.close(figure)


def alignment_accuracy(model, tokenizers, pairs, *, batch_size=200):
    """Share of target words whose strongest attention weight lands on their gold source word.

    For a task with known word alignments (``synthetic_pairs``: ``pairs.alignments[k][j]`` is the source word
    that target word j translates) and word-level tokenizers (``build_tokenizers(..., model_type="word")``,
    one piece per word). The weights are the model's under teacher forcing: row j is the attention used to
    predict target word j.

    Returns:
        A float in [0, 1] for the RNN models; for the Transformer, a list with one value per decoder layer
        (the heads' weights averaged).
    """
    if pairs.alignments is None:
        raise ValueError("alignment_accuracy needs pairs with gold `alignments` (e.g. synthetic_pairs()).")
    correct, total, per_layer = 0.0, 0, False
    for start in range(0, len(pairs), batch_size):
        chunk = pairs.select(range(start, min(start + batch_size, len(pairs))))
        source = tokenizers.source.tokenize(tf.constant(list(chunk.source)))
        target = tokenizers.target.tokenize(tf.constant(list(chunk.target)))
        words = [len(s.split()) for s in chunk.source], [len(t.split()) for t in chunk.target]
        if source.row_lengths().numpy().tolist() != words[0] or target.row_lengths().numpy().tolist() != words[1]:
            raise ValueError("alignment_accuracy needs one token per word: use tokenizers built with "
                             "model_type='word'.")
        target_in = tf.concat([tf.fill([len(chunk), 1], model.start_token_id), tf.cast(target.to_tensor(), tf.int32)],
                              axis=1)
        maps = model.attention_maps(tf.cast(source.to_tensor(), tf.int32), target_in)
        per_layer = isinstance(maps, list)
        # (layers, B, T, S): the RNN's single map, or each Transformer layer's head average.
        layers = np.stack([np.asarray(m).mean(axis=1) for m in maps] if per_layer else [np.asarray(maps)])
        hits = np.zeros(len(layers))
        for k, gold in enumerate(chunk.alignments):
            predicted = layers[:, k, : len(gold), : words[0][k]].argmax(axis=-1)  # (layers, T_k)
            hits += (predicted == np.asarray(gold)[None]).sum(axis=1)
            total += len(gold)
        correct = correct + hits
    accuracy = correct / max(total, 1)
    return accuracy.tolist() if per_layer else float(accuracy[0])
