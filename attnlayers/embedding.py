"""Token + position (+ segment) embeddings with a tied output projection."""

import math

import keras
from keras import ops

from attnlayers.positional import PositionEmbedding, SinusoidalPositionEncoding
from attnlayers.validation import check_feature_size, check_rank, check_tensor, one_of, positive_int

__all__ = ["TokenAndPositionEmbedding", "padded_size"]

_POSITIONS = ("learned", "sinusoidal")


@keras.saving.register_keras_serializable(package="attnlayers")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding + position embedding (+ segment embedding), and the tied output projection.

    ``x = E[token] * scale + P[position] (+ G[segment])``. With ``scale_embeddings=True`` the token embedding
    is multiplied by sqrt(d_model) as in Vaswani et al. (2017, section 3.4). Called with ``reverse=True`` it
    maps hidden states to vocabulary logits with the same matrix, ``logits = h E^T (+ b)`` (Press & Wolf
    2017), for language-model heads.

    ``vocabulary_padding=m`` rounds the table up to V_pad = ceil(V / m) m rows (nanoGPT and llm.c pad GPT-2's
    50,257 to 50,304 = 393 x 128: GEMMs over a multiple of 64 / 128 columns run at the accelerator's full rate).
    The padded rows are never looked up (ids < V) and the reversed projection returns the V real columns only,
    so a padded id can never be scored, picked or sampled; ``token_embedding.embeddings`` is (V_pad, d).

    Args:
        vocabulary_size: number of tokens V.
        sequence_length: longest sequence (size of the learned position table).
        embedding_dim: d_model.
        position: "learned" (BERT / GPT) or "sinusoidal" (the Transformer paper).
        num_segments: if set, add a segment embedding with this many segments (BERT's sentence A / B).
        mask_zero: token id 0 is padding; the output carries the padding mask (B, T).
        scale_embeddings: multiply token embeddings by sqrt(embedding_dim).
        output_bias: give the tied projection a (V,) bias.
        embeddings_initializer: initializer of the token, position and segment tables.
        vocabulary_padding: round the token table up to a multiple of this many rows (1: no padding).

    Call arguments:
        inputs: token ids (B, T); or, with ``reverse=True``, hidden states (B, T, d).
        segment_ids: (B, T) ints in [0, num_segments), required iff ``num_segments`` is set.
        start_index: position of the first token (cached decoding).
        positions: (B, T) int, the position of each token (learned positions only; replaces ``start_index``):
            e.g. RoBERTa's, numbered over the real tokens so that left padding does not shift them.
        reverse: project hidden states to logits instead of embedding tokens.

    Returns:
        (B, T, d) embeddings (with an implicit mask if ``mask_zero``), or (B, T, V) logits when reversed (the
        real V columns, whatever the padding).

    Example:
    >>> embed = TokenAndPositionEmbedding(8000, 256, 128, mask_zero=True)
    >>> h = embed(token_ids)                 # (B, T, 128)
    >>> logits = embed(h, reverse=True)      # (B, T, 8000), weights tied
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        position="learned",
        num_segments=None,
        mask_zero=False,
        scale_embeddings=False,
        output_bias=False,
        embeddings_initializer="glorot_uniform",
        vocabulary_padding=1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = positive_int(vocabulary_size, "vocabulary_size")
        self.sequence_length = positive_int(sequence_length, "sequence_length")
        self.embedding_dim = positive_int(embedding_dim, "embedding_dim")
        self.vocabulary_padding = positive_int(vocabulary_padding, "vocabulary_padding")
        self.table_size = padded_size(self.vocabulary_size, self.vocabulary_padding)
        self.position = one_of(position, "position", _POSITIONS)
        self.num_segments = positive_int(num_segments, "num_segments", allow_none=True)
        self.mask_zero = mask_zero
        self.scale_embeddings = scale_embeddings
        self.output_bias = output_bias
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = mask_zero

        # Keras' ReversibleEmbedding: the same "embeddings" weight as keras.layers.Embedding, and a reverse
        # projection that reads it in every quantization mode (model.quantize("int8" | "int4") scales the tied table
        # in both directions; a plain matmul with the int8 table would miss its scale).
        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.table_size, embedding_dim, tie_weights=True, embeddings_initializer=self.embeddings_initializer,
            mask_zero=mask_zero, reverse_dtype=self.dtype_policy.compute_dtype,  # logits in the compute dtype
            name="token_embedding", dtype=self.dtype_policy,
        )
        if position == "learned":
            self.position_embedding = PositionEmbedding(
                sequence_length, initializer=self.embeddings_initializer, name="position_embedding",
                dtype=self.dtype_policy,
            )
        else:
            self.position_embedding = SinusoidalPositionEncoding(name="position_embedding", dtype=self.dtype_policy)
        self.segment_embedding = None
        if self.num_segments:
            self.segment_embedding = keras.layers.Embedding(
                num_segments, embedding_dim, embeddings_initializer=self.embeddings_initializer,
                name="segment_embedding", dtype=self.dtype_policy,
            )

    def build(self, inputs_shape=None, segment_ids_shape=None):
        check_tensor(inputs_shape, "inputs", "(batch, length)")
        self.token_embedding.build(inputs_shape)
        embedded = tuple(inputs_shape[:2]) + (self.embedding_dim,)
        self.position_embedding.build(embedded)
        if self.segment_embedding is not None:
            self.segment_embedding.build(inputs_shape)
        if self.output_bias:
            self.bias = self.add_weight(name="output_bias", shape=(self.vocabulary_size,), initializer="zeros")

    def call(self, inputs, segment_ids=None, start_index=0, reverse=False, positions=None):
        if reverse:
            return self._project(inputs)
        check_tensor(inputs, "inputs", "(batch, length)")
        check_rank(inputs.shape, 2, "inputs", "(batch, length) of token ids")
        if (segment_ids is None) != (self.segment_embedding is None):
            raise ValueError(
                f"`segment_ids` must be given iff `num_segments` is set (num_segments={self.num_segments}); "
                f"received segment_ids={'None' if segment_ids is None else tuple(segment_ids.shape)}."
            )
        x = self.token_embedding(inputs)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.embedding_dim), x.dtype)
        if positions is None:
            x = x + self.position_embedding(x, start_index=start_index)
        else:
            x = x + self._rows_at(positions, inputs)
        if segment_ids is not None:
            if tuple(segment_ids.shape) != tuple(inputs.shape) and None not in segment_ids.shape + inputs.shape:
                raise ValueError(
                    f"`segment_ids` must have the shape of `inputs` {tuple(inputs.shape)}; received "
                    f"{tuple(segment_ids.shape)}."
                )
            x = x + self.segment_embedding(segment_ids)
        return x

    def _rows_at(self, positions, inputs):
        """P[positions]: (B, T, d) rows of the learned position table."""
        if self.position != "learned":
            raise ValueError(f"`positions` needs position='learned'; this layer has position={self.position!r}.")
        if tuple(positions.shape) != tuple(inputs.shape) and None not in tuple(positions.shape) + tuple(inputs.shape):
            raise ValueError(f"`positions` must have the shape of `inputs` {tuple(inputs.shape)}; received "
                             f"{tuple(positions.shape)}.")
        table = ops.cast(self.position_embedding.embeddings, self.compute_dtype)
        return ops.take(table, ops.cast(positions, "int32"), axis=0)

    def _project(self, hidden):
        """logits = h E^T (+ b): the tied output projection (Press & Wolf 2017), its V real columns."""
        layout = f"(..., {self.embedding_dim}) hidden states with reverse=True"
        check_tensor(hidden, "inputs", layout)
        if len(hidden.shape) < 2:
            check_rank(hidden.shape, (2, 3), "inputs", layout)
        check_feature_size(hidden.shape, self.embedding_dim, "inputs", built_with="embedding_dim, with reverse=True")
        logits = self.token_embedding(hidden, reverse=True)  # h E^T, E dequantized where quantized
        if self.table_size != self.vocabulary_size:  # the padded rows' columns never leave the layer
            logits = logits[..., :self.vocabulary_size]
        if self.output_bias:
            logits = logits + ops.cast(self.bias, logits.dtype)
        return logits

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero or len(inputs.shape) != 2:
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(self, inputs_shape, segment_ids_shape=None):
        return tuple(inputs_shape[:2]) + (self.embedding_dim,)

    def compute_output_spec(self, inputs, segment_ids=None, start_index=0, reverse=False, positions=None):
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
        else:
            shape = tuple(inputs.shape[:2]) + (self.embedding_dim,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "embedding_dim": self.embedding_dim,
            "position": self.position,
            "num_segments": self.num_segments,
            "mask_zero": self.mask_zero,
            "scale_embeddings": self.scale_embeddings,
            "output_bias": self.output_bias,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "vocabulary_padding": self.vocabulary_padding,
        }


def padded_size(vocabulary_size, multiple):
    """V rounded up to a multiple of ``multiple``: ceil(V / m) m (50,257 and 128 -> 50,304)."""
    return -(-vocabulary_size // multiple) * multiple
