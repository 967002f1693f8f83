"""Text generation with a GPT and its byte-level BPE tokenizer: strings in, strings out, stop strings.

    texts = generate_text(model, tokenizer, ["Once upon a time"], max_new_tokens=40,
                          search=Sampling(temperature=0.8, top_p=0.9), seed=1, stop_strings=["\\n\\n"])

Stop strings (Hugging Face's ``stop_strings``; keras-hub has only stop token ids) stop the decoding loop (each
is tokenized once into a stop sequence) and cut the returned text: :mod:`attnlayers.stop_strings`, whose
``check_stop_strings``, ``stop_sequences_for`` and ``cut_at_stop_strings`` this module re-exports. BPE may spell
a stop string with other tokens in context (e.g. "\\n\\n" after "."): the row then runs on, but the text is still
cut at it. A stop string that spans the prompt and the generated text is not a stop: only the generated part is
searched.

Compiled decoding (``jit_compile=True``) runs greedy search and sampling as one XLA program for every prompt length:
the prompts sit in a (B, L) buffer, the key/value cache has the static length L, the prompt is prefilled by chunks of
32 tokens from a start position that is a value (:meth:`GPT.prefill`), and the decoding loop takes the prompt
lengths, ``max_new_tokens`` and the output length as values. A :class:`DecodingSession` keeps the cache between
calls (a chat's turns): a call prefills only what follows the tokens already in it. :func:`compilations` counts the
programs compiled; :func:`use_compilation_cache` keeps them on disk for later processes (JAX).

TensorFlow (the tokenizer's ops); the model runs on the TensorFlow or the JAX backend (``jit_compile`` on both).
"""

from __future__ import annotations

import weakref

from attnlayers.decoding import BeamSearch, check_seed, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.stop_strings import check_stop_strings, cut_at_stop_strings, stop_sequences_for
from attnlayers.validation import positive_int

from ..core.generative import check_id_range

__all__ = ["DecodingSession", "check_stop_strings", "compilations", "cut_at_stop_strings", "generate_text",
           "stop_sequences_for", "use_compilation_cache"]


def _tokenize_prompts(model, tokenizer, prompts, max_length):
    """Right-padded (B, P) token ids and their mask; ValueErrors naming `prompts` for empty or too long ones."""
    import numpy as np

    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"`prompts` must be a string or a non-empty list of strings; received prompts={prompts!r}.")
    rows = tokenizer.tokenize(list(prompts)).to_list()
    limit = model.config.max_sequence_length
    for i, row in enumerate(rows):
        if not row:
            raise ValueError(
                f"`prompts`[{i}] is empty: a prompt needs at least one token (GPT-2 generates unconditionally "
                f"from its end-of-text token, {tokenizer.end_token_id}: pass '<|endoftext|>')."
            )
        if len(row) > limit or (max_length is not None and len(row) > max_length):
            bound = limit if len(row) > limit else max_length
            name = "max_sequence_length" if len(row) > limit else "max_length"
            raise ValueError(
                f"`prompts`[{i}] is {len(row)} tokens long, more than {name}={bound}; shorten it (keep its last "
                "tokens) to leave room for the generated ones."
            )
    width = max(len(row) for row in rows)
    token_ids = np.full((len(rows), width), model.pad_token_id, "int32")
    for i, row in enumerate(rows):
        token_ids[i, : len(row)] = row
    mask = np.arange(width)[None, :] < np.array([len(row) for row in rows])[:, None]
    return token_ids, mask


_BUCKET = 64  # beam search: prompts are padded to a multiple of this width (one compiled loop per width)
_CHUNK = 32  # prefill: the prompt runs through the model this many tokens at a time (one compiled chunk)
_MIN_LENGTH = 64  # the shortest cache of a call without a session (then 128, 256, ... up to the context)
_COMPILED = weakref.WeakKeyDictionary()  # model -> (weak refs to its variables, {settings: the compiled program})
_TRACES = weakref.WeakKeyDictionary()  # model -> how many decoding programs were traced and compiled for it


def compilations(model):
    """How many decoding programs :func:`generate_text` (``jit_compile=True``) has traced and compiled for ``model``
    in this process (under JAX with a persistent compilation cache, a trace may load its program from the disk
    instead): what tells a chat whether a turn compiled."""
    return _TRACES.get(model, 0)


