"""Layout maps for ``keras.distribution.ModelParallel`` (JAX backend) of a
:class:`~.model.TransformerTranslator`: which weight is split along which axis over the mesh's "model" axis
(docs/guides/model-parallelism.md). The recurrent translators (RNNSeq2Seq) have none."""

from ..core.runs.model_parallel import block_rules, check_style, make_layout_map


__all__ = ["layout_map"]


def layout_map(mesh, style="tensor", config=None):
    """The ``keras.distribution.LayoutMap`` of a TransformerTranslator on ``mesh`` (axes "data", "model").

    Args:
        mesh: a ``keras.distribution.DeviceMesh``.
        style: "tensor" (Megatron: Q / K / V and the first MLP matmul of the encoder's and decoder's self- and
            cross-attention blocks split by columns, the attention outputs and second MLP matmul by rows; the
            source and target tables (V, D) along the vocabulary; the output projection (D, V_t) by columns) or
            "fsdp" (every matrix along its d_model axis).
        config: {"shared_embeddings": bool} or None (separate tables and output projection); with shared
            embeddings there is no output projection to split.
    """
    tensor = check_style(style) == "tensor"
    rules = block_rules(style)
    rules[r"(.*/)?(source|target)_embedding/token_embedding/embeddings"] = (
        ("model", None) if tensor else (None, "model"))  # (V, D)
    if not (config or {}).get("shared_embeddings", False):
        rules[r"(.*/)?logits/kernel"] = (None, "model") if tensor else ("model", None)  # (D, V_t)
        if tensor:
            rules[r"(.*/)?logits/bias"] = ("model",)
    return make_layout_map(mesh, rules)
