"""attnlayers.viewer: the page is self-contained, its data round-trips within the uint16 quantization, tokens are
escaped, the maps of every shape the library returns are taken, bad input gets clear ValueErrors. (The page in a
real browser: tests/test_viewer_browser.py.)"""

import base64
import re
import struct

import numpy as np
import pytest
from keras import ops

from attnlayers import visualize
from attnlayers.viewer import AttentionViewer, read_attention_viewer, write_attention_viewer

QUANTUM = 1 / 131070  # half a uint16 step over [0, 1]


def _softmax(*shape, seed=0):
    logits = np.random.default_rng(seed).normal(size=shape) * 3
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


WORDS = "the cat sat on the mat".split()


def test_page_is_self_contained(tmp_path):
    viewer = AttentionViewer("offline")
    viewer.add_attention("self", _softmax(2, 3, 6, 6), WORDS)
    viewer.add_image("caption", np.zeros((8, 8, 3), "uint8"), _softmax(3, 4), ["a", "red", "dot"])
    page = viewer.to_html()
    assert not re.search(r"https?://", page), "the page names a network address"
    assert not re.search(r"<(script|img|link|iframe)\b[^>]*\b(src|href)\s*=", page, re.I), "an external resource"
    assert "<link" not in page and "@import" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for script in re.findall(r"<script\b[^>]*>", page):  # the code inline, the data not executed
        assert "src" not in script
    assert page.count("<script>") == 1 and "<style>" in page
    path = viewer.write(tmp_path / "sub" / "viewer.html")
    assert open(path, encoding="utf-8").read() == page


@pytest.mark.parametrize(
    "shape, layers, heads",
    [((5, 6), 1, 1), ((3, 5, 6), 1, 3), ((2, 3, 5, 6), 2, 3), ((1, 2, 3, 5, 6), 2, 3)],
    ids=["alignment", "one-layer", "layers", "batch-of-one"],
)
def test_maps_round_trip_within_the_quantization(tmp_path, shape, layers, heads):
    weights = _softmax(*shape)
    target = "le chat est assis .".split()
    path = write_attention_viewer(tmp_path / "v.html", weights, source_tokens=WORDS, target_tokens=target,
                                  name="cross", title="t")
    page = read_attention_viewer(path)
    entry = page["sets"]["cross"]
    assert entry["kind"] == "cross" and entry["source_tokens"] == WORDS and entry["target_tokens"] == target
    assert entry["weights"].shape == (layers, heads, 5, 6)
    np.testing.assert_allclose(entry["weights"].ravel(), weights.ravel(), rtol=0, atol=QUANTUM + 1e-12)
    # what the page shows, 3 decimals, is the weight to 3 decimals
    assert np.abs(np.round(entry["weights"], 3) - weights.reshape(entry["weights"].shape)).max() <= 0.0005 + QUANTUM


def test_per_layer_lists_tensors_and_other_ranges():
    per_layer = [ops.convert_to_tensor(_softmax(1, 2, 4, 4, seed=i).astype("float32")) for i in range(3)]
    viewer = AttentionViewer().add_attention("stack", per_layer, "a b c d")  # a Transformer stack's list
    assert viewer.sets[0]["weights"].shape == (3, 2, 4, 4) and viewer.sets[0]["kind"] == "self"
    scores = np.linspace(-2.0, 3.0, 16).reshape(4, 4)  # not weights: the page keeps the range
    viewer.add_attention("scores", scores)
    back = read_attention_viewer(viewer.to_html())["sets"]["scores"]
    assert back["target_tokens"] == ["0", "1", "2", "3"]
    np.testing.assert_allclose(back["weights"][0, 0], scores, atol=5.0 / 131070 + 1e-12)


def test_tokens_are_escaped():
    nasty = ["</script><script>alert(1)</script>", "a & b", '"quoted"', "<!--", "caf\u00e9", "\u2581piece"]
    page = AttentionViewer("<title> & </script>").add_attention("x", _softmax(6, 6), nasty).to_html()
    assert page.count("</script>") == page.count("<script")  # no token closes an element
    assert "<title>&lt;title&gt; &amp; &lt;/script&gt;</title>" in page
    back = read_attention_viewer(page)
    assert back["sets"]["x"]["source_tokens"] == nasty and back["title"] == "<title> & </script>"


