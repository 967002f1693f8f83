"""The servable classifier: a SavedModel with a ``classify`` signature, uint8 images in, class probabilities out.

    export_classifier("/tmp/vit", model, class_names)
    # anywhere with only TensorFlow:
    classifier = tf.saved_model.load("/tmp/vit")
    out = classifier.classify(images)        # images: uint8 (B, H, W, C), any size, C = 1 or 3
    out["probabilities"], out["class_id"], out["class_name"]

Images of another size are resized (bilinear, antialiased) to the model's; gray images are repeated to 3
channels for an RGB model and RGB images averaged (ITU-R 601 luma) for a gray one. The model reads pixel / 255,
the scale the training data used. An empty batch gives empty outputs; images of rank other than 4, with another
channel count, or with no pixel fail with an ``InvalidArgumentError`` that says so. The SavedModel needs neither
attnlayers nor keras to load and run.

TensorFlow only (this module imports tensorflow).
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.export import assert_rank


def to_model_images(images, image_shape):
    """uint8 (B, H, W, C), C in {1, 3} -> float32 (B, *image_shape) in [0, 1]."""
    images = assert_rank(tf.convert_to_tensor(images), 4, "images", "(batch, height, width, channels)")
    height, width, channels = image_shape
    shape = tf.shape(images)
    checks = [
        tf.debugging.Assert(tf.reduce_any(tf.equal(shape[-1], [1, 3])),
                            ["images must have 1 (gray) or 3 (RGB) channels; received", shape[-1]]),
        # An image with no pixel (height or width 0) would fail inside the resize kernel, naming neither.
        tf.debugging.Assert(tf.logical_or(tf.equal(shape[0], 0), tf.logical_and(shape[1] > 0, shape[2] > 0)),
                            ["`images` must have height and width >= 1; received shape", shape]),
    ]
    with tf.control_dependencies(checks):
        x = tf.cast(images, tf.float32) / 255.0
    if channels == 3:
        x = tf.cond(tf.equal(shape[-1], 1), lambda: tf.tile(x[..., :1], [1, 1, 1, 3]), lambda: x[..., :3])
    else:
        x = tf.cond(tf.equal(shape[-1], 3), lambda: tf.image.rgb_to_grayscale(x[..., :3]), lambda: x[..., :1])
    same = tf.logical_and(tf.equal(shape[1], height), tf.equal(shape[2], width))
    x = tf.cond(same, lambda: x, lambda: tf.image.resize(x, (height, width), antialias=True))
    return tf.ensure_shape(x, (None, height, width, channels))


class _Classifier(tf.Module):
    def __init__(self, model, class_names):
        super().__init__(name="attnlayers_image_classifier")
        self.model = model
        self.class_names = tf.constant(list(class_names))
        self.image_shape = tuple(model.config.image_shape)

    @tf.function(input_signature=[tf.TensorSpec((None, None, None, None), tf.uint8, name="images")])
    def classify(self, images):
        logits = self.model(to_model_images(images, self.image_shape), training=False)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "class_id": class_id,
                "class_name": tf.gather(self.class_names, class_id)}


def export_classifier(path, model, class_names):
    """Writes a SavedModel whose ``classify`` signature (also the serving default) classifies uint8 images.

    Args:
        path: the SavedModel directory.
        model: a trained :class:`~attnlayers.applications.vision.ViT` (or any Keras classifier with a
            ``config.image_shape``), trained on images scaled to [0, 1].
        class_names: the class names, in the order of the model's outputs.

    Returns:
        ``path``.
    """
    class_names = [str(name) for name in class_names]
    if len(class_names) != model.config.num_classes:
        raise ValueError(f"`class_names` must name the model's {model.config.num_classes} classes; received "
                         f"{len(class_names)} names.")
    module = _Classifier(model, class_names)
    tf.saved_model.save(module, path, signatures={"classify": module.classify,
                                                  "serving_default": module.classify})
    return path


__all__ = ["export_classifier", "to_model_images"]
