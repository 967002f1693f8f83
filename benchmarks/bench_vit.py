"""The Vision Transformer: attnlayers' ViT against keras-hub's ViTBackbone, forward + backward.

ViT-S/16 sizes (12 layers, d 384, 6 heads, MLP 1536, 16 x 16 patches) on 224 x 224 x 3 images (196 patches + the
class token), batch 8, float32, TensorFlow backend on CPU (see harness.py). Both sides are built from one seed and
ours then takes the keras-hub backbone's weights (``vision.from_keras_hub``), so they compute the same function:
the max |diff| column checks it. Measured: keras-hub ``ViTBackbone(...)(images)`` against
``ViT.encode(images)["sequence_output"]`` (the same final states; the classification head is left out of both).

Run:  .venv/bin/python benchmarks/bench_vit.py                           (--help for flags)
      .venv/bin/python benchmarks/bench_vit.py --repeats 5 --batch 4 --modes xla
"""

import harness  # first: it selects the TensorFlow backend
import keras
import keras_hub
from harness import Entry, Side, normal

from attnlayers.applications.vision import VIT_PRESETS, from_keras_hub

SIZES = {"batch": 8, "image": 224, "patch": 16, "preset": "s16"}


def backbone(s):
    layers, hidden, heads, mlp = VIT_PRESETS[s["preset"]]
    keras.utils.set_random_seed(1)
    return keras_hub.models.ViTBackbone(image_shape=(s["image"], s["image"], 3), patch_size=s["patch"],
                                        num_layers=layers, num_heads=heads, hidden_dim=hidden, mlp_dim=mlp)


ENTRIES = [
    Entry(
        "vit",
        inputs=lambda s: {"images": normal(s["batch"], s["image"], s["image"], 3)},
        peer=Side("keras_hub.models.ViTBackbone(ViT-S/16)(images)", make=backbone,
                  call=lambda layer, x: layer(x["images"])),
        ours=Side("attnlayers ViT(ViT-S/16).encode(images) (keras-hub's weights)",
                  make=lambda s: from_keras_hub(backbone(s)),
                  call=lambda layer, x: layer.encode(x["images"])["sequence_output"],
                  setup=lambda layer, s: setattr(layer.head, "trainable", False)),  # not in the measured path
        same_math=True,
    ),
]

if __name__ == "__main__":
    harness.main(ENTRIES, name="vit", sizes=SIZES, description=__doc__)
