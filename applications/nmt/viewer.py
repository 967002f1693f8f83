"""A translator's attention in the interactive viewer (:mod:`attnlayers.viewer`), in one call.

    viewer = attention_viewer(model, tokenizers, "Ich habe keine Zeit.", "out/viewer.html")

TensorFlow (the tokenizers); the models themselves are backend-agnostic.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from attnlayers.deprecation import renamed_keyword
from attnlayers.viewer import AttentionViewer

from . import evaluate
from .model import TransformerTranslator


def attention_maps(model, source_ids, target_in_ids):
    """Every attention map of ``model`` under teacher forcing, as NumPy arrays (batch first).

    Returns:
        A dict: the RNN models ``{"alignment": (B, T, S)}``; the Transformer ``{"encoder self-attention":
        (B, L, N, S, S), "decoder self-attention": (B, L, N, T, T), "cross-attention": (B, L, N, T, S)}``. Empty for
        the model without attention.
    """
    if not isinstance(model, TransformerTranslator):
        maps = model.attention_maps(source_ids, target_in_ids)
        return {} if maps is None else {"alignment": np.asarray(maps)}
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_in = tf.convert_to_tensor(target_in_ids, tf.int32)
    mask = tf.not_equal(source_ids, model.pad_token_id)
    encoded = model.encoder(model.source_embedding(source_ids), padding_mask=mask, return_attention_scores=True)
    decoded = model.decoder(model.target_embedding(target_in), encoded["sequence_output"],
                            decoder_padding_mask=tf.not_equal(target_in, model.pad_token_id),
                            encoder_padding_mask=mask, return_attention_scores=True)

    def stack(maps):
        return np.stack([np.asarray(m) for m in maps], axis=1)

    return {
        "encoder self-attention": stack(encoded["attention_scores"]),
        "decoder self-attention": stack([s["self_attention"] for s in decoded["attention_scores"]]),
        "cross-attention": stack([s["cross_attention"] for s in decoded["attention_scores"]]),
    }


@renamed_keyword("strategy", "search")
def attention_viewer(model, tokenizers, source, path=None, *, target=None, max_length=64, search="greedy",
                     title=None):
    """The attention of ``model`` translating ``source`` as an :class:`~attnlayers.viewer.AttentionViewer`.

    ``source`` is translated (``search``, greedy by default) unless ``target`` is given; the maps are then read
    under teacher forcing on the pair, as :func:`evaluate.alignment` reads them: the RNN models' alignment (T, S)
    (the matrix view, Bahdanau et al. 2015, Fig. 3); the Transformer's encoder self-attention, decoder
    self-attention and cross-attention, every layer and head. Cross-attention rows are the predicted pieces (the
    target's, then [END]); decoder self-attention runs over the decoder's inputs ([START] and the target's pieces).

    Args:
        model: a trained translator (any of ``nmt.MODELS`` but "seq2seq", which has no attention).
        tokenizers: its :class:`~attnlayers.applications.nmt.Tokenizers`.
        source: one source sentence (str).
        path: where to write the page (None: not written).
        target: the target sentence to force (default: the model's own translation).
        max_length: source and target are cut at this many pieces.
        search: the decoding search for the translation.
        title: the page's title (default: the model's name and the sentence pair).

    Returns:
        The viewer (``viewer.sets`` holds the maps); written to ``path`` when given.

    Raises:
        ValueError: a model without attention, or a source that is not one string.
    """
    if not isinstance(source, str):
        raise ValueError(f"`source` must be one sentence (a str); received {type(source).__name__}.")
    if target is None:
        target = evaluate.translate(model, tokenizers, [source], max_source_length=max_length, max_length=max_length,
                                    search=search, warn_truncation=False)[0]
    source_ids = tokenizers.source.tokenize(tf.constant([source]))[:, :max_length].to_tensor()
    target_ids = tokenizers.target.tokenize(tf.constant([target]))[:, : max_length - 1].to_tensor()
    target_in = tf.concat([tf.fill([1, 1], model.start_token_id), tf.cast(target_ids, tf.int32)], axis=1)
    maps = attention_maps(model, tf.cast(source_ids, tf.int32), target_in)
    if not maps:
        raise ValueError(f"model {model.name!r} has no attention to show.")

    def pieces(tokenizer, ids):
        return evaluate._readable([p.decode() for p in tokenizer.id_to_token(ids[0]).numpy()])

    source_pieces = pieces(tokenizers.source, source_ids)
    target_pieces = pieces(tokenizers.target, target_ids)
    outputs, inputs = target_pieces + ["[END]"], ["[START]"] + target_pieces
    viewer = AttentionViewer(title or f"{model.name}: {source} \u2192 {target}")
    for name, weights in maps.items():
        weights = weights[0]
        if name == "encoder self-attention":
            viewer.add_attention(name, weights, source_pieces)
        elif name == "decoder self-attention":
            viewer.add_attention(name, weights, inputs)
        else:
            viewer.add_attention(name, weights, source_tokens=source_pieces, target_tokens=outputs)
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_maps", "attention_viewer"]
