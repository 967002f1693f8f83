"""Output symbol generation over one step function: greedy search, beam search (the t best of k hypotheses,
GNMT length normalisation) and sampling (temperature, top-k, top-p / nucleus), for every autoregressive model
alike (GPT, the Transformer translator, the RNN seq2seq and captioning decoders).

A model is seen through one function (keras-hub's ``CausalLM`` step has the same form, so its models plug in)::

    next(tokens, cache, index) -> (logits, cache)            or (logits, hidden_states, cache)

``tokens`` is the whole (B, L) token buffer (the prompt, the tokens generated so far, then padding), ``index``
the scalar position to predict (the newest known token is ``tokens[:, index - 1]``), ``logits`` (B, V) or
(B, 1, V) the unnormalised scores of that position, and ``cache`` any nest of tensors with the batch on axis 0:
a Transformer key/value cache (B, layers, 2, L, heads, head_dim), RNN states, an encoder memory carried along
unchanged. A ``next`` that ignores the cache and recomputes the whole prefix is valid too.

:func:`generate` runs the loop with fixed shapes in ``keras.ops.while_loop``, so it traces once inside
``tf.function(jit_compile=True)`` or ``jax.jit`` and is what :mod:`attnlayers.export` writes into a SavedModel.
Finished rows are frozen and padded, and every sequence comes back with its log-probability and length
(:class:`DecodeResult`). Sampling keeps no random state: its noise is a hash of the seed and the position, so
the same seed gives the same tokens on every call, eager or compiled, under TensorFlow and JAX, and the seed can
be an input of a compiled or exported function.

Shapes: B batch, L ``max_length`` (prompt included), V vocabulary, k ``num_beams``, t ``num_return``.
"""

import math
import random as python_random
import sys
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from attnlayers.deprecation import renamed_attributes, renamed_keyword
from attnlayers.validation import concrete_value, is_int, is_number, positive_int, positive_number

__all__ = ["BeamSearch", "DecodeResult", "GreedySearch", "NEG_INF", "Sampling", "Search", "check_seed",
           "check_stop_sequences", "generate", "get_search", "length_penalty", "uniform_noise"]

# A finite "minus infinity" for impossible candidates: -inf would give inf - inf = NaN in the beam sums and the
# length normalisation. Scores are float32 (log-softmax in float32 whatever the model dtype).
NEG_INF = -1e9


class DecodeResult(NamedTuple):
    """What :func:`generate` returns (a NamedTuple: a nest that ``tf.function`` and ``jax.jit`` return as is).

    Attributes:
        tokens: int32 (B, L), or (B, t, L) for :class:`BeamSearch`: the prompt, the generated tokens up to and
            including the stop token, then ``pad_token_id``.
        scores: float32 (B,) or (B, t): the ranking score, ``log_probs`` divided by the length penalty
            lp(Y) when ``alpha`` > 0 (beam search), else equal to ``log_probs``. Beams are sorted by it, best
            first.
        log_probs: float32 (B,) or (B, t): sum of log p(y_i | y_<i, prompt) over the generated tokens (stop
            token included, prompt excluded) under the model's distribution softmax(logits), whatever the
            temperature or filter used to choose them.
        lengths: int32 (B,) or (B, t): the number of valid tokens of each sequence, prompt included; positions
            from ``lengths`` on hold ``pad_token_id``.
    """

    tokens: object
    scores: object
    log_probs: object
    lengths: object


# ----------------------------------------------------------------------------------------------------------
# Searches


class Search:
    """Base of the decoding searches. ``num_return`` is the number of sequences returned per row (None: one
    sequence, outputs without the t axis); ``stochastic`` says whether the search draws random numbers (and
    so takes a seed). A search that picks one token per row and step implements ``choose(logits (B, V)
    float32, index, seed) -> (B,) int32`` (and, if stochastic, ``initial_seed(seed) -> (2,) uint32``)."""

    num_return = None
    stochastic = False

    def get_config(self):
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class GreedySearch(Search):
    """Greedy search: the most probable token at every step, ``y_i = argmax_v logits_i[v]``.

    Example:
    >>> result = generate(next, prompt, max_length=32, search=GreedySearch())
    >>> result.tokens          # (B, 32)
    """

    def choose(self, logits, index, seed):
        """The most probable token of each row.

        Args:
            logits: (B, V) float32 logits of the position being chosen.
            index: the position (unused).
            seed: (2,) uint32 seed (unused).

        Returns:
            (B,) int32 tokens.
        """
        return ops.cast(ops.argmax(logits, axis=-1), "int32")


