"""Argument validators shared by every layer, decoder and application: one definition of each check, and one
wording of its error (a ValueError that names the argument, what was received and what was expected).

    units = positive_int(units, "units")
    rate = rate_in_unit_interval(dropout, "dropout")            # [0, 1)
    mode = one_of(mode, "mode", ("min", "max"))
    check_rank(x.shape, 3, "query", "(batch, length, dim)")
    values = concrete_value(ids)                                # None inside tf.function / jax.jit
"""

import sys

import keras
import numpy as np
from keras import ops


__all__ = ["check_divisible", "check_feature_size", "check_rank", "check_tensor", "concrete_value", "format_shape",
           "is_int", "is_number", "is_symbolic", "non_negative_int", "non_negative_number", "one_of", "positive_int",
           "positive_number", "rate_in_unit_interval", "reject_arguments", "same_size", "string_list"]


def is_int(value):
    """True for a Python / NumPy integer that is not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """True for a Python / NumPy int or float that is not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def positive_int(value, name, *, allow_none=False, what=None):
    """``value`` as an int > 0 (or None when ``allow_none``); else a ValueError naming ``name``."""
    if allow_none and value is None:
        return None
    if not is_int(value) or value <= 0:
        expected = "a positive integer or None" if allow_none else "a positive integer"
        detail = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be {expected}{detail}; received {name}={value!r}.")
    return int(value)


def non_negative_int(value, name):
    """``value`` as an int >= 0; else a ValueError naming ``name``."""
    if not is_int(value) or value < 0:
        raise ValueError(f"`{name}` must be an integer >= 0; received {name}={value!r}.")
    return int(value)


def non_negative_number(value, name):
    """``value`` as a float >= 0 (not NaN); else a ValueError naming ``name``."""
    if not is_number(value) or not value >= 0:
        raise ValueError(f"`{name}` must be a number >= 0; received {name}={value!r}.")
    return float(value)


def positive_number(value, name, *, what=None):
    """``value`` as a float > 0; else a ValueError naming ``name``."""
    if not is_number(value) or not value > 0:
        detail = f" ({what})" if what else ""
        raise ValueError(f"`{name}` must be a number > 0{detail}; received {name}={value!r}.")
    return float(value)


def check_divisible(value, name, divisor, divisor_name):
    """A ValueError naming both arguments unless ``divisor`` divides ``value`` (e.g. a model width and its heads)."""
    if value % divisor:
        raise ValueError(f"`{name}` must be divisible by `{divisor_name}`; received {name}={value}, "
                         f"{divisor_name}={divisor}.")


def rate_in_unit_interval(value, name):
    """``value`` as a float in [0, 1) (a dropout rate, a decay, a smoothing epsilon)."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a number in [0, 1); received {name}={value!r}.")
    return float(value)


def one_of(value, name, choices):
    """``value`` if it is one of ``choices``; else a ValueError listing them."""
    if value not in choices:
        raise ValueError(f"Unknown `{name}` {value!r}; expected one of {list(choices)}.")
    return value


def format_shape(shape):
    """``(None, 4, 8)`` style text for a static shape."""
    return "(" + ", ".join("None" if s is None else str(s) for s in tuple(shape)) + ")"


def check_rank(shape, ranks, name, layout):
    """Raises unless ``len(shape)`` is ``ranks`` (an int) or one of them (a tuple); ``layout`` names the axes,
    e.g. "(batch, length, dim)"."""
    ranks = (ranks,) if is_int(ranks) else tuple(ranks)
    if shape is None or len(shape) not in ranks:
        received = "None" if shape is None else f"shape {format_shape(shape)}"
        raise ValueError(f"`{name}` must have shape {layout}; received {received}.")


def check_tensor(x, name, layout):
    """Raises a named ValueError for a missing input (None) instead of a TypeError deep inside an op."""
    if x is None:
        raise ValueError(f"`{name}` is required, with shape {layout}; received None.")
    return x


def same_size(a, b):
    """True when two static sizes agree or either is unknown (None)."""
    return a is None or b is None or a == b


def check_feature_size(shape, expected, name, built_with="the size the layer was built with"):
    """Raises when the last axis of ``shape`` is known and differs from ``expected`` (a feature size fixed by
    ``build``): a named ValueError, not an op error deep inside a matmul."""
    if expected is not None and shape is not None and len(shape) and not same_size(shape[-1], expected):
        raise ValueError(
            f"`{name}` must have last axis {expected} ({built_with}); received shape {format_shape(shape)}."
        )


def string_list(value, name):
    """``value`` (None, or a list / tuple of non-empty strings) as a list ([] for None); else a ValueError naming
    ``name`` (a single string is refused: it would be read as its characters)."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
        isinstance(s, str) and s for s in value
    ):
        raise ValueError(f"`{name}` must be None or a list of non-empty strings; received {name}={value!r}.")
    return list(value)


def reject_arguments(layer, arguments, names, why, *, flags=False):
    """Raises a ValueError for the first of ``names`` that ``arguments`` (a call's kwargs) sets: not None, or with
    ``flags`` truthy. The message names the layer, the argument and its value, says ``why`` and what is
    expected."""
    for name in names:
        value = arguments.get(name)
        if (bool(value) if flags else value is not None):
            expected = "None or False" if flags else "None"
            raise ValueError(f"{layer} does not support `{name}`: {why}; received {name}={value!r}, expected {expected}.")


def is_symbolic(x):
    """True for a tensor that has no values yet: a ``keras.KerasTensor`` (functional model building), a symbolic
    TensorFlow tensor (inside ``tf.function`` / a graph; ragged and sparse ones too) or a ``tf.Variable`` read in
    graph mode, a JAX tracer (inside ``jax.jit``, ``jax.grad``, ``jax.vmap``); a ``keras.Variable`` by its value.
    False for everything else (eager tensors, NumPy arrays, Python numbers and lists).

    TensorFlow and JAX are looked up in ``sys.modules``, never imported: a tensor of a framework that was never
    imported cannot exist."""
    if isinstance(x, keras.KerasTensor):
        return True
    if isinstance(x, keras.Variable):
        x = x.value  # inside a StatelessScope (jax.jit of a keras model) the traced value
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "is_symbolic_tensor"):
        if isinstance(x, tf.RaggedTensor):
            x = x.flat_values
        elif isinstance(x, tf.SparseTensor):
            x = x.values
        if isinstance(x, tf.Variable):
            return not tf.executing_eagerly()
        if tf.is_symbolic_tensor(x):
            return True
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def concrete_value(x, name="value"):
    """``x`` as a NumPy array when its values are known here (eager tensors, NumPy arrays, Python numbers and
    lists), else None: for value checks that can only run eagerly and are skipped, by design, for symbolic
    tensors (:func:`is_symbolic`: ``tf.function``, ``jax.jit``, KerasTensors). None stays None.

    Only symbolic values are skipped: any other failure to read the values (a deleted JAX buffer, a backend
    error) propagates, and a ragged nested list is a ValueError naming ``name``."""
    if x is None or is_symbolic(x):
        return None
    if isinstance(x, (list, tuple)):
        leaves = keras.tree.flatten(x)
        if any(is_symbolic(leaf) for leaf in leaves):
            return None
        try:
            return np.asarray(x)
        except ValueError as error:  # NumPy's "inhomogeneous shape": rows of different lengths
            raise ValueError(
                f"`{name}` must be a rectangular (nested) list or an array; received a ragged nested list "
                f"({error})."
            ) from error
    return np.asarray(ops.convert_to_numpy(x))
