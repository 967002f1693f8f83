"""BERT's sizes: :class:`BertConfig` and the named configurations of the papers.

    config = BertConfig.preset("base")          # Devlin et al. 2019: 12 layers, d 768, 12 heads, 110M
    config = BertConfig.preset("mini", vocabulary_size=8000, max_sequence_length=128)
    config.parameter_count()                    # the closed form, == the built backbone's count_params()
    config = BertConfig.preset("base", family="albert")   # the family's options: FAMILIES (RoBERTa, DistilBERT...)
"""

from __future__ import annotations

import dataclasses

from attnlayers.routes import IMPLEMENTATIONS
from attnlayers.validation import (
    check_divisible,
    is_int,
    non_negative_int,
    one_of,
    positive_int,
    rate_in_unit_interval,
)

from ..core.configs import config_of

__all__ = ["ACTIVATIONS", "FAMILIES", "BertConfig", "PRESETS"]

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

# The BERT family as options of one encoder: what each model changes in BERT's architecture (its Hugging Face
# config class's values for the base checkpoints; the sizes come from PRESETS or the caller).
FAMILIES = {
    "bert": {},
    # Liu et al. 2019: BERT's encoder; a byte-level BPE of 50,265 tokens, <pad> = 1, one segment, and fairseq's
    # learned positions, numbered from padding_idx + 1 = 2 (a 514-row table for 512 tokens).
    "roberta": dict(vocabulary_size=50265, max_sequence_length=514, num_segments=1, pad_token_id=1, position_offset=2,
                    layer_norm_epsilon=1e-5),
    # Conneau et al. 2020: RoBERTa's architecture over a 250,002-token SentencePiece vocabulary.
    "xlm-roberta": dict(vocabulary_size=250002, max_sequence_length=514, num_segments=1, pad_token_id=1,
                        position_offset=2, layer_norm_epsilon=1e-5),
    # Sanh et al. 2019: no segment embeddings and no pooler (its base model has 6 layers: num_layers=6).
    "distilbert": dict(num_segments=0, pooler=False),
    # Lan et al. 2020 (albert-base-v2): factorised embeddings E = 128 (section 3.1), one set of layer weights shared
    # across depth (cross-layer sharing), the tanh GELU and no dropout.
    "albert": dict(vocabulary_size=30000, embedding_dim=128, num_groups=1, activation="gelu_approximate", dropout=0.0),
}
# "gelu": the erf form (BERT, RoBERTa, DistilBERT); "gelu_approximate": the tanh approximation (ALBERT's gelu_new).
ACTIVATIONS = ("gelu", "gelu_approximate")


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
        family: the Hugging Face model_type the checkpoint writer names ("bert", "roberta", "xlm-roberta",
            "distilbert", "albert": :data:`FAMILIES`); the options below make the architecture.
        embedding_dim: E, ALBERT's factorised embeddings [embedding_size]: E-wide token / position / segment tables
            and a learned projection E -> d before the encoder. None (BERT): the tables are d wide, no projection.
        num_groups: the number of distinct sets of layer weights [num_hidden_groups]; layer i runs set
            i G / N (ALBERT's cross-layer sharing: 1, one block called N times). None: num_layers (no sharing).
        position_offset: the position of the first token (RoBERTa's padding_idx + 1 = 2): token t reads row
            offset + t of the position table, so sequences hold at most max_sequence_length - offset tokens.
        pooler: build the tanh pooler and return "pooled_output" (DistilBERT has none).
        activation: the feed-forward GELU, "gelu" (erf) or "gelu_approximate" (tanh) [hidden_act].
        attention_implementation: the route of every attention (:class:`attnlayers.MultiHeadAttention`'s
            ``implementation``): "auto" (the default), "exact", "chunked", "fused" or "flash" (the Pallas kernel
            that keeps the attention dropout: JAX on a GPU). A named route that cannot compute a call raises.
        num_segments may be 0 (DistilBERT): no segment table; segment ids, if given, must then be 0.
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
    family: str = "bert"
    embedding_dim: int | None = None
    num_groups: int | None = None
    position_offset: int = 0
    pooler: bool = True
    activation: str = "gelu"
    attention_implementation: str = "auto"

    def __post_init__(self):
        for name in ("vocabulary_size", "max_sequence_length", "num_layers", "num_heads", "hidden_dim",
                     "intermediate_dim"):
            positive_int(getattr(self, name), name)
        non_negative_int(self.num_segments, "num_segments")
        one_of(self.family, "family", tuple(FAMILIES))
        one_of(self.activation, "activation", ACTIVATIONS)
        positive_int(self.embedding_dim, "embedding_dim", allow_none=True)
        positive_int(self.num_groups, "num_groups", allow_none=True)
        if self.num_groups is not None and self.num_layers % self.num_groups:
            raise ValueError(
                f"`num_layers` must be divisible by `num_groups` (layer i runs group i G / N); received num_layers="
                f"{self.num_layers}, num_groups={self.num_groups}."
            )
        non_negative_int(self.position_offset, "position_offset")
        if self.position_offset >= self.max_sequence_length:
            raise ValueError(
                f"`position_offset` must leave positions in the table: < max_sequence_length="
                f"{self.max_sequence_length}; received {self.position_offset}."
            )
        if not isinstance(self.pooler, bool):
            raise ValueError(f"`pooler` must be True or False; received {self.pooler!r}.")
        check_divisible(self.hidden_dim, "hidden_dim", self.num_heads, "num_heads")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        if self.attention_dropout is None:
            self.attention_dropout = self.dropout
        self.attention_dropout = rate_in_unit_interval(self.attention_dropout, "attention_dropout")
        one_of(self.attention_implementation, "attention_implementation", IMPLEMENTATIONS)
        if not (isinstance(self.layer_norm_epsilon, (int, float)) and self.layer_norm_epsilon > 0):
            raise ValueError(f"`layer_norm_epsilon` must be a positive number; received {self.layer_norm_epsilon!r}.")
        if not (is_int(self.pad_token_id) and 0 <= self.pad_token_id < self.vocabulary_size):
            raise ValueError(
                f"`pad_token_id` must be a token id in [0, vocabulary_size={self.vocabulary_size}); received "
                f"{self.pad_token_id!r}."
            )

    @property
    def max_tokens(self):
        """The longest input: max_sequence_length - position_offset (512 for RoBERTa's 514 rows)."""
        return self.max_sequence_length - self.position_offset

    @property
    def layer_groups(self):
        """G, the number of distinct sets of layer weights (num_layers without sharing)."""
        return self.num_layers if self.num_groups is None else self.num_groups

    @classmethod
    def preset(cls, name, family="bert", **overrides):
        """The named configuration with ``family``'s architecture.

        The sizes of :data:`PRESETS` (tiny, mini, small, medium, base, large), d_ff = 4 d and V = 30,522 unless
        ``overrides`` say otherwise, and the architecture of :data:`FAMILIES`:

            BertConfig.preset("base", family="roberta")               # roberta-base: 124,645,632 weights
            BertConfig.preset("base", family="albert")                # albert-base-v2: 11,683,584
            BertConfig.preset("base", family="distilbert", num_layers=6)   # distilbert-base: 66,362,880

        Args:
            name: a key of :data:`PRESETS`.
            family: a key of :data:`FAMILIES` ("bert", "roberta", "albert", ...).
            **overrides: fields that replace the preset's.

        Returns:
            A :class:`BertConfig`.

        Raises:
            ValueError: an unknown preset or family.
        """
        if name not in PRESETS:
            raise ValueError(f"Unknown BERT preset {name!r}; expected one of {sorted(PRESETS)}.")
        one_of(family, "family", tuple(FAMILIES))
        layers, hidden, heads = PRESETS[name]
        sizes = dict(num_layers=layers, hidden_dim=hidden, num_heads=heads, intermediate_dim=4 * hidden)
        return cls(**{**sizes, **FAMILIES[family], "family": family, **overrides})

    @classmethod
    def of(cls, config):
        """``config`` as a BertConfig.

        Args:
            config: a BertConfig, a dict of its fields, a preset name, or None (tiny).

        Returns:
            A :class:`BertConfig`.

        Raises:
            ValueError: unknown fields, an unknown preset, or anything else than these four kinds.
        """
        return config_of(cls, config)

    def parameter_count(self, pooler=True):
        """The number of weights in closed form.

        embeddings: (V + P + S) d + 2 d (LayerNorm);
        each layer: 4 (d^2 + d) (Q, K, V, O) + 2 (d d_ff) + d_ff + d (feed-forward) + 2 x 2 d (two LayerNorms);
        pooler: d^2 + d. BERT-Base: 109,482,240; BERT-Large: 335,141,888.
        With ALBERT's options the tables are E wide, plus the projection E d + d, and G sets of layer weights
        instead of N; without a pooler (``pooler=False`` here or in the config) its d^2 + d are not counted.

        Args:
            pooler: count the pooler (when the config has one).

        Returns:
            The count, an int.
        """
        d, f = self.hidden_dim, self.intermediate_dim
        e = self.embedding_dim or d
        embeddings = (self.vocabulary_size + self.max_sequence_length + self.num_segments) * e + 2 * e
        projection = e * d + d if self.embedding_dim else 0
        layer = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
        with_pooler = pooler and self.pooler
        return embeddings + projection + self.layer_groups * layer + (d * d + d if with_pooler else 0)
