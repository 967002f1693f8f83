"""The caption SavedModel: uint8 images of any size in, caption strings out (beam search inside), attention
maps; loaded in a process where attnlayers, keras and keras_hub cannot be imported; agrees with in-process
captioning; gray, RGBA, other sizes and empty batches are served, other channel counts refused."""

import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from attnlayers import BeamSearch
from attnlayers.applications.captioning import ShowAndTell, ShowAttendTell, data, predict
from attnlayers.applications.captioning.export import export_captioner, to_model_images
from model_harness import serve_alone

SCRIPT = textwrap.dedent(
    """
    import json, sys
    hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
    import numpy as np
    import tensorflow as tf
    captioner = tf.saved_model.load(sys.argv[1])
    images = np.load(sys.argv[2])
    out = captioner.signatures["caption"](images=tf.constant(images))
    gray = captioner.caption(tf.constant(images[..., :1]))
    rgba = captioner.caption(tf.concat([images, np.full(images.shape[:3] + (1,), 255, np.uint8)], -1))
    large = captioner.caption(tf.image.resize(images, (40, 56), method="nearest"))
    empty = captioner.caption(tf.zeros((0, 30, 30, 3), tf.uint8))
    try:
        captioner.caption(tf.zeros((1, 16, 16, 2), tf.uint8))
        refused = ""
    except tf.errors.InvalidArgumentError as error:
        refused = error.message
    print(json.dumps({
        "caption": [c.decode() for c in out["caption"].numpy()], "token_ids": out["token_ids"].numpy().tolist(),
        "attention": list(out["attention"].shape), "attention_sums": out["attention"].numpy().sum((2, 3)).tolist(),
        "gray": len(gray["caption"]), "rgba": [c.decode() for c in rgba["caption"].numpy()],
        "large": len(large["caption"]), "empty": list(empty["caption"].shape), "refused": refused,
    }))
    """
)


@pytest.fixture(scope="module")
def task():
    splits = data.load_scenes(64, 8, 6, image_size=16, seed=3)
    return splits, data.CaptionVocabulary.build(splits.train)


def test_caption_signature_serves_without_attnlayers(task, tmp_path):
    splits, vocabulary = task
    keras.utils.set_random_seed(11)
    model = ShowAttendTell(vocabulary.vocabulary_size, image_size=16, filters=(4, 8), units=16, embedding_dim=8)
    model.compile_for_captioning(1e-2)
    model.fit(data.make_dataset(splits.train, vocabulary, batch_size=16, image_size=16, max_length=10),
              epochs=2, verbose=0)
    beam = BeamSearch(3)
    path = str(tmp_path / "captioner")
    export_captioner(path, model, vocabulary, search=beam, max_length=10)
    images = splits.test.images
    np.save(tmp_path / "images.npy", images)
    served = serve_alone(SCRIPT, path, tmp_path / "images.npy", cwd=tmp_path)

    expected = predict.caption_images(model, images, vocabulary, search=beam, max_length=10)
    assert served["caption"] == expected and served["rgba"] == expected
    tokens = np.asarray(served["token_ids"])
    assert tokens.shape == (6, 10) and (tokens[:, 0] == vocabulary.start_token_id).all()
    assert served["attention"] == [6, 9] + list(model.grid_shape)
    sums = np.asarray(served["attention_sums"])  # one map per generated token, zero after [end]
    lengths = (tokens[:, 1:] != vocabulary.pad_token_id).sum(1)
    for row, n in zip(sums, lengths):
        np.testing.assert_allclose(row[:n], 1.0, rtol=1e-4)
        np.testing.assert_allclose(row[n:], 0.0)
    assert served["gray"] == 6 and served["large"] == 6 and served["empty"] == [0]
    assert "1 (gray), 3 (RGB) or 4 (RGBA) channels" in served["refused"]


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
