"""Scheduled sampling (Bengio, Vinyals, Jaitly & Shazeer 2015): train a decoder on its own predictions.

Teacher forcing feeds a decoder the true previous token y_{t-1}; at inference it reads its own prediction, a
mismatch called exposure bias. Scheduled sampling flips a coin at every decoder step of training: with
probability eps_i the decoder reads y_{t-1}, otherwise its own prediction y^_{t-1} (a sample from its softmax,
or the argmax), and eps_i decays with the training iteration i (section 2.1):

    linear           eps_i = max(epsilon, k - c i)        0 <= epsilon <= 1, k >= 0, c >= 0
    exponential      eps_i = k^i                          0 < k < 1
    inverse sigmoid  eps_i = k / (k + exp(i / k))         k >= 1

Parts (composed, not flagged):

- the schedules :class:`LinearDecay`, :class:`ExponentialDecay`, :class:`InverseSigmoidDecay` (``get`` reads
  ``"inverse_sigmoid:1000"``-style specs);
- :class:`ScheduledSampler`, a layer an application model owns: it counts its training calls (i, a
  ``training_step.step_counter``: saved with the weights, the same on every replica), computes eps_i in the graph
  and draws the coins. Nothing is assigned from outside the train step, so it works under ``tf.distribute``,
  ``jit_compile`` and the JAX trainer as is; :class:`ScheduledSamplingLogger` only logs eps_i (TensorBoard,
  history);
- :class:`Feedback`, what one call needs: the gold tokens, the coins, and for an RNN decoder the embedding and
  the output layer, so that its loop can feed back its own token (``AttentionRNNDecoder.call(feedback=...)``).
  A parallel decoder (the Transformer) uses :meth:`Feedback.mix` on the predictions of a first pass
  (Mihaylova & Martins 2019).

No gradient flows through the choice of the fed token (argmax / sampling are not differentiable, and the
logits that choose it are wrapped in ``stop_gradient``), as in the paper.

    sampler = ScheduledSampler("inverse_sigmoid:1000")           # an attribute of the model
    feedback = sampler.feedback(target_in, training, embed=embedding, logits=lambda output, token: dense(output))
    outputs, fed = decoder(embedding(target_in), memory, feedback=feedback)   # feedback None: teacher forcing
"""

from __future__ import annotations

import math
import random

import keras
from keras import ops

from attnlayers.layer_walk import nested_layers
from attnlayers.training_step import count_step, step_counter
from attnlayers.validation import is_number, one_of

PREDICTIONS = ("sample", "argmax")
EPSILON_LOG_KEY = "scheduled_sampling_epsilon"


# ----------------------------------------------------------------------------------------------------------
# Schedules (Bengio et al. 2015, section 2.1)


def _number(value, name, schedule, condition, expected):
    if not is_number(value) or not condition(float(value)):
        raise ValueError(f"{schedule}: `{name}` must be {expected}; received {name}={value!r}.")
    return float(value)


class SamplingSchedule:
    """eps_i, the probability of reading the true previous token at training iteration i.

    Subclasses implement :meth:`value` (NumPy-free Python math, for logs and tests) and :meth:`__call__`
    (``keras.ops``, for the graph); both give the same number.
    """

    name = None
    arguments = ()

    def __call__(self, step):
        """eps_i for ``step`` i (a scalar tensor or number) as a float32 scalar tensor."""
        raise NotImplementedError

    def value(self, step):
        """eps_i for ``step`` i as a Python float."""
        raise NotImplementedError

    def get_config(self):
        return {name: getattr(self, name) for name in self.arguments}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def spec(self):
        """The ``get`` spec of this schedule, e.g. ``"inverse_sigmoid:1000"``."""
        return f"{self.name}:" + ",".join(f"{getattr(self, a):g}" for a in self.arguments)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{a}={getattr(self, a)!r}' for a in self.arguments)})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash((type(self), tuple(self.get_config().items())))


def _step(step):
    return ops.cast(step, "float32")