class Sampling(Search):
    """Ancestral sampling from softmax(logits / temperature), optionally restricted to the ``top_k`` most
    probable tokens (Fan et al. 2018) and / or to the nucleus: the smallest set of most probable tokens whose
    probability reaches ``top_p`` (Holtzman et al. 2020, section 3.1). With both, the nucleus is taken among
    the ``top_k`` tokens (their probabilities under the whole softmax, not renormalised).

    A draw is the Gumbel-max trick, ``y = argmax_v (logits[v] / temperature + g_v)`` with
    ``g_v = -log(-log(u_v))`` (Jang et al. 2017, eq. 1), and the uniform ``u`` a hash of (seed, position, row,
    candidate) in integer arithmetic (:func:`uniform_noise`): no random state, no variable. The same seed gives
    the same tokens on every call, compiled or not, in a SavedModel, and under TensorFlow and JAX alike (for
    the same logits), and a row's tokens do not depend on the other rows of the batch.

    Settings as tensors. ``temperature``, ``top_k`` and ``top_p`` may also be scalar tensors (e.g. inputs of a
    compiled or exported function, one trace for every setting). Then 0 is allowed and means off:
    ``temperature`` 0 is greedy search (the argmax, exactly :class:`GreedySearch`'s token), ``top_k`` 0 keeps
    every token, ``top_p`` 1.0 keeps every token. The whole vocabulary is sorted once per step (static shape:
    ``ops.top_k`` with a tensor k does not compile), ranks >= k and tokens outside the nucleus are masked, and
    the noise is indexed as with Python settings, so the same settings give the same tokens whether they are
    Python numbers or tensors (with ``top_k=None`` / ``top_p=None`` for the tensors' 0 / 1.0). Concrete (eager)
    tensors are checked here; symbolic ones cannot be (an exported function checks its inputs itself).

    Args:
        temperature: > 0 (a number), or >= 0 (a scalar tensor, 0 = greedy); below 1 sharpens, above 1 flattens
            the distribution.
        top_k: None or a positive int, or a scalar integer tensor (0 = off).
        top_p: None or a float in (0, 1], or a scalar float tensor in (0, 1] (1.0 = off).
        seed: int or None. :func:`generate`'s ``seed`` argument overrides it per call (and may be a tensor,
            e.g. a signature input). None: a fresh random seed per Python call (per trace when compiled).

    Example:
    >>> search = Sampling(temperature=0.8, top_p=0.9, seed=42)
    >>> result = generate(next, prompt, max_length=64, search=search, stop_token_ids=[eos])
    >>> Sampling(temperature=tf.constant(0.8), top_k=tf.constant(0), top_p=tf.constant(0.9))  # the same tokens
    """

    stochastic = True

    def __init__(self, temperature=1.0, top_k=None, top_p=None, seed=None):
        self.dynamic = any(_is_tensor(v) for v in (temperature, top_k, top_p))
        if _is_tensor(temperature):
            self.temperature = _check_setting(temperature, "temperature", lambda t: np.isfinite(t) and t >= 0,
                                              "a finite number >= 0 (0: greedy)")
        else:
            self.temperature = positive_number(temperature, "temperature", what="the softmax temperature")
        if _is_tensor(top_k):
            self.top_k = _check_setting(top_k, "top_k", lambda k: k >= 0, "an integer >= 0 (0: off)", integer=True)
        else:
            self.top_k = positive_int(top_k, "top_k", allow_none=True, what="the number of tokens kept")
        if _is_tensor(top_p):
            self.top_p = _check_setting(top_p, "top_p", lambda p: 0 < p <= 1, "a probability in (0, 1] (1.0: off)")
        else:
            if top_p is not None and not (is_number(top_p) and 0 < top_p <= 1):
                raise ValueError(
                    f"`top_p` must be a probability in (0, 1] (the nucleus mass); received top_p={top_p!r}."
                )
            self.top_p = None if top_p is None else float(top_p)
        if seed is not None and not is_int(seed):
            raise ValueError(f"`seed` must be an int or None; received seed={seed!r}.")
        self.seed = None if seed is None else int(seed)

    def get_config(self):
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}

    def initial_seed(self, seed=None):
        """The (2,) uint32 seed tensor of a call.

        Args:
            seed: an int, two ints, a scalar or (2,) integer tensor, or None (then ``self.seed``, else a fresh random
                int).

        Returns:
            (2,) uint32 tensor.

        Raises:
            ValueError: ``seed`` is not one of these (e.g. a string or a tensor of another shape).
        """
        check_seed(seed)
        if seed is None:
            seed = self.seed
        if seed is None:
            seed = python_random.randint(1, 2**31 - 1)
        if is_int(seed):
            seed = int(seed)
            return ops.convert_to_tensor(np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], "uint32"))
        seed = ops.convert_to_tensor(seed)
        if len(seed.shape) == 0:
            seed = ops.stack([seed, ops.zeros_like(seed)])
        elif tuple(seed.shape) != (2,):
            raise ValueError(
                "`seed` must be an int, a scalar integer tensor or a (2,) integer tensor; received a tensor of "
                f"shape {tuple(seed.shape)}."
            )
        return ops.cast(seed, "uint32")

    def choose(self, logits, index, seed):
        """A token drawn for each row from the filtered softmax(logits / temperature) (Gumbel-max).

        Args:
            logits: (B, V) float32 logits of position ``index``.
            index: the position being chosen (int or scalar tensor); it indexes the noise.
            seed: (2,) uint32 seed, as :meth:`initial_seed` returns it.

        Returns:
            (B,) int32 tokens.

        Raises:
            ValueError: ``top_p`` or tensor settings with logits whose vocabulary size V is not static.
        """
        if self.dynamic:
            return self._choose_with_tensor_settings(logits, index, seed)
        logits = logits / self.temperature
        ids = None  # the candidates' token ids (B, K) when filtered
        if self.top_k is not None or self.top_p is not None:
            vocab = logits.shape[-1]
            if self.top_k is None and vocab is None:
                raise ValueError("`top_p` sampling needs logits with a known vocabulary size (the last axis).")
            k = self.top_k if vocab is None else min(self.top_k or vocab, vocab)
            log_z = ops.logsumexp(logits, axis=-1, keepdims=True)
            logits, ids = ops.top_k(logits, k, sorted=True)  # (B, K), most probable first
            if self.top_p is not None:
                # The nucleus: token i stays while the probability of the tokens before it is below p.
                probs = ops.exp(logits - log_z)
                logits = ops.where(ops.cumsum(probs, axis=-1) - probs < self.top_p, logits, NEG_INF)
        gumbel = -ops.log(-ops.log(uniform_noise(seed, index, ops.shape(logits)[0], logits.shape[-1])))
        choice = ops.cast(ops.argmax(logits + gumbel, axis=-1), "int32")
        if ids is None:
            return choice
        return ops.take_along_axis(ops.cast(ids, "int32"), choice[:, None], axis=1)[:, 0]

    def _choose_with_tensor_settings(self, logits, index, seed):
        """:meth:`choose` with tensor settings: the whole vocabulary sorted, ranks >= k and tokens outside the
        nucleus masked (static shapes, so it compiles), the same noise cells as the Python-settings path."""
        vocab = logits.shape[-1]
        if vocab is None:
            raise ValueError("Sampling with tensor settings needs logits with a known vocabulary size (the last axis).")
        temperature = ops.cast(self.temperature, "float32")
        greedy = temperature <= 0.0
        scaled = logits / ops.where(greedy, 1.0, temperature)
        top_k = ops.convert_to_tensor(0 if self.top_k is None else self.top_k)
        top_k = ops.cast(top_k, "int32")
        top_p = ops.cast(1.0 if self.top_p is None else self.top_p, "float32")
        k = ops.where(top_k > 0, ops.minimum(top_k, vocab), vocab)  # the Python path's K = min(top_k or V, V)
        use_nucleus = top_p < 1.0
        filtered = ops.logical_or(top_k > 0, use_nucleus)
        log_z = ops.logsumexp(scaled, axis=-1, keepdims=True)
        ranked, ids = ops.top_k(scaled, vocab, sorted=True)  # (B, V), most probable first
        ids = ops.cast(ids, "int32")
        rank = ops.arange(vocab, dtype="int32")[None, :]
        probs = ops.exp(ranked - log_z)
        # The nucleus (Holtzman et al. 2020, eq. 2): token i stays while the mass before it is below p.
        in_nucleus = ops.logical_or(ops.logical_not(use_nucleus), ops.cumsum(probs, axis=-1) - probs < top_p)
        keep = ops.logical_and(rank < k, in_nucleus)  # top-k (Fan et al. 2018): ranks 0 .. k - 1
        ranked = ops.where(keep, ranked, NEG_INF)
        # Noise cells as the Python path: (row, rank) in a (B, K) grid when filtered, (row, token) unfiltered.
        row = ops.arange(ops.shape(logits)[0], dtype="int32")[:, None]
        cell = ops.where(filtered, row * k + rank, row * vocab + ids)
        gumbel = -ops.log(-ops.log(_hash_uniform(seed, index, cell)))
        choice = ops.cast(ops.argmax(ranked + gumbel, axis=-1), "int32")
        sampled = ops.take_along_axis(ids, choice[:, None], axis=1)[:, 0]
        return ops.where(greedy, ops.cast(ops.argmax(logits, axis=-1), "int32"), sampled)


