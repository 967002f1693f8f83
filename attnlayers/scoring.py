"""Attention score functions: query (B, T, Dq) and keys (B, S, Dk) -> logits (B, T, S).

Every score is a small Keras layer with two steps, so a decoder that attends over the same keys at every
step does the key-side work once (Bahdanau's precomputed U_a h_j):

    keys = score.prepare_keys(key)     # once per source sequence
    logits = score.score(query, keys)  # per decoder step

``score(query, key)`` (the layer's ``__call__``) does both. Pick a score by name (``get_score("general")``)
or pass an instance; register your own with :func:`register_score`.
"""

import functools
import math

import keras
from keras import ops

from attnlayers.validation import check_rank, positive_int, positive_number

__all__ = ["AdditiveScore", "CosineScore", "DotScore", "GeneralScore", "LocationScore", "MLPScore", "ScaledDotScore",
           "Score", "available_scores", "dense_last_axis", "get_score", "register_score", "serialize_score"]

_SCORES = {}


def register_score(name, factory=None):
    """Registers a score under ``name`` so ``score="name"`` works in every attention layer.

    Usable as ``register_score("mine", MyScore)`` or as a class decorator ``@register_score("mine")``.
    The factory is called with no arguments. For ``.keras`` files, also register the class with
    ``keras.saving.register_keras_serializable``.

    Args:
        name: the score's name.
        factory: a callable returning a :class:`Score` (a class); None makes this a decorator.

    Returns:
        ``factory``, or the decorator when ``factory`` is None.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string; received {name!r}.")

    def decorator(f):
        if not callable(f):
            raise ValueError(f"`factory` for score {name!r} must be callable; received {f!r}.")
        _SCORES[name] = f
        return f

    return decorator if factory is None else decorator(factory)


def available_scores():
    """Names accepted by :func:`get_score`."""
    return sorted(_SCORES)


def get_score(identifier, **kwargs):
    """Resolves a score: a registered name (with optional constructor kwargs), a ``Score`` instance, or a
    serialized config dict.

    Args:
        identifier: a name of :func:`available_scores`, a :class:`Score` or a config dict.
        **kwargs: the constructor's arguments, with a name.

    Returns:
        A :class:`Score` layer.

    Raises:
        ValueError: an unknown name or another type.
    """
    if isinstance(identifier, Score):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _SCORES:
            raise ValueError(
                f"Unknown `score` {identifier!r}; expected one of {available_scores()} or a Score instance."
            )
        return _SCORES[identifier](**kwargs)
    if isinstance(identifier, dict):
        return keras.saving.deserialize_keras_object(identifier)
    raise ValueError(
        f"`score` must be a name in {available_scores()}, a Score instance or a config dict; received "
        f"{identifier!r}."
    )


def serialize_score(identifier):
    """Config form of a score: its name if given by name, else the serialized layer."""
    if isinstance(identifier, str):
        return identifier
    return keras.saving.serialize_keras_object(identifier)


class Score(keras.layers.Layer):
    """Base class of score functions.

    Subclasses implement ``score(query, keys)`` and, when part of the work depends on the keys alone,
    ``prepare_keys(key)``.

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Call arguments:
        query: (B, T, Dq).
        key: (B, S, Dk).

    Returns:
        Logits (B, T, S), in the compute dtype.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # masks are the attention layer's business; scores pass none on

    def compute_mask(self, *args, **kwargs):
        return None

    def build(self, query_shape, key_shape):
        check_rank(query_shape, 3, "query", "(batch, length, dim)")
        check_rank(key_shape, 3, "key", "(batch, length, dim)")

    def prepare_keys(self, key):
        """Per-sequence work on the keys, done once and reused by every query (and every decoder step).

        Args:
            key: (B, S, Dk) keys.

        Returns:
            What :meth:`score` takes as ``keys``: the keys themselves here; a subclass may project or normalise them,
            e.g. (B, S, Dq) for :class:`GeneralScore`.
        """
        return key

    def score(self, query, keys):
        """The logits of every (query, key) pair: the one method subclasses implement.

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, ...).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        raise NotImplementedError

    def call(self, query, key):
        return self.score(query, self.prepare_keys(key))

    def compute_output_shape(self, query_shape, key_shape):
        return (query_shape[0], query_shape[1], key_shape[1])

    def _weight(self, w, like):
        # Weights used outside a sublayer's __call__ are cast explicitly (mixed precision).
        return ops.cast(w, like.dtype)


def _require_same_dim(query_shape, key_shape, name):
    if query_shape[-1] is not None and key_shape[-1] is not None and query_shape[-1] != key_shape[-1]:
        raise ValueError(
            f"The {name} score needs query and key of the same feature size; received query dim "
            f"{query_shape[-1]} and key dim {key_shape[-1]}. Use score='general' or 'additive' to score "
            f"vectors of different sizes."
        )


def dense_last_axis(layer, x):
    """``layer(x)`` for a layer acting on the last axis (a ``Dense``), applied to a rank-2 view of ``x``.

    Under TensorFlow a ``Dense`` on a rank > 2 input whose batch size is unknown is a ``tf.tensordot`` with
    computed permutations, whose gradient XLA cannot compile inside a while loop (a decoder that attends at
    every step); on a (N, D) view it is a plain matmul.
    """
    if len(x.shape) <= 2:
        return layer(x)
    y = layer(ops.reshape(x, (-1, x.shape[-1])))
    return ops.reshape(y, tuple(ops.shape(x)[:-1]) + (y.shape[-1],))


def _batched_dot(query, keys):
    # (B, T, D) x (B, S, D) -> (B, T, S)
    return ops.matmul(query, ops.swapaxes(keys, -1, -2))


@keras.saving.register_keras_serializable(package="attnlayers")
class DotScore(Score):
    """``score(q, k) = q . k`` (Luong et al. 2015, eq. 8 "dot").

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).

    Args:
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``).
    """

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        _require_same_dim(query_shape, key_shape, "dot")

    def score(self, query, keys):
        """``q . k`` for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, Dq).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        return _batched_dot(query, keys)


