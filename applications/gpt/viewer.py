"""A GPT's attention over its prompt and what it generated, in the interactive viewer (:mod:`attnlayers.viewer`),
in one call.

    viewer = attention_viewer(model, tokenizer, "Once upon a time", "out/viewer.html", max_new_tokens=20)

``attention_maps`` is keras ops (any backend); ``attention_viewer`` tokenizes with TensorFlow.
"""

from __future__ import annotations

import numpy as np

from attnlayers.deprecation import renamed_keyword
from attnlayers.viewer import AttentionViewer


def attention_maps(model, token_ids, padding_mask=None):
    """Every layer's causal self-attention weights of a :class:`~attnlayers.applications.gpt.GPT` on
    ``token_ids`` (B, T) (right-padded, ``padding_mask`` True at real tokens): (B, L, N, T, T) float32 NumPy (no
    dropout). Row t holds position t's weights over positions 0..t (later ones are 0)."""
    token_ids, padding_mask = model._check_inputs(token_ids, padding_mask, convert=True)
    out = model.decoder(model._embed(token_ids), decoder_padding_mask=padding_mask, return_attention_scores=True)
    return np.stack([np.asarray(s["self_attention"], dtype="float32") for s in out["attention_scores"]], axis=1)


def _labels(tokenizer, ids):
    """Each token's own text (byte-level pieces decoded alone; a split UTF-8 character shows U+FFFD), spaces made
    visible as non-breaking ones and newlines as "\\n"."""
    texts = tokenizer.detokenize(np.asarray(ids, "int32").reshape(-1, 1)).numpy()
    return [t.decode("utf-8", "replace").replace("\n", "\\n").replace(" ", "\u00a0") for t in texts]


@renamed_keyword("strategy", "search")
def attention_viewer(model, tokenizer, prompt, path=None, *, max_new_tokens=20, search="greedy", seed=None,
                     title=None):
    """Generates a continuation of ``prompt`` and shows the model's causal self-attention over the whole sequence
    (prompt and generated tokens), every layer and head, as an :class:`~attnlayers.viewer.AttentionViewer`.

    Args:
        model: a :class:`~attnlayers.applications.gpt.GPT`.
        tokenizer: its :class:`~attnlayers.applications.gpt.GPT2Tokenizer`.
        prompt: the text to continue (str, at least one token).
        path: where to write the page (None: not written).
        max_new_tokens: tokens to generate (0: the prompt alone).
        search, seed: the decoding search and its seed (``model.generate``'s).
        title: the page's title.

    Returns:
        The viewer (``viewer.sets[0]["weights"]``: (L, N, T, T), T = prompt + generated tokens); written to
        ``path`` when given.

    Raises:
        ValueError: an empty or non-string prompt, or one longer than the model's ``max_sequence_length``.
    """
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"`prompt` must be a non-empty string; received {prompt!r}.")
    ids = np.asarray(tokenizer.tokenize(prompt), "int32")
    limit = model.config.max_sequence_length
    if ids.size == 0 or ids.size > limit:
        raise ValueError(f"`prompt` is {ids.size} tokens long; it needs 1 to max_sequence_length={limit} tokens.")
    max_new_tokens = max(0, min(int(max_new_tokens), limit - ids.size))
    if max_new_tokens:
        result = model.generate(ids[None], search=search, seed=seed, max_new_tokens=max_new_tokens)
        tokens = np.asarray(result.tokens)
        tokens = tokens[:, 0] if tokens.ndim == 3 else tokens  # beam search: the best
        ids = tokens[0, : int(np.asarray(result.lengths).reshape(-1)[0])]
    maps = attention_maps(model, ids[None])[0]
    c = model.config
    viewer = AttentionViewer(title or f"GPT ({c.num_layers} layers, {c.num_heads} heads): {prompt}")
    viewer.add_attention("self-attention", maps, _labels(tokenizer, ids))
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_maps", "attention_viewer"]
