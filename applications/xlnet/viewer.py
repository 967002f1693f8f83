"""XLNet's content-stream self-attention in the interactive viewer (:mod:`attnlayers.viewer`), in one call.

    viewer = attention_viewer(backbone, {"token_ids": ids, "segment_ids": segments}, tokens, "out/viewer.html")

The application has no tokenizer of its own (XLNet's is SentencePiece): the caller passes the ids of one sequence
and their token strings. Keras ops (any backend).
"""

from __future__ import annotations

import numpy as np
from keras import ops

from attnlayers.viewer import AttentionViewer


def attention_maps(backbone, inputs):
    """Every layer's content-stream attention weights of an :class:`~attnlayers.applications.xlnet.XLNetBackbone`
    (what ``backbone(inputs)`` applies; inference: no dropout).

    Args:
        backbone: the XLNet encoder.
        inputs: what the backbone takes: ``{"token_ids", "segment_ids", "padding_mask"}`` (B, T) or token ids.

    Returns:
        (B, L, N, T, T) float32 NumPy: layer l, head n, query t, key s.
    """
    token_ids, content_mask, different_segment = backbone._masks(inputs)
    content = backbone.token_embedding(token_ids)
    maps = []
    for block in backbone.blocks:  # the block's attention once more, for its weights, then the block itself
        _, weights = block.attention.attention(
            content, content, attention_mask=content_mask, return_attention_scores=True,
            attention_bias=block._segment_term(content, different_segment))
        maps.append(np.asarray(ops.convert_to_numpy(weights), dtype="float32"))
        content, _ = block(content, content_attention_mask=content_mask, different_segment=different_segment)
    return np.stack(maps, axis=1)


def attention_viewer(backbone, inputs, tokens, path=None, *, title=None):
    """The content-stream self-attention of ``backbone`` on one sequence as an
    :class:`~attnlayers.viewer.AttentionViewer`: every layer and head (the head and model views of bertviz, Vig 2019).

    Args:
        backbone: an :class:`~attnlayers.applications.xlnet.XLNetBackbone`.
        inputs: one sequence, (1, T) token ids or the backbone's dict of (1, T) inputs.
        tokens: its T token strings.
        path: where to write the page (None: not written).
        title: the page's title.

    Returns:
        The viewer (``viewer.sets[0]["weights"]``: (L, N, T, T)); written to ``path`` when given.

    Raises:
        ValueError: ``inputs`` not one sequence, or ``tokens`` not a list of T strings.
    """
    maps = attention_maps(backbone, inputs)
    if maps.shape[0] != 1:
        raise ValueError(f"`inputs` must hold one sequence (batch 1); received a batch of {maps.shape[0]}.")
    length = maps.shape[-1]
    if not (isinstance(tokens, (list, tuple)) and len(tokens) == length and all(isinstance(t, str) for t in tokens)):
        raise ValueError(f"`tokens` must be a list of the {length} token strings of `inputs`; received {tokens!r}.")
    config = backbone.config
    viewer = AttentionViewer(title or f"XLNet ({config.num_layers} layers, {config.num_heads} heads): "
                                      f"{' '.join(tokens)}")
    viewer.add_attention("content-stream self-attention", maps[0], list(tokens))
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_maps", "attention_viewer"]
