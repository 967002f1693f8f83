"""Stochastic "hard" attention (Xu et al. 2015, "Show, Attend and Tell", sec. 4.1).

At training time the layer *samples* where to attend, ``s ~ Multinoulli(alpha)`` with
``alpha = masked_softmax(score(query, key))`` (Xu eq. 8), and the context is the value at the sampled position
(eq. 9). A sample has no pathwise gradient, so the score is trained by one of two estimators:

- ``estimator="gumbel"``: straight-through Gumbel-softmax (Jang et al. 2017; Maddison et al. 2017). The forward
  pass uses the hard one-hot ``one_hot(argmax(log alpha + g))``, the backward pass the gradient of
  ``softmax((log alpha + g) / tau)``. Works in any model with plain ``fit``.
- ``estimator="reinforce"``: the score-function (REINFORCE) gradient of Xu eq. 11-13,
  ``E[(L - b) grad log p(s)]`` with a moving-average baseline ``b`` and an entropy bonus. The reward is the
  negative per-example task loss, which a layer cannot see. Two ways to wire it, both trained by ``model.fit``:
  explicitly, the layer (or an attention RNN decoder) returns each sample's log-probability and entropy
  (``return_sample=True``) and :class:`ReinforceLoss` (or :func:`reinforce_surrogate`) turns them and the
  per-example loss into the surrogate loss; or, for a layer called once in a model's forward pass,
  :class:`ReinforceModel`, whose ``compute_loss`` adds the surrogate from the compiled loss.

:class:`GumbelTemperatureSchedule` anneals the Gumbel temperature ``tau`` during ``fit``.
"""

import threading
import warnings

import keras
import numpy as np
from keras import ops

from attnlayers import masking
from attnlayers.attention import Attention
from attnlayers.distribution import scale_for_replicas
from attnlayers.layer_walk import nested_layers
from attnlayers.validation import is_number, one_of, positive_int, positive_number, rate_in_unit_interval


__all__ = ["GumbelTemperatureSchedule", "HardAttention", "ReinforceLoss", "ReinforceModel", "reinforce_surrogate",
           "straight_through"]

_ESTIMATORS = ("reinforce", "gumbel")
_SAMPLE_KEYS = ("log_prob", "entropy")
_INFERENCE = ("argmax", "expectation")
# Smallest positive float32: keeps -log(-log(u)) finite for u drawn from [tiny, 1).
_TINY = float(np.finfo("float32").tiny)


def straight_through(hard, soft):
    """``hard`` in the forward pass, the gradient of ``soft`` in the backward pass.

    ``soft - stop_gradient(soft)`` is exactly 0 in floating point, so the forward value is ``hard`` bit for bit.
    """
    return hard + (soft - ops.stop_gradient(soft))


