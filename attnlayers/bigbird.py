"""BigBird block-sparse attention (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences"), the ITC
construction: the sequence is cut into blocks of b positions; query block i attends

    its sliding window  blocks i - 1, i, i + 1                               (w = 3 blocks)
    the global blocks   0 .. g - 1, which also attend every block           (ITC: existing tokens made global)
    r random blocks     drawn once from a seed, so the pattern is fixed per layer

and each query block runs one softmax over the keys it gathers, O(T (3 + g + r) b) rather than O(T S).
"""

import keras
import numpy as np
from keras import ops

from attnlayers import masking
from attnlayers.multi_head import AttentionOutputs, MultiHeadAttention
from attnlayers.validation import format_shape, non_negative_int, positive_int, reject_arguments


__all__ = ["BigBirdAttention", "bigbird_mask", "bigbird_pattern"]


def bigbird_pattern(num_blocks, num_global_blocks, num_random_blocks, seed):
    """The key blocks each non-global query block attends.

    Query block i (g <= i < ``num_blocks``) gathers, in this order, the global blocks 0 .. g - 1, its window
    i - 1, i, i + 1 and ``num_random_blocks`` random blocks. The random blocks are drawn without replacement
    from the blocks that are neither global nor in the window, with ``np.random.default_rng(seed)`` (query
    blocks in order); when fewer exist, every one of them is taken and the rest of the slots repeat block i.
    A slot that repeats an earlier one or lies outside the sequence (the window of the first or last block) is
    marked invalid, so no key is attended twice.

    Args:
        num_blocks: number of blocks of the (padded) sequence.
        num_global_blocks: g (at most ``num_blocks`` are global).
        num_random_blocks: r.
        seed: int seed of the random blocks.

    Returns:
        ``(blocks, valid)``: int32 and bool NumPy arrays (num_blocks - g, g + 3 + r), the key block of each
        slot (clipped into range) and whether the slot counts.
    """
    g = min(num_global_blocks, num_blocks)
    rng = np.random.default_rng(seed)
    blocks, valid = [], []
    for i in range(g, num_blocks):
        window = [i - 1, i, i + 1]
        candidates = [j for j in range(g, num_blocks) if j not in window]
        if len(candidates) >= num_random_blocks:
            random_blocks = sorted(rng.choice(candidates, num_random_blocks, replace=False).tolist())
        else:
            random_blocks = candidates + [i] * (num_random_blocks - len(candidates))
        row = list(range(num_global_blocks)) + window + random_blocks
        seen = set()
        row_valid = []
        for j in row:
            row_valid.append(0 <= j < num_blocks and j not in seen)
            seen.add(j)
        blocks.append([min(max(j, 0), num_blocks - 1) for j in row])
        valid.append(row_valid)
    slots = num_global_blocks + 3 + num_random_blocks
    return (np.asarray(blocks, "int32").reshape(-1, slots), np.asarray(valid, bool).reshape(-1, slots))


