"""Neural machine translation: data, tokenizers, models, evaluation and the servable translator.

    from attnlayers.applications import nmt
    from attnlayers.applications.nmt import evaluate, export

    splits = nmt.split_pairs(nmt.load_de_en())          # German-English, test set of 1000 held out
    tokenizers = nmt.build_tokenizers(splits, shared=True)  # SentencePiece, trained on splits.train only
    train = nmt.make_dataset(splits.train, tokenizers)  # ((source_ids, target_in_ids), target_out_ids)
    vocabulary = tokenizers.source.vocabulary_size                   # shared: one vocabulary for both sides
    model, callbacks = nmt.build_recipe("transformer", vocabulary, vocabulary, shared_embeddings=True)  # its best
    model.fit(train, validation_data=..., epochs=10, callbacks=callbacks)  # learning rate, weight selection
    bleu, _ = evaluate.evaluate_bleu(model, tokenizers, splits.test, search=BeamSearch(4))
    export.export_translator("translator", model, tokenizers, search=BeamSearch(4))

`nmt.synthetic_pairs()` is a made-up language pair with known word alignments for quick runs and tests;
`nmt.synthetic_task()` splits it and builds its word-level tokenizers in one call.
Modules: `data`, `tokenizer` (data), `model` (the five models), `variants` (each model's training variants,
its best measured one the default: `build_recipe`), `evaluate` (translate, BLEU, alignments, heatmaps),
`export` (translate SavedModel). The loss, metric, schedule and callbacks come from `applications.core`
(re-exported here).
"""

from ..core.lazy import lazy_attributes
from ..core.training.callbacks import BestWeights, TimeBudget
from .data import (
    DE_EN_PATH,
    Pairs,
    Splits,
    count_truncated,
    default_bucket_boundaries,
    encode_pairs,
    load_de_en,
    load_de_en_lexicon,
    make_dataset,
    normalize_text,
    parse_de_en_line,
    read_parallel,
    read_tsv,
    split_pairs,
    synthetic_dictionary,
    synthetic_pairs,
    synthetic_task,
)
from .model import (
    MODELS,
    MaskedAccuracy,
    MaskedCrossEntropy,
    RNNSeq2Seq,
    TransformerSchedule,
    TransformerTranslator,
    Translator,
    build_model,
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
from .variants import DEFAULT_VARIANTS, RNN_VARIANTS, TRANSFORMER_VARIANTS, Variant, build_recipe, get_variant

__all__ = [
    "BestWeights",
    "DEFAULT_VARIANTS",
    "RNN_VARIANTS",
    "TRANSFORMER_VARIANTS",
    "TimeBudget",
    "Variant",
    "build_recipe",
    "get_variant",
    "MODELS",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "RNNSeq2Seq",
    "TransformerSchedule",
    "TransformerTranslator",
    "Translator",
    "build_model",
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
    "count_truncated",
    "default_bucket_boundaries",
    "encode_pairs",
    "load_de_en",
    "load_de_en_lexicon",
    "make_dataset",
    "normalize_text",
    "parse_de_en_line",
    "read_parallel",
    "read_tsv",
    "split_pairs",
    "synthetic_dictionary",
    "synthetic_pairs",
    "synthetic_task",
    "train_sentencepiece",
]

# Each module of the package is an attribute too (nmt.viewer, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__)