@keras.saving.register_keras_serializable(package="attnlayers")
class HardAttention(Attention):
    """Stochastic hard attention (Xu et al. 2015, "Show, Attend and Tell", sec. 4.1).

    Training (``training=True``): each query samples a key position from its attention distribution
    ``alpha = softmax(score(query, key))`` over the visible keys (Xu eq. 8) and its context is that position's
    value (eq. 9). With ``num_samples = K > 1`` the weights are the mean of K sampled one-hots. Masked positions
    are never sampled. Inference (``training`` False / None): the argmax one-hot (``inference="argmax"``, the
    most likely location) or the soft expectation ``alpha`` (``inference="expectation"``, the deterministic
    approximation Xu et al. use at test time).

    Which estimator:

    - ``"gumbel"`` (straight-through Gumbel-softmax): low variance, slightly biased (the backward pass is the
      gradient of a relaxed sample), and self-contained, so it works in any model, any training loop,
      ``keras.layers.RNN`` cells included. Anneal ``tau`` towards 0 with :class:`GumbelTemperatureSchedule` for
      a less biased gradient (at the cost of variance). The simpler choice: nothing else to wire.
    - ``"reinforce"`` (the default; score function, the paper's estimator, Xu eq. 11-13): unbiased but higher
      variance, reduced by a moving-average baseline and an entropy bonus. Its gradient needs the per-example
      task loss: either call the layer (or the decoder holding it) with ``return_sample=True`` and add
      :class:`ReinforceLoss` to the model's loss (works anywhere, decoder loops included), or build the model
      as a :class:`ReinforceModel` (the layer called once in the model's own forward pass). Otherwise the
      scorer gets no gradient at all (a warning says so).

    Args:
        score: a score name ("dot", "scaled_dot", "general", "additive", "location", "cosine", "mlp", ...), a
            ``Score`` instance or a serialized score config.
        estimator: "reinforce" or "gumbel" (see above).
        num_samples: K >= 1 samples per query in training; the weights are the mean of their one-hots.
        inference: "argmax" or "expectation": the weights used when not training.
        temperature: initial Gumbel-softmax temperature tau > 0 ("gumbel" only). Stored as the non-trainable
            weight ``tau`` so a callback can anneal it.
        baseline_decay: decay in [0, 1) of the moving-average baseline (``ReinforceModel`` path):
            ``b <- decay * b + (1 - decay) * mean(L)``. The first batch sets ``b = mean(L)``.
        entropy_weight: lambda_e >= 0, weight of the entropy bonus ``-lambda_e * H(alpha)`` added with
            ``add_loss`` in training (``ReinforceModel`` path; Xu eq. 13). With ``return_sample=True`` the layer
            adds nothing and records nothing: :class:`ReinforceLoss` holds its own baseline and weight.
        seed: seed of the sampling.

    Call arguments:
        query: (B, T, Dq) queries (decoder states), or (B, Dq) for a single decoder step.
        value: (B, S, Dv) values (annotation vectors).
        key: (B, S, Dk); defaults to ``value``.
        query_mask: (B, T) padding mask of the queries; padded queries get zero weights and context.
        value_mask: (B, S) padding mask of the keys / values.
        attention_mask: (B, T, S) boolean, True = may attend (axes of size 1 broadcast).
        use_causal_mask: query t sees keys s <= t + (S - T) only.
        return_attention_scores: also return the weights.
        return_sample: also return the sample statistics, a dict of float32 (B, T) (or (B,)) tensors:
            ``"log_prob"``: log p(s_t) = sum over the K draws of log alpha_t(s) (the argmax's in inference with
            ``inference="argmax"``, 0 with ``"expectation"``); ``"entropy"``: H(alpha_t) (Xu eq. 13's H[s]).
            They carry the gradients REINFORCE needs; pass them to :class:`ReinforceLoss`.
        training: sample (True) or use the inference weights (False / None).
        Implicit Keras masks on ``query`` / ``value`` are used when the explicit masks are not given.

    Returns:
        context (B, T, Dv) — or (B, Dv) for a (B, Dq) query —, if requested the weights (B, T, S) — or
        (B, S): one-hots (means of K one-hots) in training and with ``inference="argmax"``, ``alpha`` with
        ``inference="expectation"`` —, and if requested the sample dict. A query that sees no key gets zero
        weights, a zero context, log-probability 0 and entropy 0.

    Example:
    >>> tokens = keras.Input((10,), dtype="int32")
    >>> states = keras.layers.Embedding(100, 32)(tokens)
    >>> query = keras.layers.GlobalAveragePooling1D()(states)
    >>> context = HardAttention(score="general", estimator="reinforce")(query, states)
    >>> model = ReinforceModel(tokens, keras.layers.Dense(5, activation="softmax")(context))
    >>> model.compile("adam", "sparse_categorical_crossentropy")  # then model.fit(...) as usual

    Inside a decoder loop (the setting of Xu et al.), with the explicit sample statistics::

        decoder = LuongDecoder(64, attention=HardAttention(score="general"))
        outputs, sample = decoder(target_embeddings, memory, return_sample=True)   # sample: (B, T) each
        loss = ReinforceLoss()(per_example_task_loss, sample)                    # added to the model's loss
    """

    stochastic = True

    def __init__(
        self,
        score="dot",
        estimator="reinforce",
        num_samples=1,
        inference="argmax",
        temperature=1.0,
        baseline_decay=0.9,
        entropy_weight=0.01,
        seed=None,
        **kwargs,
    ):
        dropout = kwargs.pop("dropout", 0.0)
        if dropout:
            raise ValueError(
                f"HardAttention does not take `dropout` (its weights are sampled one-hots); received "
                f"dropout={dropout!r}; expected 0."
            )
        super().__init__(score=score, dropout=0.0, seed=seed, **kwargs)
        self.estimator = one_of(estimator, "estimator", _ESTIMATORS)
        self.inference = one_of(inference, "inference", _INFERENCE)
        self.num_samples = positive_int(num_samples, "num_samples", what="samples per query")
        self.temperature = positive_number(temperature, "temperature")
        self.baseline_decay = rate_in_unit_interval(baseline_decay, "baseline_decay")
        self.entropy_weight = _non_negative_number(entropy_weight, "entropy_weight")
        self.seed_generator = keras.random.SeedGenerator(seed)
        # REINFORCE plumbing (not tracked by Keras): per-thread log p(s) of the samples drawn in the current
        # forward pass (threads: tf.distribute runs one replica per thread), whether a ReinforceModel
        # consumes them, and whether the "nothing wires the reward" warning was given.
        object.__setattr__(self, "_log_probs", {})  # thread id -> list of (B,) tensors
        object.__setattr__(self, "_reward_wired", False)
        object.__setattr__(self, "_warned_unwired", False)

    def build(self, query_shape=None, value_shape=None, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        if self.estimator == "gumbel":
            self.tau = self.add_weight(
                name="tau",
                shape=(),
                initializer=keras.initializers.Constant(self.temperature),
                trainable=False,
                aggregation="only_first_replica",
            )
        else:
            # Moving average of the per-example *loss* L = -reward, i.e. minus the paper's reward baseline.
            self.baseline = self.add_weight(
                name="baseline", shape=(), initializer="zeros", trainable=False, aggregation="mean"
            )
            self.baseline_steps = self.add_weight(
                name="baseline_steps", shape=(), initializer="zeros", trainable=False,
                aggregation="only_first_replica",
            )

    # ---------------------------------------------------------------------------------------------- weights

    def _gumbel_noise(self, shape):
        """Standard Gumbel noise g = -log(-log(u)), u ~ U[tiny, 1), float32 (always finite)."""
        u = keras.random.uniform(shape, minval=_TINY, maxval=1.0, dtype="float32", seed=self.seed_generator)
        return -ops.log(-ops.log(u))

    def _sample(self, logits, mask, training, with_statistics):
        """Weights (B, T, S) in the logits' dtype and, if ``with_statistics``, float32 (B, T) log p(s) of the
        draws and entropy H(alpha) (else None, None)."""
        dtype = logits.dtype
        x = ops.cast(logits, "float32")  # sampling and log-probabilities always in float32
        length = x.shape[-1] if x.shape[-1] is not None else ops.shape(x)[-1]
        if mask is not None:
            mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(x))
            visible = ops.cast(ops.any(mask, axis=-1, keepdims=True), "float32")  # (B, T, 1)
            x_masked = ops.where(mask, x, masking.large_negative("float32"))
        else:
            visible, x_masked = None, x
        log_alpha = ops.log_softmax(x_masked, axis=-1) if with_statistics else None  # masked entries never used

        def statistics(hard):  # hard: (B, T, K, S) draws, or None for no sample
            if not with_statistics:
                return None, None
            alpha = masking.masked_softmax(x, mask)
            entropy = -ops.sum(ops.where(alpha > 0, alpha * log_alpha, 0.0), axis=-1)  # H(alpha_t), (B, T)
            if hard is None:
                return ops.zeros_like(entropy), entropy
            # log p(s) of the K draws of a query: sum_k log alpha(s_k) (independent draws, Xu eq. 8).
            log_prob = ops.sum(ops.where(hard > 0, ops.expand_dims(log_alpha, -2), 0.0), axis=(-2, -1))
            return log_prob, entropy

        if not training:
            if self.inference == "expectation":
                return (masking.masked_softmax(logits, mask),) + statistics(None)  # E[s] = alpha (Xu sec. 4.2)
            hard = ops.one_hot(ops.argmax(x_masked, axis=-1), length, dtype="float32")
            hard = hard if visible is None else hard * visible
            return (ops.cast(hard, dtype),) + statistics(ops.expand_dims(hard, -2))

        # Gumbel-max: argmax_i(log alpha_i + g_i) ~ Multinoulli(alpha) (Xu eq. 8). K draws: (B, T, K, S).
        # Masked logits are a huge negative, so a masked position can win only where every key is masked,
        # and those rows are zeroed by `visible`.
        batch, queries = ops.shape(x)[0], ops.shape(x)[1]
        noise = self._gumbel_noise((batch, queries, self.num_samples, length))
        index = ops.argmax(ops.expand_dims(x_masked, -2) + noise, axis=-1)  # (B, T, K)
        hard = ops.one_hot(index, length, dtype="float32")  # (B, T, K, S)
        if visible is not None:
            hard = hard * ops.expand_dims(visible, -1)
        if self.estimator == "gumbel":
            # Straight-through Gumbel-softmax: forward one_hot(argmax(x + g)), backward d/dx softmax((x + g) / tau)
            # (Jang et al. 2017, eq. 1; Maddison et al. 2017). Divide before masking: the fill value stays finite.
            tau = ops.cast(self.tau, "float32")
            sample_mask = None if mask is None else ops.expand_dims(mask, -2)
            soft = masking.masked_softmax((ops.expand_dims(x, -2) + noise) / tau, sample_mask)
            weights = ops.mean(straight_through(hard, soft), axis=-2)
        else:  # REINFORCE: the one-hots themselves; the gradient comes through log p(s)
            weights = ops.mean(hard, axis=-2)
        return (ops.cast(weights, dtype),) + statistics(hard)

    def compute_weights(self, logits, mask, *, query, value_mask, training, index=None):
        reinforce = bool(training) and self.estimator == "reinforce"
        weights, log_prob, entropy = self._sample(logits, mask, training, with_statistics=reinforce)
        if not reinforce:
            return weights
        # The ReinforceModel path: log p(s) travels to ReinforceModel.compute_loss, the entropy bonus by add_loss.
        if self.entropy_weight > 0:
            # Entropy bonus lambda_e * H(alpha) (Xu eq. 13), as a loss: minimising -lambda_e * H raises H.
            self.add_loss(-self.entropy_weight * ops.mean(ops.sum(entropy, axis=-1)))
        if self._reward_wired:
            self._record_log_prob(ops.sum(log_prob, axis=-1))  # (B,): the queries' samples are independent
        elif not self._warned_unwired:  # nothing would consume the log-probabilities: record nothing, warn
            object.__setattr__(self, "_warned_unwired", True)
            warnings.warn(
                f"HardAttention layer '{self.name}' (estimator='reinforce') was called with training=True, but "
                f"no ReinforceModel wires its reward: its scorer gets no gradient from the task loss. Call it "
                f"with return_sample=True and add attnlayers.hard.ReinforceLoss to the model's loss, build the "
                f"model as attnlayers.hard.ReinforceModel(inputs, outputs), or use HardAttention("
                f"estimator='gumbel'), which needs no wiring.",
                stacklevel=2,
            )
        return weights

    def _weights_and_sample(self, logits, mask, *, query, value_mask, training, index=None):
        weights, log_prob, entropy = self._sample(logits, mask, training, with_statistics=True)
        return weights, {"log_prob": log_prob, "entropy": entropy}

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
        return_sample=False,
        training=None,
    ):
        return self._attend(
            query, value, key, query_mask, value_mask, attention_mask, use_causal_mask,
            return_attention_scores, training, return_sample=return_sample,
        )

    def compute_output_spec(
        self, query, value, key=None, return_attention_scores=False, return_sample=False, **kwargs
    ):
        return self._output_spec(query.shape, value.shape, return_attention_scores, return_sample)

    # -------------------------------------------------------------------------------------------- REINFORCE

    def _record_log_prob(self, log_prob):
        self._log_probs.setdefault(threading.get_ident(), []).append(log_prob)

    def _clear_log_probs(self):
        self._log_probs.pop(threading.get_ident(), None)

    def _pop_log_probs(self):
        """The per-example log p(s) recorded in this thread since the last clear (a list of (B,)), cleared."""
        return self._log_probs.pop(threading.get_ident(), None) or []

    def reinforce_surrogate(self, per_example_loss, log_probs):
        """The REINFORCE surrogate for one batch (:func:`reinforce_surrogate` with this layer's baseline), and
        the baseline update (the ``ReinforceModel`` path).

        ``b`` is the baseline *before* this batch (it does not depend on the current samples, so the estimator
        stays unbiased); then ``b <- decay * b + (1 - decay) * mean(L)``. The first batch uses ``b = mean(L)``.

        Args:
            per_example_loss: (B,) task loss of every example.
            log_probs: a (B,) tensor or a list of them (one per call of the layer in the forward pass).

        Returns:
            Scalar float32 surrogate loss (its value is not meaningful, its gradient is).
        """
        if not isinstance(log_probs, (list, tuple)):
            log_probs = [log_probs]
        log_prob = ops.cast(log_probs[0], "float32")
        for extra in log_probs[1:]:
            log_prob = log_prob + ops.cast(extra, "float32")
        baseline, update = _moving_average_baseline(self, per_example_loss)
        surrogate = reinforce_surrogate(per_example_loss, log_prob, baseline)
        update()
        return surrogate

    # ---------------------------------------------------------------------------------------------- Keras API

    def get_config(self):
        config = super().get_config()
        config.pop("dropout", None)
        config.update(
            estimator=self.estimator,
            num_samples=self.num_samples,
            inference=self.inference,
            temperature=self.temperature,
            baseline_decay=self.baseline_decay,
            entropy_weight=self.entropy_weight,
        )
        return config