@keras.saving.register_keras_serializable(package="attnlayers")
class LinearDecay(SamplingSchedule):
    """eps_i = max(epsilon, k - c i) (Bengio et al. 2015, section 2.1), at most 1.

    Args:
        k: the offset, >= 0 (1: start from teacher forcing; above 1 the first (k - 1) / c iterations are teacher
            forced; 0 with epsilon 0: always the model's own tokens).
        c: the slope, >= 0 (0: a constant eps = min(1, max(epsilon, k))).
        epsilon: the least truth the model is given, in [0, 1].
    """

    name = "linear"
    arguments = ("k", "c", "epsilon")

    def __init__(self, k=1.0, c=1e-4, epsilon=0.0):
        where = "LinearDecay (eps_i = max(epsilon, k - c i))"
        self.k = _number(k, "k", where, lambda x: x >= 0, "a number >= 0")
        self.c = _number(c, "c", where, lambda x: x >= 0, "a number >= 0")
        self.epsilon = _number(epsilon, "epsilon", where, lambda x: 0 <= x <= 1, "a number in [0, 1]")

    def __call__(self, step):
        return ops.minimum(1.0, ops.maximum(self.epsilon, self.k - self.c * _step(step)))

    def value(self, step):
        return min(1.0, max(self.epsilon, self.k - self.c * float(step)))


@keras.saving.register_keras_serializable(package="attnlayers")
class ExponentialDecay(SamplingSchedule):
    """eps_i = k^i (Bengio et al. 2015, section 2.1).

    Args:
        k: in (0, 1); eps halves every log(2) / -log(k) iterations (k = 0.9999: every 6,931).
    """

    name = "exponential"
    arguments = ("k",)

    def __init__(self, k=0.9999):
        self.k = _number(k, "k", "ExponentialDecay (eps_i = k^i)", lambda x: 0 < x < 1, "a number in (0, 1)")

    def __call__(self, step):
        return ops.exp(_step(step) * math.log(self.k))  # k^i

    def value(self, step):
        return self.k ** float(step)


@keras.saving.register_keras_serializable(package="attnlayers")
class InverseSigmoidDecay(SamplingSchedule):
    """eps_i = k / (k + exp(i / k)) (Bengio et al. 2015, section 2.1); eps_i = 1/2 at i = k ln k.

    Computed as sigmoid(ln k - i / k), the same number without overflow of exp(i / k).

    Args:
        k: >= 1; larger k decays later (k = 1000: eps 0.9 at i = 4,710, 0.5 at 6,908, 0.1 at 9,105).
    """

    name = "inverse_sigmoid"
    arguments = ("k",)

    def __init__(self, k=1000.0):
        self.k = _number(k, "k", "InverseSigmoidDecay (eps_i = k / (k + exp(i / k)))", lambda x: x >= 1,
                         "a number >= 1")

    def __call__(self, step):
        return ops.sigmoid(math.log(self.k) - _step(step) / self.k)

    def value(self, step):
        x = math.log(self.k) - float(step) / self.k
        return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


SCHEDULES = {cls.name: cls for cls in (LinearDecay, ExponentialDecay, InverseSigmoidDecay)}
SPEC_FORMS = ("linear:K,C[,EPSILON]", "exponential:K", "inverse_sigmoid:K")


def get(identifier):
    """A :class:`SamplingSchedule` from a schedule, its ``{"class_name", "config"}`` / ``keras.saving`` dict, or a
    spec: ``"NAME:VALUES"`` with the values in the order of the formula's letters or as ``key=value`` pairs,

    - ``"linear:K,C[,EPSILON]"``, e.g. ``"linear:1,1e-4,0.1"`` = max(0.1, 1 - 1e-4 i);
    - ``"exponential:K"``, e.g. ``"exponential:0.9999"`` = 0.9999^i;
    - ``"inverse_sigmoid:K"``, e.g. ``"inverse_sigmoid:1000"`` = 1000 / (1000 + exp(i / 1000)).

    Raises a ValueError naming the spec and the expected forms for anything else.
    """
    if isinstance(identifier, SamplingSchedule):
        return identifier
    if isinstance(identifier, dict):
        if identifier.get("class_name") in (cls.__name__ for cls in SCHEDULES.values()):
            cls = next(c for c in SCHEDULES.values() if c.__name__ == identifier["class_name"])
            return cls(**identifier.get("config", {}))
        return keras.saving.deserialize_keras_object(identifier)
    if not isinstance(identifier, str):
        raise ValueError(f"A sampling schedule must be a SamplingSchedule, a config dict or a spec such as "
                         f"'inverse_sigmoid:1000'; received {identifier!r}.")
    return _parse(identifier)