def _is_tensor(value):
    """True for a backend tensor or a NumPy array (a setting given as a tensor), False for Python numbers."""
    return not (value is None or is_number(value)) and hasattr(value, "dtype") and hasattr(value, "shape")


def _check_setting(value, name, valid, expected, integer=False):
    """A scalar tensor setting of :class:`Sampling`; its value is checked when it is concrete (eager: not symbolic,
    see :func:`attnlayers.validation.concrete_value`)."""
    if len(value.shape) != 0:
        raise ValueError(f"`{name}` must be a scalar tensor; received a tensor of shape {tuple(value.shape)}.")
    kind = keras.backend.standardize_dtype(value.dtype)
    if integer and "int" not in kind:
        raise ValueError(f"`{name}` must be an integer tensor; received dtype {kind}.")
    if not integer and "float" not in kind and "int" not in kind:
        raise ValueError(f"`{name}` must be a number tensor; received dtype {kind}.")
    concrete = concrete_value(value, name)
    if concrete is None:  # a symbolic tensor (tf.function, jax.jit): checked by the caller
        return value
    concrete = concrete.item()
    if not valid(concrete):
        raise ValueError(f"`{name}` must be {expected}; received {name}={concrete!r}.")
    return value


def _mix(x, y, z, w):
    """One mixing round of pcg4d: each word absorbs the product of two others (mod 2^32)."""
    x = x + y * w
    y = y + z * x
    z = z + x * y
    w = w + y * z
    return x, y, z, w


def check_seed(seed):
    """``seed`` is None, an int, two ints, or an integer tensor / array (a scalar or (2,)); else a ValueError naming
    it (a string used to fail deep inside: "Cast string to uint32 is not supported")."""
    if seed is None or is_int(seed):
        return seed
    if isinstance(seed, (list, tuple)) and len(seed) == 2 and all(is_int(s) for s in seed):
        return seed
    dtype = getattr(seed, "dtype", None)
    if dtype is not None and not isinstance(seed, (str, bytes)):
        try:
            integer = keras.backend.is_int_dtype(keras.backend.standardize_dtype(dtype))
        except (ValueError, TypeError):
            integer = False
        if integer:
            return seed
    raise ValueError(
        "`seed` must be None, an int, or a scalar or (2,) integer tensor; received "
        f"seed={seed!r}{f' of dtype {dtype}' if dtype is not None else ''}."
    )


def uniform_noise(seed, index, rows, columns):
    """Uniform numbers in (0, 1), a pure function of (seed, index, row, column): the same on every backend,
    compiled or not, since it is integer arithmetic modulo 2^32.

    The four uint32 counters go through the pcg4d hash (Jarzynski & Olano 2020, "Hash Functions for GPU
    Rendering": ``v = v * 1664525 + 1013904223``, a mixing round, ``v ^= v >> 16``, a mixing round); the top 23
    bits b of the first word give ``u = (b + 1/2) / 2^23``, exactly representable in float32, never 0 or 1.

    Args:
        seed: (2,) uint32. index: a scalar int (the decoding position). rows: B (an int or scalar tensor).
        columns: K, a Python int.

    Returns:
        float32 (B, K).
    """
    cell = ops.reshape(ops.arange(rows * columns, dtype="int32"), (-1, columns))  # row * K + column
    return _hash_uniform(seed, index, cell)


def _hash_uniform(seed, index, cell):
    """:func:`uniform_noise` of explicit cells: ``cell`` int32 (any shape) -> float32 of its shape."""
    x, y, z, w = seed[0], seed[1], ops.cast(index, "uint32"), ops.cast(cell, "uint32")
    a, c = ops.convert_to_tensor(np.uint32(1664525)), ops.convert_to_tensor(np.uint32(1013904223))
    x, y, z, w = _mix(x * a + c, y * a + c, z * a + c, w * a + c)
    shift = ops.convert_to_tensor(np.uint32(16))
    x, y, z, w = (ops.bitwise_xor(v, ops.right_shift(v, shift)) for v in (x, y, z, w))
    word = _mix(x, y, z, w)[0]
    bits = ops.right_shift(word, ops.convert_to_tensor(np.uint32(9)))
    return (ops.cast(bits, "float32") + 0.5) * (2.0**-23)


