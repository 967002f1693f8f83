"""The servable captioner: a SavedModel with a ``caption`` signature, images in and caption strings out.

    export_captioner("/tmp/captioner", model, vocabulary, search=BeamSearch(3))
    # anywhere with only TensorFlow:
    captioner = tf.saved_model.load("/tmp/captioner")
    captioner.caption(images)["caption"]           # images: uint8 (B, H, W, C), any size, C = 1, 3 or 4

The decoding is the library's one export path (``applications.core.formats.export.export_generator`` on
:func:`attnlayers.export.export_generate`, XLA-compiled); this module adds what is around it: resizing to the
model's input size, gray and RGBA images to RGB, ids to words, and optionally the attention maps of the
generated caption. The SavedModel needs neither attnlayers nor keras to load and run.

Inputs the model cannot caption as such are handled in the graph, never by a crash inside TensorFlow: an
empty batch gives empty outputs; images with a channel count other than 1, 3 or 4, a height or width of 0, or
not of rank 4 (a single
(H, W, C) image fed through ``signatures[...]``, which checks dtypes but not shapes), fail with an
``InvalidArgumentError`` that says so.

The signature takes uint8 pixel values (0..255) only: the dtype is checked by TensorFlow before the graph
runs (``loaded.caption``: "Can not cast TensorSpec(... dtype=tf.float32 ...) to TensorSpec(... dtype=tf.uint8
...)"; ``signatures["caption"]``: "input #0(zero-based) was expected to be a uint8 tensor"). Float images in
[0, 1] must be converted first: ``tf.image.convert_image_dtype(images, tf.uint8, saturate=True)``; float pixel
values in [0, 255]: ``tf.cast(tf.round(images), tf.uint8)``. (The in-process entry points of ``predict`` take
other dtypes by the rule of ``encoder.check_pixel_values``.)

TensorFlow only (this module imports tensorflow).
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.decoding import BeamSearch, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.export import assert_rank

from ..core.formats.export import export_generator


__all__ = ["export_captioner", "to_model_images"]


class _Captioner(tf.Module):
    def __init__(self, generator, words):
        super().__init__(name="attnlayers_captioner")
        self.generator = generator  # the exported decoding loop (it holds the model's variables)
        self.words = tf.constant(words)


def to_model_images(images, image_size):
    """uint8 (B, H, W, C) with C in {1, 3, 4} -> uint8 (B, image_size, image_size, 3) (bilinear resize)."""
    images = tf.convert_to_tensor(images)
    if images.dtype != tf.uint8:
        raise ValueError(f"`images` must be uint8 pixel values (0..255); received dtype {images.dtype.name}.")
    images = assert_rank(images, 4, "images", "(batch, height, width, channels)")
    shape = tf.shape(images)
    channels = shape[-1]
    check = tf.debugging.Assert(
        tf.reduce_any(tf.equal(channels, [1, 3, 4])),
        ["images must have 1 (gray), 3 (RGB) or 4 (RGBA) channels; received", channels],
    )
    # An image with no pixel (height or width 0) would fail inside the resize kernel, naming neither.
    has_pixels = tf.debugging.Assert(
        tf.logical_or(tf.equal(shape[0], 0), tf.logical_and(shape[1] > 0, shape[2] > 0)),
        ["`images` must have height and width >= 1; received shape", shape],
    )
    with tf.control_dependencies([check, has_pixels]):
        rgb = tf.cond(tf.equal(channels, 1), lambda: tf.tile(images[..., :1], [1, 1, 1, 3]),
                      lambda: images[..., :3])
    resized = tf.image.resize(tf.cast(rgb, tf.float32), (image_size, image_size), antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)


@renamed_keyword("strategy", "search")
def export_captioner(path, model, vocabulary, *, search=None, max_length=None, return_attention=True,
                     jit_compile=True):
    """Writes a SavedModel whose ``caption`` signature captions a batch of images.

    Args:
        path: the SavedModel directory.
        model: a trained captioner (``ShowAttendTell``, ``ShowAndTell``, ``TransformerCaptioner``).
        vocabulary: its ``CaptionVocabulary`` (``words``: id -> word).
        search: decoding: "greedy", ``BeamSearch(k)`` (default ``BeamSearch(3)``; the best beam is returned)
            or a sampling search (then the signature takes an int32 ``seed``).
        max_length: the longest caption in tokens, [start] and [end] included (default: the model's).
        return_attention: also return the attention maps of the generated caption (models with attention).
        jit_compile: compile the encoder + decoding loop with XLA.

    Signature ``caption`` (``loaded.caption(images)`` or ``loaded.signatures["caption"](images=...)``):
        inputs: ``images`` uint8 (B, H, W, C) pixel values 0..255 (other dtypes are refused: see the module
        docstring), any H and W, C = 1, 3 or 4; ``seed`` int32 () for sampling.
        outputs: ``caption`` string (B,); ``token_ids`` int32 (B, L) ([start] first, [end] then padding);
        ``score`` float32 (B,) (log-probability, length-normalised for beam search); with
        ``return_attention`` and a model with attention, ``attention`` float32 (B, L - 1, h, w): row t is the
        map used to predict token t + 1 (rows after [end] are zero).

    Returns:
        The saved ``tf.Module`` (its ``caption`` works in this process too).
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"export_captioner needs the TensorFlow backend; received {keras.backend.backend()!r}.")
    search = get_search(BeamSearch(3) if search is None else search)
    beam = isinstance(search, BeamSearch)
    max_length = model.generation_length(max_length)
    image_size = model.encoder.image_size
    probe = (tf.zeros((1, image_size, image_size, 3), tf.uint8), tf.ones((1, 1), tf.int32))
    model(probe)  # every variable exists before tracing (an untrained model has none yet)
    spec = tf.TensorSpec((None, image_size, image_size, 3), tf.uint8, name="images")
    generator = export_generator(None, model, max_length, search, source_spec=spec, jit_compile=jit_compile)
    module = _Captioner(generator, vocabulary.words)
    grid = model.grid_shape
    with_attention = return_attention and model.attention_maps(*probe) is not None
    specials = [model.pad_token_id, model.start_token_id, model.end_token_id]

    def caption(images, seed=None):
        images = to_model_images(images, image_size)
        return tf.cond(tf.equal(tf.shape(images)[0], 0), lambda: empty(), lambda: run(images, seed))

    def empty():  # an empty batch: the outputs' shapes with B = 0, nothing run
        result = {"caption": tf.zeros((0,), tf.string), "token_ids": tf.zeros((0, max_length), tf.int32),
                  "score": tf.zeros((0,), tf.float32)}
        if with_attention:
            result["attention"] = tf.zeros((0, max_length - 1, grid[0], grid[1]), tf.float32)
        return result

    def run(images, seed):
        out = module.generator.generate(images, *([] if seed is None else [seed]))
        tokens, scores = out["token_ids"], out["scores"]
        if beam:  # (B, k, L) -> the best hypothesis
            tokens, scores = tokens[:, 0], scores[:, 0]
        keep = tf.reduce_all(tf.not_equal(tokens[..., None], specials), axis=-1)
        words = tf.ragged.boolean_mask(tf.gather(module.words, tokens), keep)
        result = {"caption": tf.strings.reduce_join(words, axis=-1, separator=" "), "token_ids": tokens,
                  "score": scores}
        if with_attention:
            caption_in = tokens[:, :-1]
            # Row t predicted token t + 1: rows fed [end] or padding predicted nothing that was kept.
            fed = [model.pad_token_id, model.end_token_id]
            real = tf.cast(tf.reduce_all(tf.not_equal(caption_in[..., None], fed), axis=-1), tf.float32)
            maps = model.attention_maps(images, caption_in) * real[..., None]  # (B, L - 1, h * w)
            result["attention"] = tf.reshape(tf.cast(maps, tf.float32), (-1, max_length - 1, grid[0], grid[1]))
        return result

    image_spec = tf.TensorSpec((None, None, None, None), tf.uint8, name="images")
    if search.stochastic:
        def serve(images, seed):
            return caption(images, seed)

        specs = [image_spec, tf.TensorSpec((), tf.int32, name="seed")]
    else:
        def serve(images):
            return caption(images)

        specs = [image_spec]
    function = tf.function(serve, input_signature=specs, autograph=False)
    module.caption = function
    tf.saved_model.save(module, str(path), signatures={"caption": function.get_concrete_function()})
    return module
