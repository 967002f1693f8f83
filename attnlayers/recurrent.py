"""Attention RNN decoders for seq2seq translation and captioning: Bahdanau et al. (2015) and Luong et al. (2015).

Both decoders compose three parts that are passed in or chosen, not flagged:

- an attention layer from this library (``Attention`` with any score, ``LocalAttention`` local-m / local-p, ...),
- a Keras RNN cell (``"gru"``, ``"lstm"``, ``"simple_rnn"`` or a ``GRUCell`` / ``LSTMCell`` / ``SimpleRNNCell``
  / ``StackedRNNCells`` instance),
- the memory: the encoder's states (B, S, D) (Bahdanau's annotations h_j, Luong's source states h_s, the
  image-region features of Show, Attend and Tell).

The two architectures differ only in *where* attention sits in a step, which is what the two classes hold:

- :class:`BahdanauDecoder`: attend from the previous state s_{i-1}, feed the context into the cell,
  ``s_i = f(s_{i-1}, [y_{i-1}; c_i])``; output ``[s_i; c_i]``.
- :class:`LuongDecoder`: run the cell first, ``h_t = f(h_{t-1}, [y_{t-1}; h~_{t-1}])`` (input feeding), attend
  from h_t, output the attentional hidden state ``h~_t = tanh(W_c [c_t; h_t])``.

Each layer runs a whole target sequence with teacher forcing (``call``, for ``model.fit``), and one step at a
time (``step``, for greedy / beam search through ``attnlayers.decoding``). The full-sequence call is the step
inside ``keras.ops.scan``, so the two agree exactly. ``keras.layers.RNN`` is not used: in Keras 3 it takes no
``constants``, so the memory could not be passed to the cell.

Each step attends through the attention layer's public single-step API: the memory's key-side work
(``attention.prepare_memory``: Bahdanau's U_a h_j, Luong's W_a h_s) is done once per source sequence, in
:meth:`AttentionRNNDecoder.initial_cache`, and carried in the decoding cache; ``attention.attend_step`` attends
from one state (with the step index, which local-m uses as p_t = t).

Scheduled sampling (Bengio et al. 2015) runs in the same loop: with ``feedback`` (an
``attnlayers.scheduled_sampling.Feedback``) each step reads the gold input or, where its coin says so, the
embedding of the token the model chose at the previous step (the output layer is passed in, as the logits are
computed outside the layer). Without it the call is the teacher-forced one, unchanged.

Hard attention trained by REINFORCE (Xu et al. 2015, sec. 4.1) works in the loop: with ``return_sample=True``
the call also returns log p(s_t) and H(alpha_t) of every step, (B, T) each, for ``attnlayers.hard.ReinforceLoss``.
"""

import warnings

import keras
from keras import ops

from attnlayers import masking
from attnlayers._loops import LoopVariables, scan
from attnlayers.attention import Attention, AttentionBase, AttentionPooling
from attnlayers.hard import HardAttention
from attnlayers.scheduled_sampling import Feedback
from attnlayers.validation import check_feature_size, check_rank, check_tensor, format_shape, positive_int, same_size

__all__ = ["AttentionRNNDecoder", "BahdanauDecoder", "LuongDecoder"]

_CELLS = {
    "gru": keras.layers.GRUCell,
    "lstm": keras.layers.LSTMCell,
    "simple_rnn": keras.layers.SimpleRNNCell,
}
_CELL_TYPES = tuple(_CELLS.values())
_MEMORY_KEYS = ("memory", "memory_keys", "memory_mask")
_TARGET_LAYOUT = "(batch, target_length, embedding_dim)"
_MEMORY_LAYOUT = "(batch, source_length, memory_dim)"


def _is_cell(cell):
    if isinstance(cell, _CELL_TYPES):
        return True
    return isinstance(cell, keras.layers.StackedRNNCells) and all(isinstance(c, _CELL_TYPES) for c in cell.cells)


def _top_units(cell):
    return cell.cells[-1].units if isinstance(cell, keras.layers.StackedRNNCells) else cell.units


def _state_sizes(cell):
    """Nest of state sizes, lists all the way: [h] (GRU), [h, c] (LSTM), [[h1], [h2, c2]] (stacked)."""
    if isinstance(cell, keras.layers.StackedRNNCells):
        return [_state_sizes(c) for c in cell.cells]
    return list(cell.state_size) if isinstance(cell.state_size, (list, tuple)) else [cell.state_size]


def _top_output(cell, states):
    """The cell's output at the step that produced ``states`` (h of the top layer: GRU/LSTM/SimpleRNN output
    their first state)."""
    return states[-1][0] if isinstance(cell, keras.layers.StackedRNNCells) else states[0]


