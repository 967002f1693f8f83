"""Model parallelism through Keras' own engine (JAX backend): a ``keras.distribution.ModelParallel`` over a 2-D
``DeviceMesh`` ("data", "model") and a ``LayoutMap`` that says how each weight is split.

    mesh = device_mesh(parse_mesh("2x4"))                      # 8 devices: batch over 2, weights over 4
    distribution = model_parallel(gpt.sharding.layout_map, mesh, style="tensor", config=gpt_config)
    keras.distribution.set_distribution(distribution)          # before the model's variables exist
    model = gpt.GPT(gpt_config)                                 # each variable created with its layout
    sharding_table(model)                                       # per-device bytes, read from the arrays

Two styles of layout map (each application's ``sharding.layout_map(mesh, style, config)``):

- "tensor" (Megatron-LM, Shoeybi et al. 2019): the query / key / value kernels (D, N, H) and the first MLP matmul
  (D, F) (LLaMA's gate and up projections both) are split by columns (heads, F) over the "model" axis, the attention
  output projection (N, H, D) and the second MLP matmul (F, D) by rows, so that each block needs one all-reduce
  forward; token tables and output projections are split along the vocabulary, position tables along the hidden
  axis; norms and small heads are replicated.
- "fsdp" (ZeRO-3 / fully sharded data parallel, Rajbhandari et al. 2020): each weight of rank 2 or more is split
  along its d_model axis over the "model" axis and gathered where it is used; biases and norms are replicated.

Either way the batch is split over the "data" axis, and XLA's partitioner (GSPMD) inserts the collectives, so the
numbers are the one-device computation's up to the order of floating-point sums.

A weight whose split axis does not divide by the mesh axis (a 50,257-token vocabulary over 4 devices) cannot be
split (JAX shards only evenly): :class:`ModelParallel` keeps that axis whole and warns, naming the weight.
"""

from __future__ import annotations

import re
import warnings

import keras

MESH_AXES = ("data", "model")
STYLES = ("tensor", "fsdp")


def parse_mesh(text, device_count=None):
    """``(data, model)`` of a ``--mesh DATAxMODEL`` text such as "2x4".

    Args:
        text: "DATAxMODEL", two positive integers joined by "x".
        device_count: when given, DATA * MODEL must equal it (every device in the mesh).

    Raises:
        ValueError: another form, a zero, or a product other than ``device_count``.
    """
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if match is None or 0 in (shape := (int(match[1]), int(match[2]))):
        raise ValueError(f"--mesh must be DATAxMODEL, two positive integers such as 2x4 (the batch split over DATA "
                         f"devices, the weights over MODEL); received {text!r}.")
    if device_count is not None and shape[0] * shape[1] != device_count:
        raise ValueError(f"--mesh {text}: {shape[0]} x {shape[1]} = {shape[0] * shape[1]} devices, but there are "
                         f"{device_count} here; use a DATAxMODEL whose product is {device_count} (on a CPU, "
                         "XLA_FLAGS=--xla_force_host_platform_device_count=N gives N devices).")
    return shape


def device_mesh(shape, devices=None):
    """A ``keras.distribution.DeviceMesh`` of ``shape`` (data, model) with the axes :data:`MESH_AXES` over
    ``devices`` (default: every local device; their number must be data * model)."""
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    parse_mesh(f"{shape[0]}x{shape[1]}", len(devices))
    return keras.distribution.DeviceMesh(tuple(shape), MESH_AXES, devices)


def check_style(style):
    if style not in STYLES:
        raise ValueError(f"sharding style must be one of {STYLES}; received {style!r}.")
    return style


def make_layout_map(mesh, rules):
    """A ``keras.distribution.LayoutMap`` on ``mesh`` of ``rules``: {regex (full match of ``variable.path``): axes,
    one mesh axis name or None per dimension}."""
    layout_map = keras.distribution.LayoutMap(mesh)
    for pattern, axes in rules.items():
        layout_map[pattern] = tuple(axes)
    return layout_map


