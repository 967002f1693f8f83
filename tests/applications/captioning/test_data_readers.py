"""Captioning readers on tiny fixtures written here: Flickr8k (token file, image folders, split files), COCO
captions JSON, the seeded split by image, `parse_data_argument`, and the one-line error every bad input gets."""

import json
import os

import numpy as np
import pytest
from attnlayers.applications.captioning import data
from PIL import Image

_TOKENS = (
    "a.jpg#0\tA dog runs.\n"
    "a.jpg#1\tA brown dog, running!\n"
    "b.png#0\tTwo cats sleep\n"
    "\n"
    "c.jpg#0\tA red car\r\n"
    "d.png#0\tA grey wall\n"
    "d.png#1\tA wall\n"
)


def _message(error):
    text = str(error.value)
    assert "\n" not in text, text  # one line
    return text


def _write_images(folder, names):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names:
        pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        image = Image.fromarray(pixels[..., 0]) if name.startswith("d") else Image.fromarray(pixels)  # d: grayscale
        image.save(os.path.join(folder, name))


def _flickr8k(root, *, image_folder="Flicker8k_Dataset", tokens=_TOKENS, images=("a.jpg", "b.png", "c.jpg", "d.png")):
    root.mkdir(exist_ok=True)
    (root / "Flickr8k.token.txt").write_text(tokens, encoding="utf-8", newline="")
    _write_images(root / image_folder, images)
    return root


def _write_splits(folder, train, dev, test):
    for name, images in (("train", train), ("dev", dev), ("test", test)):
        (folder / f"Flickr_8k.{name}Images.txt").write_text("".join(i + "\n" for i in images))


def test_read_flickr8k(tmp_path):
    root = _flickr8k(tmp_path / "flickr")
    result = data.read_flickr8k(root)
    assert isinstance(result, data.CaptionSet) and result.images is None
    assert [os.path.basename(p) for p in result.image_paths] == ["a.jpg", "b.png", "c.jpg", "d.png"]
    assert all(os.path.isabs(p) and os.path.isfile(p) for p in result.image_paths)
    assert result.captions == [["A dog runs.", "A brown dog, running!"], ["Two cats sleep"], ["A red car"],
                               ["A grey wall", "A wall"]]  # fmt: skip
    assert result.num_captions == 6


def test_read_flickr8k_folders(tmp_path):
    images = _flickr8k(tmp_path / "kaggle", image_folder="Images")  # the Kaggle layout's folder name
    assert len(data.read_flickr8k(images)) == 4
    text = tmp_path / "original"
    (text / "Flickr8k_text").mkdir(parents=True)
    (text / "Flickr8k_text" / "Flickr8k.token.txt").write_text(_TOKENS)
    _write_images(tmp_path / "elsewhere", ["a.jpg", "b.png", "c.jpg", "d.png"])
    result = data.read_flickr8k(text, image_dir=tmp_path / "elsewhere")
    assert os.path.dirname(result.image_paths[0]) == str(tmp_path / "elsewhere")


def test_read_flickr8k_split_files(tmp_path):
    root = _flickr8k(tmp_path / "flickr")
    _write_splits(root, ["d.png", "a.jpg"], ["b.png"], ["c.jpg"])
    splits = data.read_flickr8k(root)
    assert isinstance(splits, data.CaptionSplits)
    names = [[os.path.basename(p) for p in s.image_paths] for s in splits]
    assert names == [["a.jpg", "d.png"], ["b.png"], ["c.jpg"]]
    assert splits.train.captions[1] == ["A grey wall", "A wall"]
    assert data.parse_data_argument(f"flickr8k:{root}") == splits


