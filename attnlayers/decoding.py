"""Output symbol generation: greedy search, beam search (t best of k, GNMT length normalisation) and sampling
(temperature, top-k, top-p / nucleus, plain random), over one step-function interface that serves every
autoregressive model alike (GPT, the Transformer translator, the RNN seq2seq decoder, the captioning decoder).

The interface
-------------
A model is seen through one function, keras-hub's::

    next(tokens, cache, index) -> (logits, cache)            or (logits, hidden_states, cache)

``tokens`` is the whole (B, L) token buffer (the prompt, then what has been generated so far, then padding),
``index`` the scalar position whose token is to be predicted (the newest known token is ``tokens[:, index - 1]``),
``logits`` (B, V) (or (B, 1, V)) the unnormalised scores of that position, and ``cache`` any nest of tensors
with the batch on axis 0: a Transformer key/value cache (B, layers, 2, L, heads, head_dim), RNN states, an
encoder memory carried along unchanged... A ``next`` that ignores the cache and recomputes the whole prefix
is valid too (it is the reference the cached path is tested against). The ``next`` that keras-hub's
``CausalLM.generate_step`` builds around ``call_with_cache`` has exactly this form, so keras-hub models plug in
unchanged.

:func:`generate` runs the loop with fixed shapes in ``keras.ops.while_loop``: it traces once inside
``tf.function(jit_compile=True)`` (no recompilation from call to call for the same shapes) and under
``jax.jit``, and it is what :mod:`attnlayers.export` writes into a SavedModel ``generate`` signature.

What is taken from keras-hub and what is not (and why)
------------------------------------------------------
keras_hub.samplers split a strategy into a *token rule* (``compute_probabilities`` + ``get_next_token``:
temperature, argmax, top-k, top-p, random) and a *loop* (``Sampler.__call__``). The token rules are used here
as they are, unchanged: :class:`GreedySearch` and :class:`Sampling` hold a ``keras_hub.samplers.GreedySampler``,
``RandomSampler``, ``TopKSampler`` or ``TopPSampler`` and call its ``get_next_token``, and any keras-hub
sampler with a token rule may be passed as the strategy. Their loop is not reused, because it falls short of
what this module must return:

- it returns the filled buffer only: no sequence log-probabilities (``scores``), no lengths;
- a row that has produced a stop token keeps generating (keras-hub masks afterwards in the model's
  ``generate``); here finished rows are frozen and padded, and their scores stop changing;
- its random state is a ``SeedGenerator`` variable advanced in place, so "same seed, same text" holds only
  for the first call of a fresh sampler, JAX needs the ``StatelessScope`` plumbing of ``run_loop`` around the
  whole model, and an exported model would carry the seed as a variable. Here the seed is a loop variable:
  the sampler's seed state is mapped to it with a ``keras.StatelessScope`` around ``get_next_token`` only, so
  the same seed gives the same text on every call, on both backends, and the seed can be a signature input.

``keras_hub.samplers.BeamSampler`` is replaced, not wrapped: it returns one beam or all k (never the t best),
has no length penalty, scores nothing but raw log-likelihoods, treats a beam that emits a stop token as still
alive (it keeps extending it) and stops only when every beam has emitted one. :class:`BeamSearch` keeps
finished hypotheses aside (the classic beam of Wu et al. 2016 / Hugging Face: a candidate ending in a stop
token that ranks among the k best is finished, the k best others stay alive), ranks them with GNMT's length
normalisation and stops a row as soon as no alive beam can still beat its t-th finished hypothesis.

Shapes: B batch, L ``max_length`` (prompt included), V vocabulary, k ``num_beams``, t ``num_return``.
"""

import math
import random as python_random
from typing import NamedTuple

import keras
import numpy as np
from keras import ops


def _samplers():
    """keras_hub.samplers, imported on first use (importing keras_hub takes seconds; ``import attnlayers``
    should not)."""
    import keras_hub

    return keras_hub.samplers


