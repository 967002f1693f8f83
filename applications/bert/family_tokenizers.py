"""One entry point for the tokenizers of the BERT family: `tokenizer_from_directory` picks BERT's (and DistilBERT's)
WordPiece, RoBERTa's byte-level BPE, ALBERT's or XLM-RoBERTa's SentencePiece from a Hugging Face checkpoint
directory, each giving Hugging Face's ids, each with a ``pack`` method for its input layout.

    tokenizer = tokenizer_from_directory("path/to/checkpoint")
    inputs = tokenizer.pack(tokenizer.tokenize(["a sentence"]), sequence_length=128)
    # {"token_ids": (1, 128), "segment_ids": (1, 128), "padding_mask": (1, 128)}

| model_type  | tokenizer               | files                    | single / pair                                 |
|-------------|-------------------------|--------------------------|-----------------------------------------------|
| bert        | `BertTokenizer`         | vocab.txt                | [CLS] A [SEP] / [CLS] A [SEP] B [SEP] (0 / 1) |
| distilbert  | `BertTokenizer`         | vocab.txt                | the same                                      |
| albert      | `AlbertTokenizer`       | spiece.model             | the same                                      |
| roberta     | `RobertaTokenizer`      | vocab.json, merges.txt   | <s> A </s> / <s> A </s></s> B </s> (all 0)    |
| xlm-roberta | `XLMRobertaTokenizer`   | sentencepiece.bpe.model  | the same                                      |

The family is config.json's ``model_type``; without a config.json, tokenizer_config.json's ``tokenizer_class``;
without either, the files the directory holds.
"""

from __future__ import annotations

import os

from ..core.tokenizers.directory import read_json, read_tokenizer_config, require_files

__all__ = ["FAMILIES", "model_type_of", "read_tokenizer_config", "require_files", "tokenizer_from_directory"]

# model_type -> (the tokenizer's module and class, the files that identify it)
FAMILIES = {
    "bert": ("tokenizer", "BertTokenizer", ("vocab.txt",)),
    "distilbert": ("tokenizer", "BertTokenizer", ("vocab.txt",)),
    "roberta": ("roberta_tokenizer", "RobertaTokenizer", ("vocab.json", "merges.txt")),
    "albert": ("sentencepiece_tokenizer", "AlbertTokenizer", ("spiece.model",)),
    "xlm-roberta": ("sentencepiece_tokenizer", "XLMRobertaTokenizer", ("sentencepiece.bpe.model",)),
}
# tokenizer_config.json's tokenizer_class -> model_type
_TOKENIZER_CLASSES = {
    "BertTokenizer": "bert", "BertTokenizerFast": "bert", "DistilBertTokenizer": "distilbert",
    "DistilBertTokenizerFast": "distilbert", "RobertaTokenizer": "roberta", "RobertaTokenizerFast": "roberta",
    "AlbertTokenizer": "albert", "AlbertTokenizerFast": "albert", "XLMRobertaTokenizer": "xlm-roberta",
    "XLMRobertaTokenizerFast": "xlm-roberta",
}


def model_type_of(directory) -> str:
    """The family of a checkpoint directory: config.json's ``model_type``, else tokenizer_config.json's
    ``tokenizer_class``, else the first family whose files are all there (`FAMILIES` order).

    Raises:
        ValueError: naming the directory, for a model_type or tokenizer_class of another family, or when nothing
            identifies one.
    """
    config = os.path.join(directory, "config.json")
    if os.path.isfile(config) and "model_type" in (read := read_json(config)):
        model_type = read["model_type"]
        if model_type not in FAMILIES:
            raise ValueError(f"{config!r}: model_type {model_type!r} is not of the BERT family; expected one of "
                             f"{sorted(FAMILIES)}.")
        return model_type
    tokenizer_class = read_tokenizer_config(directory).get("tokenizer_class")
    if tokenizer_class is not None:
        if tokenizer_class not in _TOKENIZER_CLASSES:
            raise ValueError(f"{os.path.join(directory, 'tokenizer_config.json')!r}: tokenizer_class "
                             f"{tokenizer_class!r} is not one of the BERT family's; expected one of "
                             f"{sorted(_TOKENIZER_CLASSES)}.")
        return _TOKENIZER_CLASSES[tokenizer_class]
    for model_type, (_, _, names) in FAMILIES.items():
        if all(os.path.isfile(os.path.join(directory, name)) for name in names):
            return model_type
    raise ValueError(f"`directory` {os.fspath(directory)!r} has no config.json model_type, no tokenizer_config.json "
                     f"tokenizer_class and none of the tokenizer files "
                     f"{sorted({name for _, _, names in FAMILIES.values() for name in names})}.")


def tokenizer_from_directory(directory, **kwargs):
    """The tokenizer of a Hugging Face checkpoint directory of the BERT family (see the module docstring).

    Args:
        directory: the checkpoint directory.
        **kwargs: passed to the tokenizer's ``from_directory`` (they override what the directory's files say).

    Returns:
        a ``BertTokenizer``, ``RobertaTokenizer``, ``AlbertTokenizer`` or ``XLMRobertaTokenizer``.

    Raises:
        ValueError: naming the directory, when no family is identified or its files are missing.
    """
    import importlib

    module, name, _ = FAMILIES[model_type_of(directory)]
    tokenizer_class = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    return tokenizer_class.from_directory(directory, **kwargs)