class BeamSearch(Search):
    """Beam search keeping ``num_beams`` (k) hypotheses and returning the ``num_return`` (t) best.

    At each step every alive beam is extended by every token; of the 2k best candidates (by log-probability),
    those ending in a stop token that rank among the k best are finished (set aside, scored
    ``log P(Y) / lp(Y)``), and the k best of the others stay alive. A row stops when it has t finished
    hypotheses and no alive beam can still beat the t-th (log-probabilities only decrease). At
    ``max_length`` the alive beams compete with the finished ones as they are. With k = t = 1 and alpha = 0
    this is greedy search.

    Length normalisation (Wu et al. 2016, eq. 14): ``score(Y) = log P(Y | X) / lp(Y)`` with
    ``lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha``, |Y| the number of generated tokens (stop token included,
    prompt excluded). alpha = 0 ranks by log-probability; Wu et al. used alpha in [0.6, 0.7].

    Args:
        num_beams: k >= 1.
        num_return: t, 1 <= t <= k: sequences returned per row, best first (outputs get a t axis:
            ``tokens`` (B, t, L), ``scores`` (B, t)).
        alpha: length-normalisation exponent (>= 0).

    Example:
    >>> result = generate(next, start, max_length=50, search=BeamSearch(4, num_return=2, alpha=0.6),
    ...                   cache=cache, stop_token_ids=[eos])
    >>> result.tokens[:, 0]    # (B, 50): the best translation of each source sentence
    """

    def __init__(self, num_beams=4, num_return=1, alpha=0.0):
        self.num_beams = positive_int(num_beams, "num_beams", what="the beam size k")
        if not (is_int(num_return) and 1 <= num_return <= self.num_beams):
            raise ValueError(
                f"`num_return` (t, the number of sequences returned) must be an integer in [1, num_beams="
                f"{self.num_beams}]; received num_return={num_return!r}."
            )
        self.num_return = int(num_return)
        if not (is_number(alpha) and math.isfinite(alpha) and alpha >= 0):
            raise ValueError(
                f"`alpha` (the length-normalisation exponent) must be a finite number >= 0; received alpha={alpha!r}."
            )
        self.alpha = float(alpha)

    def get_config(self):
        return {"num_beams": self.num_beams, "num_return": self.num_return, "alpha": self.alpha}


_SEARCHES = {
    "greedy": GreedySearch,
    "beam": lambda: BeamSearch(),
    "random": lambda: Sampling(),
    "sample": lambda: Sampling(),
    "top_k": lambda: Sampling(top_k=5),
    "top_p": lambda: Sampling(top_p=0.9),
}


def _from_keras_hub(sampler):
    """The search equivalent to a keras-hub sampler (its settings; the draws are this module's), or None."""
    samplers = sys.modules["keras_hub"].samplers
    kind = type(sampler)
    if kind is samplers.GreedySampler:
        return GreedySearch()
    settings = {"temperature": sampler.temperature, "seed": getattr(sampler, "seed", None)}
    if kind is samplers.RandomSampler:
        return Sampling(**settings)
    if kind is samplers.TopKSampler:
        return Sampling(top_k=sampler.k, **settings)
    if kind is samplers.TopPSampler:
        return Sampling(top_p=sampler.p, top_k=sampler.k, **settings)
    return None


def get_search(identifier):
    """A decoding search from a name, a :class:`Search` or a keras-hub sampler.

    Args:
        identifier: "greedy", "beam" (k = 4), "random" or "sample", "top_k" (k = 5), "top_p" (p = 0.9); a
            :class:`Search`; or a ``keras_hub.samplers`` ``GreedySampler``, ``RandomSampler``,
            ``TopKSampler`` or ``TopPSampler``, translated to the equivalent search (same temperature, k, p
            and seed). Other keras-hub samplers (beam, contrastive, subclasses with their own token rule) are
            refused: use :class:`BeamSearch` for beam search.

    Returns:
        A :class:`Search`.

    Example:
    >>> get_search("top_k")                                  # Sampling(top_k=5)
    >>> get_search(keras_hub.samplers.TopKSampler(k=10))     # Sampling(top_k=10)
    """
    if isinstance(identifier, Search):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _SEARCHES:
            raise ValueError(f"`search` must be one of {sorted(_SEARCHES)}; received search={identifier!r}.")
        return _SEARCHES[identifier]()
    keras_hub = sys.modules.get("keras_hub")  # a keras-hub sampler implies keras_hub is imported
    if keras_hub is not None and isinstance(identifier, keras_hub.samplers.Sampler):
        search = _from_keras_hub(identifier)
        if search is None:
            raise ValueError(
                f"keras-hub's {type(identifier).__name__} is not supported as a search (only GreedySampler, "
                "RandomSampler, TopKSampler and TopPSampler are translated); use attnlayers.decoding.BeamSearch "
                f"for beam search, or Sampling for sampling. Received search={identifier!r}."
            )
        return search
    raise ValueError(
        "`search` must be a name (greedy, beam, random, sample, top_k, top_p), an attnlayers.decoding.Search or a "
        f"keras_hub.samplers sampler; received search={identifier!r}."
    )


def length_penalty(length, alpha):
    """GNMT's length penalty lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha (Wu et al. 2016, eq. 14).

    Args:
        length: |Y|, a number or a tensor (any shape).
        alpha: the exponent; 0 gives lp = 1.

    Returns:
        float32 of the shape of ``length``.

    Example:
    >>> float(length_penalty(1, 0.6)), round(float(length_penalty(7, 0.6)), 4)
    (1.0, 1.5157)
    """
    length = ops.cast(length, "float32")
    return ops.power((5.0 + length) / 6.0, alpha)


# ----------------------------------------------------------------------------------------------------------
# The loop


def _step(next, tokens, cache, index):
    """Calls ``next`` and returns (B, V) float32 logits and the new cache (hidden states are dropped)."""
    out = next(tokens, cache, index)
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 3):
        raise ValueError(
            "`next(tokens, cache, index)` must return (logits, cache) or (logits, hidden_states, cache); "
            f"received {type(out).__name__}"
            f"{' of length ' + str(len(out)) if isinstance(out, (tuple, list)) else ''}."
        )
    logits, new_cache = out[0], out[-1]
    if len(logits.shape) == 3 and logits.shape[1] == 1:
        logits = logits[:, 0]
    if len(logits.shape) != 2:
        raise ValueError(
            f"`next` must return logits of shape (batch, vocabulary) or (batch, 1, vocabulary); received shape "
            f"{tuple(logits.shape)}."
        )
    return ops.cast(logits, "float32"), (() if new_cache is None else new_cache)


