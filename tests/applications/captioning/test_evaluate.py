"""Captioning evaluation: BLEU / CIDEr through pycocoevalcap, exact match, attention localization."""

import math

import numpy as np
import pytest
from attnlayers.applications.captioning.evaluate import (
    attention_localization,
    caption_metrics,
    exact_match,
    normalized_text,
)

HYPS = [
    "a red circle above a blue square",
    "two green triangles next to a big circle",
    "a small dog",
]
REFS = [
    ["a red circle above a blue square", "a red ball over a square"],
    ["two green triangles beside a large circle", "green triangles and a circle"],
    ["a small brown dog sits", "the little dog"],
]


# --- BLEU / CIDEr ---------------------------------------------------------------------------------


def test_identical_captions_score_full_bleu_and_positive_cider():
    refs = [[h] for h in HYPS]
    scores = caption_metrics(HYPS, refs)
    assert set(scores) == {"BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "CIDEr"}
    for n in range(1, 5):
        assert scores[f"BLEU-{n}"] == pytest.approx(100.0, abs=1e-4)  # 0..100 scale
    assert 0.0 < scores["CIDEr"] <= 10.0 + 1e-9
    # Case, punctuation and spacing do not matter (lowercased, punctuation deleted).
    shouty = caption_metrics([h.upper() + " ." for h in HYPS], [[h.replace(" ", "  ")] for h in HYPS])
    assert shouty == pytest.approx(scores)


def test_disjoint_captions_score_zero():
    scores = caption_metrics(["a b c d e", "f g h i j"], [["k l m n"], ["o p q r s"]])
    assert all(v == pytest.approx(0.0, abs=1e-9) for v in scores.values())


def test_bleu_by_hand():
    # p1 = 5/6, p2 = 3/5 ("the cat", "on the", "the mat"), p3 = 1/4 ("on the mat"), p4 = 0; BP = 1.
    scores = caption_metrics(["The cat sat on the mat."], [["the cat is on the mat"]])
    assert scores["BLEU-1"] == pytest.approx(100 * 5 / 6, rel=1e-6)
    assert scores["BLEU-2"] == pytest.approx(100 * math.sqrt(5 / 6 * 3 / 5), rel=1e-6)
    assert scores["BLEU-3"] == pytest.approx(50.0, rel=1e-6)
    # No 4-gram matches: pycocoevalcap takes p4 = 1e-15 / 3 rather than 0 (sacrebleu: exactly 0).
    assert 0.0 < scores["BLEU-4"] < 0.01
    assert scores["CIDEr"] == 0.0  # one image: every idf is log(1 / 1) = 0


def test_bleu_agrees_with_sacrebleu_on_multi_reference_corpus():
    import sacrebleu

    scores = caption_metrics(HYPS, REFS)
    streams = [list(stream) for stream in zip(*REFS)]
    for n in range(1, 5):
        # Same definition: corpus counts, closest reference length (ties to the shorter), no smoothing.
        bleu = sacrebleu.metrics.BLEU(
            tokenize="none", smooth_method="none", max_ngram_order=n, effective_order=False
        )
        assert scores[f"BLEU-{n}"] == pytest.approx(bleu.corpus_score(HYPS, streams).score, rel=1e-6)
    assert 0.0 < scores["CIDEr"] < 10.0


def test_cider_prefers_the_better_caption():
    good = caption_metrics(HYPS, REFS)["CIDEr"]
    worse = caption_metrics(["a dog", "a square", "a circle"], REFS)["CIDEr"]
    assert good > worse >= 0.0


@pytest.mark.parametrize(
    "hypotheses, references, message",
    [
        (["a b"], [["a b"], ["c"]], r"`hypotheses` has 1 captions but `references` has 2"),
        ("a b", [["a b"]], r"one string: wrap it"),
        (["a b"], ["a b"], r"`references\[0\]` must be a non-empty list .* received 'a b'"),
        (["a b"], [[]], r"`references\[0\]` must be a non-empty list"),
        ([3], [["a"]], r"`hypotheses\[0\]` must be a string; received int"),
        (["a"], [["a", None]], r"`references\[0\]\[1\]` must be a string"),
        (["a"], [["..."]], r"`references\[0\]\[0\]` has no words"),
        ([], [], r"`hypotheses` is empty"),
    ],
)
def test_caption_input_errors(hypotheses, references, message):
    with pytest.raises(ValueError, match=message):
        caption_metrics(hypotheses, references)
    with pytest.raises(ValueError, match=message):
        exact_match(hypotheses, references)


def test_exact_match():
    hyps = ["A red  circle.", "a blue square", "a dog"]
    refs = [["a red circle", "a circle"], ["a square", "a blue box"], ["a dog"]]
    assert exact_match(hyps, refs) == pytest.approx(2 / 3)
    assert exact_match(["x"], [["y", "x"]]) == 1.0
    assert normalized_text("  Don't  STOP, t-shirt!\n") == "dont stop tshirt"


# --- Attention localization -----------------------------------------------------------------------

GRID = (4, 4)
SIZE = (64, 64)  # 16 pixels per cell


def _peaked(cell, grid=GRID, peak=0.85):
    """(L,) weights with ``peak`` on one cell and the rest spread evenly."""
    w = np.full(grid[0] * grid[1], (1.0 - peak) / (grid[0] * grid[1] - 1))
    w[cell[0] * grid[1] + cell[1]] = peak
    return w


def test_peak_inside_box_counts_outside_does_not():
    boxes = [[(0, 0, 32, 32), (32, 32, 64, 64)]]  # top-left and bottom-right quarters
    weights = [np.stack([_peaked((0, 1)), _peaked((3, 3)), _peaked((0, 0))])]
    # word 0 -> object 0 (peak in top-left: hit); word 1 -> object 0 (peak bottom-right: miss);
    # word 2 names nothing.
    result = attention_localization(weights, GRID, SIZE, boxes, [[0, 0, -1]])
    assert result == {"localization": 0.5, "words": 2, "hits": 1, "pointing_game": 0.5, "pointing_game_hits": 1,
                      "tolerance": 15 * 64 / 224}
    result = attention_localization(weights, GRID, SIZE, boxes, [[0, 1, -1]])
    assert result["localization"] == 1.0
    none = attention_localization(weights, GRID, SIZE, boxes, [[-1, -1, -1]])
    assert none["words"] == 0 and math.isnan(none["localization"])


def test_pointing_game_counts_peaks_near_the_box():
    """Zhang et al. 2018: a hit within 15 px of the box at 224 px (here 64 px: 4.29 px); the strict rule beside it."""
    from attnlayers.applications.captioning.evaluate import pointing_game_tolerance

    assert pointing_game_tolerance((224, 224)) == 15.0 and pointing_game_tolerance((64, 32)) == 15 * 64 / 224
    # Hard mode: the peak is the centre pixel of the argmax cell: (8, 8) for cell (0, 0), (8, 24) for (0, 1).
    weights = [np.stack([_peaked((0, 0)), _peaked((0, 1)), _peaked((0, 1))])]
    boxes = [[(0, 12, 16, 40), (0, 28, 16, 40), (20, 29, 30, 40)]]
    # (8, 8) is 4 px left of box 0 (x0 = 12): a Pointing Game hit, strictly a miss; (8, 24) is 4 px from box 1
    # (x0 = 28) but 12 px above and 5 px left of box 2 (distance 13 px): a hit only for box 1.
    result = attention_localization(weights, GRID, SIZE, boxes, [[0, 1, 2]], hard=True,
                                    word_kinds=[["shape", "shape", "colour"]])
    assert (result["hits"], result["pointing_game_hits"]) == (0, 2)
    assert result["by_kind"]["shape"] == {"localization": 0.0, "words": 2, "pointing_game": 1.0}
    assert result["by_kind"]["colour"]["pointing_game"] == 0.0
    strict = attention_localization(weights, GRID, SIZE, boxes, [[0, 1, 2]], hard=True, tolerance=0)
    assert strict["pointing_game"] == strict["localization"] == 0.0
    wide = attention_localization(weights, GRID, SIZE, boxes, [[0, 1, 2]], hard=True, tolerance=13)
    assert wide["pointing_game"] == 1.0
    with pytest.raises(ValueError, match="tolerance"):
        attention_localization(weights, GRID, SIZE, boxes, [[0, 1, 2]], tolerance=-1)


def test_box_edges_are_exclusive_at_the_end():
    # Peak in cell (1, 1): pixels 16..31, upsampled peak at the cell centre (~pixel 23.5).
    weights = [_peaked((1, 1))[None]]
    inside = attention_localization(weights, GRID, SIZE, [[(16, 16, 32, 32)]], [[0]])
    assert inside["hits"] == 1
    before = attention_localization(weights, GRID, SIZE, [[(0, 0, 16, 16)]], [[0]])
    assert before["hits"] == 0
    for hard in (False, True):
        narrow = attention_localization(weights, GRID, SIZE, [[(0, 0, 20, 64)]], [[0]], hard=hard)
        assert narrow["hits"] == 0  # centre row 24 (hard) / 23 (soft peak) is below y1 = 20


def test_hard_uses_the_argmax_cell_centre():
    # A 2 x 2 block of 0.2 bottom-left and a lone 0.21 at cell (1, 2): the upsampled, smoothed map
    # peaks in the block, but the argmax cell (the sampled location) is (1, 2), centre pixel (24, 40).
    w = np.zeros(GRID)
    w[2:, :2] = 0.2
    w[1, 2] = 0.21
    weights = [w[None]]
    lone = [[(20, 36, 28, 44)]]  # an 8-pixel box around the centre of cell (1, 2)
    block = [[(32, 0, 64, 32)]]
    assert attention_localization(weights, GRID, SIZE, lone, [[0]], hard=True)["hits"] == 1
    assert attention_localization(weights, GRID, SIZE, block, [[0]], hard=True)["hits"] == 0
    assert attention_localization(weights, GRID, SIZE, lone, [[0]])["hits"] == 0
    assert attention_localization(weights, GRID, SIZE, block, [[0]])["hits"] == 1
    # Non-square grid and image: cell (1, 2) of a (2, 3) grid over 20 x 30 pixels -> pixel (15, 25).
    w = np.zeros((2, 3))
    w[1, 2] = 1.0
    hit = attention_localization([w[None]], (2, 3), (20, 30), [[(15, 25, 16, 26)]], [[0]], hard=True)
    assert hit["hits"] == 1


def test_padded_and_list_inputs_agree_and_kinds_break_down():
    rng = np.random.default_rng(0)
    lengths = [3, 5, 2]
    per_image = [rng.dirichlet(np.full(16, 0.3), size=t) for t in lengths]
    padded = np.zeros((3, 6, 16))  # one extra row: the step predicting [END] is ignored
    for n, w in enumerate(per_image):
        padded[n, : len(w)] = w
    boxes = [[(0, 0, 32, 32), (32, 0, 64, 64)], [(0, 0, 64, 32)], [(16, 16, 48, 48)]]
    word_objects = [[-1, 0, 1], [0, -1, 0, -1, 0], [-1, 0]]
    kinds = [[None, "colour", "shape"], ["size", None, "shape", None, "shape"], [None, "colour"]]
    for hard in (False, True):
        from_list = attention_localization(
            per_image, GRID, SIZE, boxes, word_objects, hard=hard, word_kinds=kinds
        )
        from_padded = attention_localization(
            padded, GRID, SIZE, np.asarray(boxes, dtype=object), word_objects, hard=hard, word_kinds=kinds
        )
        from_grid = attention_localization(
            padded.reshape(3, 6, 4, 4), GRID, SIZE, boxes, word_objects, hard=hard, word_kinds=kinds
        )
        assert from_list == from_padded == from_grid
        assert from_list["words"] == 6
        by_kind = from_list["by_kind"]
        assert set(by_kind) == {"colour", "shape", "size"}
        assert sum(v["words"] for v in by_kind.values()) == 6
        assert by_kind["shape"]["words"] == 3


def test_soft_peak_matches_upsample_attention():
    from attnlayers.visualize import upsample_attention

    rng = np.random.default_rng(1)
    w = rng.dirichlet(np.full(16, 0.5), size=4)
    peak = np.unravel_index(np.argmax(upsample_attention(w[2].reshape(GRID), SIZE)), SIZE)
    box = [(peak[0], peak[1], peak[0] + 1, peak[1] + 1)]  # exactly the peak pixel
    assert attention_localization([w], GRID, SIZE, [box], [[-1, -1, 0, -1]])["hits"] == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"weights": [np.ones((2, 15))]}, r"`weights\[0\]` has shape \(2, 15\); expected \(T, 16\) or \(T, 4, 4\)"),
        ({"weights": np.ones((1, 2, 15))}, r"`weights` \(image 0\) has shape \(2, 15\)"),
        ({"weights": np.ones((2, 16))}, r"`weights` must be a padded array \(N, T, L\)"),
        ({"weights": [np.ones((2, 16))] * 2}, r"`weights` has 2 images but `word_objects` has 1"),
        ({"word_objects": [[0, 0, 0]]}, r"`word_objects\[0\]` labels 3 words but the weights of image 0 have 2"),
        ({"word_objects": [[0, 2]]}, r"`word_objects\[0\]\[1\]` = 2 names object 2, but `boxes\[0\]` has 1"),
        ({"word_objects": [[0.0, 1.5]]}, r"`word_objects\[0\]` must be a list of integer"),
        ({"boxes": [[(0, 0, 8)]]}, r"`boxes\[0\]` must be a list of \(y0, x0, y1, x1\) boxes"),
        ({"boxes": []}, r"`boxes` has 0 images but `word_objects` has 1"),
        ({"grid_shape": (4, 0)}, r"`grid_shape` must be two positive integers"),
        ({"image_size": 64}, r"`image_size` must be two positive integers"),
        ({"word_kinds": [["colour"]]}, r"`word_kinds\[0\]` has 1 labels but `word_objects\[0\]` has 2"),
    ],
)
def test_localization_errors(kwargs, message):
    args = {
        "weights": [np.full((2, 16), 1 / 16)],
        "grid_shape": GRID,
        "image_size": SIZE,
        "boxes": [[(0, 0, 8, 8)]],
        "word_objects": [[0, -1]],
    }
    args.update(kwargs)
    word_kinds = args.pop("word_kinds", None)
    with pytest.raises(ValueError, match=message):
        attention_localization(**args, word_kinds=word_kinds)
