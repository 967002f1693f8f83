"""GPT: a GPT-2-style decoder-only language model built from attnlayers' layers.

    from attnlayers.applications import gpt

    model = gpt.GPT(gpt.GPTConfig(vocabulary_size=1000, max_sequence_length=128))
    logits = model(token_ids)                                    # (B, T, 1000)
    result = model.generate(prompt_ids, max_length=128, strategy="top_p", seed=1)

Modules: `model` (GPTConfig, GPT: call, initial_cache / next / generation_inputs / generate, a core
GenerativeModel, so `attnlayers.applications.core.export.export_generator` exports it as a SavedModel),
`keras_hub_weights` (a GPT from a keras-hub GPT2Backbone: same sizes, same weights).
"""

from .keras_hub_weights import copy_keras_hub_weights, from_keras_hub
from .model import GPT, GPTConfig, gelu_approximate

__all__ = ["GPT", "GPTConfig", "copy_keras_hub_weights", "from_keras_hub", "gelu_approximate"]
