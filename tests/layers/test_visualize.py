"""attnlayers.visualize: heatmaps drawn and saved, inputs validated, matplotlib stays optional."""

import sys

import numpy as np
import pytest
from keras import ops

from attnlayers import visualize
from attnlayers.visualize import plot_attention, plot_attention_heads

SRC = "the cat sat on the mat".split()
TGT = "le chat s'est assis".split()


def _weights(*shape, seed=0):
    logits = np.random.default_rng(seed).normal(size=shape).astype("float32") * 3
    return ops.softmax(ops.convert_to_tensor(logits), axis=-1)


def _check_png(path, min_bytes=5_000):
    import matplotlib.image

    assert path.exists(), f"{path} was not written"
    assert path.stat().st_size > min_bytes, (
        f"{path} is suspiciously small ({path.stat().st_size} bytes)"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels[..., :3].std() > 0.05, "the image is (nearly) blank"
    return pixels


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def test_plot_attention_saves_labelled_heatmap(tmp_path):
    weights = _weights(1, len(TGT), len(SRC))  # a leading batch of 1 is squeezed
    path = tmp_path / "sub" / "alignment.png"
    fig = plot_attention(
        weights, source_tokens=SRC, target_tokens=TGT, path=path, title="Alignment"
    )
    _check_png(path)
    image_ax = next(ax for ax in fig.axes if ax.images)
    assert image_ax.images[0].get_array().shape == (len(TGT), len(SRC))
    assert [t.get_text() for t in image_ax.get_xticklabels()] == SRC
    assert [t.get_text() for t in image_ax.get_yticklabels()] == TGT
    assert (
        image_ax.xaxis.get_ticks_position() == "top"
    )  # source along the top, as in Bahdanau Fig. 3
    assert image_ax.get_title() == "Alignment"
    assert len(fig.axes) == 2  # heatmap + colorbar


def test_plot_attention_numpy_without_tokens_or_path(tmp_path):
    import matplotlib.figure

    fig = plot_attention(np.eye(4, 6, dtype="float64"))
    assert isinstance(fig, matplotlib.figure.Figure)
    assert list(tmp_path.iterdir()) == []


def test_plot_attention_single_step_and_string_tokens(tmp_path):
    path = tmp_path / "step.png"
    fig = plot_attention(_weights(len(SRC)), source_tokens=" ".join(SRC), path=path)
    assert fig.axes[0].images[0].get_array().shape == (1, len(SRC))
    _check_png(path, min_bytes=2_000)


def test_plot_attention_into_existing_axes(tmp_path):
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2)
    returned = plot_attention(_weights(3, 3), ax=right, cmap="gray", path=tmp_path / "mine.png")
    assert returned is fig
    assert right.images and not left.images
    assert plt.fignum_exists(fig.number)  # the caller's figure is left open
    assert (tmp_path / "mine.png").exists()


def test_saved_figures_do_not_accumulate_in_pyplot(tmp_path):
    import matplotlib.pyplot as plt

    if plt.get_backend().lower() != "agg":
        pytest.skip("figures are kept open for interactive backends")
    before = len(plt.get_fignums())
    for i in range(3):
        plot_attention(_weights(3, 4), path=tmp_path / f"{i}.png")
        plot_attention_heads(_weights(2, 3, 4), path=tmp_path / f"heads{i}.png")
    assert len(plt.get_fignums()) == before


def test_plot_attention_reduced_precision_input(tmp_path):
    path = tmp_path / "half.png"
    plot_attention(ops.cast(_weights(5, 7), "float16"), path=path)
    _check_png(path, min_bytes=2_000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"source_tokens": SRC[:-1]}, "`source_tokens` has 5 tokens but the weights have 6"),
        ({"target_tokens": TGT + ["extra"]}, "`target_tokens` has 5 tokens but the weights have 4"),
    ],
)
def test_plot_attention_token_count_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plot_attention(_weights(len(TGT), len(SRC)), **kwargs)


