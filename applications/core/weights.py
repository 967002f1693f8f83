"""Copying weights between two implementations of one architecture (keras-hub's models and ours), matched by
path after renaming, with every missing, unexpected or misshapen weight named in one error."""


def renamed(path, renames):
    """``path`` with each (old, new) of ``renames`` replaced in turn."""
    for old, new in renames:
        path = path.replace(old, new)
    return path


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
