"""core.runs.keras_fixes: each fix is needed by the Keras installed (training with Keras as shipped fails, or differs
from one device, in the case the fix exists for) and, installed, that case trains as on one device. The day a Keras
release fixes one of them, its "as shipped" assertion fails here: give the fix a last version, or delete it. (The
multi-worker fix, reduce_scalars_across_workers, needs two processes: test_fault_tolerance.py.)"""

import keras
import numpy as np
import pytest

from attnlayers.applications.core.runs import keras_fixes
from attnlayers.applications.core import make_strategy

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute is TensorFlow's")


def _mirrored():
    strategy = make_strategy("mirrored")  # over the two logical CPUs conftest.py configures; installs the fixes
    assert strategy.num_replicas_in_sync == 2
    return strategy


def _masked_model(strategy):
    """A model whose second input is a boolean padding mask."""
    with strategy.scope():
        tokens = keras.Input((5, 3))
        mask = keras.Input((5,), dtype="bool")
        pooled = keras.layers.GlobalAveragePooling1D()(tokens, mask=mask)
        model = keras.Model([tokens, mask], keras.layers.Dense(1)(pooled))
        model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_build_from_one_replica_is_needed_for_a_boolean_input():
    strategy = _mirrored()
    rng = np.random.default_rng(0)
    x, mask, y = rng.normal(size=(8, 5, 3)).astype("float32"), np.ones((8, 5), bool), np.zeros((8, 1), "float32")
    with keras_fixes.without("build_from_one_replica"), pytest.raises(Exception, match="(?i)addn|bool"):
        _masked_model(strategy).fit([x, mask], y, batch_size=4, epochs=1, verbose=0)  # Keras as shipped
    history = _masked_model(strategy).fit([x, mask], y, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def _clipped_steps(strategy):
    """The weights after 2 steps of SGD with global_clipnorm 0.01 (clipping active on every step)."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 1)).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.5, global_clipnorm=0.01), "mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def test_clip_after_all_reduce_is_needed_for_clipping_to_match_one_device():
    import tensorflow as tf

    one = _clipped_steps(tf.distribute.get_strategy())
    strategy = _mirrored()
    with keras_fixes.without("clip_after_all_reduce"):
        shipped = _clipped_steps(strategy)  # each replica clips its half of the gradient
    fixed = _clipped_steps(strategy)
    assert max(np.abs(a - b).max() for a, b in zip(shipped, one)) > 1e-3
    assert max(np.abs(a - b).max() for a, b in zip(fixed, one)) < 1e-6


def test_fixes_are_named_installed_once_and_restored_after_without():
    _mirrored()
    part = keras_fixes.FIXES["clip_after_all_reduce"][0]
    assert part.installed() and part.applies()
    assert sorted(keras_fixes.apply_distribution_fixes()) == sorted(keras_fixes.FIXES)  # again: a no-op
    with keras_fixes.without("clip_after_all_reduce"):
        assert not part.installed() and keras_fixes.FIXES["build_from_one_replica"][0].installed()
    assert part.installed()
    assert not keras_fixes.KerasFix("x", (3, 0), (3, 1), part.locate, part.make).applies((3, 15))
    with pytest.raises(ValueError, match="Unknown Keras fix 'clip'"):
        with keras_fixes.without("clip"):
            pass


def test_set_initial_epoch_is_where_fit_starts():
    """What set_initial_epoch writes is still what fit starts from (core.training.backup's resume; it fails here
    first)."""

    class Resume(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            keras_fixes.set_initial_epoch(self.model, 2)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", run_eagerly=True)
    history = model.fit(np.zeros((4, 2)), np.zeros((4, 1)), epochs=4, verbose=0, callbacks=[Resume()])
    assert history.epoch == [2, 3]


def test_private_uses_check_the_version_and_the_name():
    """(bpe_merge_into_cache is exercised by GPT2Tokenizer's tests, against Hugging Face's ids.)"""
    model = keras.Sequential([keras.Input((2,))])
    with pytest.raises(ImportError, match=r"x relies on keras's private Sequential\._initial_epoch \(keras 3\.0 to "
                                          r"3\.1\), which the installed keras 3\.\d+\S* is not known to have"):
        keras_fixes.PrivateUse("keras", (3, 0), (3, 1), "_initial_epoch").require(model, "x")
    with pytest.raises(ImportError, match=r"_gone \(keras 3\.0 and later\), which .* lacks: install"):
        keras_fixes.PrivateUse("keras", (3, 0), None, "_gone").require(model, "x")