def _is_stop(tokens, stop_token_ids):
    if not stop_token_ids:
        return ops.zeros_like(tokens, dtype="bool")
    hits = [ops.equal(tokens, s) for s in stop_token_ids]
    out = hits[0]
    for h in hits[1:]:
        out = ops.logical_or(out, h)
    return out


def _write(tokens, index, column):
    """tokens[:, index] = column (fixed shapes: an in-place dynamic update slice under XLA)."""
    return ops.slice_update(tokens, ops.stack([ops.zeros_like(index), index]), ops.expand_dims(column, 1))


def _column(x, index):
    """x[:, index] for a scalar tensor index."""
    return ops.take(x, index, axis=1)


def _check_stop_token_ids(stop_token_ids):
    if stop_token_ids is None:
        return ()
    if is_int(stop_token_ids):
        return (int(stop_token_ids),)
    if not isinstance(stop_token_ids, (list, tuple)) or not all(is_int(s) for s in stop_token_ids):
        raise ValueError(
            f"`stop_token_ids` must be None, an int or a list of ints; received stop_token_ids={stop_token_ids!r}."
        )
    return tuple(int(s) for s in stop_token_ids)


def check_stop_sequences(stop_sequences):
    """``stop_sequences`` (None, or a list of non-empty lists of token ids) as a right-aligned (S, M) int32
    array, -1 before the shorter ones (ids are >= 0, so -1 never matches: it marks "no token here"), or None;
    else a ValueError naming the argument. Also :mod:`attnlayers.stop_strings`'s."""
    if stop_sequences is None:
        return None
    error = ValueError(
        "`stop_sequences` must be None or a list of non-empty lists of token ids (ints >= 0); received "
        f"stop_sequences={stop_sequences!r}."
    )
    if not isinstance(stop_sequences, (list, tuple)):
        raise error
    sequences = []
    for sequence in stop_sequences:
        if isinstance(sequence, np.ndarray):
            sequence = sequence.tolist()
        if not isinstance(sequence, (list, tuple)) or not sequence or not all(is_int(t) and t >= 0 for t in sequence):
            raise error
        sequences.append([int(t) for t in sequence])
    if not sequences:
        return None
    width = max(len(s) for s in sequences)
    table = np.full((len(sequences), width), -1, "int32")
    for i, sequence in enumerate(sequences):
        table[i, width - len(sequence):] = sequence
    return table


def _ends_with_stop_sequence(tokens, given, index, sequences):
    """Whether the generated tokens up to position ``index`` end with one of the stop sequences.

    Args:
        tokens: int32 (..., L) with position ``index`` written. given: bool broadcastable to ``tokens``, True at
            prompt positions (a stop sequence must lie in the generated tokens). index: scalar int32 tensor.
        sequences: (S, M) int32 from :func:`check_stop_sequences` (right-aligned, -1 before shorter ones).

    Returns:
        bool (...,).
    """
    width = sequences.shape[1]
    positions = index - (width - 1) + ops.arange(width, dtype="int32")  # the window ending at `index`
    inside = positions >= 0
    positions = ops.maximum(positions, 0)
    window = ops.expand_dims(ops.take(tokens, positions, axis=-1), -2)  # (..., 1, M)
    generated = ops.expand_dims(ops.logical_and(ops.logical_not(ops.take(given, positions, axis=-1)), inside), -2)
    table = ops.convert_to_tensor(sequences)  # (S, M)
    used = table >= 0
    same = ops.logical_and(ops.equal(window, table), generated)
    return ops.any(ops.all(ops.logical_or(same, ops.logical_not(used)), axis=-1), axis=-1)


