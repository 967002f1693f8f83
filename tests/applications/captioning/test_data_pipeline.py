"""Caption vocabulary (special ids, normalisation, round trips, save / load) and the tf.data pipeline (static
shapes and dtypes, [start] / [end] placement, one example per reference, files decoded and resized, truncation
counted and warned about)."""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf
from attnlayers.applications.captioning import data
from PIL import Image


@pytest.fixture(scope="module")
def splits():
    return data.load_scenes(48, 8, 8, seed=4)


@pytest.fixture(scope="module")
def vocabulary(splits):
    return data.CaptionVocabulary.build(splits.train)


# --------------------------------------------------------------------------------------------------
# Vocabulary


def test_special_ids_and_words(vocabulary, splits):
    v = vocabulary
    assert (v.pad_token_id, v.start_token_id, v.end_token_id, v.unk_token_id) == (0, 1, 2, 3)
    assert v.words[:4] == ["<pad>", "<start>", "<end>", "<unk>"] == list(data.SPECIAL_TOKENS)
    assert v.words[4] == "a"  # the most frequent word first
    assert set(v.words[4:]) == {w for (c,) in splits.train.captions for w in c.split()}
    assert v.vocabulary_size == len(v) == len(v.words) <= 4 + 4 + 5 + 2 + 3 + 1  # a, shapes, colours, sizes, rels
    assert data.CaptionVocabulary.build(splits) == v  # a CaptionSplits gives its train split


def test_encode_decode_round_trip(vocabulary, splits):
    for (caption,) in splits.test.captions:
        ids = vocabulary.encode(caption)
        assert min(ids) > vocabulary.unk_token_id and len(ids) == len(caption.split())
        assert vocabulary.decode(ids) == caption
        assert vocabulary.decode([1, *ids, 2, 0, 0]) == caption  # start / pad skipped, stops at end
        assert vocabulary.decode(np.asarray([1, *ids, 2, *ids], np.int32)) == caption
    assert vocabulary.encode("A BIG, red... circle!") == vocabulary.encode("a big red circle")
    assert vocabulary.encode("a purple circle")[1] == vocabulary.unk_token_id
    assert vocabulary.decode(vocabulary.encode("a purple circle")) == "a <unk> circle"
    assert data.normalize_caption("A man's T-shirt, blue.") == ["a", "mans", "tshirt", "blue"]
    assert vocabulary.token_to_id("a") == 4 and vocabulary.token_to_id("zebra") == 3
    assert vocabulary.id_to_token(2) == "<end>"
    with pytest.raises(ValueError, match="token_id"):
        vocabulary.id_to_token(vocabulary.vocabulary_size)


def test_build_thresholds():
    captions = ["the cat sat", "The cat ran.", "a cat", ["the dog", "the end"]]
    v = data.CaptionVocabulary.build(captions, min_count=2)
    assert v.words[4:] == ["the", "cat"]  # 4 and 3 occurrences; once-seen words dropped
    assert data.CaptionVocabulary.build(captions, max_words=3).words[4:] == ["the", "cat", "a"]  # ties: a-z
    with pytest.raises(ValueError, match="no word seen at least min_count=9"):
        data.CaptionVocabulary.build(captions, min_count=9)
    with pytest.raises(ValueError, match="min_count"):
        data.CaptionVocabulary.build(captions, min_count=0)
    with pytest.raises(ValueError, match="single string"):
        data.CaptionVocabulary.build("the cat")
    with pytest.raises(ValueError, match="duplicate"):
        data.CaptionVocabulary(["cat", "cat"])
    with pytest.raises(ValueError, match="special token"):
        data.CaptionVocabulary(["cat", "<end>"])
    with pytest.raises(ValueError, match="without whitespace"):
        data.CaptionVocabulary(["black cat"])


def test_save_and_load(vocabulary, tmp_path):
    path = tmp_path / "vocabulary.txt"
    vocabulary.save(path)
    assert path.read_text(encoding="utf-8").splitlines()[:5] == ["<pad>", "<start>", "<end>", "<unk>", "a"]
    loaded = data.CaptionVocabulary.load(path)
    assert loaded == vocabulary and loaded.words == vocabulary.words
    with pytest.raises(FileNotFoundError, match="missing.txt not found"):
        data.CaptionVocabulary.load(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("a\nb\n")
    with pytest.raises(ValueError, match="bad.txt: a caption vocabulary starts with the lines"):
        data.CaptionVocabulary.load(bad)
    bad.write_text("<pad>\n<start>\n<end>\n<unk>\ncat\ncat\n")
    with pytest.raises(ValueError, match="bad.txt: .*duplicate"):
        data.CaptionVocabulary.load(bad)


# --------------------------------------------------------------------------------------------------
# Dataset


def test_dataset_shapes_and_specials(splits, vocabulary):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scene captions (<= 19 words) fit the default max_length=20
        ds = data.make_dataset(splits.train, vocabulary, batch_size=16, shuffle=False, drop_remainder=True)
    (images_spec, in_spec), out_spec = ds.element_spec
    assert images_spec.shape == (16, 64, 64, 3) and images_spec.dtype == tf.uint8
    assert in_spec.shape == out_spec.shape == (16, 20) and in_spec.dtype == out_spec.dtype == tf.int32
    batches = list(ds)
    assert len(batches) == 3
    (images, caption_in), caption_out = batches[1]
    np.testing.assert_array_equal(images.numpy(), splits.train.images[16:32])  # in order when not shuffled
    caption_in, caption_out = caption_in.numpy(), caption_out.numpy()
    for row in range(16):
        words = vocabulary.encode(splits.train.captions[16 + row][0])
        n = len(words)
        assert list(caption_in[row, : n + 1]) == [1, *words] and not caption_in[row, n + 1 :].any()
        assert list(caption_out[row, : n + 1]) == [*words, 2] and not caption_out[row, n + 1 :].any()

    shuffled = data.make_dataset(splits.train, vocabulary, batch_size=16, seed=3)
    assert shuffled.element_spec[1].shape.as_list() == [None, 20]  # batch dimension dynamic without drop
    first, second = ([b[1].numpy() for b in shuffled] for _ in range(2))
    assert sum(len(b) for b in first) == 48
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))  # reshuffled each epoch
    again = [b[1].numpy() for b in data.make_dataset(splits.train, vocabulary, batch_size=16, seed=3)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))  # seeded