def use_compilation_cache(directory):
    """Keeps this process's compiled XLA programs (the decoding programs included) in ``directory``, where a later
    process compiling the same program for the same shapes loads it instead of compiling it: JAX's persistent
    compilation cache (``jax.config`` ``jax_compilation_cache_dir``; the environment variable
    ``JAX_COMPILATION_CACHE_DIR`` does the same without code). Programs that took under a second to compile are not
    kept (JAX's ``jax_persistent_cache_min_compile_time_secs``). Other backends: a ValueError (there is no such
    cache to turn on here)."""
    import keras

    if keras.backend.backend() != "jax":
        raise ValueError(f"`directory`: a persistent compilation cache needs the JAX backend; this process runs "
                         f"{keras.backend.backend()!r} (set KERAS_BACKEND=jax). Received directory={directory!r}.")
    import jax

    jax.config.update("jax_compilation_cache_dir", str(directory))


def _traced(model):
    """Counts one trace of a decoding program of ``model`` (called while tracing: once per compilation)."""
    _TRACES[model] = _TRACES.get(model, 0) + 1


def _programs(model):
    """``{settings: compiled program}`` of ``model`` as its variables are now: programs traced before they changed
    (LoRA adapters added or merged, kernels quantized) are dropped, for a ``tf.function`` would go on running the
    model it traced."""
    variables = model.variables
    known = _COMPILED.get(model, ((), None))[0]
    if len(known) != len(variables) or any(ref() is not v for ref, v in zip(known, variables)):
        _COMPILED[model] = (tuple(weakref.ref(v) for v in variables), {})
    return _COMPILED[model][1]


def _compile(model_ref, run, donate=()):
    """``run(*arrays)`` compiled with XLA: a ``tf.function(jit_compile=True)`` under TensorFlow; under JAX a
    ``jax.jit`` of the stateless call (the model's variables are arguments, mapped in a ``keras.StatelessScope``, as
    keras-hub's ``CausalLM`` does: weights loaded or trained later are used, not the values seen when tracing), the
    arguments at positions ``donate`` donated (their buffers reused for the outputs: the key/value cache is updated
    in place rather than copied). ``model_ref``: a weak reference to the model (the cache must not keep it alive)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(run, jit_compile=True, autograph=False)
    if backend == "jax":
        import jax

        def stateless(values, *arrays):
            with keras.StatelessScope(state_mapping=list(zip(model_ref().variables, values))):
                return run(*arrays)

        jitted = jax.jit(stateless, donate_argnums=tuple(1 + i for i in donate))
        return lambda *arrays: jitted([v.value for v in model_ref().variables], *arrays)
    raise ValueError(f"`jit_compile=True` needs the TensorFlow or JAX backend; received the {backend!r} backend. "
                     "Pass jit_compile=False.")


def _sampling_seed(search, seed):
    """The seed of a compiled call: ``seed``, else the search's, else a fresh one (sampling); 0 for greedy."""
    import numpy as np

    check_seed(seed)  # a named ValueError before the conversion below
    if seed is None and search.stochastic:
        seed = getattr(search, "seed", None)
        seed = int(np.random.randint(2**31 - 1)) if seed is None else seed
    return np.asarray(0 if seed is None else seed, dtype="int32")