def _parse(spec):
    forms = "expected " + ", ".join(SPEC_FORMS) + " (values in order or as key=value)"
    name, colon, values = spec.strip().partition(":")
    name = name.strip().lower().replace("-", "_")
    if name not in SCHEDULES:
        raise ValueError(f"Unknown sampling schedule {spec!r}: the name must be one of {list(SCHEDULES)}; {forms}.")
    cls = SCHEDULES[name]
    parts = [p.strip() for p in values.split(",")] if values.strip() else []
    if not colon or not parts or any(not p for p in parts):
        raise ValueError(f"Sampling schedule {spec!r} has no values; {forms}.")
    positional, keywords = [], {}
    for part in parts:
        key, equals, text = part.partition("=")
        key = key.strip().lower()
        if equals and key not in cls.arguments:
            raise ValueError(f"Sampling schedule {spec!r}: unknown key {key!r}; {name} takes {list(cls.arguments)}.")
        try:
            number = float(text if equals else part)
        except ValueError:
            raise ValueError(f"Sampling schedule {spec!r}: {part!r} is not a number; {forms}.") from None
        if equals:
            if keywords.get(key) is not None:
                raise ValueError(f"Sampling schedule {spec!r} gives {key!r} twice.")
            keywords[key] = number
        elif keywords:
            raise ValueError(f"Sampling schedule {spec!r}: positional values must come before key=value ones.")
        else:
            positional.append(number)
    required = 2 if cls is LinearDecay else 1
    if len(positional) > len(cls.arguments):
        raise ValueError(f"Sampling schedule {spec!r} has {len(positional)} values; {name} takes at most "
                         f"{len(cls.arguments)} ({', '.join(cls.arguments)}); {forms}.")
    given = {**dict(zip(cls.arguments, positional)), **keywords}
    missing = [a for a in cls.arguments[:required] if a not in given]
    if missing:
        raise ValueError(f"Sampling schedule {spec!r} lacks {', '.join(missing)}; {forms}.")
    return cls(**given)


# ----------------------------------------------------------------------------------------------------------
# Choosing and mixing tokens


def choose_tokens(logits, uniform=None):
    """The model's token from ``logits`` (..., V): the argmax when ``uniform`` is None, else a sample of
    softmax(logits) by inverse transform with the uniform draws ``uniform`` (...,) in [0, 1): the first v whose
    cumulative probability exceeds u. int32 (...,); no gradient."""
    logits = ops.stop_gradient(ops.cast(logits, "float32"))
    vocabulary = ops.shape(logits)[-1]
    if uniform is None:
        return ops.cast(ops.argmax(logits, axis=-1), "int32")
    cumulative = ops.cumsum(ops.softmax(logits, axis=-1), axis=-1)
    below = ops.sum(ops.cast(cumulative <= ops.expand_dims(ops.cast(uniform, "float32"), -1), "int32"), axis=-1)
    return ops.minimum(below, vocabulary - 1)  # u beyond a rounded-down total of 1 -> the last token


