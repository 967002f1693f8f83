"""Position information for attention: absolute encodings added to the inputs (sinusoidal, learned),
rotations of queries and keys (rotary) and additive logit biases (T5 relative buckets, ALiBi).

Every layer takes ``start_index`` (a Python int or a scalar integer tensor): the absolute position of the
first element it is given, so cached decoding, which sees one token at a time, gets the right positions.

The two bias layers are called as ``bias(query, key, start_index=0)`` with query (B, T, ...) and key
(B, S, ...) tensors (only their lengths are read) and return a (1, N, T, S) bias for the attention logits;
query t sits at absolute position ``start_index + t`` and key s at position s. Pass them to
``attnlayers.MultiHeadAttention(position_bias=...)``, or compute a bias once and pass it to every layer as
``attention_bias=`` (T5 shares one bias across its stack).
"""

import math

import keras
import numpy as np
from keras import ops

from attnlayers.validation import check_feature_size, check_rank, check_tensor, is_int, positive_int, positive_number

__all__ = ["ALiBi", "PositionEmbedding", "RelativePositionBias", "RotaryEmbedding", "SinusoidalPositionEncoding",
           "alibi_slopes", "relative_position_bucket"]

_SEQUENCE = "(batch, length, dim)"


def _check_start_index(start_index):
    """Static check of ``start_index``: a Python int or a scalar tensor."""
    if is_int(start_index):
        return
    shape = getattr(start_index, "shape", None)
    if shape is None or len(shape) != 0:
        raise ValueError(
            f"`start_index` must be a Python int or a scalar integer tensor; received {start_index!r}."
        )


def _positions(length, start_index):
    """Absolute positions ``start_index + arange(length)`` as float32 (length,)."""
    return ops.arange(length, dtype="float32") + ops.cast(start_index, "float32")