@keras.saving.register_keras_serializable(package="attnlayers")
class ScaledDotScore(Score):
    """``score(q, k) = q . k / sqrt(d_k)`` (Vaswani et al. 2017, eq. 1).

    Args:
        scale: multiply by this instead of ``1 / sqrt(d_k)``.

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, scale=None, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        _require_same_dim(query_shape, key_shape, "scaled_dot")
        self._scale = self.scale if self.scale is not None else 1.0 / math.sqrt(key_shape[-1])

    def score(self, query, keys):
        """``q . k / sqrt(d_k)`` for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, Dq).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        # Scale the (B, T, D) query rather than the (B, T, S) logits: fewer multiplies when S > D.
        return _batched_dot(query * ops.cast(self._scale, query.dtype), keys)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@keras.saving.register_keras_serializable(package="attnlayers")
class GeneralScore(Score):
    """``score(q, k) = q^T W_a k`` (Luong et al. 2015, eq. 8 "general"; bilinear), or with ``scaled=True``
    ``q^T W_a k / sqrt(Dk)`` (registered as "scaled_general").

    ``prepare_keys`` computes ``W_a k`` once, so a decoder step costs one (T x S) matmul.

    Under Adam the unscaled score can saturate early in training; ``scaled_general`` divides by sqrt(Dk)
    (measurements in docs/results/nmt.md).

    Args:
        kernel_initializer: initializer of W_a, shape (Dq, Dk).
        scaled: divide the logits by sqrt(Dk) (as scaled dot-product attention, Vaswani et al. 2017, eq. 1).

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, kernel_initializer="glorot_uniform", scaled=False, **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.scaled = bool(scaled)

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self.kernel = self.add_weight(
            name="kernel", shape=(query_shape[-1], key_shape[-1]), initializer=self.kernel_initializer
        )

    def prepare_keys(self, key):
        """``W_a k`` for every key (divided by sqrt(Dk) when ``scaled``), as :meth:`Score.prepare_keys`.

        Args:
            key: (B, S, Dk) keys.

        Returns:
            (B, S, Dq) projected keys.
        """
        # (B, S, Dk) x (Dk, Dq) -> (B, S, Dq): W_a k for every key (and / sqrt(Dk) when scaled).
        keys = ops.matmul(key, ops.transpose(self._weight(self.kernel, key)))
        return keys * ops.cast(1.0 / math.sqrt(key.shape[-1]), keys.dtype) if self.scaled else keys

    def score(self, query, keys):
        """``q . (W_a k)`` for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, Dq).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        return _batched_dot(query, keys)

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "scaled": self.scaled,
        }


