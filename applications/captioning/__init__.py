"""Image captioning with visual attention (Xu et al. 2015, "Show, Attend and Tell").

    from attnlayers.applications.captioning import ShowAttendTell, data
    splits = data.load_scenes()                                   # generated scenes with known object boxes
    vocabulary = data.CaptionVocabulary.build(splits.train)
    train = data.make_dataset(splits.train, vocabulary)           # ((images, caption_in), caption_out)
    model = ShowAttendTell(vocabulary.vocabulary_size, attention="soft")
    model.compile_for_captioning()
    model.fit(train, epochs=10)
    model.generate(images, search=BeamSearch(3))                  # token ids; vocabulary.decode(...) -> text

Modules: `data` (the scene task, Flickr8k / COCO readers, vocabulary, tf.data pipeline), `encoder`
(ImageEncoder: a small CNN or a keras.applications backbone), `model` (ShowAttendTell soft / hard, ShowAndTell,
TransformerCaptioner),
`evaluate` (BLEU-1..4, CIDEr, exact match, attention localization), `features` (the on-disk feature cache of
a frozen backbone) and `export` (the `caption` SavedModel; imports TensorFlow, so it is not imported here).
"""

from ..core.lazy import lazy_attributes
from . import data
from .encoder import BACKBONES, ImageEncoder
from .model import ShowAndTell, ShowAttendTell, ShowAttendTellDecoder, TransformerCaptioner, next_tokens

__all__ = ["BACKBONES", "ImageEncoder", "ShowAndTell", "ShowAttendTell", "ShowAttendTellDecoder",
           "TransformerCaptioner", "data", "next_tokens"]

# Each module of the package is an attribute too (captioning.viewer, ...), imported on first use (core/lazy.py).
__getattr__ = lazy_attributes(__name__)
