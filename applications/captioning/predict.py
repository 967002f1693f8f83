"""A trained captioner on a ``CaptionSet``: captions (greedy / beam search), the metrics of ``evaluate``
(BLEU-1..4, CIDEr, exact match, attention localization) and the paper's attention pictures.

Images are pixel values in 0..255: uint8 as they are, other integers and floats in that range accepted; floats
all within [0, 1] (images scaled to [0, 1]: multiply by 255) and values outside 0..255 are refused with a
ValueError naming the argument (the rule of ``encoder.check_pixel_values``). An empty batch has no captions.

    captions = caption_images(model, splits.test.images, vocabulary, search=BeamSearch(3))
    metrics = evaluate_captioner(model, splits.test, vocabulary)      # {"BLEU-4": ..., "localization": ...}
    plot_captions(model, splits.test, vocabulary, "out/attention.png")
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnlayers.decoding import get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.validation import positive_int

from . import evaluate
from .data.pipeline import encode_captions
from .data.scenes import word_kind
from .encoder import check_pixel_values


__all__ = ["caption_images", "evaluate_captioner", "load_images", "localization", "plot_captions",
           "teacher_forced_attention"]


def load_images(caption_set, image_size):
    """``caption_set`` with its image files decoded, made RGB and resized: ``images`` uint8 (N, S, S, 3)."""
    import tensorflow as tf

    if caption_set.images is not None:
        return caption_set
    images = np.zeros((len(caption_set), image_size, image_size, 3), np.uint8)
    for i, path in enumerate(caption_set.image_paths):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32), (image_size, image_size), antialias=True)
        images[i] = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8).numpy()
    return dataclasses.replace(caption_set, images=images, image_paths=None)


@renamed_keyword("strategy", "search")
def caption_images(model, images, vocabulary, *, search="greedy", max_length=None, batch_size=100):
    """Captions of ``images`` (N, S, S, 3) as strings (the best beam for beam search); [] for N = 0.

    ``images``: uint8 0..255, or integers / floats holding pixel values in 0..255 (``check_pixel_values``:
    floats all within [0, 1] and values outside 0..255 raise a ValueError)."""
    import keras
    import tensorflow as tf

    if images is None:
        raise ValueError("`images` are required: pixel values of shape (N, S, S, 3); received None.")
    if not callable(getattr(vocabulary, "decode", None)):
        raise ValueError("`vocabulary` must be the captioner's CaptionVocabulary (with `decode`); received "
                         f"{type(vocabulary).__name__}.")
    batch_size = positive_int(batch_size, "batch_size")
    images = check_pixel_values(images, "images")
    if images.ndim != 4:
        raise ValueError(f"`images` must be RGB images of shape (N, S, S, 3); received shape {images.shape} "
                         "(one image: images[None]).")
    if len(images) == 0:
        return []
    search = get_search(search)
    max_length = model.generation_length(max_length)
    if keras.backend.backend() == "tensorflow":
        function = tf.function(lambda x: model.generate(x, max_length, search).tokens, autograph=False)
        decode = lambda x: function(tf.constant(x))  # noqa: E731
    else:  # JAX: generate runs its loop in ops.while_loop (compiled); a tf.function cannot trace it
        decode = lambda x: model.generate(x, max_length, search).tokens  # noqa: E731
    captions = []
    for start in range(0, len(images), batch_size):
        tokens = np.asarray(decode(images[start : start + batch_size]))
        tokens = tokens[:, 0] if tokens.ndim == 3 else tokens  # beam search: (B, k, L) -> the best
        captions += [vocabulary.decode(row) for row in tokens]
    return captions


def teacher_forced_attention(model, caption_set, vocabulary, *, max_length=24, batch_size=200):
    """Per image, the (T_n, L) attention of teacher forcing on its first reference caption: row t predicted
    word t (T_n = the caption's words; the [end] step left out). None for a model without attention."""
    check_pixel_values(caption_set.images, "caption_set.images")
    image_index, caption_in, _ = encode_captions(caption_set, vocabulary, max_length=max_length)
    caption_in = caption_in[np.unique(image_index, return_index=True)[1]]  # the first reference of each image
    maps = []
    for start in range(0, len(caption_set), batch_size):
        batch = model.attention_maps(caption_set.images[start : start + batch_size],
                                     caption_in[start : start + batch_size])
        if batch is None:
            return None
        maps.append(np.asarray(batch, dtype="float32"))
    maps = np.concatenate(maps)
    lengths = (caption_in != vocabulary.pad_token_id).sum(1) - 1  # words (the start token fed them)
    return [m[:n] for m, n in zip(maps, lengths)]


def localization(model, caption_set, vocabulary):
    """Attention localization of the object words under teacher forcing (``evaluate.attention_localization``;
    hard attention: its argmax cell), by the strict rule and the Pointing Game: ``{"localization",
    "localization_words", "localization_by_kind" ({"colour" | "size" | "shape": share}), "pointing_game",
    "pointing_game_tolerance" (pixels), "pointing_game_by_kind"}``, or {} for a model without attention or a set
    without boxes."""
    if caption_set.objects is None:
        return {}
    maps = teacher_forced_attention(model, caption_set, vocabulary, max_length=model.generation_length(None))
    if maps is None:
        return {}
    boxes = [[o.box for o in objects] for objects in caption_set.objects]
    hard = getattr(model, "attention_type", None) == "hard"
    kinds = [[word_kind(word) for word in references[0].split()] for references in caption_set.captions]
    found = evaluate.attention_localization(maps, model.grid_shape, caption_set.images.shape[1:3], boxes,
                                            caption_set.word_objects, hard=hard, word_kinds=kinds)
    return {"localization": found["localization"], "localization_words": found["words"],
            "localization_by_kind": {k: v["localization"] for k, v in found["by_kind"].items()},
            "pointing_game": found["pointing_game"], "pointing_game_tolerance": found["tolerance"],
            "pointing_game_by_kind": {k: v["pointing_game"] for k, v in found["by_kind"].items()}}


@renamed_keyword("strategy", "search")
def evaluate_captioner(model, caption_set, vocabulary, *, search="greedy", max_length=None):
    """BLEU-1..4 and CIDEr (``evaluate.caption_metrics``), exact match, and, when ``caption_set`` has object
    boxes and the model attention, the localization of object words (teacher forcing on the reference).

    Returns:
        ``{"BLEU-1".., "CIDEr", "exact_match", "localization", "localization_words", "localization_by_kind"
        ({"colour" | "size" | "shape": share}), "pointing_game", "pointing_game_tolerance",
        "pointing_game_by_kind", "captions": [...]}``.
    """
    images = check_pixel_values(caption_set.images, "caption_set.images")
    hypotheses = caption_images(model, images, vocabulary, search=search, max_length=max_length)
    result = {**evaluate.caption_metrics(hypotheses, caption_set.captions),
              "exact_match": evaluate.exact_match(hypotheses, caption_set.captions)}
    result.update(localization(model, caption_set, vocabulary))
    result["captions"] = hypotheses
    return result


@renamed_keyword("strategy", "search")
def plot_captions(model, caption_set, vocabulary, path, *, index=0, search="greedy", max_length=None):
    """The paper's figure for image ``index``: the image and, per generated word, its attention map upsampled
    over the image (hard attention: the sampled cell marked). Returns the path, or None without attention."""
    import tensorflow as tf

    from attnlayers.visualize import plot_image_attention

    image = check_pixel_values(caption_set.images[index : index + 1], "caption_set.images")
    max_length = model.generation_length(max_length)
    tokens = np.asarray(model.generate(tf.constant(image), max_length, get_search(search)).tokens)
    tokens = tokens[:, 0] if tokens.ndim == 3 else tokens
    words = vocabulary.decode(tokens[0]).split()
    maps = model.attention_maps(image, tokens[:, : len(words) + 1])
    if maps is None:
        return None
    maps = np.asarray(maps)[0, : len(words)]
    plot_image_attention(image[0], words, maps, grid_shape=model.grid_shape, path=str(path),
                         sampled=getattr(model, "attention_type", None) == "hard",
                         title=f"reference: {caption_set.captions[index][0]}")
    return str(path)