# A finite "minus infinity" for the scores of impossible candidates: -inf would give inf - inf = NaN in the
# sums and in the length normalisation. Scores are float32 (log-softmax in float32 whatever the model dtype).
NEG_INF = -1e9


class DecodeResult(NamedTuple):
    """What :func:`generate` returns (a NamedTuple: a nest that ``tf.function`` and ``jax.jit`` return as is).

    Attributes:
        tokens: int32 (B, L), or (B, t, L) for :class:`BeamSearch`: the prompt, the generated tokens up to and
            including the stop token, then ``pad_token_id``.
        scores: float32 (B,) or (B, t): the ranking score, the log-probability of the generated tokens
            divided by the GNMT length penalty lp(Y) when ``alpha`` > 0 (beam search), else equal to
            ``log_probs``. Beams are sorted by it, best first.
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
# Strategies


def _positive_int(value, name, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer ({what}); received {name}={value!r}.")
    return int(value)


def _positive_float(value, name, what):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not value > 0:
        raise ValueError(f"`{name}` must be a number > 0 ({what}); received {name}={value!r}.")
    return float(value)


class Strategy:
    """Base of the decoding strategies. ``num_return`` is the number of sequences returned per row (None: one
    sequence, outputs without the t axis); ``stochastic`` says whether the strategy draws random numbers."""

    num_return = None
    stochastic = False

    def get_config(self):
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class _TokenRule(Strategy):
    """A strategy that picks one token per row and step with a keras-hub sampler's token rule."""

    seed = None

    def __init__(self, sampler):
        self.sampler = sampler

    @property
    def stochastic(self):
        return bool(self.sampler.variables)

    def initial_seeds(self, seed):
        """The loop-carried seed states: one (2,) tensor per seed variable of the keras-hub sampler."""
        variables = self.sampler.variables
        if not variables:
            return ()
        if seed is None:
            seed = self.seed
        if seed is None:  # a fresh Python seed per call (per trace inside a compiled function)
            seed = python_random.randint(1, 2**31 - 1)
        dtype = variables[0].dtype
        if isinstance(seed, (int, np.integer)):
            seed = ops.convert_to_tensor(np.array([int(seed) % 2**31, 0]), dtype=dtype)
        else:
            seed = ops.convert_to_tensor(seed)
            if len(seed.shape) == 0:
                seed = ops.stack([seed, ops.zeros_like(seed)])
            elif tuple(seed.shape) != (2,):
                raise ValueError(
                    f"`seed` must be an int, a scalar integer tensor or a (2,) integer tensor; received a tensor "
                    f"of shape {tuple(seed.shape)}."
                )
            seed = ops.cast(seed, dtype)
        # Distinct streams if a sampler ever holds several generators.
        return tuple(seed + ops.convert_to_tensor(np.array([0, 7919 * i]), dtype=dtype) for i in range(len(variables)))

    def choose(self, logits, seeds):
        """(B, V) logits -> (B,) int32 tokens, with the seed states advanced."""
        probabilities = self.sampler.compute_probabilities(logits)  # float32, temperature applied
        if not seeds:
            return ops.cast(self.sampler.get_next_token(probabilities), "int32"), seeds
        # keras-hub draws from `sampler.seed_generator`; map its state to our loop variable (stateless).
        variables = self.sampler.variables
        with keras.StatelessScope(state_mapping=list(zip(variables, seeds))) as scope:
            token = self.sampler.get_next_token(probabilities)
        new_seeds = []
        for variable, old in zip(variables, seeds):
            new = scope.get_current_value(variable)
            new_seeds.append(old if new is None else ops.cast(new, old.dtype))
        return ops.cast(token, "int32"), tuple(new_seeds)


class GreedySearch(_TokenRule):
    """Greedy search: the most probable token at every step (``keras_hub.samplers.GreedySampler``).

    Example:
    >>> result = generate(next, prompt, max_length=32, strategy=GreedySearch())
    >>> result.tokens          # (B, 32)
    """

    def __init__(self):
        super().__init__(_samplers().GreedySampler())


