"""Local attention (Luong et al. 2015, section 3.2): attend to a window [p_t - D, p_t + D] of the source."""

import keras
from keras import ops

from attnlayers import masking
from attnlayers.attention import Attention
from attnlayers.scoring import LocationScore, dense_last_axis
from attnlayers.validation import one_of, positive_int

__all__ = ["LocalAttention"]

_MODES = {"local-m": "local-m", "monotonic": "local-m", "local-p": "local-p", "predictive": "local-p"}
_IMPLEMENTATIONS = ("windowed", "masked")
_POSITIONS = ("diagonal", "paper")
_PRIOR_EPSILON = 1e-3  # the diagonal prior (t + 1/2) / (L + 1) is clipped to [eps, 1 - eps] before its logit


def _take_rows(x, positions):
    """``x[b, positions[b, t, w], ...]``: x (B, S, ...) gathered on its source axis at positions (B|1, T, W)
    (int, inside [0, S)) -> (B, T, W, ...)."""
    shape = ops.shape(x)
    rows = ops.arange(shape[0], dtype="int32")[:, None, None] * shape[1]  # b * S: row offsets in (B * S, ...)
    return ops.take(ops.reshape(x, (-1,) + tuple(shape[2:])), positions + rows, axis=0)


def _take_positions(x, positions, batch, length):
    """``x[b, t, positions[b, t, w]]`` for x (B|1, T|1, S|1), whose axes of size 1 broadcast (a mask, or
    logits indexed by source position), at positions (B|1, T, W) inside [0, S) -> (batch, length, W)."""
    b_dim, t_dim, s_dim = ops.shape(x)
    b = ops.minimum(ops.arange(batch, dtype="int32"), b_dim - 1)[:, None, None]
    t = ops.minimum(ops.arange(length, dtype="int32"), t_dim - 1)[None, :, None]
    s = ops.minimum(positions, s_dim - 1)
    return ops.take(ops.reshape(x, (-1,)), (b * t_dim + t) * s_dim + s, axis=0)


def _scatter_window(weights, positions, source_length):
    """Window weights (B, T, W) at positions (B|1, T, W) -> dense weights (B, T, S), zeros elsewhere.

    Positions repeated by clipping at the sequence ends hold zero weights (they are masked): the scatter adds.
    """
    batch, length = ops.shape(weights)[:2]
    rows = ops.reshape(ops.arange(batch * length, dtype="int32"), (batch, length, 1)) * source_length
    index = ops.reshape(positions + rows, (-1, 1))
    dense = ops.scatter(index, ops.reshape(weights, (-1,)), (batch * length * source_length,))
    return ops.reshape(dense, (batch, length, source_length))


