"""The XLNet encoder (Yang et al. 2019): token embeddings, N post-LN blocks of two-stream relative attention
(Transformer-XL's relative positions, Dai et al. 2019, section 3.3, plus XLNet's relative segment encodings,
section 2.5) and a GELU feed-forward; no position table, no pooler.

    {"token_ids", "segment_ids", "padding_mask"} (B, T)
      -> h = Dropout(E[token])                                                  word_embedding
      -> N blocks, each                                                         layer.{i}
           h = LayerNorm(h + Attention(Q = h, KV = h))                          rel_attn.{q,k,v,o,r,r_*_bias,seg_embed}
           h = LayerNorm(h + FFN_GELU(h))                                       ff.{layer_1,layer_2,layer_norm}
      -> Dropout -> (B, T, d)

with XLNet's attention logits (A^rel of Transformer-XL plus the segment term), one function of the stream's queries:

    ((q_i + u) . k_j + (q_i + v) . W_{k,R} R_{i-j} + (q_i + b) . s_ij) / sqrt(H)

For pretraining the query stream g (section 2.3) starts from the trainable vector w (``mask_emb``), attends the
content stream through the same weights under the permutation masks (:mod:`attnlayers.permutation`) and goes
through the same feed-forward: :meth:`XLNetBackbone.two_stream`.

The inputs and the output are keras-hub's ``XLNetBackbone``'s (a (B, T, d) tensor); Hugging Face's ``XLNetModel``'s
names on the right (:mod:`.checkpoint` maps both).
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from attnlayers.relative_positional import TransformerXLRelativeBias
from attnlayers.two_stream import TwoStreamAttention
from attnlayers.validation import check_rank, format_shape

from ..core.generative import check_id_range
from .config import XLNetConfig
from .segment import RelativeSegmentBias


__all__ = ["MaskEmbedding", "XLNetBackbone", "XLNetBlock", "call_on_saved_shapes"]


def _initializer():
    return keras.initializers.TruncatedNormal(stddev=0.02)  # initializer_range of the reference implementation


@keras.saving.register_keras_serializable(package="attnlayers.xlnet")
class MaskEmbedding(keras.layers.Layer):
    """w, the query stream's first representation g^{(0)} at every position (section 2.3; ``mask_emb``).

    Args:
        hidden_dim: d.
        initializer: w's initializer; None: a truncated normal of stddev 0.02 (the reference implementation's).
        **kwargs: ``keras.layers.Layer`` arguments.

    Call arguments:
        content: (B, T, d), the content stream (only its shape is read).

    Returns:
        (B, T, d): w at every position.
    """

    def __init__(self, hidden_dim, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.initializer = keras.initializers.get(initializer or _initializer())

    def build(self, content_shape=None):
        # (1, 1, d), the layout of Hugging Face's and keras-hub's mask_emb.
        self.embedding = self.add_weight(name="embedding", shape=(1, 1, self.hidden_dim),
                                         initializer=self.initializer)

    def call(self, content):
        return ops.broadcast_to(ops.cast(self.embedding, self.compute_dtype), ops.shape(content))

    def compute_output_shape(self, content_shape):
        return tuple(content_shape)

    def get_config(self):
        return {**super().get_config(), "hidden_dim": self.hidden_dim,
                "initializer": keras.initializers.serialize(self.initializer)}


def call_on_saved_shapes(model, build_config, batch):
    """Builds a loaded XLNet model (``.keras`` files) by calling it on zeros of its saved input shapes (a dict of
    token_ids / segment_ids / padding_mask shapes, or token_ids' alone), ``batch`` rows where the batch is None."""
    shapes = (build_config or {}).get("input_shape")
    if shapes is None:
        return
    if not isinstance(shapes, dict):
        shapes = {"token_ids": shapes}
    model({key: ops.zeros([batch if size is None else size for size in shape],
                          "bool" if key == "padding_mask" else "int32") for key, shape in shapes.items()})


@keras.saving.register_keras_serializable(package="attnlayers.xlnet")
class XLNetBlock(keras.layers.Layer):
    """One XLNet layer: two-stream relative attention with the relative segment term, then the feed-forward, each
    followed by dropout, the residual and LayerNorm (post-LN); both streams share every weight.

    Args:
        num_heads: N. hidden_dim: d (H = d / N). intermediate_dim: d_ff.
        dropout: on the attention weights and each residual branch. activation: of the feed-forward.
        layer_norm_epsilon: of both LayerNorms. clamp_length: of the relative distances (None: not clamped).
        kernel_initializer: of every projection and of the segment encodings.

    Call arguments:
        content: (B, T, d), h.
        query_stream: optional (B, T, d), g (pretraining).
        content_attention_mask: (B, T, T) boolean, True = may attend.
        query_attention_mask: (B, T, T) boolean; required with ``query_stream``.
        different_segment: optional (B, T, T) boolean, True where query and key lie in different segments; None
            leaves the segment term out (Hugging Face's ``token_type_ids=None``).
        training: enables dropout.

    Returns:
        ``(content, query_stream)``: (B, T, d) each; the second None without ``query_stream``.
    """

    def __init__(self, num_heads, hidden_dim, intermediate_dim, dropout=0.0, activation="gelu",
                 layer_norm_epsilon=1e-12, clamp_length=None, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads, self.hidden_dim, self.intermediate_dim = num_heads, hidden_dim, intermediate_dim
        self.clamp_length = clamp_length
        self.dropout, self.activation, self.layer_norm_epsilon = dropout, activation, layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer or _initializer())
        head_dim = hidden_dim // num_heads

        def initializer():  # a fresh instance per weight, so they do not share init values
            return keras.initializers.get(keras.initializers.serialize(self.kernel_initializer))

        policy = self.dtype_policy
        self.attention = TwoStreamAttention(
            num_heads, head_dim, dropout=dropout, use_bias=False, kernel_initializer=initializer(),
            position_bias=TransformerXLRelativeBias(num_heads, clamp_length=clamp_length,
                                                    kernel_initializer=initializer(),
                                                    name="relative_position", dtype=policy),
            name="two_stream_attention", dtype=policy,
        )
        self.segment_bias = RelativeSegmentBias(num_heads, head_dim, encodings_initializer=initializer(),
                                                name="segment_bias", dtype=policy)
        self.attention_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.attention_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                                    name="attention_layer_norm", dtype=policy)
        self.intermediate_dense = keras.layers.Dense(intermediate_dim, activation=activation,
                                                     kernel_initializer=initializer(), name="intermediate_dense",
                                                     dtype=policy)
        self.output_dense = keras.layers.Dense(hidden_dim, kernel_initializer=initializer(), name="output_dense",
                                               dtype=policy)
        self.feedforward_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.feedforward_layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                                      name="feedforward_layer_norm", dtype=policy)

    def build(self, content_shape):
        check_rank(content_shape, 3, "content", "(batch, length, hidden_dim)")
        head_shape = tuple(content_shape[:2]) + (self.num_heads, self.hidden_dim // self.num_heads)
        self.attention.build(content_shape)
        self.segment_bias.build(head_shape, tuple(content_shape[:2]) + (content_shape[1],))
        self.attention_layer_norm.build(content_shape)
        self.intermediate_dense.build(content_shape)
        self.output_dense.build(tuple(content_shape[:2]) + (self.intermediate_dim,))
        self.feedforward_layer_norm.build(content_shape)

    def _segment_term(self, stream, different_segment):
        """The stream's segment bias from its own queries (the attention's W_q), or None without segments."""
        if different_segment is None:
            return None
        return self.segment_bias(self.attention.attention.query_dense(stream), different_segment)

    def _feedforward(self, x, training):
        y = self.feedforward_dropout(self.intermediate_dense(x), training=training)  # Dropout(act(x W_1 + b_1))
        y = self.feedforward_dropout(self.output_dense(y), training=training)
        return self.feedforward_layer_norm(x + y)

    def call(self, content, query_stream=None, content_attention_mask=None, query_attention_mask=None,
             different_segment=None, training=None):
        content_bias = self._segment_term(content, different_segment)
        if query_stream is None:
            attended = self.attention(content, content_attention_mask=content_attention_mask,
                                      attention_bias=content_bias, training=training)
            query_attended = None
        else:  # the segment term reads each stream's own queries: one bias per stream
            attended, query_attended = self.attention(
                content, query_stream, content_attention_mask=content_attention_mask,
                query_attention_mask=query_attention_mask, attention_bias=content_bias,
                query_attention_bias=self._segment_term(query_stream, different_segment), training=training)
        outputs = []
        for stream, update in ((content, attended), (query_stream, query_attended)):
            if stream is None:
                outputs.append(None)
                continue
            x = self.attention_layer_norm(stream + self.attention_dropout(update, training=training))
            outputs.append(self._feedforward(x, training))
        return tuple(outputs)

    def compute_output_shape(self, content_shape, query_stream_shape=None):
        return tuple(content_shape), (None if query_stream_shape is None else tuple(query_stream_shape))

    def get_config(self):
        return {
            **super().get_config(), "num_heads": self.num_heads, "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim, "dropout": self.dropout, "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon, "clamp_length": self.clamp_length,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package="attnlayers.xlnet")
class XLNetBackbone(keras.Model):
    """The XLNet encoder.

    Args:
        config: an :class:`XLNetConfig`, a dict of its fields, a preset name ("tiny", "base", "large") or None
            (tiny).

    Call arguments:
        inputs: a dict with "token_ids" int (B, T); optional "segment_ids" int (B, T) (any values: only equality
            between positions is read; absent: no segment term, as Hugging Face's ``token_type_ids=None``) and
            "padding_mask" bool or 0/1 int (B, T), True at real tokens (default ``token_ids != pad_token_id``).
            A bare (B, T) tensor is taken as token ids. Token ids must lie in [0, vocabulary_size): checked when
            the values are known (eager calls), not in a compiled call.
        training: enables dropout.

    Returns:
        The content stream's last hidden states (B, T, d). As in XLNet, a padded position attends the real tokens
        and itself; the real tokens never attend it.

    Example:
    >>> backbone = XLNetBackbone("base")
    >>> h = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 5})   # (B, T, 768)
    >>> content_mask, query_mask = permutation_masks(order, padding_mask=ids != 5)
    >>> h, g = backbone.two_stream({"token_ids": ids}, content_mask, query_mask)              # pretraining
    """

    def __init__(self, config=None, **kwargs):
        super().__init__(**kwargs)
        self.config = config = XLNetConfig.of(config)
        policy = self.dtype_policy
        self.token_embedding = keras.layers.Embedding(config.vocabulary_size, config.hidden_dim,
                                                      embeddings_initializer=_initializer(), name="token_embedding",
                                                      dtype=policy)
        self.mask_embedding = MaskEmbedding(config.hidden_dim, name="mask_embedding", dtype=policy)
        self.embeddings_dropout = keras.layers.Dropout(config.dropout, dtype=policy)
        self.blocks = [
            XLNetBlock(config.num_heads, config.hidden_dim, config.intermediate_dim, dropout=config.dropout,
                       activation=config.activation, layer_norm_epsilon=config.layer_norm_epsilon,
                       clamp_length=config.clamp_length, name=f"block_{i}", dtype=policy)
            for i in range(config.num_layers)
        ]
        self.output_dropout = keras.layers.Dropout(config.dropout, dtype=policy)

    def build(self, inputs_shape=None):
        d = self.config.hidden_dim
        self.token_embedding.build((None, None))
        self.mask_embedding.build((None, None, d))  # w, read by the query stream only
        for block in self.blocks:
            block.build((None, None, d))

    def _inputs(self, inputs):
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        unknown = sorted(set(inputs) - {"token_ids", "segment_ids", "padding_mask"})
        if unknown or inputs.get("token_ids") is None:
            raise ValueError(
                "XLNetBackbone takes a dict with 'token_ids' (and optional 'segment_ids', 'padding_mask'); received "
                f"keys {sorted(inputs)}."
            )
        token_ids = inputs["token_ids"]
        check_rank(token_ids.shape, 2, "token_ids", "(batch, length) of token ids")
        _check_dtype(token_ids, "token_ids", "integer token ids")
        segment_ids, padding_mask = inputs.get("segment_ids"), inputs.get("padding_mask")
        if padding_mask is None:
            padding_mask = ops.not_equal(token_ids, self.config.pad_token_id)
        for name, value in (("segment_ids", segment_ids), ("padding_mask", padding_mask)):
            if value is None:
                continue
            if None not in value.shape + token_ids.shape and tuple(value.shape) != tuple(token_ids.shape):
                raise ValueError(f"`{name}` must have the shape of `token_ids` {format_shape(token_ids.shape)}; "
                                 f"received {format_shape(value.shape)}.")
        if segment_ids is not None:
            _check_dtype(segment_ids, "segment_ids", "integer segment ids")
        _check_dtype(padding_mask, "padding_mask", "a boolean (True = real token) or 0/1 integer mask", allow_bool=True)
        check_id_range(token_ids, "token_ids", self.config.vocabulary_size)
        return token_ids, segment_ids, ops.cast(padding_mask, "bool")

    def _masks(self, inputs):
        """``(token_ids, content_mask, different_segment)`` of a plain call: XLNet's content mask (B, T, T), where
        every position attends the real tokens and itself (a padded position too), and the segment comparison
        (B, T, T) (None without segment ids)."""
        token_ids, segment_ids, padding_mask = self._inputs(inputs)
        different_segment = None
        if segment_ids is not None:  # s_ij = s_- where seg_i != seg_j (section 2.5)
            different_segment = ops.not_equal(segment_ids[:, :, None], segment_ids[:, None, :])
        length = ops.shape(token_ids)[1]
        itself = ops.equal(ops.arange(length)[:, None], ops.arange(length)[None, :])
        return token_ids, ops.logical_or(padding_mask[:, None, :], itself[None]), different_segment

    def _encode(self, inputs, attention_masks, two_streams, training):
        token_ids, content_mask, different_segment = self._masks(inputs)
        if attention_masks is None:
            attention_masks = (content_mask, None)
        content_mask, query_mask = attention_masks
        content = self.embeddings_dropout(self.token_embedding(token_ids), training=training)  # h^(0) = E[x]
        query = None
        if two_streams:
            query = self.embeddings_dropout(self.mask_embedding(content), training=training)  # g^(0) = w
        for block in self.blocks:
            content, query = block(content, query, content_attention_mask=content_mask,
                                   query_attention_mask=query_mask, different_segment=different_segment,
                                   training=training)
        return content, query

    def call(self, inputs, training=None):
        content, _ = self._encode(inputs, None, False, training)
        return self.output_dropout(content, training=training)

    def two_stream(self, inputs, content_attention_mask, query_attention_mask, training=None):
        """Both streams of pretraining (section 2.3): the content stream h under ``content_attention_mask`` and the
        query stream g (from w) under ``query_attention_mask``.

        Args:
            inputs: as for ``call``; ``padding_mask`` is not read here (the masks carry the padding).
            content_attention_mask, query_attention_mask: (B, T, T) boolean, True = may attend: the masks of
                :func:`attnlayers.permutation.permutation_masks` (with its ``padding_mask``) for a factorisation
                order.
            training: enables dropout.

        Returns:
            ``(content, query)``: h and g of the last layer, (B, T, d) each. The language-model head reads g at the
            predicted positions (:func:`attnlayers.permutation.prediction_targets`).
        """
        if content_attention_mask is None or query_attention_mask is None:
            raise ValueError("`two_stream` needs both `content_attention_mask` and `query_attention_mask` (B, T, T): "
                             "see attnlayers.permutation.permutation_masks.")
        if not self.built:  # as a first call would: a later call must not build (and add) the weights again
            self.build()
            self.built = True
        content, query = self._encode(inputs, (content_attention_mask, query_attention_mask), True, training)
        return self.output_dropout(content, training=training), self.output_dropout(query, training=training)

    def build_from_config(self, config):
        """Rebuilds a loaded model (``.keras`` files) by calling it once on zeros of the saved input shapes."""
        call_on_saved_shapes(self, config, batch=1)

    def get_config(self):
        return {**super().get_config(), "config": dataclasses.asdict(self.config)}


def _check_dtype(value, name, expected, allow_bool=False):
    """Integer ids (and a boolean / 0-1 integer mask): floats, silently truncated by a cast, and strings are refused
    by name."""
    dtype = keras.backend.standardize_dtype(value.dtype)
    if not (keras.backend.is_int_dtype(dtype) or (allow_bool and dtype == "bool")):
        raise ValueError(f"`{name}` must be {expected} of shape (batch, length); received dtype {dtype}.")
