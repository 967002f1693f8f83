"""Each application's one-call viewer hook (``<application>.viewer.attention_viewer``) on a tiny model: the maps
it puts in the page are the model's own (compared with another path through the model), with the right tokens,
and bad input is refused clearly. The pages in Chromium: tests/test_viewer_browser.py."""

import numpy as np
import pytest
import viewer_pages
from attnlayers.viewer import read_attention_viewer

QUANTUM = 1 / 131070


def _page_matches(viewer):
    """What the page stores equals what the hook collected, within the quantization."""
    back = read_attention_viewer(viewer.to_html())
    for entry in viewer.sets:
        np.testing.assert_allclose(back["sets"][entry["name"]]["weights"], entry["weights"], atol=QUANTUM + 1e-9)
    for entry in viewer.images:
        np.testing.assert_allclose(back["images"][entry["name"]]["weights"], entry["weights"], atol=QUANTUM + 1e-9)


def test_nmt_rnn_alignment_and_transformer_sets():
    viewer, expected = viewer_pages.nmt_viewer("bahdanau")
    (alignment,) = viewer.sets
    assert alignment["name"] == "alignment" and alignment["kind"] == "cross"
    np.testing.assert_allclose(alignment["weights"][0, 0], expected["alignment"], atol=1e-6)
    assert alignment["target_tokens"][-1] == "[END]"
    assert len(alignment["source_tokens"]) == expected["alignment"].shape[1]
    _page_matches(viewer)

    viewer, expected = viewer_pages.nmt_viewer("transformer")
    names = [s["name"] for s in viewer.sets]
    assert names == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    cross = viewer.sets[2]["weights"]
    assert cross.shape == (2, 2) + expected["cross-attention"].shape[-2:]
    np.testing.assert_allclose(cross, expected["cross-attention"], atol=1e-6)
    encoder, decoder = viewer.sets[0]["weights"], viewer.sets[1]["weights"]
    np.testing.assert_allclose(encoder.sum(-1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(decoder, k=1), 0.0), "the decoder's self-attention sees the future"
    assert viewer.sets[1]["target_tokens"][0] == "[START]"
    _page_matches(viewer)


def test_nmt_hook_refuses_bad_input():
    from attnlayers.applications.nmt import build_model
    from attnlayers.applications.nmt.viewer import attention_viewer

    _, tokenizers = viewer_pages.nmt_task()
    with pytest.raises(ValueError, match=r"`source` must be one sentence"):
        attention_viewer(None, tokenizers, ["a", "b"])
    plain = build_model("seq2seq", tokenizers.source.vocabulary_size, tokenizers.target.vocabulary_size,
                        embedding_dim=8, units=8)
    with pytest.raises(ValueError, match=r"has no attention"):
        attention_viewer(plain, tokenizers, "toka lufe", target="hil zol")


def test_bert_self_attention_over_the_packed_pair():
    viewer, expected = viewer_pages.bert_viewer()
    (entry,) = viewer.sets
    tokens = entry["target_tokens"]
    assert tokens == ["[CLS]", "the", "big", "cat", "sat", "on", "a", "mat", ".", "[SEP]", "it", "was", "tired", ".",
                      "[SEP]"]
    assert entry["weights"].shape == (3, 4, 15, 15)
    np.testing.assert_allclose(entry["weights"][0], expected["layer 1"], atol=1e-6)
    np.testing.assert_allclose(entry["weights"].sum(-1), 1.0, atol=1e-5)
    _page_matches(viewer)
    from attnlayers.applications.bert.viewer import attention_viewer

    with pytest.raises(ValueError, match=r"`pair` must be a str"):
        attention_viewer(None, None, "a", pair=3)


def test_gpt_causal_attention_over_prompt_and_generation():
    viewer, expected = viewer_pages.gpt_viewer()
    (entry,) = viewer.sets
    ids = expected["generated"]
    length = expected["prompt_tokens"] + 6
    assert entry["weights"].shape == (2, 2, length, length)
    text = expected["tokenizer"].detokenize(ids[:length]).numpy().decode("utf-8", "replace")
    assert "".join(entry["target_tokens"]).replace("\u00a0", " ") == text  # each token's own text
    assert np.allclose(np.triu(entry["weights"], k=1), 0.0)
    np.testing.assert_allclose(entry["weights"].sum(-1), 1.0, atol=1e-5)
    _page_matches(viewer)
    from attnlayers.applications.gpt.viewer import attention_viewer

    with pytest.raises(ValueError, match=r"`prompt` must be a non-empty string"):
        attention_viewer(None, None, "")


@pytest.mark.parametrize("kind", ["soft", "transformer"])
def test_captioning_maps_per_word(kind):
    viewer, expected = viewer_pages.captioning_viewer(kind)
    (image,) = viewer.images
    assert image["queries"] == ["a", "big", "red", "circle", "<end>"] and image["grid"] == tuple(expected["grid"])
    assert image["image"].shape == (16, 16, 3)
    # the model's attention_maps: Show, Attend and Tell's map; the Transformer's last layer, heads averaged
    shown = image["weights"][0, 0] if kind == "soft" else image["weights"][-1].mean(axis=0)
    np.testing.assert_allclose(shown, expected["maps"], atol=1e-6)
    if kind == "transformer":
        assert [s["name"] for s in viewer.sets] == ["decoder self-attention"]
        assert viewer.sets[0]["target_tokens"] == ["<start>", "a", "big", "red", "circle"]
    _page_matches(viewer)


def test_vit_patch_maps_and_rollout():
    viewer, expected = viewer_pages.vit_viewer()
    patches, rollout = viewer.images
    assert patches["grid"] == (4, 4) and patches["grid_start"] == 1 and patches["patch_queries"]
    assert patches["queries"][:3] == ["[CLS]", "(0, 0)", "(0, 1)"]
    np.testing.assert_allclose(patches["weights"], expected["maps"], atol=1e-6)
    np.testing.assert_allclose(rollout["weights"][0, 0], expected["rollout"], atol=1e-6)
    np.testing.assert_allclose(viewer.sets[0]["weights"], expected["maps"], atol=1e-6)
    _page_matches(viewer)
    from attnlayers.applications.vision import ViT
    from attnlayers.applications.vision.viewer import attention_viewer

    with pytest.raises(ValueError, match=r"image_shape \(8, 8, 1\)"):
        attention_viewer(ViT({"image_shape": (8, 8, 1), "patch_size": 2, "num_layers": 1, "num_heads": 1,
                              "hidden_dim": 4, "mlp_dim": 4}), np.zeros((1, 8, 8, 1)))
