"""The ViT (attnlayers.applications.vision): equal to keras-hub's ViTBackbone with copied weights; the named sizes'
parameter counts (closed form against the built model, and the published figures); pooling; bad input named; a
.keras round trip; the scenes task ("what colour is the triangle") and the CNN baseline; and examples/train_vit.py
end to end on the digits (a few epochs of a tiny model): results, pictures and a SavedModel that serves uint8 images
of any size without attnlayers, with the in-process probabilities; and with --model cnn on the scenes."""

import importlib.util
import json
import pathlib
import textwrap

import keras
import numpy as np
import pytest

from attnlayers.applications.vision import ViT, ViTConfig, from_keras_hub
from attnlayers.applications.vision.cnn import ConvNet, ConvNetConfig
from attnlayers.applications.vision.data import digits, random_shift, triangle_colour_shared, triangle_colours
from model_harness import run_model_test

ROOT = pathlib.Path(__file__).resolve().parents[3]
TINY = dict(image_shape=(8, 8, 1), patch_size=2, num_classes=10, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)


def test_equals_keras_hub_backbone_with_copied_weights(rng):
    import keras_hub

    keras.utils.set_random_seed(1)
    backbone = keras_hub.models.ViTBackbone(image_shape=(16, 12, 3), patch_size=4, num_layers=2, num_heads=2,
                                            hidden_dim=16, mlp_dim=32)
    # Every weight moved off its initial value: at keras-hub's init (LayerNorm gamma 1 / beta 0, zero biases) a
    # swapped LayerNorm pair or a dropped bias would copy "correctly".
    for weight in backbone.weights:
        weight.assign(weight + rng.normal(scale=0.2, size=weight.shape).astype("float32"))
    model = from_keras_hub(backbone, num_classes=5)
    images = rng.uniform(size=(3, 16, 12, 3)).astype("float32")
    ours = keras.ops.convert_to_numpy(model.encode(images)["sequence_output"])
    theirs = keras.ops.convert_to_numpy(backbone(images))
    assert ours.shape == (3, 13, 16)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)  # measured: 9.2e-7, outputs up to 2.9
    assert model(images).shape == (3, 5)


def test_parameter_counts():
    # the published sizes (timm's vit_{tiny,small,base,large}_patch16_224: 5.7M, 22.1M, 86.6M, 304.3M)
    counts = {name: ViTConfig.preset(name).parameter_count() for name in ("ti16", "s16", "b16", "l16")}
    assert counts == {"ti16": 5_717_416, "s16": 22_050_664, "b16": 86_567_656, "l16": 304_326_632}
    for config in (ViTConfig(**TINY), ViTConfig.preset("ti16")):
        assert ViT(config).count_params() == config.parameter_count()


def test_pooling_and_attention_maps(rng):
    images = rng.uniform(size=(2, 8, 8, 1)).astype("float32")
    token = ViT(ViTConfig(**TINY))
    encoded = token.encode(images, return_attention_scores=True)
    assert [tuple(a.shape) for a in encoded["attention_scores"]] == [(2, 2, 17, 17)] * 2
    sequence = keras.ops.convert_to_numpy(encoded["sequence_output"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(token.pool(sequence)), sequence[:, 0])
    mean = ViT(ViTConfig(**{**TINY, "pooling": "mean"}))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(mean.pool(sequence)), sequence[:, 1:].mean(1), rtol=1e-6)


def test_pictures_read_what_the_pooling_reads(rng):
    from attnlayers import attention_rollout
    from attnlayers.applications.vision.runs import pooled_attention

    images = rng.uniform(size=(2, 8, 8, 1)).astype("float32")
    for pooling in ("token", "mean"):
        model = ViT(ViTConfig(**{**TINY, "pooling": pooling}))
        scores = [keras.ops.convert_to_numpy(a) for a in model.encode(images, True)["attention_scores"]]
        rollout, layers, _ = pooled_attention(model, scores)
        assert rollout.shape == (2, 4, 4) and layers.shape == (2, 2, 2, 4, 4)
        full = attention_rollout(scores)
        rows = full[:, 0, 1:] if pooling == "token" else full[:, 1:, 1:].mean(1)  # the class token / the patches
        np.testing.assert_allclose(rollout.reshape(2, 16), rows, rtol=1e-6)
        first = scores[0][1, 1, 0, 1:] if pooling == "token" else scores[0][1, 1, 1:, 1:].mean(0)
        np.testing.assert_allclose(layers[0, 1, 1].reshape(16), first, rtol=1e-6)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"`images` must have shape \(batch, 8, 8, 1\)"):
        ViT(ViTConfig(**TINY))(np.zeros((1, 8, 8, 3), "float32"))
    with pytest.raises(ValueError, match="multiples of `patch_size`=3"):
        ViTConfig(**{**TINY, "patch_size": 3})
    with pytest.raises(ValueError, match="pooling"):
        ViTConfig(**{**TINY, "pooling": "max"})
    with pytest.raises(ValueError, match="preset"):
        ViTConfig.preset("h14")


