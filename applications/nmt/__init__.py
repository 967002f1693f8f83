"""Neural machine translation: data, tokenizers and input pipelines (models build on these).

    from attnlayers.applications import nmt

    splits = nmt.split_pairs(nmt.load_de_en())          # German-English, test set of 1000 held out
    tokenizers = nmt.build_tokenizers(splits)           # SentencePiece, trained on splits.train only
    train = nmt.make_dataset(splits.train, tokenizers)  # ((source_ids, target_in_ids), target_out_ids)

`nmt.synthetic_pairs()` is a made-up language pair with known word alignments for quick runs and tests.
See `data` and `tokenizer` for the details.
"""

from .data import (
    DE_EN_PATH,
    Pairs,
    Splits,
    default_bucket_boundaries,
    encode_pairs,
    load_de_en,
    make_dataset,
    normalize_text,
    parse_de_en_line,
    read_parallel,
    read_tsv,
    split_pairs,
    synthetic_dictionary,
    synthetic_pairs,
)
from .tokenizer import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
    SubwordTokenizer,
    Tokenizers,
    build_tokenizers,
    train_sentencepiece,
)

__all__ = [
    "DE_EN_PATH",
    "END_ID",
    "PAD_ID",
    "RESERVED_TOKENS",
    "START_ID",
    "UNK_ID",
    "Pairs",
    "Splits",
    "SubwordTokenizer",
    "Tokenizers",
    "build_tokenizers",
    "default_bucket_boundaries",
    "encode_pairs",
    "load_de_en",
    "make_dataset",
    "normalize_text",
    "parse_de_en_line",
    "read_parallel",
    "read_tsv",
    "split_pairs",
    "synthetic_dictionary",
    "synthetic_pairs",
    "train_sentencepiece",
]