def test_image_sets_round_trip_with_their_grid():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (12, 16, 3)).astype("uint8")
    words = ["a", "red", "square"]
    viewer = AttentionViewer().add_image("caption", image, _softmax(3, 12), words, grid_shape=(3, 4))
    vit = _softmax(2, 2, 5, 5)  # [CLS] + 2 x 2 patches
    viewer.add_image("patches", image[..., 0], vit, grid_shape=(2, 2), grid_start=1, patch_queries=True)
    viewer.add_image("per word", image, _softmax(2, 3, 4).reshape(2, 3, 4) / 1.0, ["b", "c"])  # (T, h, w)
    page = viewer.to_html()
    back = read_attention_viewer(page)
    caption, patches = back["images"]["caption"], back["images"]["patches"]
    assert caption["grid"] == (3, 4) and caption["queries"] == words and caption["grid_start"] == 0
    np.testing.assert_allclose(caption["weights"][0, 0], _softmax(3, 12), atol=QUANTUM + 1e-12)
    assert patches["queries"] == ["token 0", "(0, 0)", "(0, 1)", "(1, 0)", "(1, 1)"]
    assert patches["weights"].shape == (2, 2, 5, 5) and back["images"]["per word"]["grid"] == (3, 4)
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (16, 12)  # width, height


def test_bert_base_sized_maps_stay_a_few_megabytes():
    weights = _softmax(12, 12, 128, 128).astype("float32")
    page = AttentionViewer().add_attention("bert", weights, [f"t{i}" for i in range(128)]).to_html()
    assert len(page) < 6_000_000, f"{len(page) / 1e6:.1f} MB for 12 x 12 heads on 128 tokens"
    assert len(page) < 2.2 * weights.size  # bytes per weight: float32 would be 4 (5.3 as base64)


def test_visualize_reexports_the_viewer():
    assert visualize.AttentionViewer is AttentionViewer
    assert visualize.write_attention_viewer is write_attention_viewer


def test_bad_input_gets_clear_errors():
    viewer = AttentionViewer()
    with pytest.raises(ValueError, match=r"`tokens` has 5 tokens but the weights have 6"):
        viewer.add_attention("a", _softmax(6, 6), WORDS[:5])
    with pytest.raises(ValueError, match=r"`target_tokens` has 2 tokens but the weights have 5"):
        viewer.add_attention("a", _softmax(5, 6), source_tokens=WORDS, target_tokens=["x", "y"])
    with pytest.raises(ValueError, match=r"`source_tokens` has 5 tokens but the weights have 6"):
        viewer.add_attention("a", _softmax(5, 6), source_tokens=WORDS[:5])
    bad = _softmax(2, 4, 4)
    bad[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"non-finite.*index \(0, 1, 2, 3\)"):
        viewer.add_attention("a", bad)
    with pytest.raises(ValueError, match=r"must have shape .*received shape \(6,\)"):
        viewer.add_attention("a", _softmax(6))
    with pytest.raises(ValueError, match=r"received shape \(2, 1, 2, 3, 4\)"):
        viewer.add_attention("a", _softmax(2, 1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"empty"):
        viewer.add_attention("a", np.zeros((2, 0)))
    with pytest.raises(ValueError, match=r"square"):
        viewer.add_attention("a", _softmax(5, 6), WORDS)
    with pytest.raises(ValueError, match=r"not both"):
        viewer.add_attention("a", _softmax(6, 6), WORDS, source_tokens=WORDS)
    with pytest.raises(ValueError, match=r"must be numeric"):
        viewer.add_attention("a", np.array([["x", "y"]]))
    with pytest.raises(ValueError, match=r"share one shape"):
        viewer.add_attention("a", [_softmax(2, 3, 3), _softmax(2, 4, 4)])
    viewer.add_attention("a", _softmax(6, 6), WORDS)
    with pytest.raises(ValueError, match=r"already used"):
        viewer.add_attention("a", _softmax(6, 6))
    with pytest.raises(ValueError, match=r"empty"):
        AttentionViewer().to_html()
    with pytest.raises(ValueError, match=r"`view`"):
        AttentionViewer(view="graph")
    with pytest.raises(ValueError, match=r"needs images"):
        AttentionViewer(view="image").add_attention("a", _softmax(2, 2)).to_html()
    image = np.zeros((8, 8, 3), "uint8")
    with pytest.raises(ValueError, match=r"not a square number: pass grid_shape"):
        viewer.add_image("i", image, _softmax(2, 12))
    with pytest.raises(ValueError, match=r"fewer than grid_start=1"):
        viewer.add_image("i", image, _softmax(2, 16), grid_shape=(4, 4), grid_start=1)
    with pytest.raises(ValueError, match=r"`queries` has 3 tokens but the weights have 2"):
        viewer.add_image("i", image, _softmax(2, 16), ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"patch_queries.*T = K"):
        viewer.add_image("i", image, _softmax(2, 5), grid_shape=(2, 2), grid_start=1, patch_queries=True)
    with pytest.raises(ValueError, match=r"`grid_shape` must be two positive integers"):
        viewer.add_image("i", image, _softmax(2, 4), grid_shape=(2, 0))
    with pytest.raises(ValueError, match=r"`image` must be"):
        viewer.add_image("i", np.zeros((8,)), _softmax(2, 4))