def test_digits_and_shifts():
    splits = digits(seed=0)
    assert [len(s[0]) for s in (splits.train, splits.validation, splits.test)] == [1258, 180, 359]
    assert splits.image_shape == (8, 8, 1) and 0.0 <= splits.train[0].min() and splits.train[0].max() == 1.0
    image = np.zeros((1, 3, 3, 1), "float32")
    image[0, 1, 1] = 1.0
    moved = random_shift(np.repeat(image, 50, 0), 1, np.random.default_rng(0))
    assert moved.sum() == 50 and len({tuple(np.argwhere(m[..., 0])[0]) for m in moved}) == 9


def test_triangle_colours_label_the_one_triangle():
    from attnlayers.applications.core.inputs.scene_images import COLOURS, draw_scenes
    from attnlayers.applications.vision.data import _one_triangle

    splits = triangle_colours(60, 10, 10, seed=3)
    assert splits.class_names == tuple(COLOURS) and splits.image_shape == (32, 32, 3)
    images, objects = draw_scenes(60, image_size=32, min_objects=2, max_objects=4, attributes=_one_triangle,
                                  seed=int(np.random.SeedSequence([3, 10]).generate_state(1)[0]))
    np.testing.assert_array_equal(splits.train[0], images / np.float32(255))
    for scene, label in zip(objects, splits.train[1]):
        triangles = [o for o in scene if o.shape == "triangle"]
        assert 2 <= len(scene) <= 4 and len(triangles) == 1 and triangles[0].colour == splits.class_names[label]
        y0, x0, y1, x1 = triangles[0].box  # the triangle's colour is drawn inside its box
        patch = images[objects.index(scene), y0:y1, x0:x1].reshape(-1, 3).astype(int)
        assert np.abs(patch - COLOURS[triangles[0].colour]).sum(-1).min() < 10
    assert len(set(splits.train[1].tolist())) == 5  # every colour occurs
    assert not np.array_equal(splits.validation[0], splits.test[0])
    again = triangle_colours(60, 10, 10, seed=3)
    np.testing.assert_array_equal(again.test[0], splits.test[0])
    with pytest.raises(ValueError, match="num_train"):
        triangle_colours(-1)


def test_triangle_colour_shared_says_whether_another_shape_shares_it():
    from attnlayers.applications.core.inputs.scene_images import draw_scenes
    from attnlayers.applications.vision.data import _one_triangle_shared

    splits = triangle_colour_shared(400, 10, 10, seed=4)
    assert splits.class_names == ("no", "yes") and 150 < splits.train[1].sum() < 250  # about half are "yes"
    images, objects = draw_scenes(400, image_size=32, min_objects=2, max_objects=4, attributes=_one_triangle_shared,
                                  seed=int(np.random.SeedSequence([4, 10]).generate_state(1)[0]))
    np.testing.assert_array_equal(splits.train[0], images / np.float32(255))
    for scene, label in zip(objects, splits.train[1]):
        triangle, = [o for o in scene if o.shape == "triangle"]
        assert label == any(o.colour == triangle.colour for o in scene if o is not triangle)


def test_cnn_baseline_sizes_and_bad_config(rng):
    config = ConvNetConfig(image_shape=(32, 32, 3), num_classes=5)
    model = ConvNet(config)
    assert model.count_params() == config.parameter_count() == 146_373
    assert ViTConfig(image_shape=(32, 32, 3), patch_size=4, num_classes=5).parameter_count() == 141_701
    assert tuple(model(rng.uniform(size=(2, 32, 32, 3)).astype("float32")).shape) == (2, 5)
    again = ConvNet.from_config(model.get_config())
    assert again.config == config
    with pytest.raises(ValueError, match="divisible by 2 \\*\\* len\\(filters\\) = 8"):
        ConvNetConfig(image_shape=(20, 20, 3))
    with pytest.raises(ValueError, match="at least one stage"):
        ConvNetConfig(filters=())


