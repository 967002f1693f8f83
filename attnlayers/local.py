"""Local attention (Luong et al. 2015, section 3.2): attend to a window [p_t - D, p_t + D] of the source."""

import keras
from keras import ops

from attnlayers import masking
from attnlayers.attention import Attention
from attnlayers.scoring import dense_last_axis
from attnlayers.validation import one_of, positive_int

_MODES = {"local-m": "local-m", "monotonic": "local-m", "local-p": "local-p", "predictive": "local-p"}


@keras.saving.register_keras_serializable(package="attnlayers")
class LocalAttention(Attention):
    """Luong et al. (2015) local attention, over any score function.

    - local-m (monotonic): the aligned position is p_t = t (eq. 9's alternative, sec. 3.2); ``start_index``
      (``index`` in :meth:`attend_step`) is the position of query 0 when decoding step by step.
    - local-p (predictive): p_t = L * sigmoid(v_p^T tanh(W_p h_t)) (eq. 9), where L is the last valid source
      index of each sequence (its length - 1, so p_t covers exactly the real tokens; the paper's S with
      0-based positions), and the weights are multiplied by a Gaussian centred at p_t,
      a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2 (eq. 10).

    The window [p_t - D, p_t + D] is a mask combined with padding, causal and explicit masks, so it is clipped
    at both sequence ends and never reaches padding; the softmax is taken over the visible part of the
    window. A query whose window holds no valid key gets zero weights and a zero context. local-p weights do
    not sum to 1 (the Gaussian rescales them), as in the paper.
    The logits are computed for all (t, s) pairs and masked, so cost is O(T * S) like global attention; the
    layer's value is the alignment prior, not speed.

    Args:
        window: D, the half-width (a positive int); the window holds 2D + 1 positions.
        mode: "local-p" / "predictive" (default) or "local-m" / "monotonic".
        score: any score (default "general", Luong's choice for local-p).
        units: width of W_p for local-p (default: the query dim).
        dropout, seed: dropout on the weights.

    Call arguments:
        As ``Attention.call``, plus ``start_index`` (int or scalar tensor): the position of query 0, for
        local-m when decoding one step at a time. ``attend_step(query, memory, index)`` takes it as ``index``.

    Returns:
        context (B, T, Dv) (or (B, Dv) for a (B, Dq) query) and, if requested, weights (B, T, S) (or (B, S)).

    Example:
    >>> attention = LocalAttention(window=2, mode="local-p", score="general")
    >>> context, weights = attention(decoder_states, encoder_states, value_mask=source_mask,
    ...                              return_attention_scores=True)
    """

    def __init__(self, window, mode="local-p", score="general", units=None, dropout=0.0, seed=None, **kwargs):
        super().__init__(score=score, dropout=dropout, seed=seed, **kwargs)
        self.window = positive_int(window, "window", what="the half-width D of the window")
        self.mode = _MODES[one_of(mode, "mode", sorted(_MODES))]
        self.units = positive_int(units, "units", allow_none=True)

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        if self.mode == "local-p":
            units = self.units or query_shape[-1]
            # W_p and v_p of eq. 9 (no biases, as in the paper).
            self.position_dense = keras.layers.Dense(
                units, use_bias=False, activation="tanh", name="position_dense", dtype=self.dtype_policy
            )
            self.position_dense.build(query_shape)
            self.position_v = self.add_weight(name="position_v", shape=(units,), initializer="glorot_uniform")

    def aligned_positions(self, query, value_mask, source_length, start_index=0):
        """The aligned positions p_t.

        Args:
            query: (B, T, Dq) queries h_t.
            value_mask: (B, S) boolean padding mask of the source, or None.
            source_length: S (int or scalar tensor).
            start_index: position of query 0 (local-m; None = 0).

        Returns:
            p_t, float32 (1, T, 1) for local-m (p_t = start_index + t), (B, T, 1) for local-p (eq. 9).
        """
        if self.mode == "local-m":
            start = 0 if start_index is None else start_index
            t = ops.arange(ops.shape(query)[1], dtype="float32") + ops.cast(start, "float32")
            return t[None, :, None]
        if value_mask is None:
            last = ops.cast(source_length - 1, "float32")
        else:
            last = ops.maximum(ops.sum(ops.cast(value_mask, "float32"), axis=-1, keepdims=True) - 1.0, 0.0)
            last = last[:, :, None]  # (B, 1, 1)
        hidden = dense_last_axis(self.position_dense, query)
        gate = ops.einsum("btu,u->bt", ops.cast(hidden, "float32"), ops.cast(self.position_v, "float32"))
        return last * ops.sigmoid(gate)[..., None]  # eq. 9

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        source_length = ops.shape(logits)[-1]
        p = self.aligned_positions(query, value_mask, source_length, index)
        s = ops.arange(source_length, dtype="float32")[None, None, :]
        in_window = ops.abs(s - p) <= float(self.window)
        weights = masking.masked_softmax(logits, masking.combine_masks(mask, in_window))
        if self.mode == "local-p":
            sigma = self.window / 2.0
            gaussian = ops.exp(-ops.square(s - p) / (2.0 * sigma**2))  # eq. 10
            weights = ops.cast(ops.cast(weights, "float32") * gaussian, weights.dtype)
        return weights

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        start_index=0,
    ):
        return self._attend(
            query, value, key, query_mask, value_mask, attention_mask, use_causal_mask,
            return_attention_scores, training, index=start_index,
        )

    def get_config(self):
        return {**super().get_config(), "window": self.window, "mode": self.mode, "units": self.units}
