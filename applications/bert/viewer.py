"""BERT's self-attention in the interactive viewer (:mod:`attnlayers.viewer`), in one call.

    viewer = attention_viewer(backbone, tokenizer, "the cat sat on the mat.", "out/viewer.html")
    viewer = attention_viewer(backbone, tokenizer, "the cat sat.", "out/pair.html", pair="it was tired.")

``attention_maps`` is keras ops (any backend); ``attention_viewer`` tokenizes with TensorFlow.
"""

from __future__ import annotations

import numpy as np

from attnlayers.viewer import AttentionViewer


def attention_maps(backbone, inputs):
    """Every layer's self-attention weights of a :class:`~attnlayers.applications.bert.BertBackbone`.

    Args:
        backbone: the BERT encoder.
        inputs: what the backbone takes: ``{"token_ids", "segment_ids", "padding_mask"}`` (B, T) or token ids.

    Returns:
        (B, L, N, T, T) float32 NumPy: layer l, head n, query t, key s (inference: no dropout).
    """
    token_ids, segment_ids, padding_mask = backbone._inputs(inputs)
    x = backbone.embeddings_layer_norm(backbone.embeddings(token_ids, segment_ids=segment_ids))
    out = backbone.encoder(x, padding_mask=padding_mask, return_attention_scores=True)
    return np.stack([np.asarray(a, dtype="float32") for a in out["attention_scores"]], axis=1)


def attention_viewer(backbone, tokenizer, text, path=None, *, pair=None, sequence_length=128, title=None):
    """The self-attention of ``backbone`` reading ``text`` (and ``pair``, BERT's sentence B) as an
    :class:`~attnlayers.viewer.AttentionViewer`: every layer and head over the real tokens ([CLS] A [SEP] (B
    [SEP]), padding left out), for the head and model views of bertviz (Vig 2019).

    Args:
        backbone: a :class:`~attnlayers.applications.bert.BertBackbone`.
        tokenizer: its :class:`~attnlayers.applications.bert.BertTokenizer`.
        text: sentence A (str).
        path: where to write the page (None: not written).
        pair: sentence B, or None.
        sequence_length: the packed length (longer inputs are cut as ``pack`` cuts them).
        title: the page's title.

    Returns:
        The viewer (``viewer.sets[0]["weights"]``: (L, N, T, T)); written to ``path`` when given.

    Raises:
        ValueError: ``text`` or ``pair`` not a string.
    """
    from .pretraining_data import pack

    for name, value in (("text", text), ("pair", pair)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"`{name}` must be a str; received {type(value).__name__}.")
    sequence_length = min(int(sequence_length), backbone.config.max_sequence_length)
    segments = [tokenizer.tokenize([text])] + ([tokenizer.tokenize([pair])] if pair is not None else [])
    inputs = pack(*segments, sequence_length=sequence_length, tokenizer=tokenizer)
    length = int(np.asarray(inputs["padding_mask"]).sum())
    inputs = {k: v[:, :length] for k, v in inputs.items()}
    maps = attention_maps(backbone, inputs)[0]  # (L, N, T, T)
    tokens = [t.decode("utf-8", "replace") for t in tokenizer.id_to_token(inputs["token_ids"][0]).numpy()]
    viewer = AttentionViewer(title or f"BERT ({backbone.config.num_layers} layers, {backbone.config.num_heads} "
                                      f"heads): {text}" + (f" | {pair}" if pair else ""))
    viewer.add_attention("self-attention", maps, tokens)
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_maps", "attention_viewer"]
