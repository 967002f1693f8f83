"""Model parallelism (core.runs.model_parallel and each application's sharding.layout_map) on 8 CPU devices.

JAX must see 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8) from its start, so the work runs in one
subprocess under KERAS_BACKEND=jax (this file run as a script), whatever backend the suite runs under: every model
and both styles, 3 AdamW steps on one device and on a mesh, and the arrays' shardings, returned as JSON.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
_BUILDING = threading.Lock()

MODELS = ("gpt2", "llama", "bert", "vit", "nmt")
MESHES = {"tensor": (2, 4), "fsdp": (1, 8)}
# Megatron's splits, as the arrays must hold them (path suffix -> PartitionSpec of the tensor style).
MEGATRON = {
    "attention/query/kernel": [None, "model", None],
    "attention/key/kernel": [None, "model", None],
    "attention/value/kernel": [None, "model", None],
    "attention/attention_output/kernel": ["model", None, None],
    "feedforward/intermediate_dense/kernel": [None, "model"],
    "feedforward/gate_dense/kernel": [None, "model"],
    "feedforward/output_dense/kernel": ["model", None],
}


def _models():
    """{name: (build() -> a built, compiled-ready model, layout function, config, inputs, labels, loss)}."""
    import numpy as np
    import keras

    from attnlayers.applications import bert, gpt, vision
    from attnlayers.applications.bert import sharding as bert_sharding
    from attnlayers.applications.gpt import sharding as gpt_sharding
    from attnlayers.applications.nmt import sharding as nmt_sharding
    from attnlayers.applications.nmt.model import TransformerTranslator
    from attnlayers.applications.vision import sharding as vision_sharding

    rng = np.random.default_rng(0)
    batch, length, vocabulary = 4, 8, 64
    tokens = rng.integers(1, vocabulary, (batch, length + 1)).astype("int32")
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    size = dict(num_layers=1, num_heads=4, hidden_dim=32, intermediate_dim=64)
    gpt2 = gpt.GPTConfig(vocabulary_size=vocabulary, max_sequence_length=16, **size)
    llama = gpt.GPTConfig(vocabulary_size=vocabulary, max_sequence_length=16, architecture="llama",
                          num_key_value_heads=4, tie_embeddings=False, **size)
    bert_config = bert.BertConfig(vocabulary_size=vocabulary, max_sequence_length=16, dropout=0.0, **size)
    vit_config = vision.ViTConfig(image_shape=(8, 8, 3), patch_size=4, num_classes=8, num_layers=1, num_heads=4,
                                  hidden_dim=32, mlp_dim=64)
    return {
        "gpt2": (lambda: gpt.GPT(gpt2), gpt_sharding.layout_map, gpt2, tokens[:, :-1], tokens[:, 1:], sparse),
        "llama": (lambda: gpt.GPT(llama), gpt_sharding.layout_map, llama, tokens[:, :-1], tokens[:, 1:], sparse),
        "bert": (lambda: bert.BertPretrainer(bert.BertBackbone(bert_config)), bert_sharding.layout_map, None,
                 {"token_ids": tokens[:, :-1], "mask_positions": tokens[:, :2] % length},
                 {"mlm": tokens[:, 2:4], "nsp": tokens[:, 0] % 2}, {"mlm": sparse, "nsp": sparse}),
        "vit": (lambda: vision.ViT(vit_config), vision_sharding.layout_map, None,
                rng.normal(size=(batch, 8, 8, 3)).astype("float32"), tokens[:, 0] % 8, sparse),
        "nmt": (lambda: TransformerTranslator(vocabulary, 48, num_layers=1, d_model=32, num_heads=4,
                                              intermediate_dim=64, dropout=0.0, max_length=16),
                nmt_sharding.layout_map, None, (tokens[:, :-1], tokens[:, 1:] % 48), tokens[:, :-1] % 48, sparse),
    }


def _train(build, x, y, loss):
    """A model from ``build()`` at seed 0, its initial weights and its 3 AdamW steps' losses.
    Adam's epsilon is 1e-6, not Keras' 1e-7: a key bias has no gradient in exact arithmetic (softmax ignores a
    shift of a query's scores), so its step is rounding noise (~1e-9) over sqrt(v) + epsilon, and any other order of
    the sums (the partitioner's) moves it by up to 3.4e-5 after 3 steps at epsilon 1e-7 (ViT, measured)."""
    import keras
    import numpy as np

    with _BUILDING:  # unseeded initializers draw their seeds from Python's random module, shared by the threads
        keras.utils.set_random_seed(0)
        model = build()
        model(keras.tree.map_structure(lambda a: keras.KerasTensor(a.shape, str(a.dtype)), x))  # every variable
    start = [np.array(w) for w in model.get_weights()]
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.01, epsilon=1e-6), loss=loss)
    losses = [float(model.train_on_batch(x, y, return_dict=True)["loss"]) for _ in range(3)]
    return model, start, losses