class _PairwiseMLP(Score):
    """Shared body of the additive and MLP scores: a first layer split as W [q; k] = W_q q + W_k k, so the
    key half is computed once per sequence and broadcast against each query."""

    def __init__(self, units=None, activation="tanh", kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.units = positive_int(units, "units", allow_none=True)
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _dense(self, name, units, use_bias, activation=None):
        return keras.layers.Dense(
            units,
            use_bias=use_bias,
            activation=activation,
            kernel_initializer=self.kernel_initializer,
            name=name,
            dtype=self.dtype_policy,
        )

    def _build_first_layer(self, query_shape, key_shape):
        units = self.units or key_shape[-1]
        self.query_dense = self._dense("query_dense", units, use_bias=False)
        self.key_dense = self._dense("key_dense", units, use_bias=True)
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        return units

    def prepare_keys(self, key):
        """``W_k k + b`` for every key: the key half of the first layer, as :meth:`Score.prepare_keys`.

        Args:
            key: (B, S, Dk) keys.

        Returns:
            (B, S, units) projected keys.
        """
        return self.key_dense(key)

    def _hidden(self, query, keys):
        # act(W_q q_t + W_k k_s + b): (B, T, 1, U) + (B, 1, S, U) -> (B, T, S, U)
        query = dense_last_axis(self.query_dense, query)
        return self.activation(ops.expand_dims(query, 2) + ops.expand_dims(keys, 1))

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": keras.activations.serialize(self.activation),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class AdditiveScore(_PairwiseMLP):
    """``score(q, k) = v_a^T tanh(W_q q + W_k k)`` (Bahdanau et al. 2015, eq. 6; Luong's "concat"
    ``v_a^T tanh(W_a [q; k])`` is the same function).

    Unlike ``keras.layers.AdditiveAttention`` it has real W_q and W_k, so query and key may differ in size.
    Memory is O(B * T * S * units): the tanh is taken for every (query, key) pair.

    Args:
        units: width of the hidden layer; defaults to the key dim.
        kernel_initializer: initializer of W_q, W_k and v_a.

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, units=None, kernel_initializer="glorot_uniform", **kwargs):
        kwargs.pop("activation", None)
        super().__init__(units=units, activation="tanh", kernel_initializer=kernel_initializer, **kwargs)

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        units = self._build_first_layer(query_shape, key_shape)
        self.v = self.add_weight(name="v", shape=(units,), initializer=self.kernel_initializer)

    def score(self, query, keys):
        """``v_a^T tanh(W_q q + W_k k)`` for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, units).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        hidden = self._hidden(query, keys)
        return ops.einsum("btsu,u->bts", hidden, self._weight(self.v, hidden))

    def get_config(self):
        config = super().get_config()
        config.pop("activation")
        return config


@keras.saving.register_keras_serializable(package="attnlayers")
class MLPScore(_PairwiseMLP):
    """``score(q, k) = w_2^T act(... act(W_1 [q; k] + b_1) ...)``: a multi-layer perceptron on the
    concatenated pair, with ``depth`` hidden layers of ``units`` each.

    Args:
        units: hidden width (default 64).
        depth: number of hidden layers (>= 1).
        activation: hidden activation (default "relu").

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, units=64, depth=1, activation="relu", **kwargs):
        super().__init__(units=units, activation=activation, **kwargs)
        self.depth = positive_int(depth, "depth", what="the number of hidden layers, >= 1")

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        units = self._build_first_layer(query_shape, key_shape)
        hidden_shape = (None, None, None, units)
        self.hidden_layers = []
        for i in range(self.depth - 1):
            layer = self._dense(f"hidden_{i + 1}", units, use_bias=True, activation=self.activation)
            layer.build(hidden_shape)
            self.hidden_layers.append(layer)
        self.output_dense = self._dense("output_dense", 1, use_bias=False)
        self.output_dense.build(hidden_shape)

    def score(self, query, keys):
        """The perceptron's output for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, units).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        hidden = self._hidden(query, keys)
        for layer in self.hidden_layers:
            hidden = dense_last_axis(layer, hidden)
        return ops.squeeze(dense_last_axis(self.output_dense, hidden), -1)

    def get_config(self):
        return {**super().get_config(), "depth": self.depth}