def _non_negative_number(value, name):
    if not is_number(value) or not value >= 0:
        raise ValueError(f"`{name}` must be a number >= 0; received {name}={value!r}.")
    return float(value)


def _moving_average_baseline(holder, per_example_loss):
    """The baseline b for this batch and a function that applies the update. ``holder`` has the variables
    ``baseline`` / ``baseline_steps`` and the float ``baseline_decay``.

    b is the moving average *before* this batch (independent of the current samples, so the estimator stays
    unbiased), or the batch mean on the first batch; the update is ``b <- decay * b + (1 - decay) * mean(L)``.
    """
    batch_mean = ops.mean(ops.stop_gradient(ops.cast(per_example_loss, "float32")))
    started = ops.cast(holder.baseline_steps, "float32") > 0
    baseline = ops.where(started, ops.cast(holder.baseline, "float32"), batch_mean)
    decay = holder.baseline_decay

    def update():
        holder.baseline.assign(ops.where(started, decay * baseline + (1.0 - decay) * batch_mean, batch_mean))
        holder.baseline_steps.assign(holder.baseline_steps + 1.0)

    return baseline, update


def reinforce_surrogate(per_example_loss, log_probs, baseline, entropy=None, entropy_weight=0.0, step_mask=None):
    """The REINFORCE surrogate loss of stochastic attention (Xu et al. 2015, eq. 11-13).

    Xu eq. 12 with the loss ``L = -log p(y | s, a)`` in place of the reward:
    ``grad = mean_i((L_i - b) * grad log p(s_i))``, so the surrogate is
    ``mean_i(stop_gradient(L_i - b) * log p(s_i)) - lambda_e * mean_i(H_i)``: its gradient is the
    score-function estimator, plus the entropy bonus of eq. 13 (minimising -lambda_e * H raises H).

    Args:
        per_example_loss: (B,) the task loss of every example (the whole sequence's, as in the paper), or
            (B, T) a loss per step: each step's sample is then credited with its own step's loss only, which
            has less variance and is unbiased when a step's sample affects no later step (e.g. a
            ``LuongDecoder(input_feeding=False)``, whose cell never sees the context).
        log_probs: (B,) or (B, T) log p(s) of the samples (``sample["log_prob"]``); with a (B,) loss, (B, T) is
            summed over the steps.
        baseline: the baseline b, a scalar (e.g. a moving average of the loss; see :class:`ReinforceLoss`).
        entropy: None, or (B,) / (B, T) entropies H(alpha) (``sample["entropy"]``), reduced like ``log_probs``.
        entropy_weight: lambda_e >= 0.
        step_mask: None, or (B, T) True at real target steps: padded steps' log-probabilities, entropies and
            (for a (B, T) loss) losses are left out.

    Returns:
        Scalar float32. Its value is not meaningful, its gradient is.
    """
    loss = ops.stop_gradient(ops.cast(per_example_loss, "float32"))
    log_probs = ops.cast(log_probs, "float32")
    entropy = None if entropy is None or not entropy_weight else ops.cast(entropy, "float32")
    weight = None if step_mask is None else ops.cast(step_mask, "float32")
    if len(loss.shape) not in (1, 2) or len(log_probs.shape) not in (1, 2) or len(log_probs.shape) < len(loss.shape):
        raise ValueError(
            f"`per_example_loss` must have shape (batch,) or (batch, steps) and `log_probs` (batch,) or (batch, "
            f"steps), at least the rank of the loss; received shapes {tuple(loss.shape)} and "
            f"{tuple(log_probs.shape)}."
        )

    def reduce(x):  # (B, T) or (B,) -> the per-example term(s) the loss is compared with
        if weight is not None and len(x.shape) == 2:
            x = x * weight
        return ops.sum(x, axis=-1) if len(x.shape) == 2 and len(loss.shape) == 1 else x

    def mean(x):
        if weight is None or len(x.shape) == 1:
            return ops.mean(x)
        return ops.sum(x * weight) / ops.maximum(ops.sum(weight), 1.0)

    advantage = ops.stop_gradient(loss - ops.cast(baseline, "float32"))
    surrogate = mean(advantage * reduce(log_probs))  # Xu eq. 12
    if entropy is not None:
        surrogate = surrogate - entropy_weight * mean(reduce(entropy))  # Xu eq. 13
    return surrogate