@renamed_keyword("strategy", "search")
def generate(
    next,
    prompt,
    max_length,
    search="greedy",
    *,
    cache=None,
    prompt_mask=None,
    index=None,
    stop_token_ids=None,
    pad_token_id=0,
    seed=None,
    max_new_tokens=None,
    stop_sequences=None,
    length_limit=None,
    return_cache=False,
):
    """Generates token sequences from a step function, with fixed shapes inside ``ops.while_loop``.

    Args:
        next: ``next(tokens, cache, index) -> (logits, cache)`` or ``(logits, hidden_states, cache)``:
            ``tokens`` the (B', L) int32 buffer, ``index`` a scalar int32 tensor, the position to predict
            (the newest known token is ``tokens[:, index - 1]``), ``logits`` (B', V) or (B', 1, V) for that
            position. B' is B, or B * k for beam search (row b's beams are rows b * k ... b * k + k - 1).
        prompt: (B, P) int token ids (prompts or start tokens), or (B,) start tokens. Every row needs at
            least one token (positions before ``index`` must be given).
        max_length: L, a Python int >= P: the length of the output, prompt included.
        search: a :class:`Search` (:class:`GreedySearch`, :class:`BeamSearch`, :class:`Sampling`), a
            name, or a keras-hub sampler (see :func:`get_search`).
        cache: None or any nest of tensors with the batch on axis 0 (B rows; beam search repeats them k times
            and reorders them with the beams): key/value caches sized for L, RNN states, an encoder memory.
        prompt_mask: (B, P) boolean, True at the given tokens of right-padded prompts of different lengths:
            the given positions are kept (forced, not scored) and generation fills the others. None: all P
            tokens are given.
        index: the first position to predict: a Python int or scalar tensor. Default: the shortest prompt
            length (P without ``prompt_mask``), for a cache filled from the prompt beforehand (prefill, one
            forward pass; the first step feeds token ``index - 1`` again and rewrites the same cache entry)
            or a ``next`` without cache. With an empty cache, pass ``index=1``: the loop then feeds the
            prompt one token at a time (given positions are kept and not scored).
        stop_token_ids: None, an int or a list of ints. A row that generates one (outside its prompt) is
            finished: the stop token is kept and the rest padded. The loop ends when every row is finished
            (every beam search row decided) or at L.
        pad_token_id: written after the end of each sequence.
        seed: overrides the search's seed for this call (sampling only): an int, a scalar integer tensor or
            a (2,) integer tensor (e.g. an input of a compiled or exported function).
        max_new_tokens: None, an int >= 1 or a scalar integer tensor (e.g. a signature input): a row is
            finished once it has generated this many tokens (after its own prompt); the loop still has the
            static length L. Greedy search and sampling only (beam search: set ``max_length``).
        stop_sequences: None or a list of non-empty lists of token ids: a row is finished when its generated
            tokens (its prompt excluded) end with one of them; they are kept, as a stop token is. A sequence of
            one token is a stop token. Checked in the loop on a fixed window (static shapes, XLA-friendly).
        length_limit: None, an int or a scalar integer tensor in [1, L]: no row grows longer than this (prompt
            included): the output length as a value, below the static L of the buffer and the cache, so that one
            compiled loop serves every length. Greedy search and sampling only.
        return_cache: also return the cache after the last step (its entries for positions 0 .. ``lengths`` - 2
            of each row hold that row's keys and values: a later call can start from them). Greedy search and
            sampling only.

    Returns:
        A :class:`DecodeResult` (``tokens``, ``scores``, ``log_probs``, ``lengths``): shapes (B, L) and (B,),
        or (B, t, L) and (B, t) for :class:`BeamSearch`; with ``return_cache``, ``(result, cache)``.

    Example:
    >>> def next(tokens, cache, index):          # a GPT-style model with a key/value cache
    ...     x = embed(ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1), start_index=index - 1)
    ...     out = decoder(x, self_attention_cache=cache, self_attention_cache_update_index=index - 1)
    ...     return embed(out["sequence_output"], reverse=True)[:, 0], out["self_attention_cache"]
    >>> cache = ops.zeros((B, num_layers, 2, 64, num_heads, head_dim))
    >>> cache = decoder(embed(prompt), self_attention_cache=cache,               # prefill the prompt
    ...                 self_attention_cache_update_index=0)["self_attention_cache"]
    >>> result = generate(next, prompt, 64, Sampling(top_p=0.9, seed=1), cache=cache, stop_token_ids=[eos])
    >>> result.tokens.shape, result.scores.shape
    ((B, 64), (B,))
    """
    search = get_search(search)
    stop_token_ids = _check_stop_token_ids(stop_token_ids)
    stop_sequences = check_stop_sequences(stop_sequences)
    max_length = positive_int(max_length, "max_length", what="the output length, prompt included")
    check_seed(seed)
    if max_new_tokens is not None:
        if isinstance(search, BeamSearch):
            raise ValueError(
                "`max_new_tokens` is for greedy search and sampling; beam search stops at `max_length` (set it to "
                f"the prompt length + the new tokens). Received max_new_tokens={max_new_tokens!r} with {search!r}."
            )
        if _is_tensor(max_new_tokens):
            _check_setting(max_new_tokens, "max_new_tokens", lambda n: n >= 1, "an integer >= 1", integer=True)
        else:
            positive_int(max_new_tokens, "max_new_tokens", what="the most tokens generated per row")
    if isinstance(search, BeamSearch) and (length_limit is not None or return_cache):
        raise ValueError(
            "`length_limit` and `return_cache` are for greedy search and sampling; beam search stops at `max_length` "
            f"and reorders its beams' caches. Received length_limit={length_limit!r}, return_cache={return_cache!r} "
            f"with {search!r}."
        )
    if length_limit is not None:
        if _is_tensor(length_limit):
            _check_setting(length_limit, "length_limit", lambda n: 1 <= n <= max_length,
                           f"an integer in [1, max_length={max_length}]", integer=True)
        elif not (is_int(length_limit) and 1 <= length_limit <= max_length):
            raise ValueError(f"`length_limit` must be an integer in [1, max_length={max_length}]; received "
                             f"length_limit={length_limit!r}.")
    prompt = ops.convert_to_tensor(prompt)
    if len(prompt.shape) == 1:
        prompt = ops.expand_dims(prompt, 1)
    if len(prompt.shape) != 2:
        raise ValueError(f"`prompt` must have shape (batch, length) or (batch,); received shape {tuple(prompt.shape)}.")
    if "int" not in keras.backend.standardize_dtype(prompt.dtype):
        raise ValueError(f"`prompt` must hold integer token ids; received dtype {prompt.dtype}.")
    prompt = ops.cast(prompt, "int32")
    prompt_length = prompt.shape[1]
    if prompt_length is not None and max_length < prompt_length:
        raise ValueError(
            f"`max_length` must be at least the prompt length {prompt_length} (it counts the prompt); received "
            f"max_length={max_length}."
        )
    if prompt_mask is None:
        mask = ops.ones_like(prompt, dtype="bool")
    else:
        mask = ops.convert_to_tensor(prompt_mask)
        if len(mask.shape) != 2 or (
            None not in (mask.shape[1], prompt_length) and mask.shape[1] != prompt_length
        ):
            raise ValueError(
                f"`prompt_mask` must have the shape of `prompt` {tuple(prompt.shape)}; received shape "
                f"{tuple(mask.shape)}."
            )
        mask = ops.cast(mask, "bool")

    # The (B, L) buffer: the given tokens, pad elsewhere; `given` marks the forced positions.
    pad = ops.convert_to_tensor(pad_token_id, "int32")
    prompt = ops.where(mask, prompt, pad)
    if prompt_length is None or prompt_length < max_length:
        extra = max_length - (ops.shape(prompt)[1] if prompt_length is None else prompt_length)
        prompt = ops.pad(prompt, [[0, 0], [0, extra]], constant_values=pad_token_id)
        mask = ops.pad(mask, [[0, 0], [0, extra]], constant_values=False)
        if prompt_length is None:  # restore the static length under tf.function with unknown prompt width
            prompt, mask = ops.reshape(prompt, (-1, max_length)), ops.reshape(mask, (-1, max_length))
    given_lengths = ops.sum(ops.cast(mask, "int32"), axis=1)  # (B,)
    if index is None:  # the shortest prompt
        index = prompt_length if prompt_mask is None and prompt_length is not None else ops.min(given_lengths)
    elif is_int(index) and not (1 <= index <= max_length):
        raise ValueError(
            f"`index` (the first position to predict) must be in [1, max_length={max_length}]; received index={index}."
        )
    index = ops.cast(ops.convert_to_tensor(index), "int32")
    cache = () if cache is None else cache

    if isinstance(search, BeamSearch):
        return _beam_search(next, search, prompt, mask, given_lengths, cache, index, max_length, stop_token_ids,
                            pad, stop_sequences)
    seed = search.initial_seed(seed) if search.stochastic else None
    limit = None
    if max_new_tokens is not None:  # (B,): clipped to max_length first, so that the sum cannot overflow int32
        if is_int(max_new_tokens):
            new = min(int(max_new_tokens), max_length)
        else:  # in the tensor's own dtype (no int64 under JAX by default)
            new = ops.minimum(max_new_tokens, ops.cast(max_length, max_new_tokens.dtype))
        limit = given_lengths + ops.cast(new, "int32")
    if length_limit is not None:
        length_limit = ops.cast(length_limit, "int32")
        limit = length_limit + ops.zeros_like(given_lengths) if limit is None else ops.minimum(limit, length_limit)
    result, cache = _one_token_search(next, search, prompt, mask, cache, index, max_length, stop_token_ids, pad,
                                      seed, stop_sequences, limit)
    return (result, cache) if return_cache else result


