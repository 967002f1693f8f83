"""Layout maps for ``keras.distribution.ModelParallel`` (JAX backend) of a :class:`~.model.ViT`: which weight is
split along which axis over the mesh's "model" axis (docs/guides/model-parallelism.md)."""

from ..core.runs.model_parallel import block_rules, check_style, make_layout_map


__all__ = ["layout_map"]


def layout_map(mesh, style="tensor", config=None):
    """The ``keras.distribution.LayoutMap`` of a ViT on ``mesh`` (axes "data", "model").

    Args:
        mesh: a ``keras.distribution.DeviceMesh``.
        style: "tensor" (Megatron: Q / K / V and the first MLP matmul split by columns, the attention output and
            second MLP matmul by rows; the patch projection (P, P, C, D), class token (1, 1, D) and position table
            (T, D) along D; the classifier head (D, K) by columns) or "fsdp" (every matrix along its D axis; the
            head (D, K) along D).
        config: unused (every ViT size has the same weights); accepted for the common signature.
    """
    tensor = check_style(style) == "tensor"
    rules = block_rules(style)
    rules[r"(.*/)?patch_embedding/projection/kernel"] = (None, None, None, "model")  # (P, P, C, D)
    rules[r"(.*/)?class_token/token"] = (None, None, "model")  # (1, 1, D)
    rules[r"(.*/)?position_embedding/embeddings"] = (None, "model")  # (T, D)
    rules[r"(.*/)?head/kernel"] = (None, "model") if tensor else ("model", None)  # (D, K)
    if tensor:
        rules[r"(.*/)?patch_embedding/projection/bias"] = ("model",)
        rules[r"(.*/)?head/bias"] = ("model",)
    return make_layout_map(mesh, rules)
