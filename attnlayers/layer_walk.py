"""The layers nested in a layer or model, found with public means only: a model's ``layers`` and the layers a layer
holds in its attributes, directly or in lists, tuples and dicts (how Keras tracks sublayers). Keras' own recursive
walk (``_flatten_layers``) is private; this gives its layers in its order (breadth of each level read left to
right, then depth first, as Keras' deque does).

    samplers = [layer for layer in nested_layers(model) if isinstance(layer, ScheduledSampler)]
"""

from __future__ import annotations

import collections

import keras


def _held_layers(values):
    """The layers among ``values``, or in a list / tuple / dict among them."""
    for value in values:
        if isinstance(value, keras.layers.Layer):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _held_layers(value)
        elif isinstance(value, dict):
            yield from _held_layers(value.values())


def _children(layer):
    """A model's layers, then the layers its attributes hold (in assignment order), each once."""
    held = (list(layer.layers) if isinstance(layer, keras.Model) else []) + list(_held_layers(vars(layer).values()))
    return list({id(child): child for child in held}.values())


def nested_layers(layer):
    """Every layer below ``layer`` (itself excluded), each once.

    Args:
        layer: a ``keras.layers.Layer`` or ``keras.Model``.

    Returns:
        A list of layers: those of ``layer._flatten_layers(include_self=False)``, in its order (a Sequential also
        lists the functional model Keras builds inside it).
    """
    found, seen = [], {id(layer)}
    pending = collections.deque(_children(layer))
    while pending:
        child = pending.popleft()
        if id(child) in seen:
            continue
        seen.add(id(child))
        found.append(child)
        pending.extendleft(_children(child))
    return found


__all__ = ["nested_layers"]
