"""The BERT encoder (Devlin et al. 2019, section 3): token + segment + learned position embeddings, LayerNorm and
dropout, N post-LN Transformer encoder blocks with GELU, and a tanh pooler on the [CLS] position.

    {"token_ids", "segment_ids", "padding_mask"} (B, T)
      -> TokenAndPositionEmbedding: E[token] + P[position] + G[segment]             embeddings.*_embeddings
      -> LayerNorm, Dropout                                                          embeddings.LayerNorm
      -> TransformerEncoder(normalize_first=False): N post-LN blocks                encoder.layer[0..N-1]
           x = LayerNorm(x + Attention(x));  x = LayerNorm(x + FFN_GELU(x))
      -> sequence_output (B, T, d);  pooled_output = tanh(W h_[CLS] + b) (B, d)     pooler.dense

The inputs and outputs are keras-hub's ``BertBackbone``'s (same dict keys), the sizes its argument names
(:class:`BertConfig`).

The rest of the BERT family are options of the same encoder (:data:`~.config.FAMILIES`):

    RoBERTa, XLM-R   token t reads position row position_offset + t (padding_idx + 1 = 2), one segment
    DistilBERT       no segment table (num_segments=0), no pooler (pooler=False: no "pooled_output")
    ALBERT           E-wide tables + a projection E -> d (embedding_dim), one block run N times (num_groups=1),
                     the tanh GELU (activation="gelu_approximate")
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers import lora
from attnlayers.embedding import TokenAndPositionEmbedding
from attnlayers.transformer import TransformerEncoder
from attnlayers.validation import check_rank, format_shape

from ..core.activations import gelu_approximate
from ..core.generative import check_id_range
from .config import BertConfig

__all__ = ["BertBackbone", "FEATURES", "build_on_zeros"]

# Hidden-state combinations for feature-based use, as compared on CoNLL-2003 NER (Devlin et al. 2019, table 7).
FEATURES = ("last", "second_to_last", "sum_last_four", "concat_last_four", "sum_all", "embeddings")


def _initializer():
    return keras.initializers.TruncatedNormal(stddev=0.02)  # initializer_range of the reference implementation


@keras.saving.register_keras_serializable(package="attnlayers.bert")
class BertBackbone(keras.Model):
    """The BERT encoder.

    Args:
        config: a :class:`BertConfig`, a dict of its fields, a preset name ("tiny" ... "large") or None (tiny).

    Call arguments:
        inputs: a dict with "token_ids" int (B, T), T <= ``max_sequence_length``; optional "segment_ids" int
            (B, T) in [0, num_segments) (default all 0: sentence A) and "padding_mask" bool (B, T), True at
            real tokens (default ``token_ids != pad_token_id``). A bare (B, T) tensor is taken as token ids.
            Token ids must lie in [0, vocabulary_size) and segment ids in [0, num_segments): checked when the
            values are known (eager calls: a ValueError naming the input); a compiled call (``fit``, ``predict``,
            ``tf.function``, ``jax.jit``) cannot check them and does not (``keras.ops.take`` wraps ids in [-V, 0)
            to V + id; larger ones are clamped under XLA, NaN under JAX, zeros on a GPU, an error on a CPU).
        return_hidden_states: also return "hidden_states", a list of N + 1 tensors (B, T, d): the embeddings'
            output (E wide with ``embedding_dim``: before the projection, as Hugging Face's ALBERT), then every
            block's (Hugging Face's ``output_hidden_states`` layout).
        training: enables dropout.

    Returns:
        {"sequence_output": (B, T, d), "pooled_output": (B, d)} (+ "hidden_states"); no "pooled_output" when
        the config has ``pooler=False``.

    Example:
    >>> backbone = BertBackbone("base")
    >>> out = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0})
    >>> out["sequence_output"].shape, out["pooled_output"].shape     # (B, T, 768), (B, 768)
    """

    # LoRA (attnlayers.lora): model.enable_lora(rank, target, alpha), save_lora_weights(path), load_lora_weights(path),
    # merge_lora(), as keras-hub's backbones have them
    enable_lora, merge_lora = lora.enable_lora, lora.merge_lora
    save_lora_weights, load_lora_weights = lora.save_lora_weights, lora.load_lora_weights

    def __init__(self, config=None, **kwargs):
        super().__init__(**kwargs)
        self.config = config = BertConfig.of(config)
        self.embeddings = TokenAndPositionEmbedding(
            config.vocabulary_size, config.max_sequence_length, config.embedding_dim or config.hidden_dim,
            position="learned", num_segments=config.num_segments or None, embeddings_initializer=_initializer(),
            name="embeddings", dtype=self.dtype_policy,
        )
        self.embeddings_layer_norm = keras.layers.LayerNormalization(
            epsilon=config.layer_norm_epsilon, name="embeddings_layer_norm", dtype=self.dtype_policy
        )
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=self.dtype_policy)
        self.embedding_projection = None
        if config.embedding_dim:  # ALBERT's factorisation: V x E tables, then E -> d (Lan et al. 2020, section 3.1)
            self.embedding_projection = keras.layers.Dense(
                config.hidden_dim, kernel_initializer=_initializer(), name="embedding_projection",
                dtype=self.dtype_policy,
            )
        # G blocks (N without sharing); layer i runs block i G / N (ALBERT's cross-layer sharing when G < N).
        self.encoder = TransformerEncoder(
            config.layer_groups, config.num_heads, config.intermediate_dim, dropout=config.dropout,
            activation="gelu" if config.activation == "gelu" else gelu_approximate,
            layer_norm_epsilon=config.layer_norm_epsilon, normalize_first=False, kernel_initializer=_initializer(),
            attention_kwargs={"dropout": config.attention_dropout, "implementation": config.attention_implementation},
            name="encoder", dtype=self.dtype_policy,
        )
        self.pooler = None
        if config.pooler:
            self.pooler = keras.layers.Dense(config.hidden_dim, activation="tanh", kernel_initializer=_initializer(),
                                             name="pooler", dtype=self.dtype_policy)

    @property
    def token_embedding(self):
        """The token embedding layer; its ``embeddings`` (V, d) is the matrix an MLM decoder ties to."""
        return self.embeddings.token_embedding

    def _inputs(self, inputs):
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        unknown = sorted(set(inputs) - {"token_ids", "segment_ids", "padding_mask"})
        if unknown or "token_ids" not in inputs:
            raise ValueError(
                "BertBackbone takes a dict with 'token_ids' (and optional 'segment_ids', 'padding_mask'); received "
                f"keys {sorted(inputs)}."
            )
        token_ids = inputs["token_ids"]
        if token_ids is None:
            raise ValueError("`token_ids` is required: integer token ids of shape (batch, length); received None.")
        check_rank(token_ids.shape, 2, "token_ids", "(batch, length) of token ids")
        _check_dtype(token_ids, "token_ids", "integer token ids")
        if token_ids.shape[1] == 0 and token_ids.shape[0] != 0:
            raise ValueError(
                f"`token_ids` holds empty sequences (shape {format_shape(token_ids.shape)}): BERT reads [CLS] at "
                "position 0, so every sequence needs at least one position (pack texts with pretraining_data.pack)."
            )
        length, config = token_ids.shape[1], self.config
        if length is not None and length > config.max_tokens:
            offset = f" - position_offset {config.position_offset}" if config.position_offset else ""
            raise ValueError(
                f"`token_ids` has {length} positions but max_sequence_length is {config.max_sequence_length}{offset}; "
                "truncate the inputs (the preprocessor's sequence_length) or use a longer position table."
            )
        segment_ids = inputs.get("segment_ids")
        if segment_ids is None:
            segment_ids = ops.zeros_like(token_ids)
        padding_mask = inputs.get("padding_mask")
        if padding_mask is None:
            padding_mask = ops.not_equal(token_ids, self.config.pad_token_id)
        for name, value in (("segment_ids", segment_ids), ("padding_mask", padding_mask)):
            if None not in value.shape + token_ids.shape and tuple(value.shape) != tuple(token_ids.shape):
                raise ValueError(
                    f"`{name}` must have the shape of `token_ids` {format_shape(token_ids.shape)}; received "
                    f"{format_shape(value.shape)}."
                )
        _check_dtype(segment_ids, "segment_ids", "integer segment ids (0 for A, 1 for B)")
        _check_dtype(padding_mask, "padding_mask", "a boolean (True = real token) or 0/1 integer mask", allow_bool=True)
        check_id_range(token_ids, "token_ids", self.config.vocabulary_size)
        if "segment_ids" in inputs and inputs["segment_ids"] is not None:
            # Without segment embeddings (num_segments=0) only segment 0 is accepted: nothing else is ignored.
            check_id_range(segment_ids, "segment_ids", max(self.config.num_segments, 1),
                           "num_segments" if self.config.num_segments else "max(num_segments, 1)")
        return token_ids, segment_ids, ops.cast(padding_mask, "bool")

    def call(self, inputs, return_hidden_states=False, training=None):
        token_ids, segment_ids, padding_mask = self._inputs(inputs)
        config = self.config
        # E[token] + P[position] + G[segment]. BERT: position t. RoBERTa (offset = padding_idx + 1) numbers the real
        # tokens from the offset and gives padding row padding_idx (fairseq's make_positions), so left padding
        # shifts nothing: p_t = offset + (real tokens up to t) - 1 at a real token, offset - 1 at padding.
        positions = None
        if config.position_offset:
            count = ops.cumsum(ops.cast(padding_mask, "int32"), axis=1)
            positions = ops.where(padding_mask, config.position_offset + count - 1, config.position_offset - 1)
        x = self.embeddings(token_ids, segment_ids=segment_ids if config.num_segments else None,
                            positions=positions)
        x = self.embeddings_dropout(self.embeddings_layer_norm(x), training=training)
        h = x if self.embedding_projection is None else self.embedding_projection(x)  # E -> d (ALBERT)
        if config.layer_groups == config.num_layers:
            encoded = self.encoder(h, padding_mask=padding_mask, return_hidden_states=True, training=training)
            sequence, hidden_states = encoded["sequence_output"], list(encoded["hidden_states"])
        else:
            sequence, hidden_states = self._shared_layers(h, padding_mask, training)
        result = {"sequence_output": sequence}
        if self.pooler is not None:
            result["pooled_output"] = self.pooler(sequence[:, 0])  # tanh(W h_[CLS] + b)
        if return_hidden_states:
            result["hidden_states"] = [x] + hidden_states
        return result

    def _shared_layers(self, x, padding_mask, training):
        """N layers over G < N sets of weights: layer i runs block floor(i G / N) (ALBERT's cross-layer sharing;
        Hugging Face's ``group_idx = int(i / (N / G))``). Returns the last output and every layer's."""
        if not self.encoder.built:
            self.encoder.build(tuple(x.shape))
        hidden_states = []
        for i in range(self.config.num_layers):
            x = self.encoder.blocks[i * self.config.layer_groups // self.config.num_layers](
                x, padding_mask=padding_mask, training=training)
            hidden_states.append(x)
        return x, hidden_states

    def features(self, inputs, combination="last", training=None):
        """Per-token features from the hidden states (Devlin et al. 2019, table 7).

        Args:
            inputs: as the call: a dict with "token_ids" int (B, T) (optional "segment_ids", "padding_mask"), or the
                (B, T) token ids.
            combination: "last" (the final layer), "second_to_last", "sum_last_four", "concat_last_four" (the last
                four layers concatenated, the paper's best feature-based NER input), "sum_all" (the N layers, not the
                embeddings) or "embeddings".
            training: whether dropout is active.

        Returns:
            (B, T, d), or (B, T, 4 d) for "concat_last_four".

        Raises:
            ValueError: an unknown ``combination``, or one that needs more layers than the model has.
        """
        if combination not in FEATURES:
            raise ValueError(f"Unknown `combination` {combination!r}; expected one of {FEATURES}.")
        hidden = self(inputs, return_hidden_states=True, training=training)["hidden_states"]
        layers = hidden[1:]
        if combination in ("second_to_last", "sum_last_four", "concat_last_four") and len(layers) < (
            2 if combination == "second_to_last" else 4
        ):
            raise ValueError(f"`combination={combination!r}` needs more layers than this model's {len(layers)}.")
        if combination == "last":
            return layers[-1]
        if combination == "second_to_last":
            return layers[-2]
        if combination == "sum_last_four":
            return ops.sum(ops.stack(layers[-4:]), axis=0)
        if combination == "concat_last_four":
            return ops.concatenate(layers[-4:], axis=-1)
        if combination == "sum_all":
            return ops.sum(ops.stack(layers), axis=0)
        return hidden[0]

    def build_from_config(self, config):
        """Rebuilds a loaded model (``.keras`` files) by calling it once on zeros of the saved input shapes."""
        build_on_zeros(self, (config or {}).get("input_shape"))

    def get_config(self):
        import dataclasses

        return {**super().get_config(), "config": dataclasses.asdict(self.config)}


def build_on_zeros(model, shapes):
    """Builds ``model`` by calling it once on zeros of ``shapes``: a (B, T) shape of token ids, or a dict of input
    names to shapes (``padding_mask`` boolean, the others int32); None (never called) leaves it unbuilt."""
    if shapes is None:
        return
    if not isinstance(shapes, dict):
        shapes = {"token_ids": shapes}
    model({
        key: ops.zeros([1 if size is None else size for size in shape], "bool" if key == "padding_mask" else "int32")
        for key, shape in shapes.items()
    })


def _check_dtype(value, name, expected, allow_bool=False):
    """Integer ids (and a boolean / 0-1 integer mask): floats, silently truncated by a cast, and strings are refused
    by name."""
    dtype = keras.backend.standardize_dtype(value.dtype)
    if not (keras.backend.is_int_dtype(dtype) or (allow_bool and dtype == "bool")):
        raise ValueError(f"`{name}` must be {expected} of shape (batch, length); received dtype {dtype}.")