@keras.saving.register_keras_serializable(package="attnlayers")
class ReinforceLoss(keras.layers.Layer):
    """The REINFORCE loss of stochastic attention, with its moving-average baseline (Xu et al. 2015, eq. 11-13).

    For sampled attention anywhere in a model, a decoder loop included: the attention (or the decoder) returns
    the log-probability of every sample and the entropy of its distribution (``return_sample=True``), the model
    computes its per-example task loss, and this layer turns both into the surrogate of
    :func:`reinforce_surrogate`, with ``b`` the moving average of the loss (before this batch; the first batch
    uses its own mean). In training it adds the surrogate to the model's losses (``add_loss``, which Keras
    divides by the replicas under ``tf.distribute``) as a zero-valued term carrying the surrogate's
    gradient, so the logged loss stays the task loss; and it updates the baseline. Otherwise it only returns it.

    Args:
        baseline_decay: decay in [0, 1) of the baseline: ``b <- decay * b + (1 - decay) * mean(L)``.
        entropy_weight: lambda_e >= 0, weight of the entropy bonus (Xu eq. 13).

    Call arguments:
        per_example_loss: (B,) the task loss of every example, or (B, T) per step (see
            :func:`reinforce_surrogate`). Its gradient is not used.
        sample: the dict ``{"log_prob": (B, T) or (B,), "entropy": same}`` from ``return_sample=True``.
        step_mask: None, or (B, T) True at real target steps.
        training: add the loss and update the baseline.

    Returns:
        The scalar float32 surrogate.

    Example (a decoder with hard attention, trained by ``model.fit``; ``call`` of a subclassed model)::

        outputs, sample = self.decoder(self.embed(decoder_in), memory, return_sample=True, training=training)
        logits = self.project(outputs)
        step_loss = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)  # (B, T)
        self.reinforce(ops.mean(step_loss, axis=-1), sample, training=training)     # ReinforceLoss()
        return logits
    """

    def __init__(self, baseline_decay=0.9, entropy_weight=0.01, **kwargs):
        super().__init__(**kwargs)
        self.baseline_decay = rate_in_unit_interval(baseline_decay, "baseline_decay")
        self.entropy_weight = _non_negative_number(entropy_weight, "entropy_weight")
        # Moving average of the per-example *loss* L = -reward, i.e. minus the paper's reward baseline.
        self.baseline = self.add_weight(
            name="baseline", shape=(), initializer="zeros", trainable=False, aggregation="mean"
        )
        self.baseline_steps = self.add_weight(
            name="baseline_steps", shape=(), initializer="zeros", trainable=False, aggregation="only_first_replica"
        )
        self.built = True

    def call(self, per_example_loss, sample, step_mask=None, training=None):
        if not isinstance(sample, dict) or any(k not in sample for k in _SAMPLE_KEYS):
            raise ValueError(
                f"`sample` must be the dict {{'log_prob': ..., 'entropy': ...}} returned with return_sample=True; "
                f"received {sample!r}."
            )
        baseline, update = _moving_average_baseline(self, per_example_loss)
        surrogate = reinforce_surrogate(
            per_example_loss, sample["log_prob"], baseline, sample["entropy"], self.entropy_weight, step_mask
        )
        if training:
            self.add_loss(surrogate - ops.stop_gradient(surrogate))  # Keras divides it by the replicas
            update()
        return surrogate

    def compute_output_spec(self, *args, **kwargs):
        return keras.KerasTensor((), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "baseline_decay": self.baseline_decay, "entropy_weight": self.entropy_weight}


