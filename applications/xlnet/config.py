"""XLNet's sizes: :class:`XLNetConfig` and the named configurations of the paper.

    config = XLNetConfig.preset("base")         # Yang et al. 2019: 12 layers, d 768, 12 heads, 117M
    config = XLNetConfig.preset("tiny", vocabulary_size=8000)
    config.parameter_count()                    # the closed form, == the built backbone's count_params()
"""

from __future__ import annotations

import dataclasses

from attnlayers.validation import check_divisible, is_int, one_of, positive_int, rate_in_unit_interval

from ..core.configs import config_of

__all__ = ["ACTIVATIONS", "PRESETS", "XLNetConfig"]

# (num_layers, hidden_dim, num_heads), d_ff = 4 d: XLNet-Base and -Large (Yang et al. 2019, section 3.1: "the
# same architecture hyperparameters as BERT-Base / BERT-Large"), and a tiny one for tests and CPU runs.
PRESETS = {
    "tiny": (2, 128, 2),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# The feed-forward activations that mean the same function here and in Hugging Face's XLNetModel (its "gelu" is the
# erf form, as Keras' "gelu").
ACTIVATIONS = ("gelu", "relu")


@dataclasses.dataclass
class XLNetConfig:
    """The sizes of an :class:`~attnlayers.applications.xlnet.XLNetBackbone` (keras-hub's ``XLNetBackbone``
    argument names; Hugging Face's ``XLNetConfig`` names in brackets). The default is tiny.

    XLNet has no position table: positions enter only as the relative encodings R_{i-j} of Transformer-XL, so no
    sequence length is fixed.

    Attributes:
        vocabulary_size: V [vocab_size]; 32,000 for XLNet's SentencePiece vocabulary.
        num_layers [n_layer]. num_heads: N [n_head]. hidden_dim: d [d_model]; the head size is d / N [d_head].
        intermediate_dim: the feed-forward size, 4 d in the paper [d_inner].
        dropout: on the embeddings, the attention weights, each residual branch and the output [dropout].
        activation: of the feed-forward, "gelu" (erf form) or "relu" [ff_activation].
        layer_norm_epsilon: [layer_norm_eps].
        pad_token_id: the <pad> id, 5 in XLNet's vocabulary (the default padding mask is ids != it) [pad_token_id].
        clamp_length: None, or the largest relative distance |i - j| that R encodes (farther ones share it)
            [clamp_len; -1 there for None].
    """

    vocabulary_size: int = 32000
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 128
    intermediate_dim: int = 512
    dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_epsilon: float = 1e-12
    pad_token_id: int = 5
    clamp_length: int | None = None

    def __post_init__(self):
        for name in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim"):
            positive_int(getattr(self, name), name)
        check_divisible(self.hidden_dim, "hidden_dim", self.num_heads, "num_heads")
        if self.hidden_dim % 2:  # R = [sin, cos] of d / 2 frequencies each
            raise ValueError(f"`hidden_dim` must be even (the relative encoding is d / 2 sines and d / 2 cosines); "
                             f"received {self.hidden_dim}.")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        self.activation = one_of(self.activation, "activation", ACTIVATIONS)
        if not (isinstance(self.layer_norm_epsilon, (int, float)) and self.layer_norm_epsilon > 0):
            raise ValueError(f"`layer_norm_epsilon` must be a positive number; received {self.layer_norm_epsilon!r}.")
        if not (is_int(self.pad_token_id) and 0 <= self.pad_token_id < self.vocabulary_size):
            raise ValueError(
                f"`pad_token_id` must be a token id in [0, vocabulary_size={self.vocabulary_size}); received "
                f"{self.pad_token_id!r}."
            )
        self.clamp_length = positive_int(self.clamp_length, "clamp_length", allow_none=True)

    @property
    def head_dim(self):
        """H = d / N [d_head]."""
        return self.hidden_dim // self.num_heads

    @classmethod
    def preset(cls, name, **overrides):
        """The named configuration (:data:`PRESETS`: tiny, base, large), d_ff = 4 d and V = 32,000 unless
        ``overrides`` say otherwise.

        Args:
            name: a key of :data:`PRESETS`.
            **overrides: fields that replace the preset's.

        Returns:
            An :class:`XLNetConfig`.

        Raises:
            ValueError: an unknown preset.
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown XLNet preset {name!r}; expected one of {sorted(PRESETS)}.")
        layers, hidden, heads = PRESETS[name]
        sizes = dict(num_layers=layers, hidden_dim=hidden, num_heads=heads, intermediate_dim=4 * hidden)
        return cls(**{**sizes, **overrides})

    @classmethod
    def of(cls, config):
        """``config`` as an XLNetConfig.

        Args:
            config: an XLNetConfig, a dict of its fields, a preset name, or None (tiny).

        Returns:
            An :class:`XLNetConfig`.

        Raises:
            ValueError: unknown fields, an unknown preset, or anything else than these four kinds.
        """
        return config_of(cls, config)

    def parameter_count(self):
        """The number of weights in closed form.

        embeddings: V d, and the query stream's mask embedding w: d;
        each layer: 5 d^2 (W_q, W_k, W_v, W_o, W_{k,R}) + 3 d (u, v and the segment bias) + 2 d (the two segment
        encodings) + 2 d (LayerNorm) + 2 d d_ff + d_ff + d (feed-forward) + 2 d (LayerNorm).
        XLNet-Base: 116,718,336; XLNet-Large: 360,268,800.
        """
        d, f = self.hidden_dim, self.intermediate_dim
        layer = 5 * d * d + 2 * d * f + f + 10 * d
        return self.vocabulary_size * d + d + self.num_layers * layer