class Sampling(_TokenRule):
    """Ancestral sampling from softmax(logits / temperature), optionally restricted to the ``top_k`` most
    probable tokens (Fan et al. 2018) and / or to the nucleus, the smallest set of most probable tokens whose
    probability reaches ``top_p`` (Holtzman et al. 2020). The draws are keras-hub's ``RandomSampler``,
    ``TopKSampler`` or ``TopPSampler`` (with ``top_p``, ``top_k`` is its pre-filter).

    Args:
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: None or a positive int.
        top_p: None or a float in (0, 1].
        seed: int or None. The same seed gives the same tokens on every call (the seed is not a variable
            that advances); :func:`generate`'s ``seed`` argument overrides it per call (and may be a tensor,
            e.g. a signature input). None: a fresh random seed per Python call (per trace when compiled).

    Example:
    >>> strategy = Sampling(temperature=0.8, top_p=0.9, seed=42)
    >>> result = generate(next, prompt, max_length=64, strategy=strategy, stop_token_ids=[eos])
    """

    def __init__(self, temperature=1.0, top_k=None, top_p=None, seed=None):
        self.temperature = _positive_float(temperature, "temperature", "the softmax temperature")
        self.top_k = None if top_k is None else _positive_int(top_k, "top_k", "the number of tokens kept")
        if top_p is not None:
            if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating)) or not 0 < top_p <= 1:
                raise ValueError(
                    f"`top_p` must be a probability in (0, 1] (the nucleus mass); received top_p={top_p!r}."
                )
            top_p = float(top_p)
        self.top_p = top_p
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"`seed` must be an int or None; received seed={seed!r}.")
        self.seed = None if seed is None else int(seed)
        samplers = _samplers()
        # keras-hub's seed argument is irrelevant here: the state is mapped to our loop-carried seed.
        if self.top_p is not None:
            sampler = samplers.TopPSampler(p=self.top_p, k=self.top_k, seed=0, temperature=self.temperature)
        elif self.top_k is not None:
            sampler = samplers.TopKSampler(k=self.top_k, seed=0, temperature=self.temperature)
        else:
            sampler = samplers.RandomSampler(seed=0, temperature=self.temperature)
        super().__init__(sampler)

    def get_config(self):
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}


class _KerasHubSampler(_TokenRule):
    """Any keras-hub sampler whose strategy is a token rule (``get_next_token``), used as it is."""

    def __init__(self, sampler):
        super().__init__(sampler)
        self.seed = getattr(sampler, "seed", None)

    def get_config(self):
        return {"sampler": self.sampler}


class BeamSearch(Strategy):
    """Beam search keeping ``num_beams`` (k) hypotheses and returning the ``num_return`` (t) best.

    At each step every alive beam is extended by every token; of the 2k best candidates (by log-probability),
    those ending in a stop token that rank among the k best are finished (set aside, scored
    ``log P(Y) / lp(Y)``), and the k best of the others stay alive. A row stops when it has t finished
    hypotheses and no alive beam can still beat the t-th (log-probabilities only decrease). At
    ``max_length`` the alive beams compete with the finished ones as they are. With k = t = 1 and alpha = 0
    this is greedy search.

    Length normalisation (Wu et al. 2016, GNMT, eq. 14): ``score(Y) = log P(Y | X) / lp(Y)`` with
    ``lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha``, |Y| the number of generated tokens (stop token included,
    prompt excluded). alpha = 0 ranks by log-probability; GNMT used alpha in [0.6, 0.7].

    Args:
        num_beams: k >= 1.
        num_return: t, 1 <= t <= k: sequences returned per row, best first (outputs get a t axis:
            ``tokens`` (B, t, L), ``scores`` (B, t)).
        alpha: length-normalisation exponent (>= 0).

    Example:
    >>> result = generate(next, start, max_length=50, strategy=BeamSearch(4, num_return=2, alpha=0.6),
    ...                   cache=cache, stop_token_ids=[eos])
    >>> result.tokens[:, 0]    # (B, 50): the best translation of each source sentence
    """

    def __init__(self, num_beams=4, num_return=1, alpha=0.0):
        self.num_beams = _positive_int(num_beams, "num_beams", "the beam size k")
        if isinstance(num_return, bool) or not isinstance(num_return, (int, np.integer)) or not (
            1 <= num_return <= self.num_beams
        ):
            raise ValueError(
                f"`num_return` (t, the number of sequences returned) must be an integer in [1, num_beams="
                f"{self.num_beams}]; received num_return={num_return!r}."
            )
        self.num_return = int(num_return)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not (
            math.isfinite(alpha) and alpha >= 0
        ):
            raise ValueError(
                f"`alpha` (GNMT length-normalisation exponent) must be a finite number >= 0; received alpha={alpha!r}."
            )
        self.alpha = float(alpha)

    def get_config(self):
        return {"num_beams": self.num_beams, "num_return": self.num_return, "alpha": self.alpha}


