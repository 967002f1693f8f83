"""Reading a Transformer's attention as attributions to its inputs (NumPy, after the model has run).

- :func:`attention_rollout` (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", section 3):
  the attention of each layer, averaged over heads, mixed with the identity for the residual connection,
  multiplied through the layers: how much of each input token reaches each output position.
- :func:`class_token_maps`: the raw attention of the class token (position 0) to the image patches, per layer and
  head, as (grid_h, grid_w) maps (ViT's figure 6 shows these).

Both take the per-layer weights a stack returns with ``return_attention_scores=True``: a list of L arrays
(B, heads, T, T) (:class:`~attnlayers.TransformerEncoder`, :meth:`attnlayers.applications.vision.ViT.encode`).
"""

import numpy as np

HEAD_FUSIONS = ("mean", "max", "min")


def _layers(attention_scores):
    """The list of L (B, heads, T, T) float64 arrays; a ValueError naming ``attention_scores`` otherwise."""
    if isinstance(attention_scores, np.ndarray) or not hasattr(attention_scores, "__len__"):
        attention_scores = [attention_scores]
    layers = [np.asarray(a, np.float64) for a in attention_scores]
    if not layers:
        raise ValueError("`attention_scores` must hold at least one layer's weights; received an empty list.")
    shape = layers[0].shape
    for a in layers:
        if a.ndim != 4 or a.shape[-1] != a.shape[-2] or a.shape != shape:
            raise ValueError("`attention_scores` must be a list of self-attention weights of one shape (batch, "
                             f"heads, T, T); received shapes {[tuple(x.shape) for x in layers]}.")
    return layers


def attention_rollout(attention_scores, head_fusion="mean", residual=True):
    """Attention rollout: R = A_L^ ... A_2^ A_1^, with A_l^ = normalize(0.5 A_l + 0.5 I) (Abnar & Zuidema 2020,
    eq. in section 3: "we add an identity matrix to account for residual connections").

    Args:
        attention_scores: L arrays (B, heads, T, T), first layer first (rows: queries, sum to 1).
        head_fusion: how the heads of a layer are combined into A_l: "mean" (the paper's), "max" or "min".
        residual: mix in the identity (the paper's); False multiplies the raw attention.

    Returns:
        (B, T, T) float32: row t is how much each input position flows to output position t (rows sum to 1).
        Row 0 of a ViT is the class token's attribution to the class token and the N patches.
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"`head_fusion` must be one of {HEAD_FUSIONS}; received {head_fusion!r}.")
    layers = _layers(attention_scores)
    b, _, t, _ = layers[0].shape
    rollout = np.broadcast_to(np.eye(t), (b, t, t))
    for a in layers:
        fused = getattr(np, head_fusion)(a, axis=1)  # (B, T, T)
        if residual:
            fused = 0.5 * fused + 0.5 * np.eye(t)
        fused = fused / np.maximum(fused.sum(-1, keepdims=True), 1e-12)
        rollout = fused @ rollout  # A_l^ (A_{l-1}^ ... A_1^)
    return rollout.astype(np.float32)


def class_token_maps(attention_scores, grid):
    """The class token's attention to the patches: (L, B, heads, grid_h, grid_w) float32.

    Args:
        attention_scores: L arrays (B, heads, 1 + N, 1 + N), the class token at position 0 and the N = grid_h
            grid_w patches after it, row by row.
        grid: (grid_h, grid_w).
    """
    layers = _layers(attention_scores)
    gh, gw = grid
    t = layers[0].shape[-1]
    if t != 1 + gh * gw:
        raise ValueError(f"`attention_scores` over T = {t} positions cannot be a class token and a {gh} x {gw} "
                         f"grid of patches (T = {1 + gh * gw}).")
    maps = np.stack([a[:, :, 0, 1:] for a in layers])  # (L, B, heads, N)
    return maps.reshape(*maps.shape[:3], gh, gw).astype(np.float32)


def patch_map(row, grid):
    """One row over [class token, patches] (1 + N,) -> the patches' (grid_h, grid_w) map, normalised to max 1."""
    row = np.asarray(row, np.float64)[1:].reshape(grid)
    return (row / max(row.max(), 1e-12)).astype(np.float32)


__all__ = ["HEAD_FUSIONS", "attention_rollout", "class_token_maps", "patch_map"]
