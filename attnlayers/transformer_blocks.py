"""Transformer blocks (Vaswani et al. 2017, section 3.1): :class:`TransformerEncoderBlock` and
:class:`TransformerDecoderBlock` (self-attention, cross-attention, feed-forward; each sublayer with dropout, a
residual connection and a normalization), and :class:`DecoderBlockOutputs`, the parts of a decoder block's result.

Each block is ``sublayer -> dropout -> residual -> LayerNorm`` (post-LN, the paper's "Add & Norm",
LayerNorm(x + Sublayer(x))) or, with ``normalize_first=True``, ``x + Sublayer(LayerNorm(x))`` (pre-LN, as in
GPT-2 and most modern models). Names and call arguments follow keras-hub's TransformerEncoder/Decoder.

A LLaMA-style block composes from the arguments: ``normalize_first=True, normalization="rms"`` (RMSNorm, Zhang &
Sennrich 2019), ``activation="swiglu"`` (Shazeer 2020), ``use_bias=False``, and ``attention_kwargs`` with
``num_key_value_heads`` (grouped-query attention) and ``rotary=RotaryEmbedding()``.
"""

import collections

import keras

from attnlayers.feed_forward import FeedForward
from attnlayers.masking import check_mask, keras_mask
from attnlayers.multi_head import AttentionOutputs, MultiHeadAttention
from attnlayers.normalization import RMSNorm
from attnlayers.routes import IMPLEMENTATIONS
from attnlayers.segment_memory import update_memory  # noqa: F401 (a model's next memory, importable with the blocks)
from attnlayers.validation import (
    check_feature_size,
    check_rank,
    check_tensor,
    one_of,
    positive_int,
    rate_in_unit_interval,
)

__all__ = ["DecoderBlockOutputs", "TransformerDecoderBlock", "TransformerEncoderBlock"]

_NORMALIZATIONS = ("layer", "rms")
_SEQUENCE = "(batch, length, d_model)"


def _normalization_layer(normalization, epsilon, name, dtype):
    """LayerNorm (Ba et al. 2016) for "layer", RMSNorm (Zhang & Sennrich 2019) for "rms"."""
    if normalization == "rms":
        return RMSNorm(epsilon=epsilon, name=name, dtype=dtype)
    return keras.layers.LayerNormalization(epsilon=epsilon, name=name, dtype=dtype)


def _check_sequence(x, name, model_dim=None):
    """A (B, L, d_model) tensor (or its shape): present, of rank 3, and of the built feature size."""
    check_tensor(x, name, _SEQUENCE)
    shape = x if isinstance(x, (tuple, list)) else x.shape
    check_rank(shape, 3, name, _SEQUENCE)
    check_feature_size(shape, model_dim, name)