def _one_token_search(next, search, tokens, given, cache, index, max_length, stop_token_ids, pad, seed,
                      stop_sequences=None, limit=None):
    """Greedy search and sampling: one token per row and step, chosen by ``search.choose``; a row also
    stops at a stop sequence, or at position ``limit`` (B,) (its prompt length + ``max_new_tokens``, or
    ``length_limit``: a row whose prompt already fills it generates nothing). Returns (result, final cache)."""
    batch = ops.shape(tokens)[0]
    state = {
        "tokens": tokens,
        "cache": cache,
        "index": index,
        "finished": ops.zeros((batch,), "bool"),
        "log_probs": ops.zeros((batch,), "float32"),
        "end": ops.full((batch,), max_length, "int32"),
    }

    def cond(state):
        return ops.logical_and(state["index"] < max_length, ops.logical_not(ops.all(state["finished"])))

    def body(state):
        index, tokens, finished, end = state["index"], state["tokens"], state["finished"], state["end"]
        if limit is not None:  # a row whose prompt reaches its limit: finished, nothing generated
            full = ops.logical_and(index >= limit, ops.logical_not(finished))
            end = ops.where(full, index, end)
            finished = ops.logical_or(finished, full)
        logits, cache = _step(next, tokens, state["cache"], index)
        chosen = search.choose(logits, index, seed)
        forced = _column(given, index)
        token = ops.where(forced, _column(tokens, index), chosen)
        token = ops.where(finished, pad, token)
        # log p(y_index | y_<index): the model's distribution (no temperature, no filter); 0 where not generated.
        log_p = ops.take_along_axis(ops.log_softmax(logits, axis=-1), ops.expand_dims(token, 1), axis=1)[:, 0]
        generated = ops.logical_not(ops.logical_or(forced, finished))
        log_probs = state["log_probs"] + ops.where(generated, log_p, 0.0)
        stopped = ops.logical_and(generated, _is_stop(token, stop_token_ids))
        tokens = _write(tokens, index, token)
        if stop_sequences is not None:
            hit = _ends_with_stop_sequence(tokens, given, index, stop_sequences)
            stopped = ops.logical_or(stopped, ops.logical_and(generated, hit))
        if limit is not None:
            stopped = ops.logical_or(stopped, ops.logical_and(generated, index + 1 >= limit))
        return {
            "tokens": tokens,
            "cache": cache,
            "index": index + 1,
            "finished": ops.logical_or(finished, stopped),
            "log_probs": log_probs,
            "end": ops.where(stopped, index + 1, end),
        }

    state = ops.while_loop(cond, body, state)
    # Rows still running when all others finished were not visited beyond `index`: already padded.
    return DecodeResult(state["tokens"], state["log_probs"], state["log_probs"], state["end"]), state["cache"]


