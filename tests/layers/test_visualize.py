"""attnlayers.visualize: heatmaps drawn and saved, inputs validated, matplotlib stays optional."""

import importlib.util
import sys

import numpy as np
import pytest
from keras import ops

from attnlayers import visualize
from attnlayers.visualize import plot_attention, plot_attention_heads

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is an optional extra"
)

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


@needs_matplotlib
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


@needs_matplotlib
def test_plot_attention_numpy_without_tokens_or_path(tmp_path):
    import matplotlib.figure

    fig = plot_attention(np.eye(4, 6, dtype="float64"))
    assert isinstance(fig, matplotlib.figure.Figure)
    assert list(tmp_path.iterdir()) == []


@needs_matplotlib
def test_plot_attention_single_step_and_string_tokens(tmp_path):
    path = tmp_path / "step.png"
    fig = plot_attention(_weights(len(SRC)), source_tokens=" ".join(SRC), path=path)
    assert fig.axes[0].images[0].get_array().shape == (1, len(SRC))
    _check_png(path, min_bytes=2_000)


@needs_matplotlib
def test_plot_attention_into_existing_axes(tmp_path):
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2)
    returned = plot_attention(_weights(3, 3), ax=right, cmap="gray", path=tmp_path / "mine.png")
    assert returned is fig
    assert right.images and not left.images
    assert plt.fignum_exists(fig.number)  # the caller's figure is left open
    assert (tmp_path / "mine.png").exists()


@needs_matplotlib
def test_saved_figures_do_not_accumulate_in_pyplot(tmp_path):
    import matplotlib.pyplot as plt

    if plt.get_backend().lower() != "agg":
        pytest.skip("figures are kept open for interactive backends")
    before = len(plt.get_fignums())
    for i in range(3):
        plot_attention(_weights(3, 4), path=tmp_path / f"{i}.png")
        plot_attention_heads(_weights(2, 3, 4), path=tmp_path / f"heads{i}.png")
    assert len(plt.get_fignums()) == before


@needs_matplotlib
def test_plot_attention_reduced_precision_input(tmp_path):
    path = tmp_path / "half.png"
    plot_attention(ops.cast(_weights(5, 7), "float16"), path=path)
    _check_png(path, min_bytes=2_000)


@needs_matplotlib
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


@needs_matplotlib
def test_plot_attention_rejects_multi_head_weights():
    with pytest.raises(ValueError, match=r"received shape \(2, 4, 6\).*plot_attention_heads"):
        plot_attention(_weights(2, 4, 6))


@needs_matplotlib
def test_plot_attention_rejects_non_numeric():
    with pytest.raises(ValueError, match="must be numeric"):
        plot_attention(np.array([["a", "b"]]))


@needs_matplotlib
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


@needs_matplotlib
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


@needs_matplotlib
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
