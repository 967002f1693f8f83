"""A captioner's visual attention in the interactive viewer (:mod:`attnlayers.viewer`), in one call: the image
with the map of the word under the cursor (Xu et al. 2015, Figs. 2-3), word by word.

    viewer = attention_viewer(model, splits.test, vocabulary, "out/viewer.html", index=0)

The model runs on any backend; generation goes through ``model.generate``.
"""

from __future__ import annotations

import numpy as np

from attnlayers.decoding import get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.viewer import AttentionViewer

from .encoder import check_pixel_values
from .model import TransformerCaptioner


def _transformer_maps(model, image, caption_in):
    """(L, N, T, L_grid) cross-attention and (L, N, T, T) decoder self-attention of a TransformerCaptioner."""
    from keras import ops

    memory = model.encode(model.encoder.check_input(image))
    caption_in = ops.convert_to_tensor(caption_in, "int32")
    out = model.decoder(model.embedding(caption_in), memory,
                        decoder_padding_mask=ops.not_equal(caption_in, model.pad_token_id),
                        return_attention_scores=True)
    cross = np.stack([np.asarray(s["cross_attention"])[0] for s in out["attention_scores"]])
    self_attention = np.stack([np.asarray(s["self_attention"])[0] for s in out["attention_scores"]])
    return cross, self_attention


@renamed_keyword("strategy", "search")
def attention_viewer(model, images, vocabulary, path=None, *, index=0, caption=None, search="greedy",
                     max_length=None, title=None):
    """Where ``model`` looks for each word of its caption of image ``index``, as an
    :class:`~attnlayers.viewer.AttentionViewer` (the image view; for the Transformer captioner also every layer and
    head of its cross-attention and its decoder self-attention).

    Args:
        model: a captioner with attention (``ShowAttendTell`` soft or hard, ``TransformerCaptioner``).
        images: a ``CaptionSet`` with images, or (N, S, S, 3) pixel values (uint8 0..255).
        vocabulary: the model's ``CaptionVocabulary``.
        path: where to write the page (None: not written).
        index: which image.
        caption: a caption to force (e.g. a reference); default: the model's own (``search``).
        search, max_length: the decoding of the caption.
        title: the page's title.

    Returns:
        The viewer (``viewer.images[0]["weights"]``: (1, 1, T, L) for Show, Attend and Tell, (layers, heads, T, L)
        for the Transformer; T words, the caption's end ("<end>") the last when the caption ended, L = the grid's
        cells); written to ``path`` when given.

    Raises:
        ValueError: a model without attention, images that are not pixel values.
    """
    import keras

    pixels = getattr(images, "images", images)
    image = check_pixel_values(np.asarray(pixels)[index : index + 1], "images")
    if caption is None:
        max_length = model.generation_length(max_length)
        tokens = np.asarray(model.generate(keras.ops.convert_to_tensor(image), max_length,
                                           get_search(search)).tokens)
        row = (tokens[:, 0] if tokens.ndim == 3 else tokens)[0]
        ids, ended = [], False
        for token in row[1:]:  # row[0] is the start token
            if int(token) in (model.end_token_id, model.pad_token_id):
                ended = True
                break
            ids.append(int(token))
    else:
        ids, ended = [int(t) for t in vocabulary.encode(caption)], True
    # Row t of the maps is the map that predicted word t; the caption's end is a prediction too (the last row).
    words = [vocabulary.id_to_token(t) for t in ids] + ([vocabulary.id_to_token(model.end_token_id)] if ended else [])
    if not words:
        raise ValueError("The caption has no word (max_length too short): there is nothing to show.")
    caption_in = np.asarray([[model.start_token_id] + ids], "int32")
    viewer = AttentionViewer(title or f"{model.name}: {' '.join(words)}")
    if isinstance(model, TransformerCaptioner):
        cross, self_attention = _transformer_maps(model, image, caption_in)
        viewer.add_image("caption", image[0], cross[:, :, : len(words)], words, grid_shape=model.grid_shape)
        viewer.add_attention("decoder self-attention", self_attention,  # over the inputs: start, the words
                             [vocabulary.id_to_token(model.start_token_id)] + words[: len(ids)])
    else:
        maps = model.attention_maps(image, caption_in)
        if maps is None:
            raise ValueError(f"model {model.name!r} has no attention to show.")
        viewer.add_image("caption", image[0], np.asarray(maps)[0, : len(words)], words, grid_shape=model.grid_shape)
    if path is not None:
        viewer.write(path)
    return viewer


__all__ = ["attention_viewer"]
