"""Transformer stacks (Vaswani et al. 2017, section 3.1): :class:`TransformerEncoder` and :class:`TransformerDecoder`,
N blocks and an optional final normalization, with keras-hub's names and call arguments. The blocks (post-LN or
pre-LN, LLaMA-style from their arguments) are :mod:`attnlayers.transformer_blocks`' and the feed-forward sublayer
:mod:`attnlayers.feed_forward`'s; every public name of the three is importable from here.
"""

import keras
from keras import ops

from attnlayers import kv_cache
from attnlayers.feed_forward import FeedForward
from attnlayers.transformer_blocks import (
    _SEQUENCE,
    DecoderBlockOutputs,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    _check_decoder_masks,
    _check_encoder_masks,
    _check_sequence,
    _normalization_layer,
    _TracedOutputSpec,
)
from attnlayers.validation import check_tensor, positive_int

__all__ = [
    "DecoderBlockOutputs",
    "FeedForward",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerEncoderBlock",
]


def _stack_layers(cls, num_layers, block_kwargs, dtype):
    return [cls(**block_kwargs, name=f"{cls.__name__.lower()}_{i}", dtype=dtype) for i in range(num_layers)]


class _Stack(_TracedOutputSpec, keras.layers.Layer):
    """N identical blocks that share no weights, plus a final LayerNorm for pre-LN stacks."""

    block_class = None

    def __init__(self, num_layers, num_heads, intermediate_dim, **block_kwargs):
        super().__init__(**{k: block_kwargs.pop(k) for k in ("name", "dtype", "trainable") if k in block_kwargs})
        self.num_layers = positive_int(num_layers, "num_layers")
        self.block_kwargs = {"num_heads": num_heads, "intermediate_dim": intermediate_dim, **block_kwargs}
        self.blocks = _stack_layers(self.block_class, num_layers, self.block_kwargs, self.dtype_policy)
        self.final_layer_norm = None
        if block_kwargs.get("normalize_first"):
            self.final_layer_norm = _normalization_layer(
                self.blocks[0].normalization, block_kwargs.get("layer_norm_epsilon", 1e-5), "final_layer_norm",
                self.dtype_policy,
            )
        self.supports_masking = True

    def _finish(self, x, hidden_states, attention_scores, return_hidden_states, return_attention_scores):
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        if not (return_hidden_states or return_attention_scores):
            return x
        result = {"sequence_output": x}
        if return_hidden_states:
            result["hidden_states"] = hidden_states
        if return_attention_scores:
            result["attention_scores"] = attention_scores
        return result

    def get_config(self):
        config = {**super().get_config(), "num_layers": self.num_layers}
        block = self.blocks[0].get_config()
        for key in ("name", "dtype", "trainable"):
            block.pop(key, None)
        return {**config, **block}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if config.get("attention_kwargs"):
            config["attention_kwargs"] = keras.saving.deserialize_keras_object(config["attention_kwargs"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="attnlayers")
class TransformerEncoder(_Stack):
    """A stack of ``num_layers`` :class:`TransformerEncoderBlock` (no weight sharing).

    Args:
        num_layers: N (6 in the paper's base model).
        num_heads: as :class:`TransformerEncoderBlock`.
        intermediate_dim: as :class:`TransformerEncoderBlock`.
        **block_kwargs: any other :class:`TransformerEncoderBlock` argument.

    Call arguments:
        inputs: (B, T, d_model). padding_mask: (B, T). attention_mask: (B, T, T).
        return_hidden_states: also return each block's output (a list of N tensors (B, T, d_model)).
        return_attention_scores: also return each block's self-attention weights (N tensors (B, heads, T, T)).
        training: enables dropout.

    Returns:
        (B, T, d_model); or, when either ``return_*`` flag is set, a dict with "sequence_output" and the
        requested "hidden_states" / "attention_scores" lists.

    Example:
    >>> encoder = TransformerEncoder(num_layers=6, num_heads=8, intermediate_dim=2048)
    >>> memory = encoder(embeddings, padding_mask=source != 0)
    """

    block_class = TransformerEncoderBlock

    def build(self, inputs_shape=None):
        _check_sequence(inputs_shape, "inputs")
        for block in self.blocks:
            block.build(inputs_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(inputs_shape)

    def call(
        self, inputs, padding_mask=None, attention_mask=None, return_hidden_states=False,
        return_attention_scores=False, training=None,
    ):
        check_tensor(inputs, "inputs", _SEQUENCE)
        padding_mask, attention_mask = _check_encoder_masks(inputs, padding_mask, attention_mask)
        x, hidden_states, attention_scores = inputs, [], []
        for block in self.blocks:
            out = block(x, padding_mask=padding_mask, attention_mask=attention_mask,
                        return_attention_scores=return_attention_scores, training=training)
            if return_attention_scores:
                x, scores = out
                attention_scores.append(scores)
            else:
                x = out
            hidden_states.append(x)
        return self._finish(x, hidden_states, attention_scores, return_hidden_states, return_attention_scores)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)


@keras.saving.register_keras_serializable(package="attnlayers")
class TransformerDecoder(_Stack):
    """A stack of ``num_layers`` :class:`TransformerDecoderBlock` (no weight sharing), with per-layer caches.

    Args:
        num_layers: N.
        num_heads: as :class:`TransformerDecoderBlock`.
        intermediate_dim: as :class:`TransformerDecoderBlock`.
        **block_kwargs: any other :class:`TransformerDecoderBlock` argument.

    Call arguments:
        decoder_sequence: (B, T, d_model). encoder_sequence: (B, S, d_model) or None (decoder-only).
        decoder_padding_mask, decoder_attention_mask, encoder_padding_mask, encoder_attention_mask: as in
            the block.
        self_attention_cache: (B, N_layers, 2, S_max, heads, H), every layer's cache stacked on axis 1
            (keras-hub's GPT-2 layout). self_attention_cache_update_index: int or scalar tensor.
        cross_attention_cache: (B, N_layers, 2, S, heads, H); cross_attention_cache_update_index: 0 to fill
            it from the encoder sequence, None to use it as is.
        use_causal_mask, training: as in the block.
        return_hidden_states / return_attention_scores: as in :class:`TransformerEncoder` (the scores are
            per-layer dicts with "self_attention" and "cross_attention").

    Returns:
        (B, T, d_model), or a dict with "sequence_output" and whatever was requested: "hidden_states",
        "attention_scores", "self_attention_cache", "cross_attention_cache" (the updated caches).

    Example:
    >>> decoder = TransformerDecoder(num_layers=6, num_heads=8, intermediate_dim=2048)
    >>> y = decoder(target_embeddings, memory, encoder_padding_mask=source != 0)
    """

    block_class = TransformerDecoderBlock

    def build(self, decoder_sequence_shape=None, encoder_sequence_shape=None):
        _check_sequence(decoder_sequence_shape, "decoder_sequence")
        for block in self.blocks:
            block.build(decoder_sequence_shape, encoder_sequence_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(decoder_sequence_shape)

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
        return_hidden_states=False,
        return_attention_scores=False,
        training=None,
    ):
        for name, cache in (("self_attention_cache", self_attention_cache), ("cross_attention_cache", cross_attention_cache)):
            if cache is not None and (len(cache.shape) != 6 or cache.shape[1] not in (None, self.num_layers)):
                raise ValueError(
                    f"`{name}` must have shape (batch, num_layers={self.num_layers}, 2, length, heads, head_dim); "
                    f"received shape {tuple(cache.shape)}."
                )
        check_tensor(decoder_sequence, "decoder_sequence", _SEQUENCE)
        decoder_padding_mask, decoder_attention_mask, encoder_padding_mask, encoder_attention_mask = (
            _check_decoder_masks(
                decoder_sequence, encoder_sequence, decoder_padding_mask, decoder_attention_mask,
                encoder_padding_mask, encoder_attention_mask,
                self_length=None if self_attention_cache is None else self_attention_cache.shape[3],
                cross_length=None if cross_attention_cache is None else cross_attention_cache.shape[3],
            )
        )
        index = self_attention_cache_update_index
        single = self_attention_cache is not None and all(
            block.supports_single_step(
                decoder_sequence, self_attention_cache, index, decoder_padding_mask=decoder_padding_mask,
                decoder_attention_mask=decoder_attention_mask, return_attention_scores=return_attention_scores,
                training=training,
            )
            for block in self.blocks
        )
        if single:
            return self._single_step(
                decoder_sequence, self_attention_cache, index, return_hidden_states, encoder_sequence=encoder_sequence,
                encoder_padding_mask=encoder_padding_mask, encoder_attention_mask=encoder_attention_mask,
                cross_attention_cache=cross_attention_cache,
                cross_attention_cache_update_index=cross_attention_cache_update_index, training=training,
            )
        x, hidden_states, attention_scores = decoder_sequence, [], []
        self_caches, cross_caches = [], []
        for i, block in enumerate(self.blocks):
            out = block(
                x, encoder_sequence,
                decoder_padding_mask=decoder_padding_mask, decoder_attention_mask=decoder_attention_mask,
                encoder_padding_mask=encoder_padding_mask, encoder_attention_mask=encoder_attention_mask,
                self_attention_cache=None if self_attention_cache is None else self_attention_cache[:, i],
                self_attention_cache_update_index=self_attention_cache_update_index,
                cross_attention_cache=None if cross_attention_cache is None else cross_attention_cache[:, i],
                cross_attention_cache_update_index=cross_attention_cache_update_index,
                use_causal_mask=use_causal_mask, return_attention_scores=return_attention_scores,
                training=training,
            )
            out = DecoderBlockOutputs.unpack(
                out, self_attention_cache is not None, block.cross_attention is not None, return_attention_scores
            )
            x = out.outputs
            if self_attention_cache is not None:
                self_caches.append(out.self_attention_cache)
                if block.cross_attention is not None:
                    cross_caches.append(out.cross_attention_cache)
            if return_attention_scores:
                attention_scores.append(out.attention_scores)
            hidden_states.append(x)
        result = self._finish(x, hidden_states, attention_scores, return_hidden_states, return_attention_scores)
        if self_attention_cache is None:
            return result
        result = result if isinstance(result, dict) else {"sequence_output": result}
        result["self_attention_cache"] = ops.stack(self_caches, axis=1)
        if cross_caches:
            result["cross_attention_cache"] = ops.stack(cross_caches, axis=1)
        return result

    def _single_step(self, decoder_sequence, cache, index, return_hidden_states, *, cross_attention_cache=None,
                     **cross):
        """One new position through every block (T = 1, see ``TransformerDecoderBlock.supports_single_step``).

        Each block's self-attention reads only the prefix of its layer of the stacked cache up to the position,
        in place, instead of slicing, rewriting and restacking every layer's whole cache. Where writes are in
        place (XLA) each layer writes its new key and value before reading; elsewhere every write copies the
        cache, so the layers' new keys and values are attended beside the cache and written in one update at
        the end. Both compute the same attention.
        """
        write = kv_cache.updates_in_place(cache)
        x, hidden_states, entries, cross_caches = decoder_sequence, [], [], []
        for i, block in enumerate(self.blocks):
            out = block.single_step(
                x, cache, index, layer=i, write=write,
                cross_attention_cache=None if cross_attention_cache is None else cross_attention_cache[:, i], **cross,
            )
            x = out.outputs
            if write:
                cache = out.self_attention_cache
            else:
                entries.append(out.self_attention_cache)  # (B, 2, N_kv, H)
            if out.cross_attention_cache is not None:
                cross_caches.append(out.cross_attention_cache)
            hidden_states.append(x)
        result = self._finish(x, hidden_states, [], return_hidden_states, False)
        result = result if isinstance(result, dict) else {"sequence_output": result}
        if not write:  # one write for every layer: cache[:, :, :, index] = their keys and values
            cache = kv_cache.write_position(cache, ops.stack(entries, axis=1), index)
        result["self_attention_cache"] = cache
        if cross_caches:
            result["cross_attention_cache"] = ops.stack(cross_caches, axis=1)
        return result

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return tuple(decoder_sequence_shape)