class Feedback:
    """One training call's scheduled sampling: which decoder steps read the truth, and how the model's own
    token is chosen and read.

    Args:
        tokens: (B, T) int, the gold decoder inputs y_0 .. y_{T-1} (the start token, then the targets).
        teacher: (B, T) bool, True where step t reads the gold token (column 0, the start token, always does).
        uniform: (B, T) float32 draws in [0, 1) that sample the model's token (``prediction="sample"``), or None
            for the argmax.
        embed: (RNN decoders) callable, (B,) int token ids -> (B, E) embeddings of the model's tokens.
        logits: (RNN decoders) callable, ``logits(output (B, output_dim), token (B,) int) -> (B, V)``: the
            output layer on the decoder's output at a step (``token``: the token that step read, for a deep output
            that also reads E y_{t-1}). Called in the decoder's loop; keep it deterministic (no dropout).
        epsilon: the eps_i the coins were drawn with (a scalar, for inspection), or None.
    """

    def __init__(self, tokens, teacher, uniform=None, embed=None, logits=None, epsilon=None):
        self.tokens = ops.cast(tokens, "int32")
        teacher = ops.cast(teacher, "bool")
        first = ops.expand_dims(ops.arange(ops.shape(teacher)[1]) == 0, 0)
        self.teacher = ops.logical_or(teacher, first)  # y_0 is the start token: always given
        self.uniform = None if uniform is None else ops.cast(uniform, "float32")
        self.embed, self.logits, self.epsilon = embed, logits, epsilon

    @classmethod
    def draw(cls, tokens, epsilon, *, prediction="sample", seed=None, embed=None, logits=None):
        """Flips the coins: step t reads the truth with probability ``epsilon`` (Bengio et al. sec. 2.1).

        Args:
            tokens: (B, T) gold decoder inputs.
            epsilon: eps_i, a number or scalar tensor in [0, 1] (1: teacher forcing, 0: always the model's token).
            prediction: "sample" (from the model's softmax, as in the paper's figure 1) or "argmax".
            seed: an int or a ``keras.random.SeedGenerator`` (inside a traced function: a SeedGenerator).
            embed, logits: see the class.
        """
        one_of(prediction, "prediction", PREDICTIONS)
        tokens = ops.convert_to_tensor(tokens)
        shape = ops.shape(tokens)
        teacher = keras.random.uniform(shape, seed=seed) < ops.cast(epsilon, "float32")  # u < eps: the truth
        uniform = keras.random.uniform(shape, seed=seed) if prediction == "sample" else None
        return cls(tokens, teacher, uniform, embed=embed, logits=logits, epsilon=epsilon)

    def choose(self, logits, uniform=None):
        """:func:`choose_tokens` with this call's rule (``uniform`` of the step(s) when sampling)."""
        return choose_tokens(logits, None if self.uniform is None else uniform)

    def mix(self, predictions):
        """Decoder inputs for a parallel decoder's second pass (Mihaylova & Martins 2019): input t is the gold
        ``tokens[:, t]`` where ``teacher`` and otherwise the first pass's prediction of it, ``predictions[:, t - 1]``
        (predictions (B, T) int: the token predicted at each position, i.e. for input t + 1). (B, T) int32."""
        predictions = ops.cast(predictions, "int32")
        predicted_inputs = ops.concatenate([self.tokens[:, :1], predictions[:, :-1]], axis=1)
        return ops.where(self.teacher, self.tokens, predicted_inputs)


# ----------------------------------------------------------------------------------------------------------
# The layer a model owns, and the logging callback


@keras.saving.register_keras_serializable(package="attnlayers")
class ScheduledSampler(keras.layers.Layer):
    """Scheduled sampling for a model's decoder: eps_i from a schedule over its own training-call count i.

    ``iterations`` (an :func:`attnlayers.training_step.step_counter`: float32, non-trainable, saved with the
    weights, so a restored run goes on with its schedule) counts the calls of :meth:`feedback` in training, one per
    training step of ``fit``, ``train_on_batch`` or a custom loop. eps_i is computed in the graph from it, so
    nothing outside the train step assigns a variable: it works under ``tf.distribute`` (every replica reads the
    same i at step i and advances its own copy, with no sync point in the model's call), ``jit_compile`` and JAX's
    stateless trainer, with ``steps_per_execution`` too.

    Args:
        schedule: a :class:`SamplingSchedule`, a spec for :func:`get` (``"inverse_sigmoid:1000"``) or a config.
        prediction: the model's token: "sample" (from its softmax, the paper's figure 1) or "argmax".
        seed: seed of the coins and samples (int or None).

    Example:
    >>> sampler = ScheduledSampler("linear:1,1e-4,0.25", prediction="argmax")
    >>> feedback = sampler.feedback(target_in, training=True, embed=embedding, logits=output_fn)
    >>> sampler.epsilon                                    # eps_i of the next training step, a float
    """

    def __init__(self, schedule="inverse_sigmoid:1000", prediction="sample", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.schedule = get(schedule)
        self.prediction = one_of(prediction, "prediction", PREDICTIONS)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(_unobtrusive_seed() if seed is None else seed)
        self.iterations = step_counter(self, "iterations")
        self.built = True

    @property
    def epsilon(self):
        """eps_i of the next training call, a Python float."""
        return self.schedule.value(float(ops.convert_to_numpy(self.iterations.value)))

    def feedback(self, tokens, training=None, *, embed=None, logits=None):
        """This training step's :class:`Feedback` (the coins drawn with eps_i, then i += 1), or None when not
        training (teacher forcing: evaluation and ``predict`` are unchanged).

        Args:
            tokens: (B, T) int gold decoder inputs.
            training: the model call's ``training``.
            embed, logits: see :class:`Feedback` (RNN decoders).
        """
        if not training:
            return None
        epsilon = self.schedule(count_step(self.iterations, training))  # eps_i; the count becomes i + 1
        return Feedback.draw(tokens, epsilon, prediction=self.prediction, seed=self.seed_generator, embed=embed,
                             logits=logits)

    def call(self, inputs=None):
        return self.schedule(self.iterations.value)  # eps_i (the layer is used through feedback())

    def get_config(self):
        return {**super().get_config(), "schedule": keras.saving.serialize_keras_object(self.schedule),
                "prediction": self.prediction, "seed": self.seed}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("schedule"), dict):
            config["schedule"] = get(config["schedule"])
        return cls(**config)