def test_truncation_counted_and_warned(splits, vocabulary):
    lengths = [len(c.split()) for (c,) in splits.train.captions]
    expected = sum(n > 7 for n in lengths)
    assert 0 < expected < len(lengths)
    counts = data.count_truncated(splits.train, vocabulary, 8)
    assert counts == {"captions": expected, "total": 48, "longest": max(lengths)}
    assert data.count_truncated(splits.train, vocabulary)["captions"] == 0
    with pytest.warns(UserWarning, match=rf"{expected} of 48 captions .* max_length - 1 = 7 words"):
        ds = data.make_dataset(splits.train, vocabulary, batch_size=48, max_length=8, shuffle=False)
    (_, caption_in), caption_out = next(iter(ds))
    index, encoded_in, encoded_out = data.encode_captions(splits.train, vocabulary, max_length=8)
    np.testing.assert_array_equal(caption_in.numpy(), encoded_in)
    np.testing.assert_array_equal(caption_out.numpy(), encoded_out)
    assert list(index) == list(range(48))
    cut = [i for i, n in enumerate(lengths) if n > 7]
    assert (encoded_out[cut, 7] == vocabulary.end_token_id).all()  # a cut caption still ends in [end]
    assert (encoded_in[cut, 0] == vocabulary.start_token_id).all()


def test_files_with_several_references(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (8, 12, 3), dtype=np.uint8)).save(folder / "rgb.png")
    Image.fromarray(np.full((10, 10), 200, np.uint8)).save(folder / "gray.png")  # grayscale -> 3 channels
    Image.fromarray(np.full((8, 8, 3), 30, np.uint8)).save(folder / "dark.jpg")
    captions = [["a noisy image", "noise"], ["a grey square"], ["a dark square", "dark", "very dark"]]
    caption_set = data.CaptionSet(image_paths=[str(folder / n) for n in ("rgb.png", "gray.png", "dark.jpg")],
                                  captions=captions)  # fmt: skip
    vocabulary = data.CaptionVocabulary.build(caption_set)
    ds = data.make_dataset(caption_set, vocabulary, batch_size=4, image_size=16, max_length=6, shuffle=False)
    assert ds.element_spec[0][0].shape.as_list() == [None, 16, 16, 3]
    examples = [(image, ci, co) for (images, cis), cos in ds for image, ci, co in zip(images, cis, cos)]
    assert len(examples) == caption_set.num_captions == 6  # one example per (image, reference)
    decoded = [vocabulary.decode(ci.numpy()) for _, ci, _ in examples]
    assert decoded == [c for references in captions for c in references]
    gray = examples[2][0].numpy()
    assert gray.dtype == np.uint8 and gray.shape == (16, 16, 3) and (gray == 200).all()
    assert np.abs(examples[3][0].numpy().astype(int) - 30).max() <= 2  # JPEG, resized
    assert np.array_equal(examples[0][0], examples[1][0])

    small = data.make_scenes(4, image_size=32, seed=0)  # arrays of another size are resized up front
    ds = data.make_dataset(small, data.CaptionVocabulary.build(small), batch_size=4, image_size=16, shuffle=False)
    (images, _), _ = next(iter(ds))
    assert images.shape == (4, 16, 16, 3) and images.dtype == tf.uint8


def test_dataset_errors(splits, vocabulary):
    with pytest.raises(ValueError, match="max_length"):
        data.make_dataset(splits.train, vocabulary, max_length=1)
    with pytest.raises(ValueError, match="batch_size"):
        data.make_dataset(splits.train, vocabulary, batch_size=0)
    with pytest.raises(ValueError, match="empty"):
        data.make_dataset(splits.train.select([]), vocabulary)
    with pytest.raises(ValueError, match="max_length"):
        data.count_truncated(splits.train, vocabulary, max_length=0)


def test_only_the_pipeline_imports_tensorflow():
    """The generator, readers and vocabulary are NumPy / plain Python; the pipeline imports TensorFlow on use."""
    folder = os.path.dirname(data.__file__)
    for name in ("caption_set.py", "scenes.py", "readers.py", "split.py", "vocabulary.py", "pipeline.py"):
        with open(os.path.join(folder, name)) as f:
            top_level = [line for line in f if line.startswith(("import ", "from "))]
        assert not any("tensorflow" in line or "keras" in line for line in top_level), name
