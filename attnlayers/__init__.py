"""attnlayers: attention layers for Keras 3.

Every classic scoring function; soft, local and hard attention; attention pooling; attention RNN decoders
(Bahdanau, Luong); multi-head attention with GQA, key/value caches (``kv_cache``) and position hooks;
memory-efficient exact attention and long-sequence variants (Linformer, BigBird); positional encodings; token
embeddings; Transformer blocks; and the mask algebra they share. All math is in ``keras.ops``, so the layers
run under the TensorFlow and JAX backends.
"""

from attnlayers import startup

startup.load_backend()  # keras first; TensorFlow's start-up lines filtered where ATTNLAYERS_QUIET_STARTUP=1

from attnlayers import (  # noqa: E402
    attention_axes,
    compat,
    decoding,
    distribution,
    fused,
    kv_cache,
    layer_walk,
    lora,
    masking,
    normalization,
    positional,
    rollout,
    scheduled_sampling,
    scoring,
    stop_strings,
    training_step,
    validation,
    visualize,
)
from attnlayers.attention import Attention, AttentionBase, AttentionPooling
from attnlayers.bigbird import BigBirdAttention, bigbird_mask, bigbird_pattern
from attnlayers.chunked import chunked_attention
from attnlayers.decoding import BeamSearch, DecodeResult, GreedySearch, Sampling, Search, generate
from attnlayers.embedding import TokenAndPositionEmbedding
from attnlayers.hard import (
    GumbelTemperatureSchedule,
    HardAttention,
    ReinforceLoss,
    ReinforceModel,
    reinforce_surrogate,
)
from attnlayers.linformer import LinformerAttention
from attnlayers.local import LocalAttention
from attnlayers.lora import enable_lora, load_lora_weights, merge_lora, save_lora_weights
from attnlayers.multi_head import AttentionOutputs, MultiHeadAttention
from attnlayers.normalization import RMSNorm
from attnlayers.patches import ClassToken, PatchEmbedding
from attnlayers.permutation import permutation_masks, prediction_targets, sample_factorization_order
from attnlayers.positional import (
    ALiBi,
    PositionEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
    alibi_slopes,
    relative_position_bucket,
)
from attnlayers.recurrent import AttentionRNNDecoder, BahdanauDecoder, LuongDecoder
from attnlayers.relative_positional import TransformerXLRelativeBias
from attnlayers.rollout import attention_rollout
from attnlayers.sagan import SelfAttention2D
from attnlayers.scheduled_sampling import ScheduledSampler, ScheduledSamplingLogger
from attnlayers.scoring import (
    AdditiveScore,
    CosineScore,
    DotScore,
    GeneralScore,
    LocationScore,
    MLPScore,
    ScaledDotScore,
    Score,
    available_scores,
    get_score,
    register_score,
)
from attnlayers.segment_memory import update_memory
from attnlayers.training_step import count_step, step_counter
from attnlayers.transformer import (
    DecoderBlockOutputs,
    FeedForward,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)
from attnlayers.two_stream import TwoStreamAttention

# The public API: every name a user imports (the API reference, docs/reference/, documents each of them).
__all__ = [
    "ALiBi", "AdditiveScore", "Attention", "AttentionBase", "AttentionOutputs", "AttentionPooling",
    "AttentionRNNDecoder", "BahdanauDecoder", "BeamSearch", "BigBirdAttention", "ClassToken", "CosineScore",
    "DecodeResult", "DecoderBlockOutputs", "DotScore", "FeedForward", "GeneralScore", "GreedySearch",
    "GumbelTemperatureSchedule", "HardAttention", "LinformerAttention", "LocalAttention", "LocationScore",
    "LuongDecoder", "MLPScore", "MultiHeadAttention", "PatchEmbedding", "PositionEmbedding", "RMSNorm",
    "ReinforceLoss", "ReinforceModel", "RelativePositionBias", "RotaryEmbedding", "Sampling", "ScaledDotScore",
    "ScheduledSampler", "ScheduledSamplingLogger", "Score", "Search", "SelfAttention2D", "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding", "TransformerDecoder", "TransformerDecoderBlock", "TransformerEncoder",
    "TransformerEncoderBlock", "TransformerXLRelativeBias", "TwoStreamAttention", "alibi_slopes", "attention_axes",
    "attention_rollout", "available_scores", "bigbird_mask", "bigbird_pattern", "chunked_attention", "compat",
    "count_step", "decoding", "distribution", "enable_lora", "fused", "generate", "get_score", "kv_cache",
    "layer_walk", "load_lora_weights", "lora", "masking", "merge_lora", "normalization", "permutation_masks",
    "positional", "prediction_targets", "register_score", "reinforce_surrogate", "relative_position_bucket",
    "rollout", "sample_factorization_order", "save_lora_weights", "scheduled_sampling", "scoring", "step_counter",
    "stop_strings", "training_step", "update_memory", "validation", "visualize"
]

__version__ = "0.2.0"  # the one place the version is written (pyproject.toml reads it)
