"""Reading a Hugging Face tokenizer directory: what the BERT family's and XLNet's tokenizers share."""

import json
import os

__all__ = ["read_json", "read_tokenizer_config", "require_files"]


def read_json(path) -> dict:
    """A JSON file holding an object, as a dict.

    Raises:
        ValueError: naming the file, when it is not UTF-8 JSON or holds no object.
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{os.fspath(path)!r} is not valid UTF-8 JSON: {error}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"{os.fspath(path)!r} must hold a JSON object; received {type(value).__name__}.")
    return value


def read_tokenizer_config(directory) -> dict:
    """The directory's tokenizer_config.json as a dict ({} when absent)."""
    path = os.path.join(directory, "tokenizer_config.json")
    return read_json(path) if os.path.isfile(path) else {}


def require_files(directory, names, family) -> tuple:
    """The paths of ``names`` in ``directory``.

    Raises:
        ValueError: naming the directory and the missing file, and what a `family` directory holds.
    """
    paths = tuple(os.path.join(directory, name) for name in names)
    for path in paths:
        if not os.path.isfile(path):
            raise ValueError(f"`directory` {os.fspath(directory)!r} has no {os.path.basename(path)}; a Hugging Face "
                             f"{family} tokenizer directory holds {', '.join(names)}.")
    return paths