def _hard_layers(target, estimator):
    if isinstance(target, HardAttention):
        layers = [target]
    else:
        layers = [layer for layer in nested_layers(target) if isinstance(layer, HardAttention)]
    return [layer for layer in layers if layer.estimator == estimator]


def _single(structure, what):
    """Unwraps a one-element list / tuple / dict; raises for several outputs."""
    if isinstance(structure, dict):
        if len(structure) != 1:
            raise ValueError(
                f"ReinforceModel supports one output with one loss; received {what} with keys "
                f"{sorted(structure)}. Expected a single-output model compiled with a single loss."
            )
        return next(iter(structure.values()))
    if isinstance(structure, (list, tuple)):
        if len(structure) != 1:
            raise ValueError(
                f"ReinforceModel supports one output with one loss; received {len(structure)} {what}. "
                f"Expected a single-output model compiled with a single loss."
            )
        return structure[0]
    return structure


@keras.saving.register_keras_serializable(package="attnlayers")
class ReinforceModel(keras.Model):
    """A ``keras.Model`` that trains ``HardAttention(estimator="reinforce")`` layers with plain ``fit``.

    ``compute_loss`` returns the compiled loss as usual plus, for every REINFORCE hard-attention layer that
    sampled in this forward pass, the surrogate ``mean_i(stop_gradient(L_i - b) * log p(s_i))`` whose gradient is
    the score-function estimator of Xu et al. (2015, eq. 12-13), where ``L_i`` is example i's task loss (the
    negative reward) and ``b`` the layer's moving-average baseline, updated in the same step (also under JAX:
    the JAX trainer collects non-trainable variables assigned inside ``compute_loss``). Under ``tf.distribute``
    the surrogate is scaled per replica like Keras' own losses and the baseline is averaged across replicas.

    Use it like ``keras.Model``: functionally (``ReinforceModel(inputs, outputs)``) or subclassed. The
    per-example loss comes from the compiled loss: a loss name (``keras.losses.get``), a ``keras.losses.Loss``
    (its ``call``, i.e. before reduction) or a function ``fn(y_true, y_pred)``; axes after the batch axis are
    averaged and sample weights applied. Only single-output models with one loss are supported. Custom training
    loops: call the model with ``training=True`` and then ``model.compute_loss(x, y, y_pred, training=True)``.

    Limits: the surrogate needs the layer's log-probabilities in the same trace as the loss, so a REINFORCE layer
    must be called in the model's forward pass, not inside a loop body (an attention RNN decoder, a
    ``keras.layers.RNN`` cell, ``ops.scan``): there, return the samples' statistics explicitly
    (``return_sample=True``) and add :class:`ReinforceLoss`.

    Example:
    >>> model = ReinforceModel(inputs, outputs)  # outputs computed through HardAttention(estimator="reinforce")
    >>> model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    >>> model.fit(x, y, epochs=10)
    """

    def _reinforce_layers(self):
        return _hard_layers(self, "reinforce")

    def _start_forward(self):
        # A new forward pass: forget samples never consumed (e.g. from a manual model(x, training=True)) and
        # tell the layers that their reward is wired (no warning).
        for layer in self._reinforce_layers():
            layer._clear_log_probs()
            object.__setattr__(layer, "_reward_wired", True)

    def __call__(self, *args, **kwargs):  # TensorFlow / eager forward passes
        self._start_forward()
        return super().__call__(*args, **kwargs)

    def stateless_call(self, *args, **kwargs):  # the JAX trainer's forward pass
        self._start_forward()
        return super().stateless_call(*args, **kwargs)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        for layer in self._reinforce_layers():
            object.__setattr__(layer, "_reward_wired", True)

    def per_example_loss(self, y, y_pred, sample_weight=None):
        """The compiled loss of every example (non-batch axes averaged, sample weights applied): the reward of
        the REINFORCE estimator.

        Args:
            y: (B, ...) targets (a single target).
            y_pred: (B, ...) predictions (a single output).
            sample_weight: (B,) or (B, ...) weights, or None.

        Returns:
            (B,) float32 losses.

        Raises:
            ValueError: no loss is compiled, the loss is nested or not a loss, or it returns a scalar instead of one
                value per example.
        """
        loss = self.loss
        if loss is None:
            raise ValueError(
                "ReinforceModel needs a compiled `loss` to compute its reward; received loss=None. "
                "Expected model.compile(loss=...) with a single loss."
            )
        loss = _single(loss, "losses")
        if isinstance(loss, (list, tuple)):
            raise ValueError(f"ReinforceModel cannot use the nested loss {loss!r}; expected a single loss.")
        y_pred = _single(y_pred, "outputs")
        y = _single(y, "targets") if isinstance(y, (list, tuple, dict)) else y
        fn = keras.losses.get(loss) if isinstance(loss, (str, dict)) else loss
        if isinstance(fn, keras.losses.Loss):
            call, dtype = fn.call, fn.dtype or "float32"
        elif callable(fn):
            call, dtype = fn, "float32"
        else:
            raise ValueError(
                f"ReinforceModel cannot compute a per-example loss from loss={loss!r}; expected a loss name, a "
                f"keras.losses.Loss or a function fn(y_true, y_pred)."
            )
        y_pred = ops.convert_to_tensor(y_pred, dtype=dtype)
        y = ops.convert_to_tensor(y, dtype=dtype)
        values = ops.cast(call(y, y_pred), "float32")
        if len(values.shape) == 0:
            raise ValueError(
                f"ReinforceModel needs a per-example loss, but loss={loss!r} returned a scalar. Expected a "
                f"function or keras.losses.Loss whose `call` returns one value per example, shape (batch, ...)."
            )
        if sample_weight is not None:
            weight = ops.cast(_single(sample_weight, "sample weights"), "float32")
            while len(weight.shape) > len(values.shape) and weight.shape[-1] == 1:
                weight = ops.squeeze(weight, -1)
            while len(weight.shape) < len(values.shape):
                weight = ops.expand_dims(weight, -1)
            values = values * weight
        if len(values.shape) > 1:
            values = ops.mean(values, axis=tuple(range(1, len(values.shape))))
        return values

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        total = super().compute_loss(x, y, y_pred, sample_weight, training=training)
        sampled = [(layer, layer._pop_log_probs()) for layer in self._reinforce_layers()]
        sampled = [(layer, log_probs) for layer, log_probs in sampled if log_probs]
        if not training or not sampled:
            return total
        per_example = self.per_example_loss(y, y_pred, sample_weight)
        for layer, log_probs in sampled:
            surrogate = layer.reinforce_surrogate(per_example, log_probs)
            surrogate = scale_for_replicas(surrogate)
            total = surrogate if total is None else total + ops.cast(surrogate, total.dtype)
        return total