def _set_dropout_masks(cell, batch, input_dim, dtype):
    """Draws the cell's dropout masks once per sequence, before the loop (as ``keras.layers.RNN`` does), so
    the loop body draws no random numbers: required by JAX's traced scan, and the same mask at every step
    is the variational dropout of Gal & Ghahramani that the Keras cells implement."""
    if isinstance(cell, keras.layers.StackedRNNCells):
        for c in cell.cells:
            _set_dropout_masks(c, batch, input_dim, dtype)
            input_dim = c.units
        return
    if getattr(cell, "dropout", 0) > 0 or getattr(cell, "recurrent_dropout", 0) > 0:
        cell.get_dropout_mask(ops.zeros((batch, input_dim), dtype))
        cell.get_recurrent_dropout_mask(ops.zeros((batch, cell.units), dtype))


def _check_feedback(feedback):
    if feedback is None:
        return
    if not isinstance(feedback, Feedback):
        raise ValueError(
            "`feedback` must be None (teacher forcing) or an attnlayers.scheduled_sampling.Feedback (e.g. "
            f"ScheduledSampler.feedback(...)); received {type(feedback).__name__}."
        )
    if not callable(feedback.embed) or not callable(feedback.logits):
        raise ValueError(
            "An RNN decoder's `feedback` needs `embed` (token ids (B,) -> (B, E)) and `logits` ((B, output_dim), "
            f"token ids (B,) -> (B, V)) to feed back its own tokens; received embed={feedback.embed!r}, "
            f"logits={feedback.logits!r}."
        )


def _reset_dropout_masks(cell):
    for c in cell.cells if isinstance(cell, keras.layers.StackedRNNCells) else [cell]:
        if hasattr(c, "reset_dropout_mask"):
            c.reset_dropout_mask()
            c.reset_recurrent_dropout_mask()


