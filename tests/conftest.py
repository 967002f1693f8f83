"""Test configuration shared by the whole suite (one pytest process: TensorFlow imports once)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    # Two logical CPUs for tf.distribute tests; must happen before any TensorFlow op runs.
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from float32, a fixed seed and a fresh name scope."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


@pytest.fixture
def rng():
    return np.random.default_rng(0)