def test_read_flickr8k_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        data.read_flickr8k(tmp_path / "nowhere")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(FileNotFoundError) as error:
        data.read_flickr8k(tmp_path / "empty_dir")
    assert "Flickr8k.token.txt not found" in _message(error)

    no_images = tmp_path / "no_images"
    no_images.mkdir()
    (no_images / "Flickr8k.token.txt").write_text(_TOKENS)
    with pytest.raises(FileNotFoundError) as error:
        data.read_flickr8k(no_images)
    assert "no image folder" in _message(error) and "Flicker8k_Dataset/" in _message(error)

    no_tab = _flickr8k(tmp_path / "no_tab", tokens=_TOKENS.replace("b.png#0\t", "b.png#0 "))
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(no_tab)
    message = _message(error)
    assert "Flickr8k.token.txt, line 3" in message and "IMAGE.jpg#N<TAB>caption" in message

    empty_caption = _flickr8k(tmp_path / "empty_caption", tokens=_TOKENS.replace("Two cats sleep", " "))
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(empty_caption)
    assert "line 3: empty caption for b.png" in _message(error) and "skip_empty=True" in _message(error)
    kept = data.read_flickr8k(empty_caption, skip_empty=True)
    assert [os.path.basename(p) for p in kept.image_paths] == ["a.jpg", "c.jpg", "d.png"]

    missing = _flickr8k(tmp_path / "missing", images=("a.jpg", "d.png"))
    with pytest.raises(FileNotFoundError) as error:
        data.read_flickr8k(missing)
    message = _message(error)
    assert "2 of 4 images named in" in message and "b.png, c.jpg" in message and "skip_missing=True" in message
    kept = data.read_flickr8k(missing, skip_missing=True)
    assert [os.path.basename(p) for p in kept.image_paths] == ["a.jpg", "d.png"]
    _write_splits(missing, ["a.jpg", "b.png"], ["c.jpg"], ["d.png"])  # skipped images drop out of the splits
    splits = data.read_flickr8k(missing, skip_missing=True)
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (1, 0, 1)

    blank = _flickr8k(tmp_path / "blank", tokens="\n\n")
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(blank)
    assert "holds no caption" in _message(error)


def test_read_flickr8k_bad_split_files(tmp_path):
    root = _flickr8k(tmp_path / "flickr")
    (root / "Flickr_8k.trainImages.txt").write_text("a.jpg\n")
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(root)
    assert "only some of the Flickr8k split files" in _message(error)
    _write_splits(root, ["a.jpg", "x.jpg"], ["b.png"], ["c.jpg"])
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(root)
    assert "trainImages.txt lists 1 image with no caption" in _message(error) and "x.jpg" in _message(error)
    _write_splits(root, ["a.jpg", "b.png"], ["b.png"], ["c.jpg"])
    with pytest.raises(ValueError) as error:
        data.read_flickr8k(root)
    assert "devImages.txt lists 1 image that Flickr_8k.trainImages.txt lists too: b.png" in _message(error)


def _coco(root, split="train2017", images=("1.jpg", "2.png", "3.jpg"), annotations=None, image_entries=None):
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    if image_entries is None:
        image_entries = [{"id": 10 + i, "file_name": name} for i, name in enumerate(("1.jpg", "2.png", "3.jpg"))]
        image_entries.append({"id": 99, "file_name": "uncaptioned.jpg"})
    if annotations is None:
        annotations = [
            {"id": 1, "image_id": 11, "caption": "A plane."},
            {"id": 2, "image_id": 10, "caption": "A boat"},
            {"id": 3, "image_id": 11, "caption": "Two planes"},
            {"id": 4, "image_id": 12, "caption": "A bird"},
        ]
    path = root / "annotations" / f"captions_{split}.json"
    path.write_text(json.dumps({"info": {}, "images": image_entries, "annotations": annotations}))
    _write_images(root / split, images)
    return path


def test_read_coco(tmp_path):
    path = _coco(tmp_path / "coco")
    result = data.read_coco(path)
    assert [os.path.basename(p) for p in result.image_paths] == ["1.jpg", "2.png", "3.jpg"]  # no uncaptioned
    assert os.path.dirname(result.image_paths[0]) == str(tmp_path / "coco" / "train2017")
    assert result.captions == [["A boat"], ["A plane.", "Two planes"], ["A bird"]]
    _write_images(tmp_path / "mine", ["1.jpg", "2.png", "3.jpg"])
    assert data.read_coco(path, tmp_path / "mine").captions == result.captions