def _compiled_beam_search(model, token_ids, mask, max_length, search, stop_sequences):
    """Beam search as ``model.generate`` in one XLA-compiled loop (:func:`_compile`), cached per model and shape: the
    prompts right-padded to a multiple of ``_BUCKET`` tokens (its loop carries and reorders k caches every step, so
    it keeps caches sized for the call rather than the context)."""
    import numpy as np

    limit = model.config.max_sequence_length
    width = token_ids.shape[1]
    bucket = -(-width // _BUCKET) * _BUCKET
    if bucket + 1 > (max_length or limit):  # no room to pad: this width, as given
        bucket = width
    if max_length is None:
        max_length = limit
    pad = np.full((len(token_ids), bucket - width), model.pad_token_id, "int32")
    token_ids = np.concatenate([token_ids, pad], axis=1)
    mask = np.concatenate([mask, np.zeros(pad.shape, bool)], axis=1)
    key = ("beam", bucket, max_length, repr(search), stop_sequences and tuple(map(tuple, stop_sequences)))
    functions = _programs(model)
    if key not in functions:
        model_ref = weakref.ref(model)  # a value of the WeakKeyDictionary holding its key would keep it forever

        def run(ids, prompt_mask):
            _traced(model_ref())
            result = model_ref().generate(ids, max_length, search, None, padding_mask=prompt_mask,
                                          stop_sequences=stop_sequences)
            return result.tokens, result.lengths

        functions[key] = _compile(model_ref, run)
    return functions[key](token_ids, mask)


class DecodingSession:
    """The key/value cache of a conversation, kept between :func:`generate_text` calls (``session=``; a chat's
    turns): the next call runs only the tokens after the longest prefix its prompts share with the tokens the cache
    holds (the earlier turns, the previous answer included), instead of the whole conversation again.

    The cache has a static length: 512 positions (or the context, if shorter), then 2,048, 8,192, ... (capped at the
    context) when a call needs more; the cache is carried over. Each length is compiled once (per batch size and
    search), so a conversation compiles a bounded number of times: at most twice up to a context of 2,048. A short
    cache keeps the prefill's cost low (each chunk attends over the whole cache). Its entries are the model's keys
    and values for its current weights: after changing the weights (training, ``set_weights``), call :meth:`reset`.

    Args:
        model: the :class:`~attnlayers.applications.gpt.GPT` the session decodes with.

    Attributes:
        length: the cache's current length L.
        reused_tokens: how many prompt tokens (per row, the fewest) the last call found in the cache.

    Example:
    >>> session = DecodingSession(model)
    >>> generate_text(model, tokenizer, [conversation], max_new_tokens=48, jit_compile=True, session=session)
    """

    first_length = 512
    growth = 4

    def __init__(self, model):
        self.model = model
        self.length = min(self.first_length, model.config.max_sequence_length)
        self.reset()

    def reset(self):
        """Forgets the cache (the next call prefills its whole prompt)."""
        self.cache, self.tokens, self.reused_tokens = None, None, 0

    def fit(self, needed):
        """The cache length for a call that needs ``needed`` positions: the current one, or a longer one (the cache
        padded to it, its entries kept)."""
        if needed <= self.length:
            return self.length
        length, limit = self.length, self.model.config.max_sequence_length
        while length < needed:
            length *= self.growth
        length = min(length, limit)
        if self.cache is not None:
            from keras import ops

            self.cache = ops.pad(self.cache, [[0, 0]] * 3 + [[0, length - self.length]] + [[0, 0]] * 2)
        self.length = length
        return length

    def start(self, token_ids, mask):
        """``(cache, start)`` for right-padded prompts (B, P): the kept cache and the length of the prefix every row
        shares with the tokens it holds, or (None, 0)."""
        if self.cache is None or len(self.tokens) != len(token_ids):
            return None, 0
        shared = []
        for row, length, kept in zip(token_ids, mask.sum(axis=1), self.tokens):
            row, count = row[:length], min(int(length), len(kept))
            same = (row[:count] != kept[:count]).nonzero()[0]
            shared.append(int(same[0]) if same.size else count)
        return self.cache, min(shared)

    def keep(self, cache, tokens, lengths):
        """Keeps the cache after a call: its entries for positions 0 .. lengths - 2 of each row are that row's."""
        self.cache = cache
        self.tokens = [row[: max(int(length) - 1, 0)] for row, length in zip(tokens, lengths)]


def _cache_length(model, needed, session):
    """The static length L of a compiled call's cache and token buffer: the session's (:meth:`DecodingSession.fit`),
    else the least of 64, 128, 256, ... (capped at the context) that holds ``needed`` tokens."""
    if session is not None:
        return session.fit(needed)
    length = _MIN_LENGTH
    while length < needed:
        length *= 2
    return min(length, model.config.max_sequence_length)


def _compiled_generate(model, token_ids, mask, max_length, search, seed, max_new_tokens, stop_sequences,
                       session=None):
    """Greedy search and sampling in one XLA-compiled program (:func:`_compile`) for every prompt length: the
    prompts in a (B, L) buffer and their mask, the cache of static length L (:func:`_cache_length`), the prefill by
    chunks of ``_CHUNK`` tokens from a start position given as a value (:meth:`GPT.prefill` in a loop), then the
    decoding loop (:func:`attnlayers.decoding.generate` from the shortest prompt, ``max_new_tokens`` and the output
    length as values). Compiled once per model, batch size, L, search and stop sequences. With a
    :class:`DecodingSession` the prefill starts after the prefix the prompts share with the session's cache."""
    import numpy as np
    from keras import ops

    from attnlayers.decoding import generate

    seed = _sampling_seed(search, seed)
    batch, width = token_ids.shape
    limit = model.config.max_sequence_length
    wanted = max_length if max_length is not None else (
        limit if max_new_tokens is None else min(limit, width + max_new_tokens))
    length = _cache_length(model, wanted, session)
    chunk = min(_CHUNK, length)
    buffer = np.full((batch, length), model.pad_token_id, "int32")
    buffer[:, :width] = token_ids
    buffer_mask = np.zeros((batch, length), bool)
    buffer_mask[:, :width] = mask
    key = ("one token", batch, length, chunk, repr(search), stop_sequences and tuple(map(tuple, stop_sequences)))
    functions = _programs(model)
    if key not in functions:
        model_ref = weakref.ref(model)  # a value of the WeakKeyDictionary holding its key would keep it forever

        def run(ids, prompt_mask, cache, start, new_tokens, length_limit, seed_):
            model_ = model_ref()
            _traced(model_)
            # The loop's first step feeds token P_min - 1 (P_min: the shortest prompt): prefill [start, P_min - 1).
            end = ops.min(ops.sum(ops.cast(prompt_mask, "int32"), axis=1)) - 1

            def prefill(position, cache):
                at = ops.minimum(position, length - chunk)  # a last chunk past L is moved back (rewrites the same)
                return at + chunk, model_.prefill(ops.slice(ids, (0, at), (batch, chunk)), cache, at)

            _, cache = ops.while_loop(lambda position, cache: position < end, prefill, (start, cache))
            result, cache = generate(
                model_.next, ids, length, search, cache=cache, prompt_mask=prompt_mask,
                stop_token_ids=list(model_.stop_token_ids), pad_token_id=model_.pad_token_id,
                seed=seed_ if search.stochastic else None, max_new_tokens=new_tokens, stop_sequences=stop_sequences,
                length_limit=length_limit, return_cache=True,
            )
            return result.tokens, result.lengths, cache

        functions[key] = _compile(model_ref, run, donate=(2,))
    cache, start = (None, 0) if session is None else session.start(token_ids, mask)
    if cache is None:
        c = model.config
        cache = ops.zeros((batch, c.num_layers, 2, length, c.key_value_heads, c.head_dim), model.compute_dtype)
    if session is not None:
        session.cache, session.reused_tokens = None, start  # donated under JAX: not to be read again
    tokens, lengths, cache = functions[key](
        buffer, buffer_mask, cache, np.asarray(start, "int32"), np.asarray(max_new_tokens or length, "int32"),
        np.asarray(wanted, "int32"), seed)
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    if session is not None:
        session.keep(cache, tokens, lengths)
    return tokens, lengths


@renamed_keyword("strategy", "search")
def generate_text(model, tokenizer, prompts, *, max_length=None, max_new_tokens=None, search="greedy",
                  seed=None, stop_strings=None, jit_compile=False, session=None):
    """Continues text prompts with a GPT (``model.generate``) and returns the generated text.

    Args:
        model: a :class:`~attnlayers.applications.gpt.GPT`.
        tokenizer: its :class:`~attnlayers.applications.gpt.GPT2Tokenizer` (or any tokenizer with
            ``tokenize(list) -> tf.RaggedTensor`` and ``detokenize``).
        prompts: a string or a list of B strings, each at least one token and at most ``max_sequence_length``.
        max_length: the output length in tokens, prompt included (default: the longest prompt +
            ``max_new_tokens`` when given, else ``max_sequence_length``).
        max_new_tokens: None or an int >= 1: each row stops after that many generated tokens (beam search: the
            default ``max_length`` is the longest prompt + ``max_new_tokens``). More than the length leaves
            (``max_length`` or ``max_sequence_length`` minus the prompt; e.g. 2**31 - 1) is clipped to that.
        search: "greedy", "beam", "sample", ... or an ``attnlayers.decoding`` search (``Sampling(temperature,
            top_k, top_p)``, ``BeamSearch(num_beams, num_return)``).
        seed: the sampling seed, an int or an integer tensor (the same seed gives the same text).
        stop_strings: None or a list of non-empty strings: generation of a row stops when its tokens end with one
            (as tokenized alone), and the text is cut before the first occurrence of any (see the module
            docstring).
        jit_compile: run the prefill and the decoding loop as one XLA-compiled program: a
            ``tf.function(jit_compile=True)`` under TensorFlow, a ``jax.jit`` of the stateless call under JAX (other
            backends: a ValueError), several times faster per token on CPUs than the plain loop. Greedy search and
            sampling compile once per batch size, search, stop strings and cache length (64, 128, 256, ... up to
            ``max_sequence_length``: the least that holds the output), whatever the prompt length, ``max_length``
            and ``max_new_tokens`` (values, not shapes): the prompt is prefilled 32 tokens at a time. Beam search
            compiles once per prompt width bucket (prompts right-padded to a multiple of 64 tokens) and settings.
            :func:`compilations` counts the programs compiled.
        session: None, or a :class:`DecodingSession` (with ``jit_compile=True``, greedy search or sampling): its
            cache (512 positions, then 2,048, ... up to ``max_sequence_length``) is kept between calls and a call
            prefills only the tokens after the prefix its prompts share with the previous call's prompt and output
            (a chat's turns).

    Returns:
        A list of B strings (the generated continuation: prompt, end token and stop string left out; invalid UTF-8
        where generation stopped inside a character is replaced by U+FFFD); with ``BeamSearch(num_return=t > 1)``
        a list of B lists of t strings, best first.

    Raises:
        ValueError: naming the argument: empty or too long prompts, bad stop strings, unknown searches or
            settings, a ``max_length`` beyond ``max_sequence_length``, a ``seed`` that is not an int, token ids
            outside the model's vocabulary (a tokenizer bigger than the model).
    """
    import numpy as np

    stop_strings = check_stop_strings(stop_strings)
    search = get_search(search)
    max_new_tokens = positive_int(max_new_tokens, "max_new_tokens", allow_none=True, what="tokens generated per row")
    max_length = positive_int(max_length, "max_length", allow_none=True, what="the output length, prompt included")
    token_ids, mask = _tokenize_prompts(model, tokenizer, prompts, max_length)
    if isinstance(search, BeamSearch) and max_new_tokens is not None:  # beam search has one length for all rows
        if max_length is None:
            max_length = min(model.config.max_sequence_length, token_ids.shape[1] + int(max_new_tokens))
        max_new_tokens = None
    stop_sequences = stop_sequences_for(tokenizer, stop_strings) or None
    if session is not None and (not jit_compile or isinstance(search, BeamSearch) or session.model is not model):
        raise ValueError(
            "`session` keeps the key/value cache of one model's compiled greedy search or sampling: pass "
            f"jit_compile=True, a search other than beam search, and the session's model; received "
            f"jit_compile={jit_compile!r}, search={search!r}"
            f"{', another model' if session.model is not model else ''}."
        )
    if jit_compile:
        model.generation_length(max_length)  # a ValueError beyond max_sequence_length
        check_id_range(token_ids, "token_ids", model.config.vocabulary_size, what="token ids")
        if isinstance(search, BeamSearch):
            check_seed(seed)
            tokens, lengths = _compiled_beam_search(model, token_ids, mask, max_length, search, stop_sequences)
        else:
            tokens, lengths = _compiled_generate(model, token_ids, mask, max_length, search, seed, max_new_tokens,
                                                 stop_sequences, session)
    else:
        result = model.generate(token_ids, max_length, search, seed, padding_mask=mask,
                                max_new_tokens=max_new_tokens, stop_sequences=stop_sequences)
        tokens, lengths = result.tokens, result.lengths
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    beams = tokens.ndim == 3
    if not beams:
        tokens, lengths = tokens[:, None], lengths[:, None]
    stops = set(model.stop_token_ids)
    starts = mask.sum(axis=1)
    pieces = [[int(t) for t in tokens[b, j, starts[b]: lengths[b, j]] if int(t) not in stops]
              for b in range(len(tokens)) for j in range(tokens.shape[1])]
    import tensorflow as tf

    raw = tokenizer.detokenize(tf.ragged.constant(pieces, dtype=tf.int32, ragged_rank=1)).numpy()
    texts = [cut_at_stop_strings(t.decode("utf-8", errors="replace"), stop_strings) for t in raw]
    width = tokens.shape[1]
    rows = [texts[b * width: (b + 1) * width] for b in range(len(tokens))]
    if beams and isinstance(search, BeamSearch) and search.num_return > 1:
        return rows
    return [row[0] for row in rows]
