"""BERT's sizes: :class:`BertConfig` and the named configurations of the papers.

    config = BertConfig.preset("base")          # Devlin et al. 2019: 12 layers, d 768, 12 heads, 110M
    config = BertConfig.preset("mini", vocabulary_size=8000, max_sequence_length=128)
    config.parameter_count()                    # the closed form, == the built backbone's count_params()
"""

from __future__ import annotations

import dataclasses

from attnlayers.validation import check_divisible, is_int, positive_int, rate_in_unit_interval

from ..core.configs import config_of

# (num_layers, hidden_dim, num_heads): BERT-Base and BERT-Large (Devlin et al. 2019, section 3) and the compact
# models of Turc et al. 2019 ("Well-Read Students Learn Better"), heads = hidden_dim / 64, d_ff = 4 d.
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


@dataclasses.dataclass
class BertConfig:
    """The sizes of a :class:`~attnlayers.applications.bert.BertBackbone` (keras-hub's ``BertBackbone``
    argument names; Hugging Face's ``BertConfig`` names in brackets). The default is tiny.

    Attributes:
        vocabulary_size: V [vocab_size]; 30,522 for the uncased English WordPiece vocabulary.
        max_sequence_length: P, the learned position table [max_position_embeddings].
        num_segments: S, segment (sentence A / B) embeddings [type_vocab_size].
        num_layers: N [num_hidden_layers]. num_heads [num_attention_heads]. hidden_dim: d [hidden_size].
        intermediate_dim: the feed-forward size, 4 d in the papers [intermediate_size].
        dropout: on the embeddings and each residual branch [hidden_dropout_prob].
        attention_dropout: on the attention weights [attention_probs_dropout_prob]; None (the default):
            ``dropout``'s rate. Only training reads either: at inference every attention route is open, the fused
            kernel included.
        layer_norm_epsilon: [layer_norm_eps].
        pad_token_id: the [PAD] id, 0 in BERT's vocabularies (the default padding mask is ids != it).
    """

    vocabulary_size: int = 30522
    max_sequence_length: int = 512
    num_segments: int = 2
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 128
    intermediate_dim: int = 512
    dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    pad_token_id: int = 0
    attention_dropout: float | None = None

    def __post_init__(self):
        for name in ("vocabulary_size", "max_sequence_length", "num_segments", "num_layers", "num_heads",
                     "hidden_dim", "intermediate_dim"):
            positive_int(getattr(self, name), name)
        check_divisible(self.hidden_dim, "hidden_dim", self.num_heads, "num_heads")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        if self.attention_dropout is None:
            self.attention_dropout = self.dropout
        self.attention_dropout = rate_in_unit_interval(self.attention_dropout, "attention_dropout")
        if not (isinstance(self.layer_norm_epsilon, (int, float)) and self.layer_norm_epsilon > 0):
            raise ValueError(f"`layer_norm_epsilon` must be a positive number; received {self.layer_norm_epsilon!r}.")
        if not (is_int(self.pad_token_id) and 0 <= self.pad_token_id < self.vocabulary_size):
            raise ValueError(
                f"`pad_token_id` must be a token id in [0, vocabulary_size={self.vocabulary_size}); received "
                f"{self.pad_token_id!r}."
            )

    @classmethod
    def preset(cls, name, **overrides):
        """The named configuration (:data:`PRESETS`: tiny, mini, small, medium, base, large), d_ff = 4 d and
        V = 30,522 unless ``overrides`` say otherwise."""
        if name not in PRESETS:
            raise ValueError(f"Unknown BERT preset {name!r}; expected one of {sorted(PRESETS)}.")
        layers, hidden, heads = PRESETS[name]
        sizes = dict(num_layers=layers, hidden_dim=hidden, num_heads=heads, intermediate_dim=4 * hidden)
        return cls(**{**sizes, **overrides})

    @classmethod
    def of(cls, config):
        """``config`` as a BertConfig: a BertConfig, a dict of its fields, a preset name, or None (tiny)."""
        return config_of(cls, config)

    def parameter_count(self, pooler=True):
        """The number of weights in closed form.

        embeddings: (V + P + S) d + 2 d (LayerNorm);
        each layer: 4 (d^2 + d) (Q, K, V, O) + 2 (d d_ff) + d_ff + d (feed-forward) + 2 x 2 d (two LayerNorms);
        pooler: d^2 + d. BERT-Base: 109,482,240; BERT-Large: 335,141,888.
        """
        d, f = self.hidden_dim, self.intermediate_dim
        embeddings = (self.vocabulary_size + self.max_sequence_length + self.num_segments) * d + 2 * d
        layer = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
        return embeddings + self.num_layers * layer + (d * d + d if pooler else 0)
