"""The caption SavedModel: a model without attention exports captions only; one (H, W, C) image is refused naming
its shape; images are made RGB and resized. A Show, Attend and Tell model's export (uint8 images of any size in,
caption strings out with beam search inside, attention maps), served in a process where attnlayers, keras and
keras_hub cannot be imported and agreeing with in-process captioning, with gray, RGBA, other sizes and empty
batches served and other channel counts refused: test_example.py::test_a_short_run_writes_every_artefact serves
the SavedModel that examples/train_captioning.py wrote."""

import numpy as np
import pytest
import tensorflow as tf
from attnlayers.applications.captioning import ShowAndTell, data
from attnlayers.applications.captioning.export import export_captioner, to_model_images


@pytest.fixture(scope="module")
def task():
    splits = data.load_scenes(64, 8, 6, image_size=16, seed=3)
    return splits, data.CaptionVocabulary.build(splits.train)


def test_model_without_attention_exports_captions_only(task, tmp_path):
    splits, vocabulary = task
    model = ShowAndTell(vocabulary.vocabulary_size, image_size=16, filters=(4, 8), units=16, embedding_dim=8)
    module = export_captioner(str(tmp_path / "plain"), model, vocabulary, search="greedy", max_length=8)
    out = module.caption(tf.constant(splits.test.images[:2]))
    assert set(out) == {"caption", "token_ids", "score"} and out["token_ids"].shape == (2, 8)
    # signatures[...] check dtypes, not shapes: one (H, W, C) image is refused naming `images` and its shape.
    loaded = tf.saved_model.load(str(tmp_path / "plain"))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"`images` must have shape \(batch, height, width, channels\)"):
        loaded.signatures["caption"](images=tf.constant(splits.test.images[0]))


def test_images_are_made_rgb_and_resized():
    gray = np.arange(4 * 6, dtype="uint8").reshape(1, 4, 6, 1)
    resized = to_model_images(gray, 8).numpy()
    assert resized.shape == (1, 8, 8, 3) and resized.dtype == np.uint8
    np.testing.assert_array_equal(resized[..., 0], resized[..., 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="channels"):
        to_model_images(np.zeros((1, 4, 4, 2), "uint8"), 8)
    with pytest.raises(ValueError, match=r"`images` must be uint8.*float32"):
        to_model_images(np.zeros((1, 4, 4, 3), "float32"), 8)
