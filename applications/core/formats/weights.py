"""Copying weights between two implementations of one architecture (keras-hub's models and ours), matched by
path after renaming, with every missing, unexpected or misshapen weight named in one error; the keras-hub copier
that the applications' ``from_keras_hub`` share, given one :class:`KerasHubTable` per model.

keras_hub is imported by the caller, not here: only the backbone's attributes and weights are read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable


__all__ = ["KerasHubTable", "copy_keras_hub_weights", "copy_weights_by_path", "from_keras_hub"]


def copy_weights_by_path(source_weights, targets, rename, *, source_name, target_name):
    """Assigns each source weight to the target at ``rename(source.path)``.

    Args:
        source_weights: the weights to copy (e.g. ``keras_hub_backbone.weights``).
        targets: {path: weight} of the receiving model; every one must be assigned.
        rename: source path -> target path.
        source_name, target_name: the two models as the caller's arguments name them (for the error).

    Raises:
        ValueError: naming the source weights without a counterpart, the shapes that differ and the targets
            left unassigned; nothing is checked piecemeal, so one error lists every difference.
    """
    targets = dict(targets)
    missing, mismatched, pairs = [], [], []
    for weight in source_weights:
        target = targets.pop(rename(weight.path), None)
        if target is None:
            missing.append(weight.path)
        elif tuple(target.shape) != tuple(weight.shape):
            mismatched.append(f"{weight.path} {tuple(weight.shape)} -> {target.path} {tuple(target.shape)}")
        else:
            pairs.append((target, weight))
    if missing or mismatched or targets:
        raise ValueError(
            f"`{source_name}` and `{target_name}` must have the same architecture and sizes; "
            f"weights of `{source_name}` without a counterpart: {missing}; shapes that differ: {mismatched}; "
            f"weights of `{target_name}` not copied: {sorted(t.path for t in targets.values())}."
        )
    for target, weight in pairs:  # only once all of them fit: a failed copy leaves the target as it was
        target.assign(weight.value)


@dataclasses.dataclass(frozen=True)
class KerasHubTable:
    """How a keras-hub backbone's weights map onto one of our models: what :func:`from_keras_hub` and
    :func:`copy_keras_hub_weights` read, one table per model.

    Attributes:
        renames: (pattern, replacement) pairs applied in turn with ``re.sub`` (a replacement may be a function of
            the match): a keras-hub weight path -> the path of its target in ``targets(model)``.
        sizes: backbone -> {config field: value}, the sizes of the model to build (raises ValueError for a
            backbone the model cannot copy).
        targets: model -> {path: weight}, the model's weights that the backbone's fill (each must be filled).
    """

    renames: tuple
    sizes: Callable
    targets: Callable

    def rename(self, path):
        for pattern, replacement in self.renames:
            path = re.sub(pattern, replacement, path)
        return path


def copy_keras_hub_weights(backbone, model, table, *, source_name="backbone", target_name="model"):
    """Copies every weight of a keras-hub ``backbone`` into ``model`` as ``table`` maps them; returns ``model``.
    ``source_name`` and ``target_name``: the two models as the caller's arguments name them (for the error).

    Raises:
        ValueError: naming the weights that are missing on either side or whose shapes differ.
    """
    copy_weights_by_path(backbone.weights, table.targets(model), table.rename, source_name=source_name,
                         target_name=target_name)
    return model


def from_keras_hub(backbone, build, table, *, source_name="backbone", target_name="model", **config):
    """``build(fields)`` with the backbone's sizes (``table.sizes``) updated by ``config``, its weights copied from
    ``backbone`` (:func:`copy_keras_hub_weights`); returns the model."""
    model = build({**table.sizes(backbone), **config})
    return copy_keras_hub_weights(backbone, model, table, source_name=source_name, target_name=target_name)