def bigbird_mask(length, block_size, num_global_blocks, num_random_blocks, seed):
    """The dense (T, T) boolean mask (True = may attend) of the pattern :class:`BigBirdAttention` computes
    blocked, for a self-attention over ``length`` positions (the last block is partial when ``block_size``
    does not divide ``length``: the pattern of the padded sequence, cropped). O(T^2): for tests and plots.

    ``MultiHeadAttention(...)(x, x, attention_mask=bigbird_mask(...)[None])`` computes what
    ``BigBirdAttention`` computes, with the same weights.

    Args:
        length: T, the number of positions.
        block_size: positions per block.
        num_global_blocks: blocks at the start that attend and are attended everywhere.
        num_random_blocks: random key blocks per query block.
        seed: the seed of the random blocks (the layer's ``pattern_seed``).

    Returns:
        A (T, T) boolean NumPy array.
    """
    length = positive_int(length, "length")
    block_size = positive_int(block_size, "block_size")
    num_blocks = -(-length // block_size)
    g = min(non_negative_int(num_global_blocks, "num_global_blocks"), num_blocks)
    blocks, valid = bigbird_pattern(num_blocks, g, non_negative_int(num_random_blocks, "num_random_blocks"), seed)
    block_mask = np.zeros((num_blocks, num_blocks), bool)
    block_mask[:g] = True  # global queries attend everything
    for row, (keys, counts) in enumerate(zip(blocks, valid)):
        block_mask[g + row, keys[counts]] = True
    dense = np.repeat(np.repeat(block_mask, block_size, axis=0), block_size, axis=1)
    return dense[:length, :length]


@keras.saving.register_keras_serializable(package="attnlayers")
class BigBirdAttention(MultiHeadAttention):
    """BigBird block-sparse self-attention (Zaheer et al. 2020), ITC construction, computed blocked.

    The T positions are cut into blocks of ``block_size`` (b). The first ``num_global_blocks`` (g) blocks
    are global: their queries attend all T keys and every query attends them. Every other query block i
    attends its window (blocks i - 1, i, i + 1), the global blocks and ``num_random_blocks`` (r) random
    blocks drawn once from ``pattern_seed`` (see :func:`bigbird_pattern`; one pattern for all heads and all
    batch rows). Each such query block gathers those (g + 3 + r) b keys and values and runs one softmax over
    them (Vaswani et al. 2017, eq. 1, restricted to the gathered keys); a key gathered twice (a random or
    window block that is also global, the window edges) is masked in its later slot. Memory and work are
    O(T (g + 3 + r) b) for the sparse rows plus O(g b T) for the global rows, against O(T^2) dense.
    :func:`bigbird_mask` gives the equivalent dense (T, T) mask: the layer equals :class:`MultiHeadAttention`
    with the same weights and ``attention_mask=bigbird_mask(...)``.

    A length that ``block_size`` does not divide is padded internally to the next multiple (padded keys are
    masked, padded queries dropped); the length must be static. Only self-attention shapes (T == S; ``query``
    and ``value`` may be different tensors) and the dot / scaled-dot scores are supported.

    ``use_causal_mask=True`` combines the pattern with the causal rule (query t sees keys s <= t of its
    pattern: the dense equivalent is ``bigbird_mask(...) & tril``; random blocks in the future are then
    masked, so a decoder sees fewer random keys). This is not part of the paper's ITC encoder design.

    Args:
        num_heads: N, as :class:`MultiHeadAttention`.
        key_dim: H, as :class:`MultiHeadAttention`.
        **kwargs: the other arguments of :class:`MultiHeadAttention` (value_dim, dropout, use_bias,
            output_shape, use_gate, num_key_value_heads, rotary, initializers, ...), except ``sliding_window``
            and ``position_bias`` (dense (T, S) biases), and with ``score`` "dot" or "scaled_dot" (a
            ``DotScore`` / ``ScaledDotScore``).
        block_size: b, positions per block (the paper's BigBird-ITC base: 64).
        num_global_blocks: g >= 0, the leading blocks made global (paper: 2 blocks of global tokens).
        num_random_blocks: r >= 0, random key blocks per query block (paper: 3).
        pattern_seed: int seed of the random blocks; None draws one from NumPy's global generator (seeded
            by ``keras.utils.set_random_seed``). It is stored in the config, so a reloaded layer keeps its
            pattern.

    Call arguments:
        query: (B, T, D_q).
        value: (B, T, D_v) (the same length: self-attention).
        key: (B, T, D_k); defaults to ``value``.
        query_mask: (B, T) boolean padding of the queries; padded queries get a zero output.
        value_mask, key_mask: (B, T) boolean padding of the keys/values; a query with no visible key (e.g.
            every key padded) gets a zero output.
        return_attention_scores: also return the weights, scattered into a dense (B, N, T, T) tensor (the
            only O(T^2) tensor the layer builds, and only on request).
        training: enables dropout on the weights.
        use_causal_mask: combine the pattern with the causal rule (see above).
        attention_mask, cache, cache_update_index, attention_bias: accepted for the signature of
            :class:`MultiHeadAttention`; anything but their defaults raises a ValueError.

    Returns:
        ``output`` (B, T, D) (or (B, T) + ``output_shape``); with ``return_attention_scores``,
        ``(output, scores)``, ``scores`` the applied weights (B, N, T, T), 0 outside the pattern.

    Example:
    >>> attention = BigBirdAttention(num_heads=8, key_dim=64, block_size=64, num_global_blocks=2,
    ...                              num_random_blocks=3, pattern_seed=0)
    >>> y = attention(x, x, value_mask=padding)                     # x (B, 4096, 512) -> y (B, 4096, 512)
    >>> mask = bigbird_mask(4096, 64, 2, 3, seed=0)                 # the dense (4096, 4096) equivalent
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        *,
        block_size=64,
        num_global_blocks=2,
        num_random_blocks=3,
        pattern_seed=None,
        **kwargs,
    ):
        reject_arguments("BigBirdAttention", kwargs, ("sliding_window", "position_bias"),
                         "its attention pattern is fixed by block_size, num_global_blocks and num_random_blocks")
        reject_arguments("BigBirdAttention", kwargs, ("flash_attention", "memory_efficient"),
                         "MultiHeadAttention's dense memory-efficient path is not used, its block-sparse attention "
                         "is already O(T (g + 3 + r) b)", flags=True)
        if kwargs.get("implementation", "auto") not in ("auto", "exact"):
            raise ValueError(f"BigBirdAttention computes its own attention: `implementation` must be 'auto' or 'exact'; "
                             f"received implementation={kwargs['implementation']!r}.")
        super().__init__(num_heads, key_dim, **kwargs)
        if self._fused_scale is None:
            raise ValueError(
                "BigBirdAttention computes dot-product scores block by block: `score` must be 'dot' or "
                f"'scaled_dot' (or a DotScore / ScaledDotScore); received score={self._score_identifier!r}."
            )
        self._block_size = positive_int(block_size, "block_size")
        self._num_global_blocks = non_negative_int(num_global_blocks, "num_global_blocks")
        self._num_random_blocks = non_negative_int(num_random_blocks, "num_random_blocks")
        if pattern_seed is None:
            pattern_seed = int(np.random.randint(0, 2**31 - 1))
        elif not isinstance(pattern_seed, (int, np.integer)) or isinstance(pattern_seed, bool) or pattern_seed < 0:
            raise ValueError(f"`pattern_seed` must be None or an integer >= 0; received pattern_seed={pattern_seed!r}.")
        self._pattern_seed = int(pattern_seed)
        self._patterns = {}  # number of blocks -> static NumPy arrays of the pattern

    block_size = property(lambda self: self._block_size)
    num_global_blocks = property(lambda self: self._num_global_blocks)
    num_random_blocks = property(lambda self: self._num_random_blocks)
    pattern_seed = property(lambda self: self._pattern_seed)

    def attention_mask(self, length):
        """The dense (T, T) NumPy mask of this layer's pattern for sequences of ``length`` (:func:`bigbird_mask`).

        Args:
            length: T, the sequence length.

        Returns:
            A boolean NumPy array (T, T), True where a query may attend to a key.
        """
        return bigbird_mask(length, self._block_size, self._num_global_blocks, self._num_random_blocks,
                            self._pattern_seed)

    # ------------------------------------------------------------------------------------------------
    # Checks

    def _check_self_attention(self, query_shape, value_shape):
        if query_shape[1] is None or not query_shape[1] == value_shape[1]:
            raise ValueError(
                "BigBirdAttention is self-attention over a static length: `query` and `value` must have the "
                f"same, known length (T == S); received query shape {format_shape(query_shape)} and value "
                f"shape {format_shape(value_shape)}."
            )

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        self._check_self_attention(query_shape, value_shape)

    def _check_unsupported(self, attention_mask, cache, cache_update_index, attention_bias):
        if attention_mask is not None:
            raise ValueError(
                "BigBirdAttention's (query, key) pattern is its own: pass padding with `query_mask` / "
                f"`value_mask` instead of an `attention_mask`; received attention_mask of shape "
                f"{format_shape(attention_mask.shape)}, expected None. (MultiHeadAttention with "
                f"attention_mask=bigbird_mask(...) computes the same attention densely.)"
            )
        if attention_bias is not None:
            raise ValueError(
                "BigBirdAttention does not add a dense `attention_bias` (it never forms the (T, S) logits); "
                f"received attention_bias of shape {format_shape(attention_bias.shape)}, expected None."
            )
        if cache is not None or cache_update_index is not None:
            raise ValueError(
                "BigBirdAttention has no key/value cache (the ITC pattern is an encoder's); received "
                f"cache={'a tensor' if cache is not None else None}, cache_update_index={cache_update_index!r}; "
                "expected None for both."
            )

    # ------------------------------------------------------------------------------------------------
    # Attention

    def _pattern(self, num_blocks, use_causal_mask):
        """Static NumPy arrays of the pattern for ``num_blocks`` blocks (cached): the gathered key blocks
        (Q, M) of the Q = num_blocks - g non-global query blocks, the mask (Q, b or 1, M b) of their slots
        (valid slots, and the causal rule), the causal mask (g b, L) of the global rows (or None), and the
        one-hot (Q, M, num_blocks) placing the slots back (for the dense scores)."""
        cache_key = (num_blocks, bool(use_causal_mask))
        if cache_key not in self._patterns:
            b = self._block_size
            g = min(self._num_global_blocks, num_blocks)
            blocks, valid = bigbird_pattern(num_blocks, g, self._num_random_blocks, self._pattern_seed)
            slot_mask = np.repeat(valid, b, axis=1)[:, None, :]  # (Q, 1, M b)
            global_causal = None
            if use_causal_mask:
                query_position = (g + np.arange(len(blocks)))[:, None, None] * b + np.arange(b)[None, :, None]
                key_position = (blocks[:, :, None] * b + np.arange(b)).reshape(len(blocks), 1, -1)
                slot_mask = slot_mask & (key_position <= query_position)  # (Q, b, M b)
                global_causal = np.tril(np.ones((g * b, num_blocks * b), bool))
            one_hot = (blocks[:, :, None] == np.arange(num_blocks)) & valid[:, :, None]  # (Q, M, num_blocks)
            self._patterns[cache_key] = (blocks, slot_mask, global_causal, one_hot)
        return self._patterns[cache_key]

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        attention_bias=None,
    ):
        self._check_unsupported(attention_mask, cache, cache_update_index, attention_bias)
        key = value if key is None else key
        self._check_inputs(query, value, key, None, None, None)
        self._check_self_attention(query.shape, value.shape)
        # Q W^Q, K W^K, V W^V for all heads: (B, L, D) -> (B, L, N, H).
        fused = self._fused_self_projections(query, value, key)
        q = self._query_dense(query) if fused is None else fused[0]
        k = self._key_dense(key) if fused is None else fused[1]
        v = self._value_dense(value) if fused is None else fused[2]
        q, k = self._rotate(q, 0), self._rotate(k, 0)

        batch, length = query.shape[0], query.shape[1]
        query_mask = masking.check_mask(query_mask, "query_mask", (batch, length))
        key_padding = self._key_side_mask(value_mask, key_mask, batch, length, False)
        heads, scores, visible = self._block_sparse_attention(
            q, k, v, query_mask, key_padding, use_causal_mask, training, return_attention_scores
        )
        if self._use_gate:
            heads = heads * self._gate_dense(query)
        output = self._output_dense(heads)  # Concat(head_1, ..., head_N) W^O
        # A query with nothing visible outputs 0 (not the output bias).
        visible = ops.reshape(visible, ops.shape(visible) + (1,) * (len(output.shape) - 2))
        output = ops.where(visible, output, ops.zeros_like(output))
        return AttentionOutputs(output, scores, None).pack(return_attention_scores)

    def _block_sparse_attention(self, q, k, v, query_mask, key_padding, causal, training, return_scores):
        """softmax(Q K^T / sqrt(d_k)) V (eq. 1) restricted to the BigBird pattern, block by block.

        Args:
            q: (B, L, N, H); k: (B, L, N_kv, H); v: (B, L, N_kv, Hv).
            query_mask: (B or 1, L) or None; key_padding: (B or 1, L) or None.
            causal: combine the pattern with the causal rule.

        Returns:
            ``(heads (B, L, N, Hv), scores (B, N, L, L) or None, visible (B, L))``: ``visible`` says which
            queries see at least one key.
        """
        b, n, n_kv = self._block_size, self._num_heads, self.num_key_value_heads
        groups, h, hv = n // n_kv, self._key_dim, self._value_dim
        length = q.shape[1]
        num_blocks = -(-length // b)
        padded = num_blocks * b
        batch = ops.shape(q)[0]
        g = min(self._num_global_blocks, num_blocks)
        blocks, slot_mask, global_causal, one_hot = self._pattern(num_blocks, causal)
        num_sparse, slots = blocks.shape

        if padded != length:  # pad to whole blocks; the padded keys are masked, the padded queries dropped
            pad = [[0, 0], [0, padded - length], [0, 0], [0, 0]]
            q, k, v = ops.pad(q, pad), ops.pad(k, pad), ops.pad(v, pad)
            if key_padding is None:
                key_padding = ops.ones((1, length), "bool")
            key_padding = ops.pad(key_padding, [[0, 0], [0, padded - length]], constant_values=False)
            if query_mask is not None:
                query_mask = ops.pad(query_mask, [[0, 0], [0, padded - length]], constant_values=False)
        # Q / sqrt(d_k) (eq. 1), queries grouped by key/value head: (B, L, N_kv, G, H).
        q = ops.reshape(q * ops.cast(self._fused_scale, q.dtype), (batch, padded, n_kv, groups, h))
        heads, scores, visible = [], [], []

        if g:  # global query blocks: every key, (B, N_kv, G, g b, L) logits
            logits = ops.einsum("btkgh,bskh->bkgts", q[:, : g * b], k)
            logits = ops.reshape(logits, (batch, n, g * b, padded))  # heads merged: softmax takes rank <= 5
            mask = masking.combine_masks(
                None if key_padding is None else key_padding[:, None, None, :],
                None if query_mask is None else query_mask[:, None, : g * b, None],
                None if global_causal is None else global_causal[None, None],
            )
            weights = self._softmax(logits, mask, training)
            grouped = ops.reshape(weights, (batch, n_kv, groups, g * b, padded))
            heads.append(ops.reshape(ops.einsum("bkgts,bskh->btkgh", grouped, v), (batch, g * b, n, hv)))
            scores.append(weights)
            visible.append(self._visible(mask, (batch, 1, g * b, padded), (batch, g * b)))

        if num_sparse:  # the other query blocks: gather the (g + 3 + r) key blocks of each
            flat = ops.convert_to_tensor(blocks.reshape(-1))

            def gather(x):  # (B, L, N_kv, H) -> (B, Q, M b, N_kv, H)
                x = ops.take(ops.reshape(x, (batch, num_blocks, b) + tuple(x.shape[2:])), flat, axis=1)
                return ops.reshape(x, (batch, num_sparse, slots * b) + tuple(x.shape[3:]))

            query_blocks = ops.reshape(q[:, g * b :], (batch, num_sparse, b, n_kv, groups, h))
            # Query blocks lead (batched matmuls over (B, Q, N_kv)); heads merged since softmax takes rank <= 5.
            logits = ops.einsum("bqtkgh,bqskh->bqkgts", query_blocks, gather(k))  # (B, Q, N_kv, G, b, M b)
            logits = ops.reshape(logits, (batch, num_sparse, n, b, slots * b))
            key_side = None
            if key_padding is not None:
                key_side = ops.take(ops.reshape(key_padding, (-1, num_blocks, b)), flat, axis=1)
                key_side = ops.reshape(key_side, (-1, num_sparse, 1, 1, slots * b))
            query_side = None
            if query_mask is not None:
                query_side = ops.reshape(query_mask[:, g * b :], (-1, num_sparse, 1, b, 1))
            mask = masking.combine_masks(ops.convert_to_tensor(slot_mask)[None, :, None], key_side, query_side)
            weights = self._softmax(logits, mask, training)  # (B, Q, N, b, M b)
            grouped = ops.reshape(weights, (batch, num_sparse, n_kv, groups, b, slots * b))
            sparse_heads = ops.einsum("bqkgts,bqskh->bqtkgh", grouped, gather(v))
            heads.append(ops.reshape(sparse_heads, (batch, num_sparse * b, n, hv)))
            if return_scores:  # scatter the slots back to their key positions: (B, N, Q b, L)
                weights = ops.reshape(weights, (batch, num_sparse, n, b, slots, b))
                dense = ops.einsum("bqntmc,qmk->bnqtkc", weights, ops.cast(one_hot, weights.dtype))
                scores.append(ops.reshape(dense, (batch, n, num_sparse * b, padded)))
            visible.append(self._visible(mask, (batch, num_sparse, 1, b, slots * b), (batch, num_sparse * b)))

        heads = ops.concatenate(heads, axis=1) if len(heads) > 1 else heads[0]
        visible = ops.concatenate(visible, axis=1) if len(visible) > 1 else visible[0]
        dense_scores = None
        if return_scores:
            dense_scores = ops.concatenate(scores, axis=2) if len(scores) > 1 else scores[0]
            dense_scores = dense_scores[:, :, :length, :length]
        return heads[:, :length], dense_scores, visible[:, :length]

    def _softmax(self, logits, mask, training):
        # softmax over the gathered keys (eq. 1), in float32 under mixed precision; no visible key -> weights 0.
        weights = ops.cast(masking.masked_softmax(logits, mask), self.compute_dtype)
        if self._dropout_layer is not None:
            weights = self._dropout_layer(weights, training=training)
        return weights

    @staticmethod
    def _visible(mask, shape, out_shape):
        """(B, queries): whether each query of ``mask`` (broadcastable to ``shape``, keys last) sees a key."""
        if mask is None:
            return ops.ones(out_shape, "bool")
        return ops.reshape(ops.any(ops.broadcast_to(mask, shape), axis=-1), out_shape)

    def compute_output_spec(self, query, value, key=None, return_attention_scores=False, **kwargs):
        def spec(shape):
            return keras.KerasTensor(tuple(shape), dtype=self.compute_dtype)

        return AttentionOutputs(
            spec(self.compute_output_shape(query.shape, value.shape)),
            spec((query.shape[0], self._num_heads, query.shape[1], value.shape[1])),
            None,
        ).pack(return_attention_scores)

    def get_config(self):
        config = super().get_config()
        for name in ("sliding_window", "position_bias"):  # always None here
            config.pop(name)
        return {
            **config,
            "block_size": self._block_size,
            "num_global_blocks": self._num_global_blocks,
            "num_random_blocks": self._num_random_blocks,
            "pattern_seed": self._pattern_seed,
        }