@keras.saving.register_keras_serializable(package="attnlayers")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Fixed sinusoidal position encoding (Vaswani et al. 2017, section 3.5).

    ``PE(pos, 2i) = sin(pos / max_wavelength^(2i/d))`` and ``PE(pos, 2i+1) = cos(pos / max_wavelength^(2i/d))``:
    sines on the even features and cosines on the odd ones, interleaved exactly as the paper writes it (and as
    ``keras_hub.layers.SinePositionEncoding`` does). Values lie in [-1, 1].

    The layer **returns the encoding; it does not add it to its input** (keras-hub's convention): write
    ``x + SinusoidalPositionEncoding()(x)``.

    Args:
        max_wavelength: the base 10000 of the paper; wavelengths range from 2 pi to 2 pi * max_wavelength.

    Call arguments:
        inputs: (B, T, d) (or (T, d)); only the shape is used.
        start_index: position of the first element (int or scalar tensor), for cached decoding.

    Returns:
        The encoding, broadcast to the shape of ``inputs``: (B, T, d), in the compute dtype (computed in
        float32).

    Example:
    >>> x = keras.layers.Embedding(1000, 64)(token_ids)    # (B, T, 64)
    >>> x = x + SinusoidalPositionEncoding()(x)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = positive_number(max_wavelength, "max_wavelength")
        self.supports_masking = True  # position-wise: an implicit padding mask passes through
        self.built = True

    def call(self, inputs, start_index=0):
        check_tensor(inputs, "inputs", _SEQUENCE)
        check_rank(inputs.shape, (2, 3), "inputs", _SEQUENCE)
        _check_start_index(start_index)
        shape = ops.shape(inputs)
        length, dim = shape[-2], inputs.shape[-1]
        # Exponent 2i/d for both features 2i and 2i+1.
        exponent = ops.cast(2 * (ops.arange(dim) // 2), "float32") / float(dim)
        inverse_timescales = ops.power(float(self.max_wavelength), -exponent)  # (d,)
        angles = ops.expand_dims(_positions(length, start_index), -1) * inverse_timescales  # (T, d)
        is_even = ops.equal(ops.arange(dim) % 2, 0)
        encoding = ops.where(is_even, ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}


@keras.saving.register_keras_serializable(package="attnlayers")
class PositionEmbedding(keras.layers.Layer):
    """Learned absolute position embedding (as in BERT and GPT-2; keras-hub's ``PositionEmbedding``).

    A (sequence_length, d) table; positions ``start_index ... start_index + T - 1`` are looked up. Like
    :class:`SinusoidalPositionEncoding` it **returns the embedding** for the caller to add.

    Args:
        sequence_length: the longest sequence (number of rows of the table).
        initializer: initializer of the table (default "glorot_uniform").

    Call arguments:
        inputs: (B, T, d) (or (T, d)); only the shape is used.
        start_index: position of the first element (int or scalar tensor).

    Returns:
        (B, T, d): rows ``start_index : start_index + T`` of the table, broadcast to the input shape.

    Example:
    >>> x = keras.layers.Embedding(1000, 64)(token_ids)
    >>> x = x + PositionEmbedding(sequence_length=128)(x)
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = positive_int(sequence_length, "sequence_length")
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True  # position-wise: an implicit padding mask passes through

    def build(self, inputs_shape=None):
        check_tensor(inputs_shape, "inputs", _SEQUENCE)
        check_rank(inputs_shape, (2, 3), "inputs", _SEQUENCE)
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, inputs_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, start_index=0):
        check_tensor(inputs, "inputs", _SEQUENCE)
        check_rank(inputs.shape, (2, 3), "inputs", _SEQUENCE)
        check_feature_size(inputs.shape, self.embeddings.shape[-1], "inputs")
        _check_start_index(start_index)
        length = inputs.shape[-2]
        start = start_index if is_int(start_index) else None
        if start is not None and start < 0:
            raise ValueError(f"`start_index` must be >= 0; received {start_index}.")
        if length is not None and (length + (start or 0)) > self.sequence_length:
            raise ValueError(
                f"PositionEmbedding(sequence_length={self.sequence_length}) cannot embed positions "
                f"{start or 0}..{(start or 0) + length - 1} (start_index={start_index}, length {length}): "
                f"expected start_index + length <= {self.sequence_length}."
            )
        shape = ops.shape(inputs)
        table = ops.cast(self.embeddings, self.compute_dtype)
        rows = ops.slice(table, (ops.cast(start_index, "int32"), 0), (shape[-2], self.embeddings.shape[-1]))
        return ops.broadcast_to(rows, shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", eq. 34).

    Feature pairs of each head are rotated by the angle ``pos * theta_i`` with
    ``theta_i = max_wavelength^(-2i/H)``, i = 0 .. H/2 - 1, so that the dot product of a rotated query at
    position m and a rotated key at position n depends only on m - n.

    Which features form a pair is a layout choice (the two are the same rotation up to a fixed permutation
    of the head features, which the projections absorb):
    ``interleaved=False`` (default) pairs feature i with i + H/2, the "rotate half" layout of GPT-NeoX,
    LLaMA and ``keras_hub.layers.RotaryEmbedding`` (so their checkpoints port unchanged);
    ``interleaved=True`` pairs features (2i, 2i+1), as the RoFormer paper writes it.

    Args:
        max_wavelength: base of the frequencies (10000 in the paper).
        scaling_factor: positions are divided by it (linear position interpolation); 1 = none.
        interleaved: feature pairing, see above.

    Call arguments:
        inputs: (B, T, N, H) per-head queries or keys (or (B, T, H)); H must be even.
        start_index: position of the first element (int or scalar tensor); with a key/value cache, the
            cache update index.

    Returns:
        The rotated tensor, same shape and dtype as ``inputs``.

    Example:
    >>> rotary = RotaryEmbedding()
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, rotary=rotary)
    >>> q = rotary(q_heads, start_index=cache_update_index)   # or standalone on (B, T, N, H)
    """

    def __init__(self, max_wavelength=10000, scaling_factor=1.0, interleaved=False, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = positive_number(max_wavelength, "max_wavelength")
        self.scaling_factor = positive_number(scaling_factor, "scaling_factor")
        self.interleaved = bool(interleaved)
        self.supports_masking = True  # position-wise: an implicit padding mask passes through
        self.built = True

    def _angles(self, length, dim, start_index):
        """(T, H/2) angles pos * theta_i, float32."""
        inverse_frequency = ops.power(
            float(self.max_wavelength), -ops.arange(0, dim, 2, dtype="float32") / float(dim)
        )
        positions = _positions(length, start_index) / float(self.scaling_factor)
        return ops.expand_dims(positions, -1) * inverse_frequency

    def call(self, inputs, start_index=0):
        layout = "(batch, length, num_heads, head_dim) or (batch, length, dim)"
        check_tensor(inputs, "inputs", layout)
        check_rank(inputs.shape, (3, 4), "inputs", layout)
        _check_start_index(start_index)
        dim = inputs.shape[-1]
        if dim is None or dim % 2:
            raise ValueError(
                f"RotaryEmbedding rotates feature pairs, so the last axis of `inputs` must be even; "
                f"received shape {tuple(inputs.shape)}."
            )
        angles = self._angles(ops.shape(inputs)[1], dim, start_index)  # (T, H/2)
        if len(inputs.shape) == 4:  # broadcast over heads: (T, 1, H/2)
            angles = ops.expand_dims(angles, 1)
        cos = ops.cast(ops.cos(angles), inputs.dtype)
        sin = ops.cast(ops.sin(angles), inputs.dtype)
        # (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) for every pair.
        if self.interleaved:
            pairs = ops.reshape(inputs, ops.shape(inputs)[:-1] + (dim // 2, 2))
            x1, x2 = pairs[..., 0], pairs[..., 1]
            rotated = ops.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
            return ops.reshape(rotated, ops.shape(inputs))
        x1, x2 = inputs[..., : dim // 2], inputs[..., dim // 2 :]
        return ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "max_wavelength": self.max_wavelength,
            "scaling_factor": self.scaling_factor,
            "interleaved": self.interleaved,
        }


class _PositionBias(keras.layers.Layer):
    """Shared call plumbing of the (1, N, T, S) bias layers."""

    def __init__(self, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.supports_masking = True  # reads lengths only; padding is the attention layer's business

    def compute_mask(self, query, previous_mask=None):
        return None

    def _check_inputs(self, query, key, start_index):
        for name, x in (("query", query), ("key", key)):
            layout = f"(batch, {name}_length, ...)"
            check_tensor(x, name, layout)
            check_rank(x.shape, (3, 4), name, layout)
        _check_start_index(start_index)

    def _relative_positions(self, query, key, start_index):
        """(T, S) int32 matrix of key position - query position (T5's memory - context)."""
        self._check_inputs(query, key, start_index)
        query_positions = ops.arange(ops.shape(query)[1], dtype="int32") + ops.cast(start_index, "int32")
        key_positions = ops.arange(ops.shape(key)[1], dtype="int32")
        return ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 1)

    def compute_output_shape(self, query_shape, key_shape):
        return (1, self.num_heads, query_shape[1], key_shape[1])

    def compute_output_spec(self, query, key, start_index=0):
        return keras.KerasTensor(
            self.compute_output_shape(query.shape, key.shape), dtype=self.compute_dtype
        )

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads}


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's bucketing of relative positions (Raffel et al. 2020; ``_relative_position_bucket`` of the T5
    code), as keras.ops.

    ``relative_position`` = key position - query position. Bidirectional: half the buckets for keys
    before the query, half for keys after. Causal: every bucket for keys at or before the query (later keys
    share bucket 0). In each half, the first ``n/2`` distances get a bucket each; larger distances share
    logarithmically wider buckets up to ``max_distance``, beyond which all share the last bucket.

    Args:
        relative_position: integer tensor of key position - query position, any shape.
        bidirectional: whether keys after the query get buckets of their own.
        num_buckets: the number of buckets n.
        max_distance: the distance from which every position shares the last bucket.

    Returns:
        An integer tensor of bucket ids in [0, n), the shape of ``relative_position``.
    """
    n = -relative_position
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = ops.cast(n < 0, "int32") * num_buckets
        n = ops.abs(n)
    else:
        n = ops.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # log-spaced buckets for max_exact <= n < max_distance (n clipped to max_exact: no log(0) anywhere).
    scaled = ops.log(ops.cast(ops.maximum(n, max_exact), "float32") / max_exact)
    scaled = scaled / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = ops.minimum(max_exact + ops.cast(scaled, "int32"), num_buckets - 1)
    return offset + ops.where(is_small, n, large)


@keras.saving.register_keras_serializable(package="attnlayers")
class RelativePositionBias(_PositionBias):
    """Learned relative position bias in log-spaced buckets (T5; Raffel et al. 2020, section 2.1).

    ``bias[h, t, s] = b[bucket(s - (start_index + t)), h]`` for a learned (num_buckets, N) table ``b``; see
    :func:`relative_position_bucket`.

    Args:
        num_heads: N.
        num_buckets: number of buckets (32 in T5).
        max_distance: distances from here on share the last bucket (128 in T5).
        bidirectional: True for encoders (keys on both sides), False for causal decoders.
        embeddings_initializer: initializer of the table.

    Call arguments:
        query: (B, T, ...) tensor; only its length T is used.
        key: (B, S, ...) tensor; only its length S is used.
        start_index: absolute position of query 0 (int or scalar tensor); with a key/value cache, the cache
            update index.

    Returns:
        (1, N, T, S) bias to add to the attention logits, in the compute dtype.

    Example:
    >>> bias = RelativePositionBias(num_heads=8, bidirectional=False)
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, position_bias=bias)
    """

    def __init__(
        self,
        num_heads,
        num_buckets=32,
        max_distance=128,
        bidirectional=True,
        embeddings_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(num_heads, **kwargs)
        self.num_buckets = positive_int(num_buckets, "num_buckets")
        min_buckets = 4 if bidirectional else 2
        if self.num_buckets < min_buckets:
            raise ValueError(
                f"`num_buckets` must be >= {min_buckets} (bidirectional={bidirectional}); received {num_buckets}."
            )
        self.max_distance = positive_int(max_distance, "max_distance")
        exact = (self.num_buckets // 2 if bidirectional else self.num_buckets) // 2
        if self.max_distance <= exact:
            raise ValueError(
                f"`max_distance` must exceed the {exact} exactly-bucketed distances; received {max_distance}."
            )
        self.bidirectional = bool(bidirectional)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, query_shape=None, key_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.num_buckets, self.num_heads),
            initializer=self.embeddings_initializer,
        )

    def call(self, query, key, start_index=0):
        self._check_inputs(query, key, start_index)
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        # The (T, S) matrix only holds the T + S - 1 relative positions s - (start_index + t): bucket and
        # look those up once (a one-hot matmul, so the table gets a dense gradient), then spread them out.
        diagonal = ops.arange(key_length, dtype="int32") - ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)
        offsets = ops.arange(1 - query_length, key_length, dtype="int32")  # all values of s - t
        buckets = relative_position_bucket(
            offsets - ops.cast(start_index, "int32"), self.bidirectional, self.num_buckets, self.max_distance
        )
        table = ops.cast(self.embeddings, self.compute_dtype)
        per_offset = ops.matmul(ops.one_hot(buckets, self.num_buckets, dtype=self.compute_dtype), table)  # (T+S-1, N)
        bias = ops.take(per_offset, diagonal + query_length - 1, axis=0)  # (T, S, N)
        return ops.expand_dims(ops.transpose(bias, (2, 0, 1)), 0)

    def get_config(self):
        return {
            **super().get_config(),
            "num_buckets": self.num_buckets,
            "max_distance": self.max_distance,
            "bidirectional": self.bidirectional,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }


def alibi_slopes(num_heads, max_bias=8):
    """Per-head ALiBi slopes (Press et al. 2022, section 3 and their reference code).

    For N a power of two: the geometric sequence starting at ``2^(-max_bias/N)`` with that ratio (N = 8:
    1/2, 1/4, ..., 1/256). Otherwise the slopes of the closest smaller power of two 2^k, then every other
    slope of 2^(k+1) heads.

    Args:
        num_heads: N.
        max_bias: the exponent of the first slope's denominator for N = 8 (the paper's 8).

    Returns:
        A list of N floats, one slope per head.
    """

    def power_of_two(n):
        start = 2.0 ** (-max_bias / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest, max_bias)[0::2][: num_heads - closest]


@keras.saving.register_keras_serializable(package="attnlayers")
class ALiBi(_PositionBias):
    """Attention with Linear Biases (Press et al. 2022, "Train Short, Test Long").

    ``bias[h, t, s] = -m_h * |(start_index + t) - s|`` with the fixed slopes ``m_h`` of
    :func:`alibi_slopes`. Under a causal mask (every visible key has s <= t) this is exactly the paper's
    causal form ``-m_h (t - s)``; without one it is the symmetric bidirectional variant. Causality comes
    from the mask, not from this layer.

    Args:
        num_heads: N.
        max_bias: the 8 of the paper: slopes start at 2^(-max_bias/N).

    Call arguments:
        query: (B, T, ...) tensor; only its length T is used.
        key: (B, S, ...) tensor; only its length S is used.
        start_index: absolute position of query 0 (int or scalar tensor); with a cache, the update index.

    Returns:
        (1, N, T, S) bias to add to the attention logits, in the compute dtype.

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64, position_bias=ALiBi(num_heads=8))
    >>> y = attention(x, x, use_causal_mask=True)
    """

    def __init__(self, num_heads, max_bias=8, **kwargs):
        super().__init__(num_heads, **kwargs)
        self.max_bias = positive_number(max_bias, "max_bias")
        self.built = True

    def call(self, query, key, start_index=0):
        distance = ops.abs(ops.cast(self._relative_positions(query, key, start_index), "float32"))
        slopes = np.asarray(alibi_slopes(self.num_heads, self.max_bias), dtype="float32")[:, None, None]
        return ops.cast(ops.expand_dims(-slopes * distance, 0), self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "max_bias": self.max_bias}