SERVE = textwrap.dedent(
    """
    import json, sys
    hide("attnlayers", "keras", "keras_hub")  # noqa: F821  (serve_alone's prelude): any import of them fails
    import numpy as np, tensorflow as tf
    classifier = tf.saved_model.load(sys.argv[1])
    images = np.load(sys.argv[2])
    out = classifier.signatures["classify"](images=tf.constant(images))
    big = classifier.classify(tf.image.resize(images, (32, 32), method="nearest"))
    rgb = classifier.classify(tf.constant(np.repeat(images, 3, -1)))
    empty = classifier.classify(tf.zeros((0, 8, 8, 1), tf.uint8))
    try:
        classifier.classify(tf.zeros((1, 8, 8, 2), tf.uint8))
        refused = ""
    except tf.errors.InvalidArgumentError as error:
        refused = str(error)
    print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                      "names": [n.decode() for n in out["class_name"].numpy()],
                      "big": list(big["probabilities"].shape), "rgb": rgb["probabilities"].numpy().tolist(),
                      "empty": list(empty["probabilities"].shape), "refused": refused}))
    """
)


def test_train_vit_example_end_to_end(tmp_path):
    spec = importlib.util.spec_from_file_location("train_vit_script", ROOT / "examples" / "train_vit.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "run"
    assert script.main(["--epochs", "3", "--num-layers", "1", "--hidden-dim", "16", "--mlp-dim", "32", "--num-heads",
                        "2", "--out", str(out), "--verbose", "0", "--learning-rate", "3e-3", "--viewer"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["training"]["epochs"] == 3 and result["test"]["examples"] == 359
    assert result["test"]["accuracy"] > 0.3  # chance is 0.1; three epochs of a one-layer model
    names = {pathlib.Path(p).name for p in result["pictures"]}
    assert names == {"curves.png", "heads.png", "viewer.html", *(f"attention_{i}.png" for i in range(4))}
    assert all((out / name).stat().st_size > 1000 for name in names)
    assert (out / "logs").is_dir()

    assert (out / "saved_model" / "saved_model.pb").is_file()


def test_train_vit_example_cnn_on_scenes(tmp_path):
    spec = importlib.util.spec_from_file_location("train_vit_script", ROOT / "examples" / "train_vit.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "run"
    assert script.main(["--dataset", "scenes", "--model", "cnn", "--filters", "4,8,8", "--train-images", "64",
                        "--epochs", "1", "--out", str(out), "--verbose", "0", "--no-export"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["model"] == "cnn" and result["train_images"] == 64 and result["test"]["examples"] == 2000
    assert result["parameters"] == ConvNetConfig(num_classes=5, filters=(4, 8, 8)).parameter_count()
    assert {pathlib.Path(p).name for p in result["pictures"]} == {"curves.png"}  # no attention to draw
    with pytest.raises(SystemExit):
        script.parse_args(["--filters", "4,x"])


def test_passes_the_model_harness(tmp_path, rng):
    """Config and .keras round trips, and the classify SavedModel served without attnlayers, keras or keras_hub:
    uint8 images of any size (gray or RGB) in, the in-process probabilities and class names out."""
    from attnlayers.applications.vision import export_classifier

    images = rng.integers(0, 256, size=(6, 8, 8, 1)).astype("uint8")
    names = [f"digit {i}" for i in range(10)]

    def make():
        keras.utils.set_random_seed(5)
        return ViT(ViTConfig(**{**TINY, "pooling": "mean"}))  # not the default: the config must carry it

    def export(model, path):
        export_classifier(path, model, names)
        np.save(tmp_path / "images.npy", images)
        return [tmp_path / "images.npy"]

    def check(model, served):
        expected = keras.ops.convert_to_numpy(keras.ops.softmax(model(images.astype("float32") / 255.0)))
        np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
        assert served["names"] == [f"digit {i}" for i in expected.argmax(-1)]
        assert served["big"] == [6, 10]  # 32 x 32 images, resized to the model's 8 x 8
        np.testing.assert_allclose(served["rgb"], expected, atol=1e-3)  # RGB images: luma, within rounding
        assert served["empty"] == [0, 10]
        assert "1 (gray) or 3 (RGB) channels" in served["refused"]

    model = run_model_test(make, images.astype("float32") / 255.0, tmp_path, saved_model=(export, SERVE, check))
    assert model.config == ViT.from_config(model.get_config()).config
    with pytest.raises(ValueError, match="must name the model's 10 classes"):
        export_classifier(str(tmp_path / "bad"), model, ["a", "b"])