class AttentionRNNDecoder(keras.layers.Layer):
    """Base of :class:`BahdanauDecoder` and :class:`LuongDecoder`: cell and attention handling, the decoding
    cache, the teacher-forced loop. Subclasses implement :meth:`_step` (one step of their equations) and
    :meth:`_cell_input_dim`. Not meant to be used directly.

    Args:
        units: size of the cell's state; optional when ``cell`` is an instance (its units are used).
        attention: an attnlayers attention layer (``Attention``, ``LocalAttention``, ``HardAttention``, or a
            subclass of ``AttentionBase`` other than ``AttentionPooling``), or its serialized config. It keeps its
            own dtype policy.
        cell: "gru", "lstm", "simple_rnn", or a ``keras.layers.GRUCell`` / ``LSTMCell`` / ``SimpleRNNCell``
            instance (to set dropout, initializers, ...) or a ``StackedRNNCells`` of them (a deep decoder:
            attention reads and feeds the top layer), or a serialized cell config.
    """

    default_score = "general"
    default_cell = "gru"

    def __init__(self, units=None, attention=None, cell=None, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # the target sequence's mask flows to the outputs
        self.attention = self._resolve_attention(attention)
        self._cell_identifier = self.default_cell if cell is None else cell
        self.cell, self.units = self._resolve_cell(self._cell_identifier, units)
        self._warned_unsampled = False

    # ------------------------------------------------------------------------------------------------------
    # Construction

    def _resolve_attention(self, attention):
        if attention is None:
            return Attention(score=self.default_score, dtype=self.dtype_policy, name="attention")
        if isinstance(attention, dict):
            attention = keras.saving.deserialize_keras_object(attention)
        if not isinstance(attention, AttentionBase) or isinstance(attention, AttentionPooling):
            raise ValueError(
                f"`attention` must be an attnlayers attention layer (Attention, LocalAttention, HardAttention or "
                f"another AttentionBase subclass other than AttentionPooling), or None for "
                f"Attention(score={self.default_score!r}); received {attention!r}."
            )
        return attention

    def _resolve_cell(self, cell, units):
        units = positive_int(units, "units", allow_none=True)
        if isinstance(cell, str):
            if cell.lower() not in _CELLS:
                raise ValueError(
                    f"Unknown `cell` {cell!r}; expected one of {sorted(_CELLS)} or a keras.layers.GRUCell / "
                    f"LSTMCell / SimpleRNNCell / StackedRNNCells instance."
                )
            if units is None:
                raise ValueError(f"`units` is required with cell={cell!r}; received units=None.")
            return _CELLS[cell.lower()](units, dtype=self.dtype_policy, name="cell"), units
        if isinstance(cell, dict):
            cell = keras.saving.deserialize_keras_object(cell)
        if not _is_cell(cell):
            raise ValueError(
                f"`cell` must be one of {sorted(_CELLS)}, a keras.layers.GRUCell / LSTMCell / SimpleRNNCell "
                f"instance or a StackedRNNCells of them; received {cell!r}."
            )
        if units is not None and units != _top_units(cell):
            raise ValueError(
                f"`units` ({units}) does not match the units of the given cell ({_top_units(cell)}); "
                f"expected units=None or {_top_units(cell)}."
            )
        return cell, _top_units(cell)

    # ------------------------------------------------------------------------------------------------------
    # Build

    def _cell_input_dim(self, embedding_dim, memory_dim):
        raise NotImplementedError

    def _check_shapes(self, target_embeddings_shape, memory_shape):
        check_rank(target_embeddings_shape, 3, "target_embeddings", _TARGET_LAYOUT)
        check_rank(memory_shape, 3, "memory", _MEMORY_LAYOUT)
        if not same_size(target_embeddings_shape[0], memory_shape[0]):
            raise ValueError(
                f"`target_embeddings` and `memory` must have the same batch size; received shapes "
                f"{format_shape(target_embeddings_shape)} and {format_shape(memory_shape)}."
            )
        for shape, name in ((target_embeddings_shape, "target_embeddings"), (memory_shape, "memory")):
            if shape[-1] is None:
                raise ValueError(f"The last axis of `{name}` must be known; received shape {format_shape(shape)}.")
        if self.built:
            check_feature_size(target_embeddings_shape, self.embedding_dim, "target_embeddings")
            check_feature_size(memory_shape, self.memory_dim, "memory")

    def build(self, target_embeddings_shape=None, memory_shape=None):
        check_tensor(target_embeddings_shape, "target_embeddings", _TARGET_LAYOUT)
        check_tensor(memory_shape, "memory", _MEMORY_LAYOUT)
        target_embeddings_shape, memory_shape = tuple(target_embeddings_shape), tuple(memory_shape)
        self._check_shapes(target_embeddings_shape, memory_shape)
        self.embedding_dim, self.memory_dim = target_embeddings_shape[-1], memory_shape[-1]
        batch = memory_shape[0]
        if not self.attention.built:
            self.attention.build((batch, self.units), memory_shape)  # queries are one (B, units) state
        if not self.cell.built:
            self.cell.build((batch, self._cell_input_dim(self.embedding_dim, self.memory_dim)))

    def _check_built(self, what):
        if not self.built:
            raise ValueError(
                f"{type(self).__name__}.{what} needs a built layer: call it on a target sequence and memory first, "
                f"or call build(target_embeddings_shape, memory_shape)."
            )

    # ------------------------------------------------------------------------------------------------------
    # Decoding cache

    def _initial_extra(self, batch):
        """Subclass hook: extra cache entries (Luong's input-feeding vector)."""
        return {}

    def initial_cache(self, memory, memory_mask=None, initial_state=None):
        """The decoding cache before the first step: a dict of tensors, each with the batch on axis 0.

        Structure:
            ``"states"``: the cell's states, a list: ``[h]`` (GRU / SimpleRNN), ``[h, c]`` (LSTM), one such list
            per layer for ``StackedRNNCells``; each (B, units).
            ``"memory"``: (B, S, D) the memory.
            ``"memory_keys"``: the score's ``prepare_keys(memory)`` (``attention.prepare_memory``), computed here
            once per source sequence (Bahdanau's U_a h_j, Luong's W_a h_s), e.g. (B, S, units).
            ``"memory_mask"``: (B, S) boolean, True at real positions (all True when no mask was given).
            ``"feed"`` (:class:`LuongDecoder` with input feeding only): (B, units), h~_{t-1}, zeros at first.

        Beam search repeats every entry along axis 0 (``keras.tree.map_structure``), and the structure never
        changes from step to step.

        Args:
            memory: (B, S, D) encoder states. Its implicit Keras mask is used if ``memory_mask`` is None.
            memory_mask: (B, S) boolean / 0-1 padding mask of the memory.
            initial_state: the cell's initial state: a (B, units) tensor for GRU / SimpleRNN, or a list of
                tensors (``[h, c]`` for LSTM; the flattened per-layer states for ``StackedRNNCells``). None:
                zeros. An NMT model passes the encoder's final state through a Dense "bridge" here.

        Returns:
            The cache dict.
        """
        self._check_built("initial_cache")
        memory = check_tensor(memory, "memory", _MEMORY_LAYOUT)
        if memory_mask is None:
            memory_mask = masking.keras_mask(memory)
        memory = ops.convert_to_tensor(memory)
        check_rank(memory.shape, 3, "memory", _MEMORY_LAYOUT)
        check_feature_size(memory.shape, self.memory_dim, "memory")
        batch, source_length = memory.shape[0], memory.shape[1]
        memory_mask = masking.check_mask(memory_mask, "memory_mask", (batch, source_length))
        dynamic_batch = ops.shape(memory)[0]
        if memory_mask is None:
            memory_mask = ops.ones(ops.shape(memory)[:2], "bool")
        else:
            memory_mask = ops.broadcast_to(memory_mask, ops.shape(memory)[:2])
        # Key-side work of the score, once per source sequence (Bahdanau's U_a h_j, Luong's W_a h_s).
        prepared = self.attention.prepare_memory(memory, value_mask=memory_mask)
        cache = {
            "states": self._initial_states(initial_state, dynamic_batch, batch),
            "memory": prepared["value"],
            "memory_keys": prepared["keys"],
            "memory_mask": prepared["value_mask"],
        }
        cache.update(self._initial_extra(dynamic_batch))
        return cache

    def _initial_states(self, initial_state, dynamic_batch, batch):
        sizes = _state_sizes(self.cell)
        flat_sizes = keras.tree.flatten(sizes)
        dtype = self.cell.compute_dtype
        if initial_state is None:
            return keras.tree.map_structure(lambda n: ops.zeros((dynamic_batch, n), dtype), sizes)
        flat = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        flat = keras.tree.flatten(flat)
        if len(flat) != len(flat_sizes):
            raise ValueError(
                f"`initial_state` must hold {len(flat_sizes)} tensor(s) of shapes "
                f"{[(batch, n) for n in flat_sizes]} for this cell; received {len(flat)}."
            )
        states = []
        for state, n in zip(flat, flat_sizes):
            state = ops.convert_to_tensor(check_tensor(state, "initial_state", f"(batch, {n})"))
            if len(state.shape) != 2 or state.shape[-1] not in (None, n):
                raise ValueError(
                    f"`initial_state` entries must have shape (batch, {n}); received shape "
                    f"{format_shape(state.shape)}."
                )
            if not same_size(state.shape[0], batch):
                raise ValueError(
                    f"`initial_state` and `memory` must have the same batch size; received initial_state shape "
                    f"{format_shape(state.shape)} and memory batch {batch}."
                )
            states.append(ops.cast(state, dtype))
        return keras.tree.pack_sequence_as(sizes, states)

    # ------------------------------------------------------------------------------------------------------
    # One step

    def _attend(self, query, cache, index, training, return_sample=False):
        """The attention's :meth:`~attnlayers.AttentionBase.attend_step` from one (B, Dq) query over the cached,
        prepared memory -> context (B, D), weights (B, S) and, with ``return_sample``, the sample dict
        ``{"log_prob": (B,), "entropy": (B,)}`` (else None)."""
        memory = {"value": cache["memory"], "keys": cache["memory_keys"], "value_mask": cache["memory_mask"]}
        query = ops.cast(query, self.attention.compute_dtype)
        result = self.attention.attend_step(query, memory, index, training, return_sample=return_sample)
        context, weights = (ops.cast(x, self.compute_dtype) for x in result[:2])
        return context, weights, (result[2] if return_sample else None)

    def _run_cell(self, inputs, states, training):
        output, new_states = self.cell(ops.cast(inputs, self.cell.compute_dtype), states, training=training)
        # Keep the states' structure and dtype fixed from step to step (a loop carry).
        new_states = keras.tree.pack_sequence_as(states, keras.tree.flatten(new_states))
        return output, new_states

    def _step(self, y_prev, cache, index, training, return_sample=False):
        """Returns (output (B, output_dim), new cache entries {"states", ...}, weights (B, S), sample dict of
        (B,) or None)."""
        raise NotImplementedError

    def step(self, y_prev, cache, index=0, training=None):
        """One decoder step, for inference (greedy / beam search).

        Args:
            y_prev: (B, E) the embedded previous target token (the start token at step 0).
            cache: the dict from :meth:`initial_cache` or from the previous step.
            index: the step's position t in the target sequence (int or scalar tensor), 0 for the first
                step; used by local-m attention (p_t = t).
            training: forwarded to the cell and the attention (dropout); leave None for inference.

        Returns:
            ``(output, cache, weights)``: output (B, output_dim) — exactly the teacher-forced output at
            position t for the same inputs —, the new cache (same structure, memory entries passed through),
            and the attention weights (B, S).
        """
        self._check_built("step")
        y_prev = ops.convert_to_tensor(check_tensor(y_prev, "y_prev", f"(batch, {self.embedding_dim})"))
        if len(y_prev.shape) != 2 or y_prev.shape[-1] not in (None, self.embedding_dim):
            raise ValueError(
                f"`y_prev` must have shape (batch, {self.embedding_dim}); received shape "
                f"{format_shape(y_prev.shape)}."
            )
        output, updates, weights, _ = self._step(y_prev, cache, index, training)
        if training:
            _reset_dropout_masks(self.cell)  # drawn inside this step; do not reuse them in the next one
        return output, {**cache, **updates}, weights

    def next_function(self, embedding, output_layer):
        """Wraps :meth:`step` into ``next(tokens, cache, index) -> (logits, cache)`` for
        ``attnlayers.decoding.generate``.

        The token at ``index - 1`` (the newest known one) is embedded and fed; its decoder step is
        ``index - 1``, so token buffer position 0 holds the start token, as in teacher forcing where the
        decoder input is ``targets[:, :-1]``.

        Args:
            embedding: callable (B,) int tokens -> (B, E), e.g. the target ``keras.layers.Embedding``.
            output_layer: callable (B, output_dim) -> (B, V) logits, e.g. the final ``Dense``.
        """

        def next(tokens, cache, index):
            token = ops.take(tokens, index - 1, axis=1)
            output, cache, _ = self.step(embedding(token), cache, index - 1)
            return output_layer(output), cache

        return next

    # ------------------------------------------------------------------------------------------------------
    # Teacher-forced sequence

    def call(
        self,
        target_embeddings,
        memory,
        memory_mask=None,
        initial_state=None,
        return_attention_scores=False,
        return_sample=False,
        training=None,
        feedback=None,
    ):
        target_embeddings = check_tensor(target_embeddings, "target_embeddings", _TARGET_LAYOUT)
        memory = check_tensor(memory, "memory", _MEMORY_LAYOUT)
        self._check_shapes(target_embeddings.shape, memory.shape)
        self._check_return_sample(return_sample)
        _check_feedback(feedback)
        self._warn_if_unsampled(return_sample, training)
        cache = self.initial_cache(memory, memory_mask, initial_state)
        memory_entries = {k: cache[k] for k in _MEMORY_KEYS}
        batch, source_length = ops.shape(memory)[0], ops.shape(memory)[1]
        carry = {k: v for k, v in cache.items() if k not in _MEMORY_KEYS}
        # The loop stacks per-step outputs shaped like the carry (see _loops.scan), so they ride in the carry.
        carry["output"] = ops.zeros((batch, self._output_dim()), self.compute_dtype)
        carry["weights"] = ops.zeros((batch, source_length), self.compute_dtype)
        if return_sample:  # log p(s_t) and H(alpha_t) of every step, float32
            carry["sample"] = {k: ops.zeros((batch,), "float32") for k in ("log_prob", "entropy")}
        per_step = ("output", "weights", "sample", "threaded", "token", "fed")
        y = ops.transpose(ops.cast(target_embeddings, self.compute_dtype), (1, 0, 2))  # time major (T, B, E)
        steps = ops.arange(ops.shape(target_embeddings)[1], dtype="int32")
        xs = (y, steps)
        if feedback is not None:  # scheduled sampling: the model's token y^_{t-1} rides in the carry
            carry["token"] = carry["fed"] = ops.zeros((batch,), "int32")
            uniform = feedback.uniform if feedback.uniform is not None else ops.zeros(ops.shape(feedback.tokens))
            xs += tuple(ops.transpose(x) for x in (feedback.teacher, feedback.tokens, uniform))  # (T, B) each

        if training:
            _set_dropout_masks(
                self.cell, batch, self._cell_input_dim(self.embedding_dim, self.memory_dim), self.cell.compute_dtype
            )
        # Variables the attention updates while training (the seed of its dropout or of HardAttention's samples)
        # are threaded through the loop under JAX, whose traced scan body cannot assign a variable.
        jax = keras.backend.backend() == "jax"
        threaded = list(self.attention.non_trainable_variables) if training and jax else []
        with LoopVariables(self, threaded) as loop_variables:
            if threaded:
                carry["threaded"] = loop_variables.read()

            def body(carry, inputs):
                y_prev, t = inputs[:2]
                if feedback is not None:
                    y_prev, fed = self._fed_input(feedback, y_prev, carry["token"], *inputs[2:4])
                state = {k: v for k, v in carry.items() if k not in per_step}
                if threaded:
                    loop_variables.write(carry["threaded"])
                output, updates, weights, sample = self._step(
                    y_prev, {**memory_entries, **state}, t, training, return_sample
                )
                new = {**updates, "output": output, "weights": weights}
                if return_sample:
                    new["sample"] = {k: ops.cast(v, "float32") for k, v in sample.items()}
                if threaded:
                    new["threaded"] = loop_variables.read()
                if feedback is not None:  # y^_t for the next step, chosen without gradient
                    new["token"] = feedback.choose(ops.stop_gradient(feedback.logits(output, fed)), inputs[4])
                    new["fed"] = fed
                return new, new

            last, stacked = scan(body, carry, xs, ops.shape(target_embeddings)[1])
            if threaded:
                loop_variables.write(last["threaded"])
        if training:
            _reset_dropout_masks(self.cell)
        result = (ops.transpose(stacked["output"], (1, 0, 2)),)
        if return_attention_scores:
            result += (ops.transpose(stacked["weights"], (1, 0, 2)),)
        if return_sample:
            result += ({k: ops.transpose(v) for k, v in stacked["sample"].items()},)  # (T, B) -> (B, T)
        if feedback is not None:
            result += (ops.transpose(stacked["fed"]),)  # (B, T) the tokens read
        return result[0] if len(result) == 1 else result

    def _fed_input(self, feedback, y_gold, model_token, teacher, gold_token):
        """Scheduled sampling (Bengio et al. 2015, sec. 2.1): step t reads the gold y_{t-1} where its coin says
        so, else the model's own y^_{t-1}. -> (the embedded input (B, E), the token read (B,) int32)."""
        y_model = ops.cast(feedback.embed(model_token), self.compute_dtype)
        if len(y_model.shape) != 2 or y_model.shape[-1] not in (None, self.embedding_dim):
            raise ValueError(
                f"`feedback.embed` must map (batch,) token ids to (batch, {self.embedding_dim}) embeddings like "
                f"`target_embeddings`; it returned shape {format_shape(y_model.shape)}."
            )
        y_prev = ops.where(ops.expand_dims(teacher, -1), y_gold, y_model)
        return y_prev, ops.where(teacher, gold_token, model_token)

    def _check_return_sample(self, return_sample):
        if return_sample and not self.attention.stochastic:
            raise ValueError(
                f"`return_sample=True` needs an attention layer that samples (HardAttention); received attention "
                f"{type(self.attention).__name__}, whose weights are deterministic."
            )

    def _warn_if_unsampled(self, return_sample, training):
        attention = self.attention
        if (
            training
            and not return_sample
            and not self._warned_unsampled
            and isinstance(attention, HardAttention)
            and attention.estimator == "reinforce"
        ):
            self._warned_unsampled = True
            warnings.warn(
                f"{type(self).__name__} '{self.name}' runs HardAttention(estimator='reinforce') in training, but "
                f"its sample log-probabilities are not returned, so its scorer gets no gradient. Call the decoder "
                f"with return_sample=True and add attnlayers.hard.ReinforceLoss()(per_example_loss, sample) to "
                f"the model's loss, or use HardAttention(estimator='gumbel').",
                stacklevel=3,
            )

    def _output_dim(self):
        raise NotImplementedError

    def compute_output_shape(self, target_embeddings_shape, memory_shape):
        return tuple(target_embeddings_shape[:2]) + (self._output_dim(),)

    def compute_output_spec(self, target_embeddings, memory, return_attention_scores=False, return_sample=False,
                            feedback=None, **kwargs):
        target_embeddings = check_tensor(target_embeddings, "target_embeddings", _TARGET_LAYOUT)
        memory = check_tensor(memory, "memory", _MEMORY_LAYOUT)
        self._check_shapes(target_embeddings.shape, memory.shape)
        self._check_return_sample(return_sample)
        batch, length = target_embeddings.shape[0], target_embeddings.shape[1]
        result = (keras.KerasTensor((batch, length, self._output_dim()), dtype=self.compute_dtype),)
        if return_attention_scores:
            result += (keras.KerasTensor((batch, length, memory.shape[1]), dtype=self.compute_dtype),)
        if return_sample:
            result += ({k: keras.KerasTensor((batch, length), dtype="float32") for k in ("log_prob", "entropy")},)
        if feedback is not None:
            result += (keras.KerasTensor((batch, length), dtype="int32"),)
        return result[0] if len(result) == 1 else result

    def get_config(self):
        cell = self._cell_identifier
        return {
            **super().get_config(),
            "units": self.units if isinstance(cell, str) else None,
            "attention": keras.saving.serialize_keras_object(self.attention),
            "cell": cell if isinstance(cell, str) else keras.saving.serialize_keras_object(self.cell),
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class BahdanauDecoder(AttentionRNNDecoder):
    """The attention RNN decoder of Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly
    Learning to Align and Translate".

    One step i (appendix A.2.2), with the previous state s_{i-1} as the attention query::

        e_ij = a(s_{i-1}, h_j)                  (eq. 6; "additive": v_a^T tanh(W_a s_{i-1} + U_a h_j), app. A.1.2)
        a_ij = softmax_j(e_ij),  c_i = sum_j a_ij h_j              (eq. 6, 5)
        s_i  = f(s_{i-1}, [y_{i-1}; c_i])                          (eq. 4, f = GRU by default)
        output_i = [s_i; c_i]

    The output is the concatenation [s_i; c_i], of size ``units + D``: a Dense on it computes the linear
    part ``U_o s_i + C_o c_i`` of the paper's deep output (the paper uses s_{i-1}, the maxout layer and
    also ``V_o E y_{i-1}``; to add that term, concatenate the target embeddings to the outputs before the
    logits layer). With an LSTM cell the query is h_{i-1}; with ``StackedRNNCells`` the top layer's h.

    Args:
        units: size of the decoder state s_i (optional when ``cell`` is an instance).
        attention: an attnlayers attention layer; default ``Attention(score="additive")`` (the paper's
            alignment model; ``AdditiveScore(units=...)`` sets the width of W_a / U_a). Any score works
            ("dot" needs ``units`` equal to the memory dim), and ``LocalAttention``.
        cell: "gru" (default), "lstm", "simple_rnn", or a Keras cell instance (see ``AttentionRNNDecoder``).

    Call arguments:
        target_embeddings: (B, T, E) the embedded decoder inputs y_0 .. y_{T-1} (teacher forcing: the start
            token, then the targets shifted right). Its implicit Keras mask is propagated to the outputs, so a
            masked loss ignores padded target steps (their outputs are computed but never feed a real step).
        memory: (B, S, D) the encoder states.
        memory_mask: (B, S) padding mask of the memory (True = real); taken from ``memory``'s implicit Keras
            mask when omitted. Padded positions get weight 0 and change nothing.
        initial_state: the cell's initial state (see :meth:`initial_cache`); zeros when omitted.
        return_attention_scores: also return the attention weights.
        return_sample: (``HardAttention`` only) also return the sample statistics of every step, a dict of
            float32 (B, T): ``"log_prob"`` log p(s_t), ``"entropy"`` H(alpha_t); pass it to
            ``attnlayers.hard.ReinforceLoss`` to train REINFORCE hard attention (Xu et al. 2015, eq. 11-13).
        training: enables the cell's and the attention's dropout (and ``HardAttention``'s sampling).
        feedback: None (teacher forcing), or an ``attnlayers.scheduled_sampling.Feedback`` for scheduled sampling
            (Bengio et al. 2015): step t reads the gold input where ``feedback.teacher`` is True, else the
            embedding (``feedback.embed``) of the token the model chose (``feedback.logits`` on the previous
            step's output, argmax or sampled, no gradient through the choice). The gold inputs are still
            ``target_embeddings``; ``feedback.tokens`` are their ids.

    Returns:
        outputs (B, T, units + D) ``[s_i; c_i]`` for every target step; with ``return_attention_scores`` also
        the weights (B, T, S): row i is the alignment a_i used to predict the target token i.
        With ``return_sample``, the sample dict comes next; with ``feedback``, last the (B, T) int32 token ids
        each step read (gold or the model's).

    Example:
    >>> source = keras.Input((None,), dtype="int32")
    >>> target_in = keras.Input((None,), dtype="int32")
    >>> annotations = keras.layers.Bidirectional(keras.layers.GRU(64, return_sequences=True))(
    ...     keras.layers.Embedding(1000, 32, mask_zero=True)(source))
    >>> decoder = BahdanauDecoder(64, attention=Attention(score=AdditiveScore(units=64)))
    >>> y = keras.layers.Embedding(1000, 32, mask_zero=True)(target_in)
    >>> logits = keras.layers.Dense(1000)(decoder(y, annotations))           # (B, T, 1000)
    >>> model = keras.Model([source, target_in], logits)

    Step by step (``attnlayers.decoding.generate``)::

        cache = decoder.initial_cache(annotations, source_mask)      # U_a h_j computed here, once
        output, cache, weights = decoder.step(embed(tokens[:, i - 1]), cache, i - 1)
    """

    default_score = "additive"
    default_cell = "gru"

    def _cell_input_dim(self, embedding_dim, memory_dim):
        return embedding_dim + memory_dim  # [y_{i-1}; c_i]

    def _output_dim(self):
        return self.units + self.memory_dim

    def _step(self, y_prev, cache, index, training, return_sample=False):
        states = cache["states"]
        s_prev = _top_output(self.cell, states)
        context, weights, sample = self._attend(s_prev, cache, index, training, return_sample)  # eq. 6, 5
        y_prev = ops.cast(y_prev, self.compute_dtype)
        s, new_states = self._run_cell(ops.concatenate([y_prev, context], axis=-1), states, training)  # eq. 4
        output = ops.concatenate([ops.cast(s, self.compute_dtype), context], axis=-1)
        return output, {"states": new_states}, weights, sample


@keras.saving.register_keras_serializable(package="attnlayers")
class LuongDecoder(AttentionRNNDecoder):
    """The attention RNN decoder of Luong, Pham & Manning (2015), "Effective Approaches to Attention-based
    Neural Machine Translation", with input feeding (section 3.3).

    One step t, attending from the *current* state h_t::

        h_t  = f(h_{t-1}, [y_{t-1}; h~_{t-1}])     (input feeding, sec. 3.3; [y_{t-1}] without it)
        a_t  = align(h_t, h_s),  c_t = sum_s a_t(s) h_s          (eq. 7; local: eq. 9-10)
        h~_t = tanh(W_c [c_t; h_t])                               (eq. 5, no bias as in the paper)
        output_t = h~_t                                           (fed to the softmax layer, eq. 6)

    h~_0 is zeros. Global attention takes any score: "general" by default, as in the paper ("scaled_general"
    trains more reliably with Adam, see ``GeneralScore``), "dot" needs ``units`` equal to the memory dim,
    "location" ...; ``LocalAttention`` gives local-m (p_t = t: the step index is passed to ``attend_step``) or
    local-p (p_t predicted from h_t, eq. 9).

    Args:
        units: size of h_t and h~_t (optional when ``cell`` is an instance).
        attention: an attnlayers attention layer; default ``Attention(score="general")``.
        cell: "lstm" (default, the paper's), "gru", "simple_rnn", or a Keras cell instance; a
            ``StackedRNNCells`` gives the paper's deep decoder (attention on the top layer).
        input_feeding: feed h~_{t-1} into the cell with y_{t-1} (default True).
        kernel_initializer: initializer of W_c.

    Call arguments:
        target_embeddings: (B, T, E) the embedded decoder inputs y_0 .. y_{T-1} (teacher forcing: the start
            token, then the targets shifted right). Its implicit Keras mask is propagated to the outputs, so a
            masked loss ignores padded target steps (their outputs are computed but never feed a real step).
        memory: (B, S, D) the encoder states.
        memory_mask: (B, S) padding mask of the memory (True = real); taken from ``memory``'s implicit Keras
            mask when omitted. Padded positions get weight 0 and change nothing.
        initial_state: the cell's initial state (see :meth:`initial_cache`); zeros when omitted.
        return_attention_scores: also return the attention weights.
        return_sample: (``HardAttention`` only) also return the sample statistics of every step, a dict of
            float32 (B, T): ``"log_prob"`` log p(s_t), ``"entropy"`` H(alpha_t); pass it to
            ``attnlayers.hard.ReinforceLoss`` to train REINFORCE hard attention (Xu et al. 2015, eq. 11-13).
        training: enables the cell's and the attention's dropout (and ``HardAttention``'s sampling).
        feedback: None (teacher forcing), or an ``attnlayers.scheduled_sampling.Feedback`` for scheduled sampling
            (Bengio et al. 2015): step t reads the gold input where ``feedback.teacher`` is True, else the
            embedding (``feedback.embed``) of the token the model chose (``feedback.logits`` on the previous
            step's output, argmax or sampled, no gradient through the choice). The gold inputs are still
            ``target_embeddings``; ``feedback.tokens`` are their ids.

    Returns:
        outputs (B, T, units), the attentional hidden states h~_t; with ``return_attention_scores`` also the
        weights (B, T, S): row t is the alignment a_t used to predict the target token t.
        With ``return_sample``, the sample dict comes next; with ``feedback``, last the (B, T) int32 token ids
        each step read (gold or the model's).

    Example:
    >>> memory = encoder(source)                                     # (B, S, 256), masked
    >>> decoder = LuongDecoder(256, attention=LocalAttention(window=5, mode="local-p"))
    >>> h_tilde = decoder(target_embedding(target_in), memory, initial_state=[bridge_h(h), bridge_c(c)])
    >>> logits = keras.layers.Dense(vocab_size)(h_tilde)               # eq. 6

    Greedy or beam search over the same weights::

        cache = decoder.initial_cache(memory, source_mask, initial_state=[h0, c0])
        next = decoder.next_function(target_embedding, logits_layer)
        result = attnlayers.decoding.generate(next, start_tokens, 50, "greedy", cache=cache, index=1)
    """

    default_score = "general"
    default_cell = "lstm"

    def __init__(self, units=None, attention=None, cell=None, input_feeding=True,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(units=units, attention=attention, cell=cell, **kwargs)
        self.input_feeding = bool(input_feeding)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.attentional_dense = keras.layers.Dense(  # W_c of eq. 5
            self.units, activation="tanh", use_bias=False, kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy, name="attentional_dense",
        )

    def build(self, target_embeddings_shape=None, memory_shape=None):
        super().build(target_embeddings_shape, memory_shape)
        self.attentional_dense.build((memory_shape[0], self.memory_dim + self.units))

    def _cell_input_dim(self, embedding_dim, memory_dim):
        return embedding_dim + (self.units if self.input_feeding else 0)  # [y_{t-1}; h~_{t-1}]

    def _output_dim(self):
        return self.units

    def _initial_extra(self, batch):
        return {"feed": ops.zeros((batch, self.units), self.compute_dtype)} if self.input_feeding else {}

    def _step(self, y_prev, cache, index, training, return_sample=False):
        y_prev = ops.cast(y_prev, self.compute_dtype)
        inputs = ops.concatenate([y_prev, cache["feed"]], axis=-1) if self.input_feeding else y_prev
        h, new_states = self._run_cell(inputs, cache["states"], training)  # h_t = f(h_{t-1}, [y; h~])
        h = ops.cast(h, self.compute_dtype)
        context, weights, sample = self._attend(h, cache, index, training, return_sample)  # eq. 7: query h_t
        h_tilde = ops.cast(self.attentional_dense(ops.concatenate([context, h], axis=-1)), self.compute_dtype)  # eq. 5
        updates = {"states": new_states}
        if self.input_feeding:
            updates["feed"] = h_tilde
        return h_tilde, updates, weights, sample

    def get_config(self):
        return {
            **super().get_config(),
            "input_feeding": self.input_feeding,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