def _run_model(name, build, layout, config, x, y, loss):
    """One model: its one-device run, then each style's run on its mesh (the results of :func:`run_all`)."""
    import keras
    import numpy as np

    from attnlayers.applications.core.runs import model_parallel

    reference, start, losses = _train(build, x, y, loss)
    final = [np.array(w) for w in reference.get_weights()]
    results = {}
    for style, shape in MESHES.items():
        mesh = model_parallel.device_mesh(shape)
        keras.distribution.set_distribution(model_parallel.model_parallel(layout, mesh, style, config))
        try:
            model, mp_start, mp_losses = _train(build, x, y, loss)  # initialized sharded, from the same seed
        finally:
            keras.distribution.set_distribution(None)
        layout_map = layout(mesh, style=style, config=config)
        unused, unmatched = model_parallel.coverage(layout_map, model)
        rows = model_parallel.sharding_table(model)
        for row in rows:  # the layout the map asked for, beside the one the array holds
            asked = layout_map[row["path"]]
            row["asked"] = list(asked.axes) if asked is not None else [None] * len(row["shape"])
            row["spec"] = list(row["spec"]) + [None] * (len(row["shape"]) - len(row["spec"]))
            row["shape"] = list(row["shape"])
        mp_final = [np.array(w) for w in model.get_weights()]
        results[f"{name}/{style}"] = {
            "mesh": list(shape), "losses": losses, "mp_losses": mp_losses,
            "init_error": max(float(np.max(np.abs(a - b))) for a, b in zip(start, mp_start)),
            "weight_error": max(float(np.max(np.abs(a - b))) for a, b in zip(final, mp_final)),
            "unused_rules": unused, "unmatched_weights": unmatched, "weights": rows,
        }
    return results


def _indivisible():
    """A weight whose split axis the mesh does not divide (6 rows over 4 devices) beside one it does (8 rows): the
    specs their arrays hold and the warnings."""
    import warnings

    import keras
    import numpy as np

    from attnlayers.applications.core.runs import model_parallel

    mesh = model_parallel.device_mesh((2, 4))
    layout_map = model_parallel.make_layout_map(mesh, {"odd": ("model", None), "even": ("model", None)})
    distribution = model_parallel.ModelParallel(layout_map=layout_map, batch_dim_name="data")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with distribution.scope():
            odd, even = (keras.Variable(np.zeros((rows, 4), "float32"), name=name)
                         for name, rows in (("odd", 6), ("even", 8)))
    spec = lambda v: [a for a in v.value.sharding.spec] + [None] * (2 - len(v.value.sharding.spec))  # noqa: E731
    return {"odd": spec(odd), "even": spec(even), "warnings": [str(w.message) for w in caught]}


def run_all(models=MODELS):
    """Every model in both styles; the JSON the test reads (run in a process with 8 JAX devices). Two models at a
    time, in threads: XLA's compilation, most of the time, runs outside the GIL, and Keras' distribution is set per
    thread."""
    from concurrent.futures import ThreadPoolExecutor

    results = {"indivisible": _indivisible()}  # first: warnings are caught process-wide
    chosen = {name: spec for name, spec in _models().items() if name in models}
    with ThreadPoolExecutor(2) as pool:
        done = [pool.submit(_run_model, name, *spec) for name, spec in chosen.items()]
        results.update({key: value for future in done for key, value in future.result().items()})
    return results