def test_plot_attention_rejects_multi_head_weights():
    with pytest.raises(ValueError, match=r"received shape \(2, 4, 6\).*plot_attention_heads"):
        plot_attention(_weights(2, 4, 6))


def test_plot_attention_rejects_non_numeric():
    with pytest.raises(ValueError, match="must be numeric"):
        plot_attention(np.array([["a", "b"]]))


def test_plot_attention_heads_grid(tmp_path):
    path = tmp_path / "heads.png"
    fig = plot_attention_heads(
        _weights(3, len(TGT), len(SRC)), SRC, TGT, path=path, max_columns=2, title="Heads"
    )
    _check_png(path)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 3
    assert len({tuple(ax.images[0].get_clim()) for ax in panels}) == 1  # one shared color scale
    # 3 heads wrapped at 2 columns: the fourth cell is switched off; labels only on the outer
    # panels.
    assert sum(1 for ax in fig.axes if not ax.images and not ax.axison) == 1
    assert [t.get_text() for t in panels[0].get_xticklabels()] == SRC
    assert all(t.get_text() == "" for t in panels[2].get_xticklabels())
    assert [t.get_text() for t in panels[2].get_yticklabels()] == TGT


def test_plot_attention_heads_layers_by_heads(tmp_path):
    path = tmp_path / "layers.png"
    fig = plot_attention_heads(_weights(2, 4, 5, 5), path=path)
    _check_png(path)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 8
    assert panels[5].get_xlabel() == "layer 1, head 1"
    # A batch of 1 in front of (L, N, T, S) is squeezed; (1, N, T, S) is one row of N heads.
    fig = plot_attention_heads(_weights(1, 1, 3, 5, 5))
    assert [ax.get_xlabel() for ax in fig.axes if ax.images] == [
        f"layer 0, head {h}" for h in range(3)
    ]


def test_plot_attention_heads_errors():
    with pytest.raises(ValueError, match=r"received shape \(4, 6\).*plot_attention"):
        plot_attention_heads(_weights(4, 6))
    with pytest.raises(ValueError, match="`source_tokens` has 6 tokens but the weights have 5"):
        plot_attention_heads(_weights(2, 4, 5), source_tokens=SRC)
    with pytest.raises(ValueError, match="`max_columns` must be a positive integer"):
        plot_attention_heads(_weights(2, 4, 5), max_columns=0)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "matplotlib", None
    )  # makes `import matplotlib` raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'pip install "attnlayers\[examples\]"'):
        visualize.plot_attention(np.eye(3))


# --- Visual attention over images (Xu et al. 2015, Figs. 2-3) -------------------------------------

CAPTION = "a red circle above".split()


