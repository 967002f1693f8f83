"""Test configuration shared by the whole suite (one pytest process: TensorFlow imports once)."""

import gc
import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The tests compile many tiny XLA programs (every JAX op outside jit, every jit_compile=True step); at these sizes
# XLA's backend optimisations cost more compile time than they save (measured: the JAX run of the chunked and
# Linformer tests 86 s -> 59 s, TensorFlow's XLA train steps of BERT and GPT 44 s -> 36 s). Set before TensorFlow
# or JAX starts; subprocesses inherit it.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

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


_TESTS_RUN = itertools.count(1)
# A full garbage collection takes ~0.4 s once TensorFlow and a few hundred models are in the heap; after every
# test that was a third of the suite's time. Python's own generational collection runs in between.
_FULL_COLLECTION_EVERY = 20


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from float32, a fixed seed and a fresh name scope."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    if next(_TESTS_RUN) % _FULL_COLLECTION_EVERY == 0:
        gc.collect()
        # What survives a full collection (modules, TensorFlow's and Keras' global caches) is long-lived: frozen, it
        # is not traversed again by later collections, whose cost otherwise grows with the suite's heap (a teardown
        # late in a CI run took 41 s).
        gc.freeze()


@pytest.fixture
def rng():
    return np.random.default_rng(0)