@pytest.fixture(scope="module")
def results():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs jax (the jax extra): the layouts run on JAX's devices")
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                                         " --xla_force_host_platform_device_count=8").strip())
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_model_parallel_matches_one_device_and_shards_each_weight(results):
    results = dict(results)
    # An axis the mesh does not divide is kept whole, with a warning that names the weight; the others are split.
    indivisible = results.pop("indivisible")
    assert indivisible["odd"] == [None, None] and indivisible["even"] == ["model", None], indivisible
    assert len(indivisible["warnings"]) == 1 and indivisible["warnings"][0].startswith("odd (6, 4): axis 0 (6) does "
                                                                                      "not divide over the 4 devices")
    assert sorted(results) == sorted(f"{m}/{s}" for m in MODELS for s in MESHES)
    for key, result in results.items():
        model, style = key.split("/")
        sizes = dict(zip(("data", "model"), result["mesh"]))
        # Every rule of the map matches a real weight path, and every matrix is matched by a rule.
        assert result["unused_rules"] == [], (key, result["unused_rules"])
        assert result["unmatched_weights"] == [], (key, result["unmatched_weights"])
        # The same initial weights (each variable initialized on its shards), then after 3 AdamW steps the losses
        # and the weights of one device, to 1e-5.
        assert result["init_error"] == 0, (key, result["init_error"])
        assert max(abs(a - b) for a, b in zip(result["losses"], result["mp_losses"])) <= 1e-5, key
        assert result["weight_error"] <= 1e-5, (key, result["weight_error"])
        sharded = 0
        for weight in result["weights"]:
            # The array holds the layout the map asked for (no axis left whole for not dividing) ...
            assert weight["spec"] == weight["asked"], (key, weight)
            n = 1
            for axis in weight["spec"]:
                n *= sizes[axis] if axis is not None else 1
            # ... and each device 1 / N of the weight, N the devices of its split mesh axes (from the arrays' shards).
            assert weight["device_bytes"] * n == weight["bytes"], (key, weight)
            sharded += n > 1
            if style == "tensor":
                for suffix, spec in MEGATRON.items():
                    if weight["path"].endswith(suffix):
                        assert weight["spec"] == spec, (key, weight)
            elif any(weight["path"].endswith(suffix) for suffix in MEGATRON):  # fsdp: each block matrix, 8 ways
                assert n == 8, (key, weight)
        assert sharded >= 6, (key, sharded)  # the attention and MLP matrices of a block, at least


def test_model_parallel_command_line_errors(tmp_path, capsys):
    """A bad --mesh, --mesh without the strategy, TensorFlow (no tensor parallelism) and a script without a layout
    map: one-line errors, before any data is read (in-process: the suite's own backend and devices)."""
    import keras

    from attnlayers.applications.core.runs import model_parallel
    from attnlayers.applications.core.runs.cli import UsageError, add_runtime_arguments, start_runtime
    from attnlayers.applications.gpt import sharding

    parser = add_runtime_arguments(argparse.ArgumentParser())
    parser.add_argument("--seed", type=int, default=0)

    def start(*argv, layout=sharding.layout_map):
        return start_runtime(parser.parse_args(argv), layout=layout)

    for bad in ("2by4", "0x8", "8", "2x4x1"):
        with pytest.raises(ValueError, match="--mesh must be DATAxMODEL"):
            model_parallel.parse_mesh(bad)
    with pytest.raises(ValueError, match="2 x 3 = 6 devices, but there are 8 here"):
        model_parallel.parse_mesh("2x3", 8)
    assert model_parallel.parse_mesh("2x4", 8) == (2, 4)
    with pytest.raises(UsageError, match="--mesh applies to --strategy model-parallel only"):
        start("--strategy", "data-parallel", "--mesh", "2x4")
    with pytest.raises(UsageError, match="--sharding applies to --strategy model-parallel only"):
        start("--sharding", "fsdp")
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(UsageError, match="needs KERAS_BACKEND=jax .*tf.distribute has no tensor parallelism"):
            start("--strategy", "model-parallel", "--mesh", "1x1")
        spec = importlib.util.spec_from_file_location("train_gpt_mp", ROOT / "examples" / "train_gpt.py")
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        missing = tmp_path / "missing.txt"  # never read: the runtime's error comes first
        assert script.main(["--strategy", "model-parallel", "--mesh", "2x4", "--corpus", f"text:{missing}",
                            "--out", str(tmp_path / "out")]) == 2
        error = capsys.readouterr().err
        assert "tensor parallelism" in error and "missing.txt" not in error, error
    else:  # the JAX run: the suite's one CPU device
        with pytest.raises(UsageError, match="2 x 4 = 8 devices, but there are 1 here"):
            start("--strategy", "model-parallel", "--mesh", "2x4")
        with pytest.raises(UsageError, match="needs --mesh DATAxMODEL"):
            start("--strategy", "model-parallel")
        with pytest.raises(UsageError, match="needs the model's layout map"):
            start("--strategy", "model-parallel", "--mesh", "1x1", layout=None)


if __name__ == "__main__":
    print(json.dumps(run_all(sys.argv[1:] or MODELS)))
