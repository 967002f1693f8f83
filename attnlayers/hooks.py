"""The per-head hooks of :class:`~attnlayers.multi_head.MultiHeadAttention`: its score (``attnlayers.scoring``),
a rotary embedding applied to queries and keys at their absolute positions (Su et al. 2021), and an additive
position bias on the logits (relative position buckets, Raffel et al. 2020; ALiBi, Press et al. 2022):

    logits = score(R_start Q, R_0 K) + bias(Q, K, start) + attention_bias                  (eq. 1 with hooks)
"""

import math

import keras
from keras import ops

from attnlayers import masking
from attnlayers.scoring import DotScore, ScaledDotScore


__all__ = ["Hooks", "dot_scale"]


def _deserialize_layer(layer, name):
    if layer is None or isinstance(layer, keras.layers.Layer):
        return layer
    if isinstance(layer, dict):
        return keras.saving.deserialize_keras_object(layer)
    raise ValueError(f"`{name}` must be a Keras layer, its serialized config or None; received {layer!r}.")


def _serialize_layer(layer):
    return None if layer is None else keras.saving.serialize_keras_object(layer)


def dot_scale(scorer, key_dim):
    """The factor of Q K^T where ``scorer`` is the dot (1) or scaled dot (its scale, default 1 / sqrt(d_k), eq. 1)
    score, which run as one einsum over all heads; None for any other score. Exact types only, since a subclass
    may override ``score``."""
    if type(scorer) is DotScore:
        return 1.0
    if type(scorer) is ScaledDotScore:
        return scorer.scale if scorer.scale is not None else 1.0 / math.sqrt(key_dim)
    return None


class Hooks:
    """Holds a layer's hook layers. Keras does not track a plain object's attributes, so the layer tracks them
    itself after its projections: ``get_weights()`` starts with exactly keras' weights, in keras' order.

    Args:
        scorer: a ``Score`` layer. rotary, position_bias: layers, their serialized configs, or None.
    """

    def __init__(self, scorer, rotary, position_bias):
        self.scorer = scorer
        self.rotary = _deserialize_layer(rotary, "rotary")
        self.position_bias = _deserialize_layer(position_bias, "position_bias")

    def build(self, query_shape, key_shape, num_heads, num_key_value_heads, key_dim):
        """Builds the hooks for (B, T, D) queries and (B, S, D) keys of a layer with these heads; refuses a
        ``position_bias`` of another number of heads. The scorer is built even where the fused dot / scaled-dot
        path never calls it (weightless): an unbuilt sublayer makes Keras trace the whole model again before every
        train_on_batch / test_on_batch / predict_on_batch."""
        n, h = num_heads, key_dim
        head_query = (query_shape[0], query_shape[1], n, h)
        head_key = (key_shape[0], key_shape[1], num_key_value_heads, h)
        if not self.scorer.built:
            self.scorer.build((None, query_shape[1], h), (None, key_shape[1], h))
        if self.rotary is not None and not self.rotary.built:
            self.rotary.build(head_query)
        if self.position_bias is not None:
            bias_heads = getattr(self.position_bias, "num_heads", n)
            if bias_heads != n:
                raise ValueError(
                    f"`position_bias` must produce one bias per query head: expected num_heads={n}; "
                    f"received a layer with num_heads={bias_heads}."
                )
            if not self.position_bias.built:
                self.position_bias.build(head_query, head_key)

    def rotate(self, x, start_index):
        """(B, L, N, H) heads rotated at positions start_index + l, in their dtype (unchanged without ``rotary``)."""
        if self.rotary is None:
            return x
        return ops.cast(self.rotary(x, start_index=start_index), x.dtype)

    def bias(self, query, key, start_index, attention_bias=None):
        """The additive logit bias of a call: the ``position_bias`` hook at ``start_index`` plus the
        ``attention_bias`` argument, (1 or B, N or 1, T, S) float32, or None when there is neither.

        Under mixed_float16 Keras casts the ``attention_bias`` argument to float16, where -1e9 is -inf (and
        a row of -inf softmaxes to NaN): infinite entries are clamped to a finite large negative.
        """
        biases = []
        if self.position_bias is not None:
            biases.append(self.position_bias(query, key, start_index=start_index))
        if attention_bias is not None:
            biases.append(attention_bias)
        if not biases:
            return None
        total = ops.cast(biases[0], "float32")
        for bias in biases[1:]:
            total = total + ops.cast(bias, "float32")
        return ops.maximum(total, masking.large_negative("float32"))

    def get_config(self):
        """The serialized ``rotary`` and ``position_bias`` (the score is the layer's own argument)."""
        return {"rotary": _serialize_layer(self.rotary), "position_bias": _serialize_layer(self.position_bias)}
