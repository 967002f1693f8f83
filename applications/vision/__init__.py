"""Vision: a Vision Transformer (Dosovitskiy et al. 2021) built from attnlayers' layers.

    from attnlayers.applications import vision

    model = vision.ViT(vision.ViTConfig(image_shape=(32, 32, 3), patch_size=4, num_classes=10))
    logits = model(images)                                                    # (B, 10)
    maps = model.encode(images, return_attention_scores=True)["attention_scores"]
    rollout = attnlayers.attention_rollout(maps)                              # (B, 65, 65)

Modules: `model` (ViTConfig with the named sizes of VIT_PRESETS and their closed-form parameter_count, ViT),
`keras_hub_weights` (a ViT from a keras-hub ViTBackbone: same sizes, same weights), `cnn` (ConvNet, the
convolutional baseline of about the same size), `data` (scikit-learn's digits, the generated scenes' two questions
about the triangle, random-shift batches), `runs` (TrainingSettings, run_training: the run of
examples/train_vit.py), `viewer` (attention_viewer: the interactive HTML page) and `export` (export_classifier: a
SavedModel, uint8 images in, class probabilities out; TensorFlow, imported on first use).
The SAGAN self-attention block for CNNs is a layer: ``attnlayers.SelfAttention2D``.
"""

from ..core.lazy import lazy_attributes
from .cnn import ConvNet, ConvNetConfig
from .keras_hub_weights import copy_keras_hub_weights, from_keras_hub
from .model import POOLING, VIT_PRESETS, ViT, ViTConfig

# The SavedModel export needs TensorFlow: imported on first use, so the model imports without it (JAX on GPUs).
_LAZY = {"export_classifier": "export"}

__all__ = ["ConvNet", "ConvNetConfig", "POOLING", "VIT_PRESETS", "ViT", "ViTConfig", "copy_keras_hub_weights",
           "from_keras_hub", *_LAZY]

# Each module of the package is an attribute too (vision.viewer, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__, _LAZY)