def block_rules(style, biases=True):
    """The rules for attnlayers' Transformer blocks (encoder, decoder, GPT / LLaMA blocks): their attention
    (``self_attention`` / ``cross_attention``: ``query``, ``key``, ``value`` kernels (D, N, H) and biases (N, H),
    ``attention_output`` (N, H, D)) and feed-forward (``intermediate_dense`` / ``gate_dense`` (D, F),
    ``output_dense`` (F, D)) weights, in ``style`` ("tensor" or "fsdp"); ``biases``: the blocks have biases
    (LLaMA's have none)."""
    attention, ffn = r"(.*/)?(self|cross)_attention", r"(.*/)?feedforward"
    if check_style(style) == "tensor":  # Megatron: column-split Q, K, V and W1 (W_gate); row-split W_O and W2
        rules = {
            rf"{attention}/(query|key|value)/kernel": (None, "model", None),
            rf"{attention}/attention_output/kernel": ("model", None, None),
            rf"{ffn}/(intermediate_dense|gate_dense)/kernel": (None, "model"),
            rf"{ffn}/output_dense/kernel": ("model", None),
        }
        if biases:  # a column-split matmul's bias is split with its columns; a row-split one's stays whole
            rules[rf"{attention}/(query|key|value)/bias"] = ("model", None)
            rules[rf"{ffn}/(intermediate_dense|gate_dense)/bias"] = ("model",)
        return rules
    rules = {  # FSDP: the d_model axis of every matrix
        rf"{attention}/(query|key|value)/kernel": ("model", None, None),
        rf"{attention}/attention_output/kernel": (None, None, "model"),
        rf"{ffn}/(intermediate_dense|gate_dense)/kernel": ("model", None),
        rf"{ffn}/output_dense/kernel": (None, "model"),
    }
    if biases:
        rules[rf"{attention}/(query|key|value)/bias"] = (None, None)  # (N, H): small, replicated
    return rules


class ModelParallel(keras.distribution.ModelParallel):
    """``keras.distribution.ModelParallel`` whose layouts split only the axes that divide evenly: a weight
    dimension that the mesh axis does not divide is kept whole, with a warning naming the weight (JAX refuses
    uneven shards). Everything else is Keras' class."""

    def get_variable_layout(self, variable):
        layout = super().get_variable_layout(variable)
        mesh_sizes = dict(zip(self.device_mesh.axis_names, self.device_mesh.shape))
        axes = list(layout.axes)
        for i, axis in enumerate(axes):
            if axis is not None and variable.shape[i] % mesh_sizes[axis]:
                warnings.warn(f"{variable.path} {tuple(variable.shape)}: axis {i} ({variable.shape[i]}) does not "
                              f"divide over the {mesh_sizes[axis]} devices of mesh axis {axis!r}; it is kept whole "
                              "on each device (to split it: a smaller MODEL in --mesh that divides it, or for a "
                              "vocabulary a padded one, e.g. GPTConfig(vocabulary_padding=128)).", stacklevel=2)
                axes[i] = None
        if axes == list(layout.axes):
            return layout
        return keras.distribution.TensorLayout(tuple(axes), self.device_mesh)


def model_parallel(layout_function, mesh, style="tensor", config=None):
    """The :class:`ModelParallel` of ``layout_function(mesh, style=style, config=config)`` (an application's
    ``sharding.layout_map``), its batch split over the mesh's "data" axis. Set it with
    ``keras.distribution.set_distribution`` before the model is built."""
    layout_map = layout_function(mesh, style=check_style(style), config=config)
    return ModelParallel(layout_map=layout_map, batch_dim_name="data")


def coverage(layout_map, model):
    """What a layout map misses on ``model``: ``(unused, unmatched)``, the rules (regexes) that match none of its
    weights' paths, and the paths of its weights of rank >= 2 that no rule matches (kept whole on each device).
    Both empty for a map written against the model's real paths."""
    paths = [w.path for w in model.weights]
    unused = [pattern for pattern in layout_map if not any(re.fullmatch(pattern, p) for p in paths)]
    unmatched = [w.path for w in model.weights if len(w.shape) >= 2 and layout_map[w.path] is None]
    return unused, unmatched


def device_bytes(variable):
    """``(total, per_device)``: the bytes of ``variable``'s full array and, per device, of the shard that device
    holds (read from the array's shards: ``variable.value.addressable_shards``)."""
    value = variable.value
    total = value.size * value.dtype.itemsize
    return total, {str(shard.device): shard.data.nbytes for shard in value.addressable_shards}


def sharding_table(model):
    """One row per weight of ``model``: {"path", "shape", "spec" (the array's PartitionSpec as a tuple), "bytes",
    "device_bytes" (the largest shard a device holds)}."""
    rows = []
    for variable in model.weights:
        total, per_device = device_bytes(variable)
        spec = getattr(variable.value.sharding, "spec", ())
        rows.append({"path": variable.path, "shape": tuple(variable.shape), "spec": tuple(spec), "bytes": total,
                     "device_bytes": max(per_device.values())})
    return rows


__all__ = ["MESH_AXES", "STYLES", "ModelParallel", "block_rules", "coverage", "device_bytes", "device_mesh",
           "make_layout_map", "model_parallel", "parse_mesh", "sharding_table"]