_STRATEGIES = {
    "greedy": GreedySearch,
    "beam": lambda: BeamSearch(),
    "random": lambda: Sampling(),
    "top_k": lambda: Sampling(top_k=5),
    "top_p": lambda: Sampling(top_p=0.9),
}


def get_strategy(identifier):
    """A decoding strategy from a name, a :class:`Strategy` or a keras-hub sampler.

    Args:
        identifier: "greedy", "beam" (k = 4), "random", "top_k" (k = 5), "top_p" (p = 0.9); a
            :class:`Strategy`; or a ``keras_hub.samplers.Sampler`` whose strategy is a token rule (greedy,
            random, top-k, top-p, or your own ``get_next_token``): it is used unchanged, with scores and stop
            handling from this module. (keras-hub's beam and contrastive samplers run their own loops: use
            :class:`BeamSearch`.)

    Returns:
        A :class:`Strategy`.

    Example:
    >>> get_strategy("top_k")                                  # Sampling(top_k=5)
    >>> get_strategy(keras_hub.samplers.TopKSampler(k=10))     # keras-hub's rule, our loop
    """
    if isinstance(identifier, Strategy):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _STRATEGIES:
            raise ValueError(f"`strategy` must be one of {sorted(_STRATEGIES)}; received strategy={identifier!r}.")
        return _STRATEGIES[identifier]()
    sampler_class = _samplers().Sampler
    if isinstance(identifier, sampler_class):
        if type(identifier).__call__ is not sampler_class.__call__:
            raise ValueError(
                f"keras-hub's {type(identifier).__name__} runs its own loop and cannot be used as a token rule; "
                f"use attnlayers.decoding.BeamSearch for beam search. Received strategy={identifier!r}."
            )
        return _KerasHubSampler(identifier)
    raise ValueError(
        "`strategy` must be a name (greedy, beam, random, top_k, top_p), an attnlayers.decoding.Strategy or a "
        f"keras_hub.samplers.Sampler; received strategy={identifier!r}."
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
    if isinstance(stop_token_ids, (int, np.integer)) and not isinstance(stop_token_ids, bool):
        return (int(stop_token_ids),)
    if not isinstance(stop_token_ids, (list, tuple)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in stop_token_ids
    ):
        raise ValueError(
            f"`stop_token_ids` must be None, an int or a list of ints; received stop_token_ids={stop_token_ids!r}."
        )
    return tuple(int(s) for s in stop_token_ids)


def generate(
    next,
    prompt,
    max_length,
    strategy="greedy",
    *,
    cache=None,
    prompt_mask=None,
    index=None,
    stop_token_ids=None,
    pad_token_id=0,
    seed=None,
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
        strategy: a :class:`Strategy` (:class:`GreedySearch`, :class:`BeamSearch`, :class:`Sampling`), a
            name, or a keras-hub sampler (see :func:`get_strategy`).
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
        seed: overrides the strategy's seed for this call (sampling only): an int, a scalar integer tensor or
            a (2,) integer tensor (e.g. an input of a compiled or exported function).

    Returns:
        A :class:`DecodeResult` (``tokens``, ``scores``, ``log_probs``, ``lengths``): shapes (B, L) and (B,),
        or (B, t, L) and (B, t) for :class:`BeamSearch`.

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
    strategy = get_strategy(strategy)
    stop_token_ids = _check_stop_token_ids(stop_token_ids)
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(
            f"`max_length` must be a positive Python int (the output length, prompt included); received "
            f"max_length={max_length!r}."
        )
    max_length = int(max_length)
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
    elif isinstance(index, (int, np.integer)) and not (1 <= index <= max_length):
        raise ValueError(
            f"`index` (the first position to predict) must be in [1, max_length={max_length}]; received index={index}."
        )
    index = ops.cast(ops.convert_to_tensor(index), "int32")
    cache = () if cache is None else cache

    if isinstance(strategy, BeamSearch):
        return _beam_search(next, strategy, prompt, mask, given_lengths, cache, index, max_length, stop_token_ids,
                            pad)
    return _token_rule_search(next, strategy, prompt, mask, given_lengths, cache, index, max_length, stop_token_ids,
                              pad, seed)


def _token_rule_search(next, strategy, tokens, given, given_lengths, cache, index, max_length, stop_token_ids, pad,
                       seed):
    batch = ops.shape(tokens)[0]
    state = {
        "tokens": tokens,
        "cache": cache,
        "index": index,
        "finished": ops.zeros((batch,), "bool"),
        "log_probs": ops.zeros((batch,), "float32"),
        "end": ops.full((batch,), max_length, "int32"),
        "seeds": strategy.initial_seeds(seed),
    }

    def cond(state):
        return ops.logical_and(state["index"] < max_length, ops.logical_not(ops.all(state["finished"])))

    def body(state):
        index, tokens, finished = state["index"], state["tokens"], state["finished"]
        logits, cache = _step(next, tokens, state["cache"], index)
        chosen, seeds = strategy.choose(logits, state["seeds"])
        forced = _column(given, index)
        token = ops.where(forced, _column(tokens, index), chosen)
        token = ops.where(finished, pad, token)
        # log p(y_index | y_<index): the model's distribution (no temperature, no filter); 0 where not generated.
        log_p = ops.take_along_axis(ops.log_softmax(logits, axis=-1), ops.expand_dims(token, 1), axis=1)[:, 0]
        generated = ops.logical_not(ops.logical_or(forced, finished))
        log_probs = state["log_probs"] + ops.where(generated, log_p, 0.0)
        stopped = ops.logical_and(generated, _is_stop(token, stop_token_ids))
        return {
            "tokens": _write(tokens, index, token),
            "cache": cache,
            "index": index + 1,
            "finished": ops.logical_or(finished, stopped),
            "log_probs": log_probs,
            "end": ops.where(stopped, index + 1, state["end"]),
            "seeds": seeds,
        }

    state = ops.while_loop(cond, body, state)
    # Rows still running when all others finished were not visited beyond `index`: already padded.
    return DecodeResult(state["tokens"], state["log_probs"], state["log_probs"], state["end"])


def _beam_search(next, strategy, tokens, given, given_lengths, cache, index, max_length, stop_token_ids, pad):
    k, t, alpha = strategy.num_beams, strategy.num_return, strategy.alpha
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
        is_stop = ops.logical_and(_is_stop(next_tokens, stop_token_ids), ops.logical_not(forced)[:, None])
        real = top_scores > NEG_INF / 2

        # Finished candidates: end in a stop token and rank among the k best (the beam proper).
        rank = ops.arange(num, dtype="int32")[None, :]
        finishing = is_stop & real & (rank < k) & ops.logical_not(state["done"])[:, None]
        generated = ops.maximum(index + 1 - given_lengths, 1)  # (B,) |Y| of a hypothesis finishing now
        normalised = top_scores / length_penalty(generated, alpha)[:, None]
        new_scores = ops.where(finishing, normalised, NEG_INF)
        parent_tokens = rows(take_rows(flat_tokens, parents), num, max_length)  # (B, 2k, L)
        candidate_tokens = ops.where(positions == index, next_tokens[..., None], parent_tokens)
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
