"""Readers of the captioning formats users have, each returning `CaptionSet`s of image file paths: Flickr8k
(`Flickr8k.token.txt` + an image folder, with its split files when present) and COCO captions JSON. A file
that is missing, malformed or names images that are not there raises one line naming the file and the problem
before anything is returned."""

from __future__ import annotations

import json
import os

from ...core.inputs.files import read_lines
from .caption_set import CaptionSet, CaptionSplits

__all__ = ["FLICKR8K_IMAGE_DIRS", "FLICKR8K_SPLIT_FILES", "FLICKR8K_TOKEN_FILE", "read_coco", "read_flickr8k"]

FLICKR8K_TOKEN_FILE = "Flickr8k.token.txt"
FLICKR8K_IMAGE_DIRS = ("Flicker8k_Dataset", "Flickr8k_Dataset", "Images")  # the archive's spelling first
FLICKR8K_SPLIT_FILES = {
    "train": "Flickr_8k.trainImages.txt",
    "validation": "Flickr_8k.devImages.txt",
    "test": "Flickr_8k.testImages.txt",
}
_SHOWN = 5  # names or line numbers listed in an error


def _listing(items) -> str:
    items = list(items)
    shown = ", ".join(str(i) for i in items[:_SHOWN])
    return shown + (", ..." if len(items) > _SHOWN else "")


def _check_images(names: list, image_dir: str, listed_in: str, skip_missing: bool) -> list:
    """`names` whose file exists under `image_dir`; raises FileNotFoundError for missing ones unless
    `skip_missing`."""
    missing = [n for n in names if not os.path.isfile(os.path.join(image_dir, n))]
    if missing and not skip_missing:
        raise FileNotFoundError(
            f"{len(missing)} of {len(names)} images named in {listed_in} are not files in {image_dir}: "
            f"{_listing(missing)} (pass skip_missing=True to leave them and their captions out)."
        )
    missing = set(missing)
    return [n for n in names if n not in missing]


def _caption_set(captions: dict, image_dir: str, source: str) -> CaptionSet:
    if not captions:
        raise ValueError(f"{source} holds no captioned image: the data set is empty.")
    image_dir = os.path.abspath(image_dir)
    return CaptionSet(
        image_paths=[os.path.join(image_dir, name) for name in captions], captions=list(captions.values())
    )


