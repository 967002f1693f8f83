"""Scoring captions and checking where a captioner looked (Xu et al. 2015, "Show, Attend and Tell").

    scores = caption_metrics(hypotheses, references)     # {"BLEU-1".."BLEU-4": 0-100, "CIDEr": 0-10}
    exact_match(hypotheses, references)                  # share in [0, 1]
    attention_localization(weights, (7, 7), (112, 112), boxes, word_objects)   # {"localization", "pointing_game"...}

Plain NumPy / Python inputs only: no TensorFlow, no model. BLEU and CIDEr come from pycocoevalcap's
scorers (the COCO caption evaluation code; the ``test`` / ``examples`` extras install it), imported on
first use. Pictures of the attention maps: :func:`attnlayers.visualize.plot_image_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from attnlayers.visualize import upsample_attention

from .data.vocabulary import normalize_caption

__all__ = ["POINTING_GAME_IMAGE_SIZE", "POINTING_GAME_TOLERANCE", "attention_localization", "caption_metrics",
           "exact_match", "normalized_text", "pointing_game_tolerance"]

_INSTALL_HINT = (
    "caption_metrics needs pycocoevalcap (the COCO caption evaluation code), an optional dependency: "
    'pip install "attnlayers[examples]" (or pip install pycocoevalcap)'
)


def normalized_text(text):
    """``text`` as the words the vocabulary sees (``data.normalize_caption``: lower-cased, punctuation deleted,
    as Karpathy's neuraltalk2 ``prepro.py`` does), joined by single spaces.

    Used instead of the COCO evaluation's PTBTokenizer, which needs Java. Differences from PTB: "don't" becomes
    "dont" (PTB: "do n't") and "t-shirt" becomes "tshirt"; the same rule applies to hypotheses and references.

    Args:
        text: a caption (str, or bytes decoded as UTF-8).

    Returns:
        The normalized caption ("" for an empty caption).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return " ".join(normalize_caption(text))


def _captions(hypotheses, references):
    """Validates and normalizes (N strings, N lists of strings)."""
    if isinstance(hypotheses, (str, bytes)) or not isinstance(hypotheses, Sequence):
        raise ValueError(
            f"`hypotheses` must be a list of N caption strings; received {type(hypotheses).__name__}"
            f"{' (one string: wrap it as [caption])' if isinstance(hypotheses, (str, bytes)) else ''}."
        )
    if isinstance(references, (str, bytes)) or not isinstance(references, Sequence):
        raise ValueError(
            f"`references` must be a list of N lists of reference strings; received "
            f"{type(references).__name__}."
        )
    if len(hypotheses) != len(references):
        raise ValueError(
            f"`hypotheses` has {len(hypotheses)} captions but `references` has {len(references)} "
            f"entries; expected one list of references per hypothesis."
        )
    if not hypotheses:
        raise ValueError("`hypotheses` is empty; expected at least one caption.")
    hyps, refs = [], []
    for i, (hyp, ref) in enumerate(zip(hypotheses, references)):
        if not isinstance(hyp, (str, bytes)):
            raise ValueError(f"`hypotheses[{i}]` must be a string; received {type(hyp).__name__} {hyp!r}.")
        if isinstance(ref, (str, bytes)) or not isinstance(ref, Sequence) or len(ref) == 0:
            raise ValueError(
                f"`references[{i}]` must be a non-empty list of reference strings (references for "
                f"one image); received {ref!r}. For one reference per image pass [[ref] for ref in refs]."
            )
        norm_refs = []
        for j, r in enumerate(ref):
            if not isinstance(r, (str, bytes)):
                raise ValueError(f"`references[{i}][{j}]` must be a string; received {type(r).__name__} {r!r}.")
            r = normalized_text(r)
            if not r:
                raise ValueError(
                    f"`references[{i}][{j}]` has no words after lowercasing and deleting punctuation; "
                    f"received {ref[j]!r}."
                )
            norm_refs.append(r)
        hyps.append(normalized_text(hyp))
        refs.append(norm_refs)
    return hyps, refs


def caption_metrics(hypotheses, references):
    """Corpus BLEU-1..4 (Papineni et al. 2002) and CIDEr-D (Vedantam et al. 2015) of generated captions.

    The scores are those of the COCO caption evaluation (pycocoevalcap's ``Bleu`` and ``Cider``
    scorers, pure Python): BLEU counts clipped n-gram matches over the whole corpus against all of an
    image's references, with the brevity penalty taken from the reference length closest to each
    hypothesis; CIDEr is the COCO server's CIDEr-D (TF-IDF n-gram vectors, n = 1..4, with the idf taken
    from the references of this corpus, clipped counts and a Gaussian length penalty, sigma = 6).

    Tokenization: lowercased, ASCII punctuation deleted, split on whitespace (:func:`normalize_caption`),
    not the COCO evaluation's Java PTBTokenizer; scores can differ slightly from published ones on
    captions with apostrophes or hyphens.

    Scales: BLEU-n in 0..100 (pycocoevalcap's 0..1 times 100, the scale of Xu et al.'s Table 1, e.g.
    BLEU-4 24.3 on COCO). Unsmoothed, except that pycocoevalcap adds 1e-15 to matched counts, so an
    order with no match gives a tiny positive score (e.g. BLEU-4 = 0.008 instead of sacrebleu's 0 for
    one sentence without a 4-gram match); otherwise it equals sacrebleu's ``tokenize="none",
    smooth_method="none"`` corpus BLEU on the same tokens. CIDEr as the COCO evaluation reports it,
    0..10 (about 0.5-1.0 for real models on COCO). Because its idf comes from the references of the
    images scored, CIDEr needs a corpus: for a single image, or n-grams shared by every image's
    references, the idf is 0 and so is CIDEr.

    Args:
        hypotheses: N generated captions (strings).
        references: N lists of reference captions (``references[i]`` are the references of image i;
            any number >= 1 per image).

    Returns:
        ``{"BLEU-1": float, "BLEU-2": ..., "BLEU-3": ..., "BLEU-4": ..., "CIDEr": float}``.

    Raises:
        ValueError: if the lengths differ, a caption is not a string, an image has no references, or
            a reference has no words.
        ImportError: if pycocoevalcap is not installed.

    Example:
    >>> caption_metrics(["a red circle above a blue square"],
    ...                 [["a red circle above a blue square", "a small red circle over a square"]])
    """
    hyps, refs = _captions(hypotheses, references)
    try:
        from pycocoevalcap.bleu.bleu import Bleu
        from pycocoevalcap.cider.cider import Cider
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    res = {i: [h] for i, h in enumerate(hyps)}
    gts = {i: r for i, r in enumerate(refs)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, _ = Cider().compute_score(gts, res)
    scores = {f"BLEU-{n + 1}": 100.0 * float(b) for n, b in enumerate(bleu)}
    scores["CIDEr"] = float(cider)
    return scores


def exact_match(hypotheses, references):
    """Share of hypotheses identical to one of their references.

    Captions are compared after :func:`normalize_caption` (lowercased, punctuation deleted, whitespace
    collapsed), the normalization :func:`caption_metrics` scores with, so "A dog." matches "a dog".

    Args:
        hypotheses: N generated captions.
        references: N lists of reference captions.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: as :func:`caption_metrics`.

    Example:
    >>> exact_match(["A dog runs."], [["a dog runs", "a brown dog"]])
    1.0
    """
    hyps, refs = _captions(hypotheses, references)
    return sum(h in set(r) for h, r in zip(hyps, refs)) / len(hyps)


# --- Attention localization --------------------------------------------------------------------


def _pair(value, name):
    arr = None
    if not isinstance(value, (str, bytes)):
        try:
            arr = np.asarray(value)
        except ValueError:  # ragged
            arr = None
    if (
        arr is None
        or arr.shape != (2,)
        or arr.dtype.kind not in "iuf"
        or not np.all(arr == np.round(arr))
        or not np.all(arr >= 1)
    ):
        raise ValueError(f"`{name}` must be two positive integers (height, width); received {value!r}.")
    return int(arr[0]), int(arr[1])


def _per_image_weights(weights, grid, n_images):
    """-> list of N float arrays (T_n, h, w)."""
    size = grid[0] * grid[1]
    if isinstance(weights, np.ndarray) or not isinstance(weights, Sequence):
        batch = np.asarray(weights)
        if batch.dtype == object or batch.ndim not in (3, 4):
            raise ValueError(
                f"`weights` must be a padded array (N, T, L) with L = h * w = {size}, (N, T, h, w), or "
                f"a list of N arrays (T_n, L); received shape {batch.shape}."
            )
        items, prefix = list(batch), "weights"
    else:
        items, prefix = list(weights), None
    if len(items) != n_images:
        raise ValueError(
            f"`weights` has {len(items)} images but `word_objects` has {n_images}; expected one entry "
            f"per image in both (and in `boxes`)."
        )
    out = []
    for n, w in enumerate(items):
        label = f"`weights[{n}]`" if prefix is None else f"`weights` (image {n})"
        w = np.asarray(w)
        if w.dtype.kind not in "fiub":
            raise ValueError(f"{label} must be numeric; received dtype {w.dtype}.")
        if w.ndim == 2 and w.shape[1] == size:
            w = w.reshape(w.shape[0], *grid)
        elif not (w.ndim == 3 and w.shape[1:] == grid):
            raise ValueError(
                f"{label} has shape {w.shape}; expected (T, {size}) or (T, {grid[0]}, {grid[1]}) for "
                f"`grid_shape` {grid} (one row of attention weights per caption word)."
            )
        out.append(w.astype("float64"))
    return out


def _kind_table(hits_by_kind):
    return {
        kind: {"localization": hits / words if words else math.nan, "words": words,
               "pointing_game": pointed / words if words else math.nan}
        for kind, (hits, words, pointed) in sorted(hits_by_kind.items(), key=lambda kv: str(kv[0]))
    }


# The Pointing Game's tolerance (Zhang et al. 2018, "Top-down Neural Attention by Excitation Backprop", section
# 5.1): a peak within 15 pixels of the box counts as a hit, on images of 224 pixels.
POINTING_GAME_TOLERANCE = 15.0
POINTING_GAME_IMAGE_SIZE = 224


def pointing_game_tolerance(image_size):
    """The Pointing Game's 15 pixels at 224 scaled to an image of ``image_size`` (H, W): 15 max(H, W) / 224."""
    height, width = _pair(image_size, "image_size")
    return POINTING_GAME_TOLERANCE * max(height, width) / POINTING_GAME_IMAGE_SIZE


def attention_localization(
    weights,
    grid_shape,
    image_size,
    boxes,
    word_objects,
    *,
    hard=False,
    word_kinds=None,
    smooth=True,
    tolerance=None,
):
    """Share of object words whose attention peak lies inside that object's box (the strict rule), and within a
    tolerance of it (the Pointing Game, Zhang et al. 2018).

    For each image n and caption word t with ``k = word_objects[n][t] >= 0`` (word t names object k),
    the attention map that predicted word t, ``weights[n][t]`` over the (h, w) feature grid, is
    upsampled to the image and smoothed (:func:`attnlayers.visualize.upsample_attention`, as in the
    pictures) and counts as a hit if its peak pixel lies in ``boxes[n][k]``. With ``hard=True`` (hard
    attention, where the decoder sees one sampled location) the argmax grid cell, the location a
    deterministic (MAP) decoder would sample, is used instead, mapped to the pixel at its centre.

    Use the weights of teacher forcing on the reference caption: row t must be the attention of the
    step whose output is caption word t (the step fed word t - 1, or [START] for t = 0), so that
    ``word_objects[n][t]`` and ``weights[n][t]`` talk about the same word. Free-running (generated)
    captions have no per-word object labels.

    Args:
        weights: attention weights, either a list of N arrays (T_n, L) with L = h * w (row-major over
            the grid) or (T_n, h, w), of different lengths T_n, or one padded array (N, T, L) /
            (N, T, h, w). Rows past ``len(word_objects[n])`` (padding, or the step predicting [END])
            are ignored.
        grid_shape: (h, w) of the feature grid.
        image_size: (H, W) of the images in pixels (all images the same size).
        boxes: per image, K_n object boxes ``(y0, x0, y1, x1)`` in pixels, y1 and x1 exclusive: a
            list of N sequences of 4-tuples or an array (N, K, 4).
        word_objects: per image, T_n ints: the index k into ``boxes[n]`` of the object word t names,
            or -1 (any negative) for words that name no object ("a", "above", ...).
        hard: use the argmax grid cell (hard attention) instead of the upsampled map's peak.
        word_kinds: optional, same structure as ``word_objects``: a label per word (e.g. "colour",
            "size", "shape"; None for none) to break the result down by; only object words count.
        smooth: smoothing of the upsampled maps (soft mode), as in ``upsample_attention``.
        tolerance: the Pointing Game's: a peak whose distance to the box (0 inside it) is at most this many
            pixels is a hit. None: :func:`pointing_game_tolerance` of ``image_size`` (15 px at 224 px).

    Returns:
        ``{"localization": hits / words (NaN when there are no object words), "words": number of
        object words, "hits": number inside their box, "pointing_game": share within ``tolerance``,
        "pointing_game_hits", "tolerance": in pixels}``, plus ``"by_kind": {kind: {"localization": float,
        "pointing_game": float, "words": int}}`` when ``word_kinds`` is given.

    Raises:
        ValueError: if the numbers of images differ, a weights array does not fit ``grid_shape``,
            ``word_objects[n]`` is longer than the weights of image n, an object index has no box, a
            box is not 4 numbers, or ``word_kinds`` does not match ``word_objects``.

    Example:
    >>> # scene n: "a red circle above a blue square", the circle is box 0, the square box 1
    >>> word_objects = [[-1, -1, 0, -1, -1, -1, 1]]
    >>> attention_localization(weights, (7, 7), (112, 112), [[(8, 40, 40, 72), (64, 40, 104, 80)]],
    ...                        word_objects)["localization"]
    """
    grid = _pair(grid_shape, "grid_shape")
    height, width = _pair(image_size, "image_size")
    if isinstance(word_objects, (str, bytes)) or not isinstance(word_objects, (Sequence, np.ndarray)):
        raise ValueError(
            f"`word_objects` must be a list of N lists of object indices (-1 for non-object words); "
            f"received {type(word_objects).__name__}."
        )
    n_images = len(word_objects)
    maps = _per_image_weights(weights, grid, n_images)
    if len(boxes) != n_images:
        raise ValueError(
            f"`boxes` has {len(boxes)} images but `word_objects` has {n_images}; expected one list of "
            f"boxes per image."
        )
    if word_kinds is not None and len(word_kinds) != n_images:
        raise ValueError(
            f"`word_kinds` has {len(word_kinds)} images but `word_objects` has {n_images}; expected the "
            f"same structure as `word_objects`."
        )

    selected, targets, kinds = [], [], []  # attention maps (h, w), their boxes, their kinds
    for n in range(n_images):
        objects = np.asarray(word_objects[n])
        if objects.ndim != 1 or (objects.size and objects.dtype.kind not in "iu"):
            raise ValueError(
                f"`word_objects[{n}]` must be a list of integer object indices (-1 for none); received "
                f"{word_objects[n]!r}."
            )
        if objects.size > maps[n].shape[0]:
            raise ValueError(
                f"`word_objects[{n}]` labels {objects.size} words but the weights of image {n} have "
                f"{maps[n].shape[0]} rows; expected at most one label per row (per decoding step)."
            )
        image_boxes = np.asarray(boxes[n], dtype="float64") if len(boxes[n]) else np.zeros((0, 4))
        if image_boxes.ndim != 2 or image_boxes.shape[1] != 4:
            raise ValueError(
                f"`boxes[{n}]` must be a list of (y0, x0, y1, x1) boxes; received shape "
                f"{np.shape(boxes[n])}."
            )
        if word_kinds is not None and len(word_kinds[n]) != objects.size:
            raise ValueError(
                f"`word_kinds[{n}]` has {len(word_kinds[n])} labels but `word_objects[{n}]` has "
                f"{objects.size}; expected one per word."
            )
        for t in np.flatnonzero(objects >= 0):
            k = int(objects[t])
            if k >= len(image_boxes):
                raise ValueError(
                    f"`word_objects[{n}][{t}]` = {k} names object {k}, but `boxes[{n}]` has "
                    f"{len(image_boxes)} boxes; expected an index below {len(image_boxes)} or -1."
                )
            selected.append(maps[n][t])
            targets.append(image_boxes[k])
            kinds.append(None if word_kinds is None else word_kinds[n][t])

    if not selected:
        peaks = np.zeros((0, 2), dtype=int)
    elif hard:
        flat = np.stack(selected).reshape(len(selected), -1)
        rows, cols = np.unravel_index(np.argmax(np.nan_to_num(flat, nan=-np.inf), axis=-1), grid)
        # The pixel holding the centre of the sampled cell.
        peaks = np.stack(
            [
                np.minimum(np.floor((rows + 0.5) * height / grid[0]), height - 1),
                np.minimum(np.floor((cols + 0.5) * width / grid[1]), width - 1),
            ],
            axis=-1,
        ).astype(int)
    else:
        stack = np.nan_to_num(np.stack(selected))
        peaks = []
        chunk = max(1, 2**24 // (height * width))  # bounds memory at ~128 MB of float64 per chunk
        for start in range(0, len(stack), chunk):
            up = upsample_attention(stack[start : start + chunk], (height, width), smooth=smooth)
            flat = np.argmax(up.reshape(up.shape[0], -1), axis=-1)
            peaks.append(np.stack(np.unravel_index(flat, (height, width)), axis=-1))
        peaks = np.concatenate(peaks)

    targets = np.asarray(targets, dtype="float64").reshape(-1, 4)
    # Distance from the peak pixel to the box (pixels y0 .. y1 - 1, x0 .. x1 - 1): 0 inside.
    dy = np.maximum(np.maximum(targets[:, 0] - peaks[:, 0], peaks[:, 0] - (targets[:, 2] - 1)), 0)
    dx = np.maximum(np.maximum(targets[:, 1] - peaks[:, 1], peaks[:, 1] - (targets[:, 3] - 1)), 0)
    distance = np.hypot(dy, dx)
    inside = (
        (targets[:, 0] <= peaks[:, 0])
        & (peaks[:, 0] < targets[:, 2])
        & (targets[:, 1] <= peaks[:, 1])
        & (peaks[:, 1] < targets[:, 3])
    )
    tolerance = pointing_game_tolerance((height, width)) if tolerance is None else float(tolerance)
    if not tolerance >= 0:
        raise ValueError(f"`tolerance` must be a number of pixels >= 0; received {tolerance!r}.")
    pointed = distance <= tolerance
    words = int(inside.size)
    hits, pointing_hits = int(inside.sum()), int(pointed.sum())
    result = {"localization": hits / words if words else math.nan, "words": words, "hits": hits,
              "pointing_game": pointing_hits / words if words else math.nan, "pointing_game_hits": pointing_hits,
              "tolerance": tolerance}
    if word_kinds is not None:
        table = {}
        for kind, hit, point in zip(kinds, inside, pointed):
            if kind is None:
                continue
            entry = table.setdefault(kind, [0, 0, 0])
            entry[0] += int(hit)
            entry[1] += 1
            entry[2] += int(point)
        result["by_kind"] = _kind_table(table)
    return result