class GumbelTemperatureSchedule(keras.callbacks.Callback):
    """Anneals the Gumbel-softmax temperature ``tau`` of ``HardAttention(estimator="gumbel")`` layers.

    Args:
        layer_or_model: a ``HardAttention`` layer, or a model (every gumbel ``HardAttention`` inside it is
            scheduled). None: the model being trained.
        schedule: ``schedule(epoch) -> tau`` (``per="epoch"``, set at the start of each epoch) or
            ``schedule(step) -> tau`` (``per="step"``, set before each training batch; ``step`` counts batches
            from 0 across epochs). Values must be > 0. A common choice (Jang et al. 2017):
            ``lambda step: max(0.5, math.exp(-1e-4 * step))``.
        per: "epoch" or "step".

    The current tau is logged as ``gumbel_temperature``. Under JAX, ``per="step"`` syncs the model state every
    step (that is how Keras callbacks change variables mid-epoch there), which costs some speed.

    Example:
    >>> model.fit(x, y, epochs=10, callbacks=[GumbelTemperatureSchedule(model, lambda e: max(0.5, 0.8 ** e))])
    """

    def __init__(self, layer_or_model=None, schedule=None, per="epoch"):
        super().__init__()
        if not callable(schedule):
            raise ValueError(f"`schedule` must be a callable epoch_or_step -> tau; received {schedule!r}.")
        if per not in ("epoch", "step"):
            raise ValueError(f"`per` must be 'epoch' or 'step'; received {per!r}.")
        self.target = layer_or_model
        self.schedule = schedule
        self.per = per
        self.step = 0
        self.current = None
        self._trained_model = None  # what set_model gave: read without `self.model`'s JAX state sync

    def set_model(self, model):
        super().set_model(model)
        self._trained_model = model

    def _layers(self):
        target = self.target if self.target is not None else self._trained_model
        layers = _hard_layers(target, "gumbel")
        if not layers:
            raise ValueError(
                f"GumbelTemperatureSchedule found no HardAttention(estimator='gumbel') layer in {target!r}; "
                f"expected such a layer or a model containing one."
            )
        return layers

    def _set(self, index):
        tau = float(self.schedule(index))
        if not tau > 0:
            raise ValueError(f"The temperature schedule must return tau > 0; received {tau!r} at {self.per} {index}.")
        if self._trained_model is not None:
            # Under JAX, touching `self.model` syncs the trainer's state into the variables and makes the next
            # step read them back, so the assignment below is not lost.
            self.model  # noqa: B018
        for layer in self._layers():
            if layer.built:
                layer.tau.assign(tau)
        self.current = tau

    def on_epoch_begin(self, epoch, logs=None):
        if self.per == "epoch":
            self._set(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.per == "step":
            self._set(self.step)
            self.step += 1

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.current is not None:
            logs["gumbel_temperature"] = self.current