@keras.saving.register_keras_serializable(package="attnlayers")
class LocationScore(Score):
    """Location-based score ``a_t = W_a h_t`` (Luong et al. 2015, eq. 8 "location"): logits over source
    positions computed from the query alone; the keys contribute only their length S.

    W_a has ``max_length`` outputs; a source of length S <= max_length uses the first S logits (positions
    past S do not exist, and padding inside S is masked by the attention layer as usual). S > max_length is
    an error: positions never seen in training have no weights.

    Args:
        max_length: the longest source the layer can score.

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, max_length=None, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = positive_int(
            max_length, "max_length",
            what="the longest source LocationScore can score: pass LocationScore(max_length=...)",
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        self._check_length(key_shape[1])
        self.dense = keras.layers.Dense(
            self.max_length, kernel_initializer=self.kernel_initializer, name="location_dense",
            dtype=self.dtype_policy,
        )
        self.dense.build(query_shape)

    def _check_length(self, length):
        if length is not None and length > self.max_length:
            raise ValueError(
                f"LocationScore(max_length={self.max_length}) cannot score a source of length {length}: "
                f"expected S <= {self.max_length}."
            )

    def score(self, query, keys):
        """``W_a h_t`` truncated to the S source positions (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: (B, S, Dk) keys; only their length S is used.

        Returns:
            Logits (B, T, S), in the compute dtype.

        Raises:
            ValueError: S (when static) is greater than ``max_length``.
        """
        length = ops.shape(keys)[1]
        self._check_length(keys.shape[1])
        return dense_last_axis(self.dense, query)[..., :length]

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package="attnlayers")
class CosineScore(Score):
    """``score(q, k) = (q . k) / (|q| |k| tau)``: cosine similarity with temperature tau.

    Cosines lie in [-1, 1], so with tau = 1 the softmax is nearly flat; a small or learnable tau sharpens
    it (learned as log tau, so it stays positive).

    Args:
        temperature: tau > 0.
        trainable_temperature: learn tau.
        epsilon: guards the norm of zero vectors.

    Call arguments and Returns as :class:`Score`: query (B, T, Dq), key (B, S, Dk) -> logits (B, T, S).
    """

    def __init__(self, temperature=1.0, trainable_temperature=False, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.temperature = positive_number(temperature, "temperature")
        self.trainable_temperature = trainable_temperature
        self.epsilon = epsilon

    def build(self, query_shape, key_shape):
        super().build(query_shape, key_shape)
        _require_same_dim(query_shape, key_shape, "cosine")
        self.log_temperature = self.add_weight(
            name="log_temperature",
            shape=(),
            initializer=keras.initializers.Constant(math.log(self.temperature)),
            trainable=self.trainable_temperature,
        )

    def _normalize(self, x):
        x32 = ops.cast(x, "float32")
        return ops.cast(x32 / ops.sqrt(ops.sum(x32 * x32, axis=-1, keepdims=True) + self.epsilon**2), x.dtype)

    def prepare_keys(self, key):
        """The keys scaled to unit norm, as :meth:`Score.prepare_keys`.

        Args:
            key: (B, S, Dk) keys.

        Returns:
            (B, S, Dk) normalised keys.
        """
        return self._normalize(key)

    def score(self, query, keys):
        """``cos(q, k) / tau`` for every pair (as :meth:`Score.score`).

        Args:
            query: (B, T, Dq) queries.
            keys: the keys as :meth:`prepare_keys` returned them, (B, S, Dk).

        Returns:
            Logits (B, T, S), in the compute dtype.
        """
        inv_tau = ops.exp(-ops.cast(self.log_temperature, "float32"))
        return _batched_dot(self._normalize(query) * ops.cast(inv_tau, query.dtype), keys)

    def get_config(self):
        return {
            **super().get_config(),
            "temperature": self.temperature,
            "trainable_temperature": self.trainable_temperature,
            "epsilon": self.epsilon,
        }


for _name, _cls in [
    ("dot", DotScore),
    ("scaled_dot", ScaledDotScore),
    ("general", GeneralScore),
    ("bilinear", GeneralScore),
    ("scaled_general", functools.partial(GeneralScore, scaled=True)),
    ("additive", AdditiveScore),
    ("concat", AdditiveScore),
    ("location", LocationScore),
    ("cosine", CosineScore),
    ("mlp", MLPScore),
]:
    register_score(_name, _cls)
