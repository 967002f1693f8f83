"""Layout maps for ``keras.distribution.ModelParallel`` (JAX backend) of a :class:`~.model.GPT`, both
architectures: which weight is split along which axis over the mesh's "model" axis (docs/guides/model-parallelism.md).

    from attnlayers.applications.core.runs import model_parallel
    mesh = model_parallel.device_mesh((2, 4))
    keras.distribution.set_distribution(model_parallel.model_parallel(layout_map, mesh, "tensor", config))
    model = GPT(config)
"""

from ..core.runs.model_parallel import block_rules, check_style, make_layout_map
from .model import GPTConfig


__all__ = ["layout_map"]


def layout_map(mesh, style="tensor", config=None):
    """The ``keras.distribution.LayoutMap`` of a GPT on ``mesh`` (axes "data", "model").

    Args:
        mesh: a ``keras.distribution.DeviceMesh``.
        style: "tensor" (Megatron: Q / K / V and the first MLP matmuls, LLaMA's gate and up included, split by
            columns; the attention output and second MLP matmul by rows; the token table (V, D) along the
            vocabulary, as the tied output projection reads it; an untied ``lm_head`` (D, V) by columns; GPT-2's
            position table (P, D) along D) or "fsdp" (every matrix along its d_model axis).
        config: the model's :class:`GPTConfig` (its architecture and ``tie_embeddings``); None: GPT-2's.
    """
    config = config if config is not None else GPTConfig()
    tensor = check_style(style) == "tensor"
    rules = block_rules(style, biases=config.architecture == "gpt2")
    rules[r"(.*/)?token_embedding/embeddings"] = ("model", None) if tensor else (None, "model")  # (V, D)
    if config.architecture == "gpt2":
        rules[r"(.*/)?position_embedding/embeddings"] = (None, "model")  # (P, D)
    elif not config.tie_embeddings:
        rules[r"(.*/)?lm_head/kernel"] = (None, "model") if tensor else ("model", None)  # (D, V)
    return make_layout_map(mesh, rules)