def _scene(height=48, width=64):
    """A uint8 image with some structure: a gradient and a red disc."""
    y, x = np.mgrid[:height, :width]
    image = np.stack([x * 255 // width, y * 255 // height, np.full_like(x, 90)], axis=-1)
    image[(y - 16) ** 2 + (x - 20) ** 2 < 81] = (230, 20, 20)
    return image.astype("uint8")


def _grid_weights(steps, grid=(3, 4), seed=0):
    logits = np.random.default_rng(seed).normal(size=(steps, grid[0] * grid[1])) * 3
    weights = np.exp(logits)
    return weights / weights.sum(-1, keepdims=True)


def test_upsample_attention_shapes_peak_and_range():
    from attnlayers.visualize import upsample_attention

    alpha = np.zeros((4, 4))
    alpha[1, 2] = 1.0
    for smooth in (True, False, 3.0):
        heat = upsample_attention(alpha, (64, 32), smooth=smooth)
        assert heat.shape == (64, 32) and heat.dtype == np.float64
        peak = np.unravel_index(np.argmax(heat), heat.shape)
        assert 16 <= peak[0] < 32 and 16 <= peak[1] < 24  # inside cell (1, 2): 16 x 8 pixels
        assert heat.min() >= -1e-12 and heat.max() <= 1.0 + 1e-12
    # A stack (..., h, w) is upsampled map by map; nested lists and tensors are accepted.
    stack = _grid_weights(3, (4, 4)).reshape(3, 4, 4)
    together = upsample_attention(stack, (20, 20))
    assert together.shape == (3, 20, 20)
    np.testing.assert_allclose(together[1], upsample_attention(stack[1].tolist(), (20, 20)))
    np.testing.assert_allclose(
        together[2], upsample_attention(ops.convert_to_tensor(stack[2]), (20, 20)), atol=1e-6
    )
    # A uniform map stays uniform (bilinear + a normalized, edge-mirrored blur).
    np.testing.assert_allclose(upsample_attention(np.full((3, 3), 0.25), (30, 30)), 0.25)


def test_upsample_attention_matches_scipy_resize_and_blur():
    from scipy import ndimage

    from attnlayers.visualize import upsample_attention

    # Bilinear with half-pixel centres (8 pixels per cell: grid row i is centred on pixel 8i + 3.5)
    # reproduces a linear ramp exactly between the outer cell centres, and clamps beyond them.
    rows, cols = np.mgrid[:7, :5]
    ramp = upsample_attention(rows + 2.0 * cols, (56, 40), smooth=False)
    y, x = np.mgrid[:56, :40]
    exact = np.clip((y + 0.5) / 8 - 0.5, 0, 6) + 2 * np.clip((x + 0.5) / 8 - 0.5, 0, 4)
    np.testing.assert_allclose(ramp, exact, atol=1e-12)
    alpha = np.random.default_rng(3).random((7, 5))
    plain = upsample_attention(alpha, (56, 40), smooth=False)
    blurred = ndimage.gaussian_filter(plain, sigma=(8 / 3, 8 / 3), mode="reflect", truncate=4.0)
    np.testing.assert_allclose(upsample_attention(alpha, (56, 40)), blurred, atol=1e-12)
    blurred = ndimage.gaussian_filter(plain, sigma=20.0, mode="reflect", truncate=4.0)
    np.testing.assert_allclose(upsample_attention(alpha, (56, 40), smooth=20.0), blurred, atol=1e-12)


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.ones(16), (8, 8)), r"`weights_hw` must be an \(h, w\) attention map .* received shape \(16,\)"),
        ((np.ones((4, 4)), (8, 0)), r"`image_size` must be two positive integers"),
        ((np.ones((4, 4)), 8), r"`image_size` must be two positive integers"),
        ((np.ones((4, 4)), (8, 8), -1.0), r"`smooth` must be True, False or a Gaussian sigma"),
        ((np.array([["a", "b"], ["c", "d"]]), (8, 8)), r"`weights_hw` must be numeric"),
    ],
)
def test_upsample_attention_errors(args, message):
    from attnlayers.visualize import upsample_attention

    with pytest.raises(ValueError, match=message):
        upsample_attention(*args)


def test_plot_image_attention_writes_png_with_one_panel_per_word(tmp_path):
    from attnlayers.visualize import plot_image_attention

    image = _scene()
    path = tmp_path / "sub" / "attention.png"
    fig = plot_image_attention(
        image, CAPTION, _grid_weights(4), grid_shape=(3, 4), path=path, columns=3, title="Soft"
    )
    _check_png(path)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 1 + len(CAPTION)  # the image, then one panel per word
    assert [ax.get_title() for ax in panels[1:]] == CAPTION
    np.testing.assert_allclose(panels[0].images[0].get_array(), image / 255.0)
    for ax in panels[1:]:
        assert ax.images[0].get_array().shape == image.shape  # the map is upsampled to the image
        assert not ax.patches  # no rectangles without sampled=True
    # 5 panels in rows of 3: the sixth cell is switched off.
    assert sum(1 for ax in fig.axes if not ax.images and not ax.axison) == 1
    assert fig._suptitle.get_text() == "Soft"