def test_read_coco_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found: read_coco expects"):
        data.read_coco(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError) as error:
        data.read_coco(bad)
    assert "bad.json is not JSON" in _message(error)
    bad.write_text(json.dumps({"images": []}))
    with pytest.raises(ValueError, match="lists 'images' and 'annotations'; received"):
        data.read_coco(bad)
    bad.write_text(json.dumps({"images": [{"id": 1}], "annotations": []}))
    with pytest.raises(ValueError, match=r"images\[0\] has no 'file_name'"):
        data.read_coco(bad)
    bad.write_text(json.dumps({"images": [{"id": 1, "file_name": "a"}], "annotations": [{"caption": "x"}]}))
    with pytest.raises(ValueError, match=r"annotations\[0\] has no 'image_id'"):
        data.read_coco(bad)

    root = tmp_path / "unknown"
    path = _coco(root, annotations=[{"image_id": 10, "caption": "A boat"}, {"image_id": 7, "caption": "x"}])
    with pytest.raises(ValueError) as error:
        data.read_coco(path)
    assert "1 annotation name image ids that 'images' does not list: 7" in _message(error)

    annotations = [{"image_id": 10, "caption": "A boat"}, {"image_id": 11, "caption": ""}]
    path = _coco(tmp_path / "empty", annotations=annotations)
    with pytest.raises(ValueError) as error:
        data.read_coco(path)
    assert r"annotations[1] has an empty caption" in _message(error)
    assert len(data.read_coco(path, skip_empty=True)) == 1

    path = _coco(tmp_path / "missing", images=("1.jpg",))
    with pytest.raises(FileNotFoundError) as error:
        data.read_coco(path)
    assert "2 of 3 images named in" in _message(error) and "2.png, 3.jpg" in _message(error)
    assert len(data.read_coco(path, skip_missing=True)) == 1

    path = _coco(tmp_path / "nothing", annotations=[])
    with pytest.raises(ValueError, match="holds no captioned image: the data set is empty"):
        data.read_coco(path)

    path = _coco(tmp_path / "no_folder", split="val2017", images=())
    os.rmdir(tmp_path / "no_folder" / "val2017")
    with pytest.raises(FileNotFoundError) as error:
        data.read_coco(path)
    assert "No image folder for" in _message(error) and "image_dir=" in _message(error)


def test_split_caption_set():
    images = np.zeros((40, 4, 4, 3), np.uint8)
    images[:, 0, 0, 0] = np.arange(40)
    full = data.CaptionSet(images=images, captions=[[f"caption {i}"] for i in range(40)])
    splits = data.split_caption_set(full, num_test=1000, num_validation=500, seed=1)
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (28, 4, 8)  # n // 5, n // 10
    ids = [set(s.images[:, 0, 0, 0].tolist()) for s in splits]
    assert set.union(*ids) == set(range(40)) and sum(len(i) for i in ids) == 40
    assert all(list(s.images[:, 0, 0, 0]) == sorted(s.images[:, 0, 0, 0]) for s in splits)  # original order
    assert data.split_caption_set(full, seed=1).test.captions == splits.test.captions
    assert data.split_caption_set(full, seed=2).test.captions != splits.test.captions
    exact = data.split_caption_set(full, num_test=3, num_validation=0)
    assert (len(exact.train), len(exact.validation), len(exact.test)) == (37, 0, 3)
    with pytest.raises(ValueError, match="at least 3 images"):
        data.split_caption_set(full.select([0, 1]))
    with pytest.raises(ValueError, match="num_test"):
        data.split_caption_set(full, num_test=-1)


def test_parse_data_argument(tmp_path):
    splits = data.parse_data_argument("scenes:30", num_test=6, num_validation=4, seed=1)
    assert [len(s) for s in splits] == [30, 4, 6] and splits.train.images.shape == (30, 64, 64, 3)

    root = _flickr8k(tmp_path / "flickr")
    splits = data.parse_data_argument(f"flickr8k:{root}", seed=0)  # no split files: 1 test, 1 validation
    assert [len(s) for s in splits] == [2, 1, 1]
    names = {os.path.basename(p) for s in splits for p in s.image_paths}
    assert names == {"a.jpg", "b.png", "c.jpg", "d.png"}

    coco = tmp_path / "coco"
    _coco(coco, "train2017")
    _coco(coco, "val2017")
    splits = data.parse_data_argument(f"coco:{coco}")  # val: 1 test, 1 validation, the rest joins training
    assert [len(s) for s in splits] == [4, 1, 1]
    assert all("val2017" in p for s in splits[1:] for p in s.image_paths)
    single = data.parse_data_argument(f"coco:{coco / 'annotations' / 'captions_train2017.json'}")
    assert [len(s) for s in single] == [1, 1, 1]

    for argument, pattern in (
        ("imagenet:/data", "Unknown data argument 'imagenet:/data'; expected one of"),
        ("flickr8k", "names no directory; expected flickr8k:DIR"),
        ("coco:", "names no directory"),
        ("scenes:many", "scenes:NUM_TRAIN"),
    ):
        with pytest.raises(ValueError, match=pattern):
            data.parse_data_argument(argument)
    with pytest.raises(FileNotFoundError):
        data.parse_data_argument(f"coco:{tmp_path / 'nowhere'}")
    with pytest.raises(FileNotFoundError, match="no annotations/captions_"):
        data.parse_data_argument(f"coco:{tmp_path / 'flickr'}")
