"""XLNet (Yang et al. 2019) from attnlayers' layers: the encoder with two-stream relative attention, its named
sizes, Hugging Face checkpoints and keras-hub's weights.

    from attnlayers.applications import xlnet

    backbone, info = xlnet.load_hf_checkpoint("path/to/xlnet")    # config.json + model.safetensors
    h = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 5})     # (B, T, d)
    content_mask, query_mask = attnlayers.permutation.permutation_masks(order, padding_mask=ids != 5)
    h, g = backbone.two_stream({"token_ids": ids}, content_mask, query_mask)               # pretraining

Modules: ``config`` (XLNetConfig, PRESETS), ``segment`` (RelativeSegmentBias, XLNet's relative segment term),
``backbone`` (XLNetBackbone, XLNetBlock), ``checkpoint`` (Hugging Face and keras-hub weights), ``viewer`` (the
content stream's attention in the interactive viewer), ``pretrainer`` (XLNetPretrainer: permutation LM), ``heads``
(XLNetClassifier, XLNetTokenClassifier), ``inputs`` (XLNet's A <sep> B <sep> <cls> layout), ``tokenizer``
(XLNetTokenizer: a spiece.model in TensorFlow ops, Hugging Face's ids), ``pretraining`` (the recipe of
examples/pretrain_xlnet.py: run_pretraining).
"""

from ..core.lazy import lazy_attributes
from .backbone import MaskEmbedding, XLNetBackbone, XLNetBlock
from .checkpoint import (
    copy_keras_hub_weights,
    copy_weights_to_keras_hub,
    from_keras_hub,
    load_hf_checkpoint,
    save_hf_checkpoint,
)
from .config import PRESETS, XLNetConfig
from .heads import XLNetClassifier, XLNetTokenClassifier
from .pretrainer import XLNetLMHead, XLNetPretrainer
from .segment import RelativeSegmentBias

__all__ = [
    "PRESETS", "MaskEmbedding", "RelativeSegmentBias", "XLNetBackbone", "XLNetBlock", "XLNetClassifier",
    "XLNetConfig", "XLNetLMHead", "XLNetPretrainer", "XLNetTokenClassifier", "copy_keras_hub_weights",
    "copy_weights_to_keras_hub", "from_keras_hub", "load_hf_checkpoint", "save_hf_checkpoint",
]

# Each module of the package is an attribute too (xlnet.checkpoint, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__)