def _unobtrusive_seed():
    """A seed for ``seed=None`` that leaves Python's random state as it was: Keras seeds unseeded layers and
    initializers from it, so a model builds the same weights with and without a sampler. (The draw is mixed so
    that the sampler's stream is not the next layer's.)"""
    state = random.getstate()
    try:
        return (random.randint(1, 10**9) * 2654435761 + 97) % (2**31 - 1)
    finally:
        random.setstate(state)


def get_sampler(identifier, seed=None):
    """A model constructor's ``scheduled_sampling`` argument as a :class:`ScheduledSampler` or None: None, a
    sampler, its config dict, a schedule, or a spec (``"inverse_sigmoid:1000"``; ``prediction`` "sample")."""
    if identifier is None or isinstance(identifier, ScheduledSampler):
        return identifier
    if isinstance(identifier, dict) and identifier.get("class_name") == "ScheduledSampler":
        return keras.saving.deserialize_keras_object(identifier)
    if isinstance(identifier, dict) and "schedule" in identifier:
        return ScheduledSampler(**{"seed": seed, **identifier, "name": identifier.get("name", "scheduled_sampler")})
    return ScheduledSampler(get(identifier), seed=seed, name="scheduled_sampler")


def find_samplers(model):
    """The :class:`ScheduledSampler` layers of ``model`` (itself included), in Keras' order of its layers
    (:func:`attnlayers.layer_walk.nested_layers`: a model's layers and the layers any layer holds)."""
    if isinstance(model, ScheduledSampler):
        return [model]
    return [layer for layer in nested_layers(model) if isinstance(layer, ScheduledSampler)]


class ScheduledSamplingLogger(keras.callbacks.Callback):
    """Logs eps_i as ``scheduled_sampling_epsilon`` (the value of the epoch's last step) in the epoch logs, so
    ``History``, the progress bar and ``keras.callbacks.TensorBoard`` (``epoch_scheduled_sampling_epsilon``)
    see it; with ``per_batch`` also in every batch's logs. Put it *before* TensorBoard in the callback list
    (callbacks see the logs in order). It assigns nothing: eps_i is computed in the train step.

    Args:
        sampler: a :class:`ScheduledSampler`, or None for the one in the model being trained.
        per_batch: also log after every batch (under JAX that syncs the training state each step).
    """

    def __init__(self, sampler=None, per_batch=False):
        super().__init__()
        self.sampler, self.per_batch = sampler, bool(per_batch)

    def _epsilon(self):
        found = [self.sampler] if self.sampler is not None else find_samplers(self.model)
        if not found:
            raise ValueError(f"ScheduledSamplingLogger found no ScheduledSampler in model {self.model.name!r}; build "
                             "the model with scheduled_sampling=... or pass the sampler.")
        sampler = found[0]
        # The count is of steps run: the last step used eps at count - 1.
        return sampler.schedule.value(max(0.0, float(ops.convert_to_numpy(sampler.iterations.value)) - 1.0))

    def on_train_batch_end(self, batch, logs=None):
        if self.per_batch and logs is not None:
            logs[EPSILON_LOG_KEY] = self._epsilon()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs[EPSILON_LOG_KEY] = self._epsilon()


__all__ = [
    "ExponentialDecay", "Feedback", "InverseSigmoidDecay", "LinearDecay", "SamplingSchedule", "ScheduledSampler",
    "ScheduledSamplingLogger", "choose_tokens", "find_samplers", "get", "get_sampler",
]
