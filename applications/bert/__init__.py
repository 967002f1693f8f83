"""BERT (Devlin et al. 2019) from attnlayers' layers: the encoder, its named sizes, in-graph WordPiece
preprocessing, pretraining (masked LM + next sentence prediction), fine-tuning heads, Hugging Face checkpoints.

    from attnlayers.applications import bert

    backbone, info = bert.load_hf_checkpoint("path/to/bert")       # config.json + model.safetensors (+ vocab.txt)
    tokenizer = bert.BertTokenizer(info["vocabulary"], lowercase=info["do_lower_case"])
    inputs = bert.pack(tokenizer.tokenize(["a sentence"]), sequence_length=128, tokenizer=tokenizer)
    out = backbone(inputs)              # {"sequence_output": (B, T, d), "pooled_output": (B, d)}

Modules: ``config`` (BertConfig, PRESETS), ``backbone`` (BertBackbone), ``tokenizer`` (BertTokenizer,
train_vocabulary), the BERT family's tokenizers (``roberta_tokenizer``: RobertaTokenizer, pack_roberta;
``sentencepiece_tokenizer``: AlbertTokenizer, XLMRobertaTokenizer; ``family_tokenizers``: tokenizer_from_directory,
which picks one from a checkpoint directory), ``pretraining_data`` (pack, next-sentence pairs, masked-LM masking, pretraining_dataset),
``pretrainer`` (BertPretrainer, bert_optimizer), ``heads`` (BertClassifier, BertTokenClassifier, BertSpanQA),
``squad`` (the SQuAD JSON reader), ``checkpoint`` (Hugging Face and keras-hub weights), ``export``
(string-in SavedModels), ``corpora`` (``applications.core.inputs.corpora``, the offline corpora: KJV / WEB Bibles,
Brown, tweets); the runs of the examples and benchmarks: ``pretraining`` (run_pretraining), ``finetuning``
(run_finetuning), ``tasks`` (the fine-tuning tasks' data), ``training`` (what both runs share: BERT's AdamW
compiled once at the budget's rate), ``tables`` (the benchmarks' Markdown tables), ``baselines`` (the non-neural
baselines), and ``runs`` (all of their public names in one module).
"""

from ..core.inputs import corpora
from ..core.lazy import lazy_attributes
from . import squad
from .backbone import FEATURES, BertBackbone
from .checkpoint import copy_keras_hub_weights, from_keras_hub, load_hf_checkpoint, save_hf_checkpoint
from .config import PRESETS, BertConfig
from .heads import (
    IGNORE_LABEL,
    BertClassifier,
    BertSpanQA,
    BertTokenClassifier,
    align_word_labels,
    decode_answers,
    span_context_mask,
    word_predictions,
)
from .pretrainer import BertMaskedLMHead, BertPretrainer, bert_optimizer

# The model, its heads and checkpoints are keras ops (they import without TensorFlow: the JAX backend on GPUs);
# the tokenizer, the pretraining data, and the string-in SavedModels are TensorFlow (tf.data,
# tensorflow-text), imported on first use.
_LAZY = {
    "export_text_model": "export",
    **dict.fromkeys(("IS_NEXT", "NOT_NEXT", "MaskedLMMasker", "is_truncated", "pack", "pretraining_dataset"),
                    "pretraining_data"),
    **dict.fromkeys(("SPECIAL_TOKENS", "BertTokenizer", "train_vocabulary"), "tokenizer"),
    **dict.fromkeys(("RobertaTokenizer", "pack_roberta"), "roberta_tokenizer"),
    **dict.fromkeys(("AlbertTokenizer", "XLMRobertaTokenizer"), "sentencepiece_tokenizer"),
    "tokenizer_from_directory": "family_tokenizers",
}

__all__ = [
    "FEATURES", "IGNORE_LABEL", "IS_NEXT", "NOT_NEXT", "PRESETS", "SPECIAL_TOKENS", "BertBackbone",
    "BertClassifier", "BertConfig", "BertMaskedLMHead", "BertPretrainer", "BertSpanQA", "BertTokenClassifier",
    "BertTokenizer", "MaskedLMMasker", "align_word_labels", "bert_optimizer", "copy_keras_hub_weights",
    "corpora", "decode_answers", "export_text_model", "from_keras_hub", "is_truncated", "load_hf_checkpoint", "pack", "pretraining_dataset",
    "save_hf_checkpoint", "span_context_mask", "squad", "train_vocabulary", "word_predictions",
    "AlbertTokenizer", "RobertaTokenizer", "XLMRobertaTokenizer", "pack_roberta", "tokenizer_from_directory",
]

# Each module of the package is an attribute too (bert.viewer, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__, _LAZY)
