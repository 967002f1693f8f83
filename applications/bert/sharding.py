"""Layout maps for ``keras.distribution.ModelParallel`` (JAX backend) of a
:class:`~.backbone.BertBackbone` and the models around it (pretrainer, classifiers, span QA): which weight is split
along which axis over the mesh's "model" axis (docs/guides/model-parallelism.md)."""

from ..core.runs.model_parallel import block_rules, check_style, make_layout_map


__all__ = ["layout_map"]


def layout_map(mesh, style="tensor", config=None):
    """The ``keras.distribution.LayoutMap`` of a BERT model on ``mesh`` (axes "data", "model").

    Args:
        mesh: a ``keras.distribution.DeviceMesh``.
        style: "tensor" (Megatron: Q / K / V and the first MLP matmul split by columns, the attention output and
            second MLP matmul by rows; the token table (V, D) and the masked-LM output bias (V,) along the
            vocabulary; position and segment tables (P, D), (S, D) along D; the pooler and the masked-LM transform
            (D, D) by columns) or "fsdp" (every matrix along its d_model axis). Task heads with a few outputs
            (classes, tags, the span and next-sentence or sentence-order logits) are replicated in both.
        config: unused (every BERT size has the same weights); accepted for the common signature.
    """
    tensor = check_style(style) == "tensor"
    rules = block_rules(style)
    rules[r"(.*/)?token_embedding/embeddings"] = ("model", None) if tensor else (None, "model")  # (V, D)
    rules[r"(.*/)?(position|segment)_embedding/embeddings"] = (None, "model")  # (P, D), (S, D)
    rules[r"(.*/)?(pooler|transform)/kernel"] = (None, "model") if tensor else ("model", None)  # (D, D)
    if tensor:
        rules[r"(.*/)?(pooler|transform)/bias"] = ("model",)
        rules[r"(.*/)?mlm_head/output_bias"] = ("model",)  # (V,): the logits' vocabulary split
    rules[r"(.*/)?(logits|span_logits|nsp_head|sop_head)/kernel"] = (None, None)  # (D, K): a few outputs, replicated
    return make_layout_map(mesh, rules)