def _find_file(directory: str, name: str) -> str | None:
    for folder in (directory, os.path.join(directory, "Flickr8k_text")):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def _flickr8k_image_dir(directory: str, image_dir) -> str:
    if image_dir is not None:
        if not os.path.isdir(image_dir):
            raise FileNotFoundError(f"{os.fspath(image_dir)} is not a directory: `image_dir` must hold the images.")
        return os.fspath(image_dir)
    for name in FLICKR8K_IMAGE_DIRS:
        if os.path.isdir(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise FileNotFoundError(
        f"{directory} has no image folder: read_flickr8k looks for {', '.join(n + '/' for n in FLICKR8K_IMAGE_DIRS)} "
        "(or pass image_dir=...)."
    )


def _parse_flickr8k_tokens(path: str, encoding: str, skip_empty: bool) -> dict:
    """image name -> captions, in file order, from `IMAGE#N<TAB>caption` lines."""
    lines = read_lines(path, encoding, "read_flickr8k", "one `IMAGE.jpg#N<TAB>caption` line per caption")
    captions, no_tab, empty = {}, [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if "\t" not in line:
            no_tab.append(number)
            continue
        key, caption = line.split("\t", 1)
        image = key.rpartition("#")[0] if "#" in key else key
        image, caption = image.strip(), caption.strip()
        if not image:
            no_tab.append(number)
            continue
        if not caption:
            empty.append((number, image))
            continue
        captions.setdefault(image, []).append(caption)
    if no_tab:
        raise ValueError(
            f"{path}, line {no_tab[0]}: expected `IMAGE.jpg#N<TAB>caption`, received {lines[no_tab[0] - 1][:80]!r} "
            f"({len(no_tab)} such line{'s' if len(no_tab) > 1 else ''}: line {_listing(no_tab)})."
        )
    if empty and not skip_empty:
        number, image = empty[0]
        raise ValueError(
            f"{path}, line {number}: empty caption for {image} ({len(empty)} empty caption"
            f"{'s' if len(empty) > 1 else ''}: line {_listing(n for n, _ in empty)}; pass skip_empty=True to leave "
            "them out)."
        )
    return captions


def read_flickr8k(
    directory, *, image_dir=None, skip_missing: bool = False, skip_empty: bool = False, encoding: str = "utf-8"
):
    """Reads Flickr8k (or any data set in its layout).

    `directory` holds `Flickr8k.token.txt` (directly or in `Flickr8k_text/`), lines `IMAGE.jpg#N<TAB>caption`,
    and an image folder: `Flicker8k_Dataset/` (the archive's spelling), `Flickr8k_Dataset/` or `Images/`, or
    `image_dir`. When the split files `Flickr_8k.trainImages.txt`, `Flickr_8k.devImages.txt` and
    `Flickr_8k.testImages.txt` (one image name per line) sit beside the token file, the result is split by them
    (images they do not list are left out).

    Args:
        directory: the data set folder.
        image_dir: the image folder, when it is none of the above.
        skip_missing: leave out images whose file does not exist (and their captions) instead of raising; the
            released token file names one image, `2258277193_586949ec62.jpg.1`, that is not in the archive.
        skip_empty: leave out empty captions instead of raising.
        encoding: the text files' encoding.

    Returns:
        `CaptionSplits(train, validation, test)` when the three split files exist, else one `CaptionSet`; with
        `image_paths` (absolute) and the captions of each image in file order.

    Raises:
        FileNotFoundError: no token file, no image folder, or images named in the token file that are not files
            (how many, and the first few).
        ValueError: naming the file: a caption line without a tab, an empty caption, no caption at all, only
            some of the split files, or split files that overlap or name images with no caption.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a directory: read_flickr8k expects the Flickr8k folder.")
    token_path = _find_file(directory, FLICKR8K_TOKEN_FILE)
    if token_path is None:
        raise FileNotFoundError(
            f"{os.path.join(directory, FLICKR8K_TOKEN_FILE)} not found (nor in Flickr8k_text/): read_flickr8k "
            "expects the caption file, lines `IMAGE.jpg#N<TAB>caption`."
        )
    image_dir = _flickr8k_image_dir(directory, image_dir)
    captions = _parse_flickr8k_tokens(token_path, encoding, skip_empty)
    if not captions:
        raise ValueError(f"{token_path} holds no caption: the data set is empty.")
    present = _check_images(list(captions), image_dir, token_path, skip_missing)
    skipped = set(captions) - set(present)
    captions = {name: captions[name] for name in present}
    everything = _caption_set(captions, image_dir, token_path)

    folder = os.path.dirname(token_path)
    split_paths = {split: os.path.join(folder, name) for split, name in FLICKR8K_SPLIT_FILES.items()}
    found = {split: path for split, path in split_paths.items() if os.path.isfile(path)}
    if not found:
        return everything
    if len(found) < len(split_paths):
        absent = [path for split, path in split_paths.items() if split not in found]
        raise ValueError(
            f"{folder} has only some of the Flickr8k split files: {', '.join(absent)} not found (keep all three, or "
            "none to get one CaptionSet)."
        )
    position = {name: i for i, name in enumerate(captions)}
    indices, owner = {}, {}
    for split, path in split_paths.items():
        names = [line.strip() for line in read_lines(path, encoding, "read_flickr8k", "one image name per line")]
        names = [n for n in names if n]
        if not names:
            raise ValueError(f"{path} is empty: a split file lists one image name per line.")
        unknown = [n for n in names if n not in position and n not in skipped]
        if unknown:
            raise ValueError(
                f"{path} lists {len(unknown)} image{'s' if len(unknown) > 1 else ''} with no caption in "
                f"{token_path}: {_listing(unknown)}."
            )
        shared = [n for n in names if owner.get(n, split) != split]
        if shared:
            raise ValueError(
                f"{path} lists {len(shared)} image{'s' if len(shared) > 1 else ''} that "
                f"{os.path.basename(split_paths[owner[shared[0]]])} lists too: {_listing(shared)}."
            )
        owner.update((n, split) for n in names)
        indices[split] = sorted({position[n] for n in names if n in position})
    return CaptionSplits(**{split: everything.select(indices[split]) for split in split_paths})


def _coco_image_dir(path: str, image_dir) -> str:
    if image_dir is not None:
        if not os.path.isdir(image_dir):
            raise FileNotFoundError(f"{os.fspath(image_dir)} is not a directory: `image_dir` must hold the images.")
        return os.fspath(image_dir)
    folder = os.path.dirname(os.path.abspath(path))
    root = os.path.dirname(folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    split = stem.split("_", 1)[1] if stem.startswith("captions_") else stem  # captions_train2017 -> train2017
    candidates = [os.path.join(root, split), os.path.join(folder, split), os.path.join(root, "images", split)]
    for candidate in candidates:
        if os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(
        f"No image folder for {path}: read_coco looks for {', '.join(candidates)} (or pass image_dir=...)."
    )


def read_coco(annotation_file, image_dir=None, *, skip_missing: bool = False, skip_empty: bool = False) -> CaptionSet:
    """Reads a COCO captions file (`annotations/captions_train2017.json` and the like).

    The JSON holds "images" (each with "id" and "file_name") and "annotations" (each with "image_id" and
    "caption"). Images without any caption are left out.

    Args:
        annotation_file: the JSON file.
        image_dir: the image folder; by default `ROOT/train2017` for `ROOT/annotations/captions_train2017.json`
            (also looked for beside the JSON and in `ROOT/images/`).
        skip_missing: leave out images whose file does not exist instead of raising.
        skip_empty: leave out empty captions instead of raising.

    Returns:
        A `CaptionSet` with `image_paths` (absolute), in the order of "images", and the captions of each image in
        the order of "annotations".

    Raises:
        FileNotFoundError: no such file, no image folder, or image files that are not there (how many, the first
            few).
        ValueError: naming the file: not JSON, not the COCO layout (which entry lacks which key), duplicate image
            ids, captions of unknown image ids, an empty caption, or no captioned image.
    """
    path = os.fspath(annotation_file)
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "not found"
        raise FileNotFoundError(f"{path} {what}: read_coco expects a COCO captions JSON file.")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not JSON text ({error}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(
        data.get("annotations"), list
    ):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: a COCO captions file has lists 'images' and 'annotations'; received {keys}.")
    for field, keys in (("images", ("id", "file_name")), ("annotations", ("image_id", "caption"))):
        for i, entry in enumerate(data[field]):
            lacking = [k for k in keys if not isinstance(entry, dict) or k not in entry]
            if lacking:
                raise ValueError(f"{path}: {field}[{i}] has no {' or '.join(repr(k) for k in lacking)}: {entry!r:.80}.")
    file_names = {}
    for entry in data["images"]:
        if entry["id"] in file_names:
            raise ValueError(f"{path}: image id {entry['id']!r} appears twice in 'images'.")
        file_names[entry["id"]] = str(entry["file_name"])
    by_id, unknown, empty = {}, [], []
    for i, entry in enumerate(data["annotations"]):
        if entry["image_id"] not in file_names:
            unknown.append(entry["image_id"])
            continue
        caption = str(entry["caption"]).strip()
        if not caption:
            empty.append(i)
            continue
        by_id.setdefault(entry["image_id"], []).append(caption)
    if unknown:
        raise ValueError(
            f"{path}: {len(unknown)} annotation{'s' if len(unknown) > 1 else ''} name image ids that 'images' does "
            f"not list: {_listing(unknown)}."
        )
    if empty and not skip_empty:
        raise ValueError(
            f"{path}: annotations[{empty[0]}] has an empty caption ({len(empty)} empty: annotations "
            f"{_listing(empty)}; pass skip_empty=True to leave them out)."
        )
    captions = {file_names[i]: by_id[i] for i in file_names if i in by_id}
    if not captions:
        raise ValueError(f"{path} holds no captioned image: the data set is empty.")
    image_dir = _coco_image_dir(path, image_dir)
    present = _check_images(list(captions), image_dir, path, skip_missing)
    return _caption_set({name: captions[name] for name in present}, image_dir, path)