def _beam_search(next, search, tokens, given, given_lengths, cache, index, max_length, stop_token_ids, pad,
                 stop_sequences=None):
    k, t, alpha = search.num_beams, search.num_return, search.alpha
    batch = ops.shape(tokens)[0]

    def beams(x):  # (B, ...) -> (B * k, ...), each row repeated k times
        return ops.repeat(x, k, axis=0)

    def rows(x, *inner):  # (B * k, ...) or (B, k * ...) views as (B, ...)
        return ops.reshape(x, (-1,) + inner)

    first_rows = ops.arange(batch, dtype="int32") * k  # first flat row of each batch row

    def take_rows(x, parents):
        """x (B * k, ...) gathered by per-row parent beams (B, n) -> (B * n, ...)."""
        flat = ops.reshape(ops.expand_dims(first_rows, 1) + parents, (-1,))
        return ops.take(x, flat, axis=0)

    first = np.full((1, k), NEG_INF, "float32")
    first[0, 0] = 0.0  # only the first copy of each row is alive at the start (the others are duplicates)
    state = {
        "tokens": beams(tokens),
        "cache": keras.tree.map_structure(beams, cache),
        "index": index,
        "alive": ops.tile(ops.convert_to_tensor(first), (batch, 1)),          # (B, k) log-probabilities
        "fin_tokens": ops.tile(ops.expand_dims(tokens, 1), (1, t, 1)),        # (B, t, L)
        "fin_scores": ops.full((batch, t), NEG_INF, "float32"),
        "fin_log_probs": ops.full((batch, t), NEG_INF, "float32"),
        "fin_end": ops.full((batch, t), max_length, "int32"),
        "done": ops.zeros((batch,), "bool"),
    }
    positions = ops.arange(max_length, dtype="int32")
    max_generated = max_length - given_lengths  # (B,) |Y| of a beam still alive at L

    def cond(state):
        return ops.logical_and(state["index"] < max_length, ops.logical_not(ops.all(state["done"])))

    def body(state):
        index, flat_tokens = state["index"], state["tokens"]
        logits, cache = _step(next, flat_tokens, state["cache"], index)
        vocab = logits.shape[-1] if logits.shape[-1] is not None else ops.shape(logits)[-1]
        log_p = rows(ops.log_softmax(logits, axis=-1), k, vocab)  # (B, k, V)
        # Forced (prompt) positions: each beam can only be extended by its row's given token, at no cost.
        forced = _column(given, index)  # (B,)
        forced_token = _column(ops.take(flat_tokens, first_rows, axis=0), index)
        only_given = ops.where(ops.arange(vocab, dtype="int32")[None, :] == forced_token[:, None], 0.0, NEG_INF)
        log_p = ops.where(forced[:, None, None], only_given[:, None, :], log_p)
        candidates = rows(ops.expand_dims(state["alive"], -1) + log_p, k * vocab)  # (B, k * V)
        num = min(2 * k, k * vocab) if isinstance(vocab, int) else 2 * k
        top_scores, top_ids = ops.top_k(candidates, num, sorted=True)  # (B, 2k), best first
        top_scores, top_ids = rows(top_scores, num), rows(ops.cast(top_ids, "int32"), num)
        parents, next_tokens = top_ids // vocab, top_ids % vocab
        parent_tokens = rows(take_rows(flat_tokens, parents), num, max_length)  # (B, 2k, L)
        candidate_tokens = ops.where(positions == index, next_tokens[..., None], parent_tokens)
        is_stop = _is_stop(next_tokens, stop_token_ids)
        if stop_sequences is not None:
            hit = _ends_with_stop_sequence(candidate_tokens, given[:, None, :], index, stop_sequences)
            is_stop = ops.logical_or(is_stop, hit)
        is_stop = ops.logical_and(is_stop, ops.logical_not(forced)[:, None])
        real = top_scores > NEG_INF / 2

        # Finished candidates: end in a stop token and rank among the k best (the beam proper).
        rank = ops.arange(num, dtype="int32")[None, :]
        finishing = is_stop & real & (rank < k) & ops.logical_not(state["done"])[:, None]
        generated = ops.maximum(index + 1 - given_lengths, 1)  # (B,) |Y| of a hypothesis finishing now
        normalised = top_scores / length_penalty(generated, alpha)[:, None]
        new_scores = ops.where(finishing, normalised, NEG_INF)
        merged_scores = ops.concatenate([state["fin_scores"], new_scores], axis=1)
        fin_scores, best = ops.top_k(merged_scores, t, sorted=True)
        best = ops.cast(best, "int32")
        fin_scores = rows(fin_scores, t)
        merged_tokens = ops.concatenate([state["fin_tokens"], candidate_tokens], axis=1)
        fin_tokens = ops.take_along_axis(merged_tokens, best[..., None], axis=1)
        merged_log_probs = ops.concatenate([state["fin_log_probs"], ops.where(finishing, top_scores, NEG_INF)], 1)
        fin_log_probs = ops.take_along_axis(merged_log_probs, best, axis=1)
        merged_end = ops.concatenate([state["fin_end"], ops.zeros_like(next_tokens) + (index + 1)], axis=1)
        fin_end = ops.take_along_axis(merged_end, best, axis=1)

        # Alive: the k best candidates that do not end in a stop token.
        alive_scores, chosen = ops.top_k(ops.where(is_stop, NEG_INF, top_scores), k, sorted=True)
        alive_scores, chosen = rows(alive_scores, k), rows(ops.cast(chosen, "int32"), k)
        alive_parents = ops.take_along_axis(parents, chosen, axis=1)
        alive_tokens = ops.take_along_axis(next_tokens, chosen, axis=1)
        flat_tokens = _write(take_rows(flat_tokens, alive_parents), index, ops.reshape(alive_tokens, (-1,)))
        cache = keras.tree.map_structure(lambda x: take_rows(x, alive_parents), cache)

        # A row is decided when its t-th finished hypothesis beats every score an alive beam can still reach:
        # log-probabilities only decrease, so the best alive one is bounded by its current log-probability over
        # lp at the shortest or the longest length still possible (whichever is larger).
        best_alive = alive_scores[:, 0]
        shortest = ops.minimum(generated + 1, max_generated)
        bound = ops.maximum(
            best_alive / length_penalty(shortest, alpha), best_alive / length_penalty(max_generated, alpha)
        )
        decided = ops.logical_and(fin_scores[:, t - 1] > NEG_INF / 2, fin_scores[:, t - 1] >= bound)
        return {
            "tokens": flat_tokens,
            "cache": cache,
            "index": index + 1,
            "alive": alive_scores,
            "fin_tokens": fin_tokens,
            "fin_scores": fin_scores,
            "fin_log_probs": fin_log_probs,
            "fin_end": fin_end,
            "done": ops.logical_or(state["done"], decided),
        }

    state = ops.while_loop(cond, body, state)

    # Beams alive at the end (rows not decided: the loop reached L) compete as they are, |Y| = L - prompt.
    alive_scores = state["alive"] / length_penalty(max_generated, alpha)[:, None]
    alive_scores = ops.where(state["done"][:, None] | (state["alive"] <= NEG_INF / 2), NEG_INF, alive_scores)
    scores = ops.concatenate([state["fin_scores"], alive_scores], axis=1)  # (B, t + k)
    scores, best = ops.top_k(scores, t, sorted=True)
    best = ops.cast(best, "int32")
    alive_tokens = rows(state["tokens"], k, max_length)
    tokens = ops.concatenate([state["fin_tokens"], alive_tokens], axis=1)
    tokens = ops.take_along_axis(tokens, best[..., None], axis=1)
    log_probs = ops.take_along_axis(ops.concatenate([state["fin_log_probs"], state["alive"]], axis=1), best, axis=1)
    ends = ops.concatenate([state["fin_end"], ops.full(ops.shape(state["alive"]), max_length, "int32")], axis=1)
    lengths = ops.take_along_axis(ends, best, axis=1)
    return DecodeResult(tokens, rows(scores, t), log_probs, lengths)


# ----------------------------------------------------------------------------------------------------------
# Deprecated names: decoding's old word (tf.distribute's) for a search; generate's old keyword is renamed above.

__getattr__ = renamed_attributes(__name__, {"Strategy": "Search", "get_strategy": "get_search"})
