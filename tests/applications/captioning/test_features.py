"""The on-disk feature cache of a frozen keras.applications backbone: computed once, read back without the
backbone, keyed by the weights and the images, and equal to running the backbone inside the model."""

import keras
import numpy as np
import pytest
from attnlayers.applications.captioning import ShowAttendTell, data
from attnlayers.applications.captioning.features import cache_features, fingerprint
from keras import ops

V = 12
FROZEN = dict(image_size=32, backbone="MobileNetV2", backbone_weights=None, fine_tune=False, units=16,
              embedding_dim=8, dropout=0.0)  # a 1 x 1 grid of 1280 features


@pytest.fixture(scope="module")
def scenes():
    return data.make_scenes(6, image_size=32, seed=3)


def test_cached_features_equal_the_backbone_and_are_computed_once(scenes, tmp_path, monkeypatch):
    keras.utils.set_random_seed(0)
    model = ShowAttendTell(V, **FROZEN)
    features = cache_features(model.encoder, scenes, tmp_path, batch_size=4, verbose=0)
    assert features.shape == (6, 1, 1280) and features.dtype == np.float32
    assert [p.name for p in tmp_path.iterdir()] == [f"features-{fingerprint(model.encoder, scenes)}.npy"]
    np.testing.assert_allclose(features, ops.convert_to_numpy(model.encoder.extract(scenes.images)), atol=1e-5)

    def fail(*args, **kwargs):
        raise AssertionError("the backbone ran again")

    monkeypatch.setattr(model.encoder, "extract", fail)
    np.testing.assert_array_equal(cache_features(model.encoder, scenes, tmp_path, verbose=0), features)
    monkeypatch.undo()

    # The captioner reads features in place of images: same logits, the backbone skipped.
    caption_in = np.array([[1, 4, 5, 0]] * 6, "int32")
    from_images = ops.convert_to_numpy(model((scenes.images, caption_in)))
    np.testing.assert_allclose(ops.convert_to_numpy(model((np.asarray(features), caption_in))), from_images,
                               rtol=1e-4, atol=1e-5)

    vocabulary = data.CaptionVocabulary.build(scenes)
    batch = next(iter(data.make_dataset(scenes, vocabulary, batch_size=4, features=features, shuffle=False)))
    (inputs, caption_in), _ = batch
    assert tuple(inputs.shape) == (4, 1, 1280)
    np.testing.assert_array_equal(inputs.numpy(), features[:4])


def test_other_weights_or_images_get_another_file(scenes, tmp_path):
    keras.utils.set_random_seed(1)
    first = ShowAttendTell(V, **FROZEN).encoder
    keras.utils.set_random_seed(2)
    second = ShowAttendTell(V, **FROZEN).encoder
    for encoder in (first, second):
        encoder.build()
    assert fingerprint(first, scenes) != fingerprint(second, scenes)  # random weights differ
    other_images = data.make_scenes(6, image_size=32, seed=4)
    assert fingerprint(first, scenes) != fingerprint(first, other_images)
    cache_features(first, scenes, tmp_path, verbose=0)
    cache_features(second, scenes, tmp_path, verbose=0)
    assert len(list(tmp_path.glob("features-*.npy"))) == 2 and not list(tmp_path.glob("*.partial"))


def test_bad_input(scenes, tmp_path):
    tuned = ShowAttendTell(V, **{**FROZEN, "fine_tune": True})
    with pytest.raises(ValueError, match="frozen keras.applications backbone"):
        cache_features(tuned.encoder, scenes, tmp_path)
    with pytest.raises(ValueError, match="frozen keras.applications backbone"):
        cache_features(ShowAttendTell(V, image_size=32).encoder, scenes, tmp_path)
    with pytest.raises(ValueError, match="accepted only by a frozen backbone"):
        tuned((np.zeros((2, 1, 1280), "float32"), np.array([[1, 4]] * 2)))
    model = ShowAttendTell(V, **FROZEN)
    with pytest.raises(ValueError, match=r"must have shape \(batch, 1, 1280\)"):
        model((np.zeros((2, 1, 64), "float32"), np.array([[1, 4]] * 2)))
    vocabulary = data.CaptionVocabulary.build(scenes)
    with pytest.raises(ValueError, match="one row per image"):
        data.make_dataset(scenes, vocabulary, features=np.zeros((5, 1, 1280), "float32"))
