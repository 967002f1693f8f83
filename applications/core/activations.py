"""Activations that more than one application uses, registered for ``.keras`` files."""

import keras

__all__ = ["gelu_approximate"]


# Registered under the GPT application's package: the name its saved models carry (it was defined there first).
@keras.saving.register_keras_serializable(package="attnlayers.gpt")
def gelu_approximate(x):
    """The tanh approximation of GELU (GPT-2's, ALBERT's "gelu_new"):
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).

    Args:
        x: a tensor.
    """
    return keras.activations.gelu(x, approximate=True)