@keras.saving.register_keras_serializable(package="attnlayers")
class LocalAttention(Attention):
    """Luong et al. (2015) local attention, over any score function.

    - local-m (monotonic): the aligned position is p_t = t (eq. 9's alternative, sec. 3.2); ``start_index``
      (``index`` in :meth:`attend_step`) is the position of query 0 when decoding step by step.
    - local-p (predictive): p_t is predicted from h_t, and the weights are multiplied by a Gaussian centred at
      p_t, a_t(s) = align(h_t, h_s) exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2 (eq. 10). L is the last
      valid source index of each sequence (its length - 1, so p_t covers exactly the real tokens; the paper's
      S with 0-based positions), g_t = v_p^T tanh(W_p h_t) and u the width of W_p:

      - ``position="diagonal"`` (default): p_t = L sigmoid(g_t / sqrt(u) + logit((t + 1/2) / (L + 1))), eq. 9
        around the monotone diagonal: at initialisation (g_t ~ 0) target word t looks at source position
        ~t, and the gate learns the departures from it (reordering, length ratio). The 1/sqrt(u) keeps Adam,
        which moves each of v_p's u entries by about the learning rate per step, from moving the gate u times
        faster than the alignment can follow (as the "scaled_general" score does for W_a). t counts from
        ``start_index`` (``index`` in :meth:`attend_step`), so step-by-step decoding needs the step index.
      - ``position="paper"``: p_t = L sigmoid(g_t) (eq. 9 as published). Trained with Adam on real sentences
        its window moves to one end of the source for every t (docs/results/nmt.md measures both).

    The window [p_t - D, p_t + D] is combined with padding, causal and explicit masks, so it is clipped at
    both sequence ends and never reaches padding; the softmax is taken over the visible part of the window.
    A query whose window holds no valid key gets zero weights and a zero context. local-p weights do not sum
    to 1 (the Gaussian rescales them), as in the paper.

    Cost: O(T (2D + 1)) scores, memory and work (times the feature size), independent of S. The 2D + 1
    positions from ceil(p_t - D) are gathered (keys prepared once by the score's ``prepare_keys``, values)
    and scored against h_t; the "location" score, whose logits come from the query alone, computes its
    (T, S) logits and gathers the window's. Dense (B, T, S) weights are built (scattered) only when they are
    returned. ``implementation="masked"`` computes all (T, S) logits and masks those outside the window,
    O(T S), with the same results (to float rounding): a reference and a benchmark baseline.

    Args:
        window: D, the half-width (a positive int); the window holds 2D + 1 positions.
        mode: "local-p" / "predictive" (default) or "local-m" / "monotonic".
        score: any score (default "general", Luong's choice for local-p).
        units: width u of W_p for local-p (default: the query dim).
        position: local-p's prediction of p_t, "diagonal" (default) or "paper" (see above).
        dropout, seed: dropout on the weights.
        implementation: "windowed" (default: only the window is computed) or "masked" (all (t, s) pairs are
            scored, then masked).

    Call arguments:
        As ``Attention.call``, plus ``start_index`` (int or scalar tensor): the position of query 0, for
        local-m and the diagonal local-p when decoding one step at a time. ``attend_step(query, memory, index)``
        takes it as ``index``.

    Returns:
        context (B, T, Dv) (or (B, Dv) for a (B, Dq) query) and, if requested, weights (B, T, S) (or (B, S)).
        ``attend_step`` returns the context (B, Dv) and the weights (B, S).

    Example:
    >>> attention = LocalAttention(window=2, mode="local-p", score="general")
    >>> context, weights = attention(decoder_states, encoder_states, value_mask=source_mask,
    ...                              return_attention_scores=True)
    """

    def __init__(self, window, mode="local-p", score="general", units=None, dropout=0.0, seed=None,
                 implementation="windowed", position="diagonal", **kwargs):
        super().__init__(score=score, dropout=dropout, seed=seed, **kwargs)
        self.window = positive_int(window, "window", what="the half-width D of the window")
        self.mode = _MODES[one_of(mode, "mode", sorted(_MODES))]
        self.units = positive_int(units, "units", allow_none=True)
        self.position = one_of(position, "position", _POSITIONS)
        self.implementation = one_of(implementation, "implementation", _IMPLEMENTATIONS)

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
            start_index: position of query 0 (local-m and the diagonal local-p; None = 0).

        Returns:
            p_t, float32 (1, T, 1) for local-m (p_t = start_index + t), (B, T, 1) for local-p (eq. 9, around
            the diagonal unless ``position="paper"``).
        """
        start = 0 if start_index is None else start_index
        t = (ops.arange(ops.shape(query)[1], dtype="float32") + ops.cast(start, "float32"))[None, :, None]
        if self.mode == "local-m":
            return t
        if value_mask is None:
            last = ops.cast(source_length - 1, "float32")
        else:
            last = ops.maximum(ops.sum(ops.cast(value_mask, "float32"), axis=-1, keepdims=True) - 1.0, 0.0)
            last = last[:, :, None]  # (B, 1, 1)
        hidden = dense_last_axis(self.position_dense, query)
        gate = ops.einsum("btu,u->bt", ops.cast(hidden, "float32"), ops.cast(self.position_v, "float32"))
        gate = gate[..., None]  # g_t = v_p^T tanh(W_p h_t), (B, T, 1)
        if self.position == "paper":
            return last * ops.sigmoid(gate)  # eq. 9
        # eq. 9 around the diagonal: L sigmoid(g_t / sqrt(u) + logit((t + 1/2) / (L + 1)))
        prior = ops.clip((t + 0.5) / (last + 1.0), _PRIOR_EPSILON, 1.0 - _PRIOR_EPSILON)
        units = float(self.position_v.shape[0])
        return last * ops.sigmoid(gate / units**0.5 + ops.log(prior) - ops.log1p(-prior))

    def _gaussian(self, s, p):
        sigma = self.window / 2.0
        return ops.exp(-ops.square(s - p) / (2.0 * sigma**2))  # eq. 10

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        """The masked implementation: the softmax over the window around p_t, zero outside it (times the
        Gaussian of eq. 10 for local-p), as :meth:`AttentionBase.compute_weights`.

        Args:
            logits: (B, T, S) scores.
            mask: boolean, broadcastable to (B, T, S) (True = may attend), or None.
            query: (B, T, Dq) the queries (local-p predicts p_t from them).
            value_mask: (B, S) boolean padding mask of the source, or None.
            training: whether the layer is training.
            index: position of query 0 in the target sequence (None = 0).

        Returns:
            Weights (B, T, S).
        """
        source_length = ops.shape(logits)[-1]
        p = self.aligned_positions(query, value_mask, source_length, index)
        s = ops.arange(source_length, dtype="float32")[None, None, :]
        in_window = ops.abs(s - p) <= float(self.window)
        weights = masking.masked_softmax(logits, masking.combine_masks(mask, in_window))
        if self.mode == "local-p":
            weights = ops.cast(ops.cast(weights, "float32") * self._gaussian(s, p), weights.dtype)
        return weights

    # ------------------------------------------------------------------------------------------------------
    # The windowed implementation

    def window_positions(self, p):
        """The 2D + 1 integer positions from ceil(p_t - D): a superset of {s : |s - p_t| <= D}.

        Args:
            p: (B|1, T, 1) float32 aligned positions.

        Returns:
            int32 (B|1, T, 2D + 1); they may fall outside [0, S) (masked by the caller).
        """
        start = ops.cast(ops.ceil(p - float(self.window)), "int32")
        return start + ops.arange(2 * self.window + 1, dtype="int32")

    def _window_logits(self, query, keys, positions):
        """score(h_t, h_s) for the window's positions: query (B, T, Dq), prepared keys (B, S, ...),
        positions (B|1, T, W) inside [0, S) -> logits (B, T, W) in the compute dtype."""
        query = ops.cast(query, self.scorer.compute_dtype)
        batch, length = ops.shape(query)[0], ops.shape(query)[1]
        if isinstance(self.scorer, LocationScore):
            # Logits from the query alone, one per source position: take the window's.
            logits = _take_positions(self.scorer.score(query, keys), positions, batch, length)
        else:
            # T folded into the batch: each query (1, Dq) against its own W gathered keys.
            window_keys = _take_rows(keys, positions)  # (B, T, W, ...)
            width = window_keys.shape[2]
            window_keys = ops.reshape(window_keys, (-1,) + tuple(ops.shape(window_keys)[2:]))
            logits = self.scorer.score(ops.reshape(query, (-1, 1, query.shape[-1])), window_keys)
            logits = ops.reshape(logits, (batch, length, width))
        return ops.cast(logits, self.compute_dtype)

    def _window_mask(self, s, p, source_length, batch, value_mask, query_mask, attention_mask, use_causal_mask):
        """True where s (B|1, T, W) may be attended: |s - p_t| <= D, inside [0, S), and visible under the
        padding, explicit and causal masks (evaluated at the window's positions only)."""
        length = ops.shape(s)[1]
        in_window = ops.abs(ops.cast(s, "float32") - p) <= float(self.window)
        in_source = ops.logical_and(s >= 0, s < source_length)
        clipped = ops.clip(s, 0, source_length - 1)
        masks = [in_window, in_source]
        if value_mask is not None:
            masks.append(_take_positions(ops.expand_dims(value_mask, 1), clipped, batch, length))
        if query_mask is not None:
            masks.append(ops.expand_dims(query_mask, -1))
        if attention_mask is not None:
            masks.append(_take_positions(attention_mask, clipped, batch, length))
        if use_causal_mask:  # query t sees s <= t + (S - T), as masking.causal_mask
            t = ops.arange(length, dtype="int32")[None, :, None]
            masks.append(s <= t + (source_length - length))
        return masking.combine_masks(*masks)

    def _attend_window(self, query, memory, index, training, query_mask=None, attention_mask=None,
                       use_causal_mask=False):
        """query (B, T, Dq) over a prepared memory, on the window only -> context (B, T, Dv), the window's
        weights (B, T, W) (after dropout) and their positions (B|1, T, W) inside [0, S)."""
        value, value_mask = memory["value"], memory["value_mask"]
        source_length, batch = ops.shape(value)[1], ops.shape(query)[0]
        p = self.aligned_positions(query, value_mask, source_length, index)  # (B|1, T, 1)
        s = self.window_positions(p)
        mask = self._window_mask(s, p, source_length, batch, value_mask, query_mask, attention_mask,
                                 use_causal_mask)
        positions = ops.clip(s, 0, source_length - 1)
        weights = masking.masked_softmax(self._window_logits(query, memory["keys"], positions), mask)
        if self.mode == "local-p":
            weights = ops.cast(ops.cast(weights, "float32") * self._gaussian(ops.cast(s, "float32"), p),
                               weights.dtype)
        if self.dropout_layer is not None:
            weights = self.dropout_layer(weights, training=training)
        window_values = ops.cast(_take_rows(value, positions), weights.dtype)  # (B, T, W, Dv)
        context = ops.einsum("btw,btwv->btv", weights, window_values)  # c_t = sum_s a_t(s) v_s
        return context, weights, positions

    def _attend_prepared(self, query, memory, mask, index, training, explicit):
        # attend_step's body (and the masked call's): dense weights (B, T, S), as AttentionBase returns them.
        if self.implementation == "masked":
            return super()._attend_prepared(query, memory, mask, index, training, explicit)
        context, weights, positions = self._attend_window(query, memory, index, training, attention_mask=mask)
        return context, _scatter_window(weights, positions, ops.shape(memory["value"])[1]), None

    def _attend_windowed(self, query, value, key, query_mask, value_mask, attention_mask, use_causal_mask,
                         return_attention_scores, training, index):
        query, value, key, query_mask, attention_mask, single_step = self._call_inputs(
            query, value, key, query_mask, attention_mask
        )
        memory = self.prepare_memory(value, key, value_mask)
        context, weights, positions = self._attend_window(query, memory, index, training, query_mask,
                                                          attention_mask, use_causal_mask)
        if not return_attention_scores:
            return ops.squeeze(context, 1) if single_step else context
        weights = _scatter_window(weights, positions, ops.shape(value)[1])  # only when requested: (B, T, S)
        if single_step:
            return ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return context, weights

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
        if getattr(key if key is not None else value, "shape", (None, None))[1] == 0:
            return self._no_keys(query, value, key, query_mask, attention_mask, return_attention_scores)
        attend = self._attend if self.implementation == "masked" else self._attend_windowed
        return attend(
            query, value, key, query_mask, value_mask, attention_mask, use_causal_mask,
            return_attention_scores, training, index=start_index,
        )

    def _no_keys(self, query, value, key, query_mask, attention_mask, return_attention_scores):
        """S = 0: a window has nothing to gather from, and every query sees nothing: the context is 0 (as in every
        layer of the library) and the weights are (B, T, 0)."""
        query, value, *_, single_step = self._call_inputs(query, value, key, query_mask, attention_mask)
        lead = tuple(ops.shape(query)[:2])
        context = ops.zeros(lead + (value.shape[-1],), self.compute_dtype)
        weights = ops.zeros(lead + (0,), self.compute_dtype)
        if single_step:
            context, weights = ops.squeeze(context, 1), ops.squeeze(weights, 1)
        return (context, weights) if return_attention_scores else context

    def get_config(self):
        return {
            **super().get_config(),
            "window": self.window,
            "mode": self.mode,
            "units": self.units,
            "implementation": self.implementation,
            "position": self.position,
        }

    @classmethod
    def from_config(cls, config):
        # Saved before ``position`` existed: those layers computed eq. 9 as published.
        return cls(**{"position": "paper", **config})
