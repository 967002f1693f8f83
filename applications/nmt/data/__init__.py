"""Parallel text for translation, as plain Python data (`Pairs`, `Splits`) until `make_dataset` turns it into
batches for `model.fit`; nothing is downloaded and nothing is cached on disk.

    pairs.py      Pairs, Splits: the containers
    readers.py    read_tsv (tab-separated pairs: columns, header rows), read_parallel (two line-aligned files)
    de_en.py      the trans-de-en dictionary: load_de_en (sentences), load_de_en_lexicon (words, phrases)
    split.py      split_pairs: seeded train / validation / test with no sentence in two splits;
                  held_out_sizes: validation / test sizes that scale with the corpus
    synthetic.py  synthetic_pairs, synthetic_task: a made-up language pair with gold alignments
    pipeline.py   encode_pairs, make_dataset, count_truncated: tf.data batches (the only TensorFlow import)

docs/guides/nmt-data.md is the data card: what the corpora hold, how they are parsed and split, their counts.
"""

from .de_en import DE_EN_PATH, load_de_en, load_de_en_lexicon, normalize_text, parse_de_en_line
from .pairs import Pairs, Splits
from .pipeline import count_truncated, default_bucket_boundaries, encode_pairs, make_dataset
from .readers import TsvFieldError, looks_like_header, read_parallel, read_tsv, read_tsv_with_header
from .split import held_out_sizes, split_pairs
from .synthetic import synthetic_dictionary, synthetic_pairs, synthetic_task

__all__ = [
    "DE_EN_PATH",
    "Pairs",
    "Splits",
    "TsvFieldError",
    "count_truncated",
    "default_bucket_boundaries",
    "encode_pairs",
    "load_de_en",
    "load_de_en_lexicon",
    "looks_like_header",
    "make_dataset",
    "normalize_text",
    "parse_de_en_line",
    "read_parallel",
    "read_tsv",
    "read_tsv_with_header",
    "held_out_sizes",
    "split_pairs",
    "synthetic_dictionary",
    "synthetic_pairs",
    "synthetic_task",
]