def test_plot_image_attention_grid_forms_agree():
    from attnlayers.visualize import plot_image_attention

    weights = _grid_weights(4, (4, 4))

    def pixels(fig):
        return [np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images]

    flat = pixels(plot_image_attention(_scene(), CAPTION, weights, grid_shape=(4, 4)))
    for other in (
        plot_image_attention(_scene(), CAPTION, weights.reshape(4, 4, 4)),
        plot_image_attention(_scene(), CAPTION, weights.reshape(4, 4, 4), grid_shape=(4, 4)),
        plot_image_attention(_scene(), " ".join(CAPTION), ops.convert_to_tensor(weights)),  # 16 = 4 x 4
    ):
        for a, b in zip(flat, pixels(other), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-6)
    # Where the word attends is brightest: the peak cell's centre beats the opposite corner.
    peak = np.unravel_index(np.argmax(weights[0]), (4, 4))
    shown = flat[1].mean(-1)
    assert shown[int((peak[0] + 0.5) * 12), int((peak[1] + 0.5) * 16)] > shown.min() + 0.2


def test_plot_image_attention_sampled_marks_argmax_cell(tmp_path):
    from attnlayers.visualize import plot_image_attention

    weights = _grid_weights(4)
    path = tmp_path / "hard.png"
    fig = plot_image_attention(
        _scene().astype("float32"),  # float 0-255 is read as 0-255
        CAPTION,
        weights,
        grid_shape=(3, 4),
        sampled=True,
        smooth=False,
        path=path,
    )
    _check_png(path)
    panels = [ax for ax in fig.axes if ax.images]
    assert panels[0].images[0].get_array().max() <= 1.0
    assert not panels[0].patches
    for t, ax in enumerate(panels[1:]):
        (rect,) = ax.patches
        r, c = np.unravel_index(np.argmax(weights[t]), (3, 4))
        assert rect.get_xy() == pytest.approx((c * 16 - 0.5, r * 16 - 0.5))  # 48 x 64 image, 16 px cells
        assert (rect.get_width(), rect.get_height()) == pytest.approx((16, 16))


def test_plot_image_attention_accepts_gray_and_normalized_images():
    from attnlayers.visualize import plot_image_attention

    gray = _scene()[..., 0]
    fig = plot_image_attention(gray, ["a"], _grid_weights(1), grid_shape=(3, 4))
    assert fig.axes[0].images[0].get_array().shape == gray.shape + (3,)
    normalized = (_scene() - 128.0) / 60.0  # a network's mean/std input: rescaled for display
    shown = plot_image_attention(normalized, ["a"], _grid_weights(1), grid_shape=(3, 4)).axes[0]
    assert shown.images[0].get_array().min() == 0.0 and shown.images[0].get_array().max() == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"words": CAPTION[:3]}, r"`words` has 3 words but `weights` has 4 rows \(shape \(4, 12\)\)"),
        ({"grid_shape": (4, 4)}, r"`weights` have 12 locations per word \(shape \(4, 12\)\) but `grid_shape`"),
        ({"grid_shape": None}, r"L = 12 not a square number; pass grid_shape"),
        ({"weights": _grid_weights(4).reshape(4, 3, 4), "grid_shape": (4, 3)}, r"do not match `grid_shape`"),
        ({"weights": _grid_weights(4).reshape(1, 4, 3, 4)}, r"received shape \(1, 4, 3, 4\).*select one image"),
        ({"image": np.zeros((8, 8, 2))}, r"`image` must be a numeric \(H, W, 3\) array"),
        ({"columns": 0}, r"`columns` must be a positive integer"),
        ({"grid_shape": (3, -4)}, r"`grid_shape` must be two positive integers"),
    ],
)
def test_plot_image_attention_errors(kwargs, message):
    from attnlayers.visualize import plot_image_attention

    args = {"image": _scene(), "words": CAPTION, "weights": _grid_weights(4), "grid_shape": (3, 4)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        plot_image_attention(args.pop("image"), args.pop("words"), args.pop("weights"), **args)