class _Block(keras.layers.Layer):
    """Shared constructor, sublayer factory and residual wiring of the encoder and decoder blocks."""

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        key_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        attention_kwargs=None,
        normalization="layer",
        use_bias=True,
        implementation="auto",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.intermediate_dim = positive_int(intermediate_dim, "intermediate_dim")
        self.dropout = rate_in_unit_interval(dropout, "dropout")
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.key_dim = positive_int(key_dim, "key_dim", allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_kwargs = dict(attention_kwargs or {})
        self.normalization = one_of(normalization, "normalization", _NORMALIZATIONS)
        self.use_bias = bool(use_bias)
        self.implementation = one_of(implementation, "implementation", IMPLEMENTATIONS)
        self.supports_masking = True

    def _key_dim(self, model_dim):
        if self.key_dim is not None:
            return self.key_dim
        if model_dim % self.num_heads:
            raise ValueError(
                f"The model dim {model_dim} is not divisible by num_heads={self.num_heads}: pass `key_dim` "
                f"explicitly, or choose num_heads dividing {model_dim}."
            )
        return model_dim // self.num_heads

    def _attention(self, name, model_dim, query_shape, value_shape):
        # attention_kwargs may override use_bias, implementation and the attention weights' dropout
        kwargs = {"use_bias": self.use_bias, "implementation": self.implementation, "dropout": self.dropout,
                  **self.attention_kwargs}
        layer = MultiHeadAttention(
            num_heads=self.num_heads, key_dim=self._key_dim(model_dim),
            kernel_initializer=self.kernel_initializer, bias_initializer=self.bias_initializer, name=name,
            dtype=self.dtype_policy, **kwargs,
        )
        layer.build(query_shape, value_shape)
        return layer

    def _norm(self, name, shape):
        layer = _normalization_layer(self.normalization, self.layer_norm_epsilon, name, self.dtype_policy)
        layer.build(shape)
        return layer

    def _feedforward(self, shape):
        self.feedforward_layer_norm = self._norm("feedforward_layer_norm", shape)
        self.feedforward = FeedForward(
            self.intermediate_dim, activation=self.activation, use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer, bias_initializer=self.bias_initializer, name="feedforward",
            dtype=self.dtype_policy,
        )
        self.feedforward.build(shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def _residual(self, x, norm, sublayer, training):
        """Post-LN: LayerNorm(x + Dropout(Sublayer(x))); pre-LN: x + Dropout(Sublayer(LayerNorm(x))).

        ``sublayer`` returns a tensor or an :class:`AttentionOutputs`; returns ``(y, AttentionOutputs)``
        with ``y`` the new residual stream and the sublayer's scores and cache by name.
        """
        out = sublayer(norm(x) if self.normalize_first else x)
        out = out if isinstance(out, AttentionOutputs) else AttentionOutputs(out, None, None)
        y = x + self.dropout_layer(out.output, training=training)
        return (y if self.normalize_first else norm(y)), out

    def _memory_states(self, memory, memory_mask, cache=None):
        """The memory as the self-attention reads it (Transformer-XL, Dai et al. 2019, section 3.2: h~ = [SG(m) o h]):
        through the self-attention's norm under pre-LN, as the segment; None without a memory. The attention stops
        its gradient (:mod:`attnlayers.segment_memory`)."""
        if memory is None:
            if memory_mask is not None:
                raise ValueError("`memory_mask` masks the steps of a `memory`; received a memory_mask and no memory.")
            return None
        if cache is not None:
            raise ValueError(
                "`memory` and `self_attention_cache` cannot be combined: write the memory into the cache first (call "
                "the block on the memory with self_attention_cache_update_index=0), then decode from index M."
            )
        _check_sequence(memory, "memory", self._model_dim)
        return self.self_attention_layer_norm(memory) if self.normalize_first else memory

    def _feedforward_residual(self, x, training):
        def feedforward(h):
            return self.feedforward(h, training=training)

        y, _ = self._residual(x, self.feedforward_layer_norm, feedforward, training)
        return y

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "normalize_first": self.normalize_first,
            "key_dim": self.key_dim,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "attention_kwargs": keras.saving.serialize_keras_object(self.attention_kwargs) if self.attention_kwargs else None,
            "normalization": self.normalization,
            "use_bias": self.use_bias,
            "implementation": self.implementation,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("attention_kwargs"):
            config["attention_kwargs"] = keras.saving.deserialize_keras_object(config["attention_kwargs"])
        return cls(**config)


class _TracedOutputSpec:
    """Symbolic outputs (tuples, dicts, caches) come from tracing ``call``, as for layers without
    compute_output_shape; compute_output_shape still answers for the plain output."""

    def compute_output_spec(self, *args, **kwargs):
        return super(keras.layers.Layer, self).compute_output_spec(*args, **kwargs)


def _check_encoder_masks(inputs, padding_mask, attention_mask):
    """The encoder's masks, checked under its own argument names; an omitted ``padding_mask`` falls back to
    the implicit Keras mask of ``inputs``."""
    batch, length = inputs.shape[0], inputs.shape[1]
    padding_mask = check_mask(padding_mask, "padding_mask", (batch, length))
    attention_mask = check_mask(attention_mask, "attention_mask", (batch, length, length))
    return (keras_mask(inputs) if padding_mask is None else padding_mask), attention_mask


def _check_decoder_masks(
    decoder_sequence, encoder_sequence, decoder_padding_mask, decoder_attention_mask, encoder_padding_mask,
    encoder_attention_mask, self_length=None, cross_length=None,
):
    """The decoder's masks, checked under its own argument names against (B, T), (B, T, S_self), (B, S) and
    (B, T, S), S_self and S being the cache lengths when there are caches; omitted padding masks fall back to
    the implicit Keras masks of the sequences."""
    batch, length = decoder_sequence.shape[0], decoder_sequence.shape[1]
    self_length = length if self_length is None else self_length
    if cross_length is None and encoder_sequence is not None:
        cross_length = encoder_sequence.shape[1]
    decoder_padding_mask = check_mask(decoder_padding_mask, "decoder_padding_mask", (batch, length))
    decoder_attention_mask = check_mask(decoder_attention_mask, "decoder_attention_mask", (batch, length, self_length))
    encoder_padding_mask = check_mask(encoder_padding_mask, "encoder_padding_mask", (batch, cross_length))
    encoder_attention_mask = check_mask(encoder_attention_mask, "encoder_attention_mask", (batch, length, cross_length))
    if decoder_padding_mask is None:
        decoder_padding_mask = keras_mask(decoder_sequence)
    if encoder_padding_mask is None and encoder_sequence is not None:
        encoder_padding_mask = keras_mask(encoder_sequence)
    return decoder_padding_mask, decoder_attention_mask, encoder_padding_mask, encoder_attention_mask


def _cross_arguments(encoder_padding_mask, encoder_attention_mask, cross_attention_cache,
                     cross_attention_cache_update_index):
    """A decoder block's cross-attention call arguments (the encoder's checked masks and the cache)."""
    return {
        "value_mask": encoder_padding_mask, "attention_mask": encoder_attention_mask, "cache": cross_attention_cache,
        "cache_update_index": cross_attention_cache_update_index,
    }


class DecoderBlockOutputs(
    collections.namedtuple(
        "DecoderBlockOutputs", ["outputs", "self_attention_cache", "cross_attention_cache", "attention_scores"]
    )
):
    """The parts of a :class:`TransformerDecoderBlock` result by name: ``outputs`` (B, T, d_model), the
    updated caches (or None) and the scores dict (or None).

    ``DecoderBlockOutputs.unpack(block(...), has_self_cache, has_cross, return_attention_scores)`` reads the
    block's return structure; ``pack()`` builds it.

    Attributes:
        outputs: (B, T, d_model).
        self_attention_cache: the updated self-attention cache, or None.
        cross_attention_cache: the cross-attention cache, or None.
        attention_scores: the scores dict, or None.
    """

    __slots__ = ()

    @classmethod
    def unpack(cls, result, has_self_cache=False, has_cross=False, return_attention_scores=False):
        """The result of a call, as the tuple :meth:`pack` returns, read back into fields.

        Args:
            result: what the block returned: ``outputs``, or the tuple of :meth:`pack`.
            has_self_cache: the tuple holds the self-attention cache.
            has_cross: the tuple holds the cross-attention cache too (after the self-attention cache).
            return_attention_scores: the tuple ends with the scores dict.

        Returns:
            A :class:`DecoderBlockOutputs` (absent parts None).
        """
        if not (has_self_cache or return_attention_scores):
            return cls(result, None, None, None)
        result = tuple(result)
        caches = result[1 : 1 + has_self_cache * (1 + has_cross)]
        return cls(
            result[0],
            caches[0] if caches else None,
            caches[1] if len(caches) > 1 else None,
            result[-1] if return_attention_scores else None,
        )

    def pack(self, has_self_cache=False, has_cross=False, return_attention_scores=False):
        """``outputs``; with a self-attention cache ``(outputs, self_attention_cache[, cross_attention_cache])``
        (keras-hub's order); with the scores dict appended when requested.

        Args:
            has_self_cache: include the self-attention cache.
            has_cross: include the cross-attention cache (only with ``has_self_cache``).
            return_attention_scores: append the scores dict.

        Returns:
            ``outputs`` (B, T, d_model) alone, or the tuple.
        """
        parts = (self.outputs,)
        if has_self_cache:
            parts += (self.self_attention_cache,) + ((self.cross_attention_cache,) if has_cross else ())
        if return_attention_scores:
            parts += (self.attention_scores,)
        return parts[0] if len(parts) == 1 else parts


@keras.saving.register_keras_serializable(package="attnlayers")
class TransformerEncoderBlock(_Block):
    """One Transformer encoder layer: self-attention and feed-forward sublayers, each with dropout, a
    residual connection and LayerNorm (Vaswani et al. 2017, section 3.1).

    Args:
        num_heads: attention heads.
        intermediate_dim: d_ff of the feed-forward sublayer.
        dropout: dropout on each sublayer's output and on the attention weights.
        activation: feed-forward activation ("relu" as in the paper, "gelu", "swiglu", ...).
        layer_norm_epsilon: the norm's epsilon (LayerNorm or RMSNorm).
        normalize_first: pre-LN instead of the paper's post-LN.
        key_dim: per-head size; defaults to d_model / num_heads.
        kernel_initializer, bias_initializer: of every dense projection.
        attention_kwargs: extra ``MultiHeadAttention`` arguments (``score``, ``num_key_value_heads``,
            ``rotary``, ``position_bias``, ``sliding_window``): behaviours compose in through the attention;
            ``dropout`` there sets the attention weights' own rate (ViT's attention_dropout).
        normalization: "layer" (LayerNorm, the default) or "rms" (:class:`~attnlayers.normalization.RMSNorm`, as
            in LLaMA), for every norm of the block (and the final norm of a pre-LN stack).
        use_bias: biases in the attention and feed-forward projections (False in LLaMA); the norms keep theirs.
        implementation: the attention route, "auto", "exact", "chunked" or "fused" (see
            :class:`~attnlayers.MultiHeadAttention`).

    Call arguments:
        inputs: (B, T, d_model).
        padding_mask: (B, T) boolean; the implicit Keras mask of ``inputs`` is used when omitted.
        attention_mask: (B, T, T) boolean, True = may attend.
        return_attention_scores: also return the self-attention weights (B, N, T, T) ((B, N, T, M + T) with a
            memory).
        training: enables dropout.
        memory: (B, M, d_model), the previous segment's inputs of this block (Transformer-XL's recurrence, Dai et al.
            2019, section 3.2): the keys and values cover [memory; inputs], the queries the inputs, at positions
            M + t for the position hooks; no gradient reaches it (:func:`attnlayers.segment_memory.update_memory`
            builds the next one). Under pre-LN it goes through the self-attention's norm with the inputs.
        memory_mask: (B, M) padding of the memory (its implicit Keras mask when omitted).

    Returns:
        (B, T, d_model), and the scores if requested.

    Example:
    >>> block = TransformerEncoderBlock(num_heads=8, intermediate_dim=2048)
    >>> y = block(x, padding_mask=tokens != 0)    # (B, T, 512)
    """

    def build(self, inputs_shape=None):
        _check_sequence(inputs_shape, "inputs")
        self._model_dim = model_dim = inputs_shape[-1]
        self.self_attention = self._attention("self_attention", model_dim, inputs_shape, inputs_shape)
        self.self_attention_layer_norm = self._norm("self_attention_layer_norm", inputs_shape)
        self._feedforward(inputs_shape)

    def call(self, inputs, padding_mask=None, attention_mask=None, return_attention_scores=False, training=None,
             memory=None, memory_mask=None):
        _check_sequence(inputs, "inputs", self._model_dim)
        padding_mask, attention_mask = _check_encoder_masks(inputs, padding_mask, attention_mask)
        memory = self._memory_states(memory, memory_mask)

        def attend(x):
            out = self.self_attention(
                x, x, query_mask=padding_mask, value_mask=padding_mask, attention_mask=attention_mask,
                return_attention_scores=return_attention_scores, training=training, memory=memory,
                memory_mask=memory_mask,
            )
            return AttentionOutputs.unpack(out, return_attention_scores)

        x, attended = self._residual(inputs, self.self_attention_layer_norm, attend, training)
        x = self._feedforward_residual(x, training)
        return (x, attended.scores) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, return_attention_scores=False, memory=None, **kwargs):
        out = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return out
        b, t = inputs.shape[:2]
        s = t if memory is None else (None if None in (t, memory.shape[1]) else memory.shape[1] + t)
        return out, keras.KerasTensor((b, self.num_heads, t, s), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="attnlayers")
class TransformerDecoderBlock(_TracedOutputSpec, _Block):
    """One Transformer decoder layer: masked (causal) self-attention, encoder-decoder cross-attention, and
    feed-forward, each with dropout, residual and LayerNorm (Vaswani et al. 2017, section 3.1).

    Built without an encoder sequence it is decoder-only (no cross-attention), as in GPT. A call on one position
    with a self-attention cache takes :meth:`single_step` when :meth:`supports_single_step` holds (cached decoding
    at a cost that grows with the position; see :mod:`attnlayers.kv_cache`).

    Args:
        num_heads, intermediate_dim, dropout, activation, layer_norm_epsilon, normalize_first, key_dim,
            kernel_initializer, bias_initializer, attention_kwargs, normalization, use_bias, implementation,
            **kwargs: as :class:`TransformerEncoderBlock`.

    Call arguments:
        decoder_sequence: (B, T, d_model).
        encoder_sequence: (B, S, d_model) encoder memory, or None (decoder-only).
        decoder_padding_mask: (B, T); the implicit mask of ``decoder_sequence`` is used when omitted.
        decoder_attention_mask: (B, T, T) extra self-attention mask ((B, T, S_max) with a cache).
        encoder_padding_mask: (B, S); the implicit mask of ``encoder_sequence`` is used when omitted.
        encoder_attention_mask: (B, T, S) extra cross-attention mask.
        self_attention_cache: (B, 2, S_max, N, H) key/value cache of the self-attention.
        self_attention_cache_update_index: where this call's tokens go in the cache.
        cross_attention_cache: (B, 2, S, N, H) keys/values of the encoder memory. With
            ``cross_attention_cache_update_index=0`` it is filled from ``encoder_sequence``; with None it is
            used as is (the encoder is not projected again at every step).
        use_causal_mask: the causal rule on self-attention (default True).
        return_attention_scores: also return {"self_attention": (B, N, T, S_self),
            "cross_attention": (B, N, T, S)}.
        training: enables dropout.
        memory: (B, M, d_model), the previous segment's decoder_sequence of this block (Transformer-XL's
            recurrence, Dai et al. 2019, section 3.2): the self-attention's keys and values cover [memory;
            decoder_sequence], its queries sit at positions M + t (the causal rule lets every one see the whole
            memory, and the position hooks get start_index M); no gradient reaches it
            (:func:`attnlayers.segment_memory.update_memory` builds the next one). Under pre-LN it goes through the
            self-attention's norm with the sequence. Not with a self-attention cache: write the memory into the
            cache first (the block called on it with ``self_attention_cache_update_index=0``).
        memory_mask: (B, M) padding of the memory (its implicit Keras mask when omitted).

    Returns:
        ``outputs`` (B, T, d_model); with a self-attention cache ``(outputs, self_attention_cache[,
        cross_attention_cache])`` (keras-hub's order), with the scores dict appended when requested.
        :meth:`DecoderBlockOutputs.unpack` names the parts.

    Example:
    >>> block = TransformerDecoderBlock(num_heads=8, intermediate_dim=2048)
    >>> y = block(target_embeddings, encoder_outputs, encoder_padding_mask=source != 0)
    """

    def build(self, decoder_sequence_shape=None, encoder_sequence_shape=None):
        _check_sequence(decoder_sequence_shape, "decoder_sequence")
        if encoder_sequence_shape is not None:
            _check_sequence(encoder_sequence_shape, "encoder_sequence")
        self._model_dim = model_dim = decoder_sequence_shape[-1]
        self._encoder_dim = None if encoder_sequence_shape is None else encoder_sequence_shape[-1]
        self.self_attention = self._attention(
            "self_attention", model_dim, decoder_sequence_shape, decoder_sequence_shape
        )
        self.self_attention_layer_norm = self._norm("self_attention_layer_norm", decoder_sequence_shape)
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            self.cross_attention = self._attention(
                "cross_attention", model_dim, decoder_sequence_shape, encoder_sequence_shape
            )
            self.cross_attention_layer_norm = self._norm("cross_attention_layer_norm", decoder_sequence_shape)
        self._feedforward(decoder_sequence_shape)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
        memory=None,
        memory_mask=None,
    ):
        self._check_inputs(decoder_sequence, encoder_sequence, cross_attention_cache)
        memory = self._memory_states(memory, memory_mask, self_attention_cache)
        decoder_padding_mask, decoder_attention_mask, encoder_padding_mask, encoder_attention_mask = (
            _check_decoder_masks(
                decoder_sequence, encoder_sequence, decoder_padding_mask, decoder_attention_mask,
                encoder_padding_mask, encoder_attention_mask,
                self_length=None if self_attention_cache is None else self_attention_cache.shape[2],
                cross_length=None if cross_attention_cache is None else cross_attention_cache.shape[2],
            )
        )
        if self.supports_single_step(
            decoder_sequence, self_attention_cache, self_attention_cache_update_index,
            decoder_padding_mask=decoder_padding_mask, decoder_attention_mask=decoder_attention_mask,
            return_attention_scores=return_attention_scores, training=training,
        ):
            result = self.single_step(
                decoder_sequence, self_attention_cache, self_attention_cache_update_index,
                encoder_sequence=encoder_sequence, encoder_padding_mask=encoder_padding_mask,
                encoder_attention_mask=encoder_attention_mask, cross_attention_cache=cross_attention_cache,
                cross_attention_cache_update_index=cross_attention_cache_update_index, training=training,
            )
        else:
            has_self_cache = self_attention_cache is not None

            def self_attend(x):
                # With a cache, the keys' padding lives in the cache (masked beyond the written positions).
                out = self.self_attention(
                    x, x,
                    query_mask=decoder_padding_mask,
                    value_mask=None if has_self_cache else decoder_padding_mask,
                    attention_mask=decoder_attention_mask, use_causal_mask=use_causal_mask,
                    return_attention_scores=return_attention_scores, training=training,
                    cache=self_attention_cache, cache_update_index=self_attention_cache_update_index,
                    memory=memory, memory_mask=memory_mask,
                )
                return AttentionOutputs.unpack(out, return_attention_scores, has_self_cache)

            result = self._forward(
                decoder_sequence, self_attend, encoder_sequence, _cross_arguments(
                    encoder_padding_mask, encoder_attention_mask, cross_attention_cache,
                    cross_attention_cache_update_index,
                ),
                decoder_padding_mask, return_attention_scores, training,
            )
        has_self_cache, has_cross = self_attention_cache is not None, self.cross_attention is not None
        return result.pack(has_self_cache, has_cross, return_attention_scores)

    def supports_single_step(
        self, decoder_sequence, self_attention_cache, self_attention_cache_update_index, *,
        decoder_padding_mask=None, decoder_attention_mask=None, return_attention_scores=False, training=None,
    ):
        """Whether a call with these arguments can take :meth:`single_step`: one position (T = 1) written into a
        self-attention cache of static length, no padding or attention mask on it, no scores returned, no
        attention dropout at work, and a self-attention layer that supports it
        (``MultiHeadAttention.supports_single_step``).

        Args:
            decoder_sequence: (B, T, d_model).
            self_attention_cache: (B, 2, S_max, N_kv, H) or a stack's (B, layers, 2, S_max, N_kv, H), or None.
            self_attention_cache_update_index: int, scalar int tensor or None.
            decoder_padding_mask, decoder_attention_mask, return_attention_scores, training: as in ``call``
                (the masks checked, the implicit padding mask filled in).

        Returns:
            A Python bool.
        """
        attention_dropout = self.self_attention.dropout and not (training is None or training is False)
        return (
            self_attention_cache is not None and self_attention_cache_update_index is not None
            and decoder_sequence.shape[1] == 1 and self_attention_cache.shape[-3] is not None
            and decoder_padding_mask is None and decoder_attention_mask is None
            and not return_attention_scores and not attention_dropout
            and self.self_attention.supports_single_step()
        )

    def single_step(
        self, decoder_sequence, cache, cache_update_index, *, layer=None, write=True, encoder_sequence=None,
        encoder_padding_mask=None, encoder_attention_mask=None, cross_attention_cache=None,
        cross_attention_cache_update_index=None, training=None,
    ):
        """The block on one new position with a self-attention cache, its self-attention computed by
        ``MultiHeadAttention.single_step`` (a cost that grows with the position, not with S_max). What ``call``
        computes for such a position when :meth:`supports_single_step` holds (and ``call`` takes this path then).

        Args:
            decoder_sequence: (B, 1, d_model), the position's input (no padding: it is a real token).
            cache: the self-attention cache (B, 2, S_max, N_kv, H) (S_max static), or with ``layer`` a decoder
                stack's (B, layers, 2, S_max, N_kv, H) of which ``layer`` is read (and written).
            cache_update_index: int or scalar int tensor, the position i.
            layer: None, or the layer (int) of a stacked ``cache``.
            write: True: the position's key and value are written into ``cache`` before the attention reads it
                (best where writes are in place, see :func:`attnlayers.kv_cache.updates_in_place`); False: they
                are attended beside it and returned unwritten, for the caller to write
                (:func:`attnlayers.kv_cache.write_position`).
            encoder_sequence: (B, S, d_model) encoder memory, or None (decoder-only, or a filled cross cache).
            encoder_padding_mask: (B, S) boolean, or None. encoder_attention_mask: (B, 1, S) boolean, or None.
                Implicit Keras masks are not read here.
            cross_attention_cache, cross_attention_cache_update_index: as in ``call`` (the block's own
                (B, 2, S, N_kv, H) cross cache, not a stack's).
            training: enables the residual dropout (not attention dropout: with attention dropout at work this
                raises a ValueError).

        Returns:
            A :class:`DecoderBlockOutputs`: ``outputs`` (B, 1, d_model); ``self_attention_cache`` the written
            cache (``write``) or the position's key and value (B, 2, N_kv, H) (``write=False``);
            ``cross_attention_cache`` (B, 2, S, N_kv, H) or None; ``attention_scores`` an empty dict.

        Example:
        >>> out = block.single_step(x_t, cache, t)       # cache (B, 2, max_length, N_kv, H)
        >>> y, cache = out.outputs, out.self_attention_cache
        """
        self._check_inputs(decoder_sequence, encoder_sequence, cross_attention_cache)
        if decoder_sequence.shape[1] != 1:
            raise ValueError(f"`decoder_sequence` of a single step must have shape (batch, 1, d_model); received "
                             f"shape {tuple(decoder_sequence.shape)}.")
        if self.self_attention.dropout and not (training is None or training is False):
            raise ValueError(
                f"`single_step` computes no attention dropout; received training={training!r} with dropout="
                f"{self.self_attention.dropout}. Call the block (the general cached path) to train with dropout."
            )
        batch = decoder_sequence.shape[0]
        cross_length = None if cross_attention_cache is None else cross_attention_cache.shape[2]
        if cross_length is None and encoder_sequence is not None:
            cross_length = encoder_sequence.shape[1]
        encoder_padding_mask = check_mask(encoder_padding_mask, "encoder_padding_mask", (batch, cross_length))
        encoder_attention_mask = check_mask(encoder_attention_mask, "encoder_attention_mask", (batch, 1, cross_length))

        def self_attend(x):
            output, written = self.self_attention.single_step(x, cache, cache_update_index, layer, write)
            return AttentionOutputs(output, None, written)

        cross = _cross_arguments(
            encoder_padding_mask, encoder_attention_mask, cross_attention_cache, cross_attention_cache_update_index
        )
        return self._forward(decoder_sequence, self_attend, encoder_sequence, cross, None, False, training)

    def _forward(self, decoder_sequence, self_attend, encoder_sequence, cross, query_mask, return_attention_scores,
                 training):
        """The block around its self-attention -> :class:`DecoderBlockOutputs`.

        ``self_attend(x) -> AttentionOutputs`` is the self-attention sublayer (general or :meth:`single_step`);
        ``cross`` the cross-attention's mask and cache arguments (:func:`_cross_arguments`); ``query_mask`` the
        checked decoder padding mask.
        """
        x, attended = self._residual(decoder_sequence, self.self_attention_layer_norm, self_attend, training)
        result = DecoderBlockOutputs(None, attended.cache, cross["cache"], {})
        if return_attention_scores:
            result.attention_scores["self_attention"] = attended.scores
        if self.cross_attention is not None:
            memory = encoder_sequence if encoder_sequence is not None else x  # unused with a static cache

            def cross_attend(h):
                out = self.cross_attention(
                    h, memory, query_mask=query_mask, return_attention_scores=return_attention_scores,
                    training=training, **cross,
                )
                return AttentionOutputs.unpack(out, return_attention_scores, cross["cache"] is not None)

            x, attended = self._residual(x, self.cross_attention_layer_norm, cross_attend, training)
            result = result._replace(cross_attention_cache=attended.cache)
            if return_attention_scores:
                result.attention_scores["cross_attention"] = attended.scores
        x = self._feedforward_residual(x, training)
        return result._replace(outputs=x)

    def _check_inputs(self, decoder_sequence, encoder_sequence, cross_attention_cache):
        _check_sequence(decoder_sequence, "decoder_sequence", self._model_dim)
        has_cross = self.cross_attention is not None
        if encoder_sequence is not None and not has_cross:
            raise ValueError(
                "This TransformerDecoderBlock was built decoder-only (no encoder_sequence at its first call); "
                "received an `encoder_sequence`. Build it with an encoder sequence to use cross-attention."
            )
        if has_cross and encoder_sequence is None and cross_attention_cache is None:
            raise ValueError(
                "This TransformerDecoderBlock has cross-attention: pass `encoder_sequence` (or a filled "
                "`cross_attention_cache`)."
            )
        if encoder_sequence is not None:
            _check_sequence(encoder_sequence, "encoder_sequence", self._encoder_dim)
            if None not in (encoder_sequence.shape[0], decoder_sequence.shape[0]) and (
                encoder_sequence.shape[0] != decoder_sequence.shape[0]
            ):
                raise ValueError(
                    f"`encoder_sequence` and `decoder_sequence` must have the same batch size; received "
                    f"{encoder_sequence.shape[0]} and {decoder_sequence.shape[0]}."
                )

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return tuple(decoder_sequence_shape)
