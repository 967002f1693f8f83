"""Strategy and precision setup: one helper and one set of flags for every script; mirrored training over the
two logical CPUs that conftest.py configures; the mixed-precision policies; clear errors where a multi-worker
cluster or a TPU does not exist."""

import argparse

import keras
import numpy as np
import pytest

from attnlayers.applications import core

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute is TensorFlow's")


def test_flags_parse_and_document_every_choice():
    parser = core.add_runtime_arguments(argparse.ArgumentParser())
    args = parser.parse_args([])
    assert (args.strategy, args.precision, args.tpu) == ("none", "float32", None)
    args = parser.parse_args(["--strategy", "mirrored", "--precision", "mixed_bfloat16"])
    assert (args.strategy, args.precision) == ("mirrored", "mixed_bfloat16")
    assert parser.parse_args(["--strategy", "default"]).strategy == "none"  # the older name
    text = parser.format_help()
    for choice in (*core.STRATEGIES, *core.PRECISIONS):
        assert choice in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--precision", "float8"])


def test_mirrored_strategy_trains_over_two_logical_cpus():
    import tensorflow as tf

    strategy = core.setup_runtime("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 2
    assert core.describe_runtime(strategy) == "MirroredStrategy, 2 replicas, float32"
    # Static shapes (padded lengths, drop_remainder) are for TPUStrategy only.
    assert not core.static_shapes(strategy) and not core.static_shapes(tf.distribute.get_strategy())
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    history = model.fit(x, x @ np.array([1.0, -2.0, 0.5], "float32"), batch_size=16, epochs=3, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert core.describe_runtime(core.setup_runtime("none")).endswith("1 replica, float32")


@pytest.mark.parametrize("precision, compute", [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16"),
                                                ("float32", "float32")])
def test_precision_sets_the_dtype_policy(precision, compute):
    core.setup_runtime("none", precision)
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    assert layer.compute_dtype == compute and layer.kernel.dtype == "float32"  # variables stay float32
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    model.compile("adam", core.MaskedCrossEntropy())
    if precision == "mixed_float16":  # Model.compile adds dynamic loss scaling
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


def test_unavailable_strategies_fail_clearly(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        core.make_strategy("multi-worker")
    with pytest.raises(ValueError, match="Unknown `strategy`"):
        core.make_strategy("horovod")
    with pytest.raises(ValueError, match="Unknown `precision`"):
        core.set_precision("float8")


def test_data_parallel_is_mirrored_under_tensorflow_and_the_jax_names_are_checked():
    import tensorflow as tf

    from attnlayers.applications.core.runs import replicas as distribution, runtime

    strategy = core.setup_runtime("data-parallel")  # the name both backends take
    assert isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync == 2
    # Under KERAS_BACKEND=jax (make_strategy hands the name to jax_runtime), a tf.distribute name says what to use.
    with pytest.raises(ValueError, match="needs KERAS_BACKEND=tensorflow.*--strategy data-parallel"):
        runtime.jax_runtime("mirrored")
    two = runtime.JaxRuntime("data-parallel", object(), ["gpu:0", "gpu:1"])
    assert two.num_replicas_in_sync == 2 and two.runtime_name == "JAX DataParallel (gpu)"
    distribution.check_batch_size(two, 8)
    with pytest.raises(ValueError, match="--batch-size 7 does not split evenly over the 2 devices"):
        distribution.check_batch_size(two, 7)
    distribution.check_batch_size(strategy, 7)  # tf.distribute splits any batch
    (x, y), n = distribution.pad_to_replicas((np.arange(5), np.arange(10).reshape(5, 2)), two)
    assert n == 5 and x.tolist() == [0, 1, 2, 3, 4, 4] and y.shape == (6, 2)
    assert distribution.pad_to_replicas(np.arange(5), strategy)[1] == 5
