"""Text generation with a GPT and its byte-level BPE tokenizer: strings in, strings out, stop strings.

    texts = generate_text(model, tokenizer, ["Once upon a time"], max_new_tokens=40,
                          search=Sampling(temperature=0.8, top_p=0.9), seed=1, stop_strings=["\\n\\n"])

Stop strings (Hugging Face's ``stop_strings``; keras-hub has only stop token ids) stop the decoding loop (each
is tokenized once into a stop sequence) and cut the returned text: :mod:`attnlayers.stop_strings`, whose
``check_stop_strings``, ``stop_sequences_for`` and ``cut_at_stop_strings`` this module re-exports. BPE may spell
a stop string with other tokens in context (e.g. "\\n\\n" after "."): the row then runs on, but the text is still
cut at it. A stop string that spans the prompt and the generated text is not a stop: only the generated part is
searched.

TensorFlow (the tokenizer's ops); the model runs on the TensorFlow or the JAX backend (``jit_compile`` on both).
"""

from __future__ import annotations

import weakref

from attnlayers.decoding import BeamSearch, check_seed, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.stop_strings import check_stop_strings, cut_at_stop_strings, stop_sequences_for
from attnlayers.validation import positive_int

__all__ = ["check_stop_strings", "cut_at_stop_strings", "generate_text", "stop_sequences_for"]


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


_BUCKET = 64  # jit_compile: prompts are padded to a multiple of this width (one compiled loop per width)
_COMPILED = weakref.WeakKeyDictionary()  # model -> {(width, max_length, search, ...): the compiled loop}


def _compile(model_ref, run):
    """``run(ids, prompt_mask, seed)`` compiled with XLA: a ``tf.function(jit_compile=True)`` under TensorFlow; under
    JAX a ``jax.jit`` of the stateless call (the model's variables are arguments, mapped in a
    ``keras.StatelessScope``, as keras-hub's ``CausalLM`` does: weights loaded or trained later are used, not the
    values seen when tracing). ``model_ref``: a weak reference to the model (the cache must not keep it alive)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(run, jit_compile=True, autograph=False)
    if backend == "jax":
        import jax

        def stateless(values, ids, prompt_mask, seed_):
            with keras.StatelessScope(state_mapping=list(zip(model_ref().variables, values))):
                return run(ids, prompt_mask, seed_)

        jitted = jax.jit(stateless)
        return lambda ids, prompt_mask, seed_: jitted([v.value for v in model_ref().variables], ids, prompt_mask,
                                                      seed_)
    raise ValueError(f"`jit_compile=True` needs the TensorFlow or JAX backend; received the {backend!r} backend. "
                     "Pass jit_compile=False.")


def _compiled_generate(model, token_ids, mask, max_length, search, seed, max_new_tokens, stop_sequences):
    """``model.generate`` as one XLA-compiled loop (:func:`_compile`), cached per model and shape: the prompts
    right-padded to a multiple of ``_BUCKET`` tokens, so a growing chat compiles once per bucket."""
    import numpy as np

    limit = model.config.max_sequence_length
    width = token_ids.shape[1]
    bucket = -(-width // _BUCKET) * _BUCKET
    if bucket + (max_new_tokens or 1) > (max_length or limit):  # no room to pad: this width, as given
        bucket = width
    if max_length is None:
        max_length = limit if max_new_tokens is None else min(limit, bucket + max_new_tokens)
    if max_new_tokens is not None:  # a row generates at most max_length - its length tokens (no int32 wrap-around)
        max_new_tokens = max(1, min(max_new_tokens, max_length - int(mask.sum(axis=1).min())))
    pad = np.full((len(token_ids), bucket - width), model.pad_token_id, "int32")
    token_ids = np.concatenate([token_ids, pad], axis=1)
    mask = np.concatenate([mask, np.zeros(pad.shape, bool)], axis=1)
    check_seed(seed)  # a named ValueError before the conversion below
    if seed is None and search.stochastic:
        seed = getattr(search, "seed", None)
        seed = int(np.random.randint(2**31 - 1)) if seed is None else seed
    key = (bucket, max_length, repr(search), max_new_tokens, stop_sequences and tuple(map(tuple, stop_sequences)))
    functions = _COMPILED.setdefault(model, {})
    if key not in functions:
        model_ref = weakref.ref(model)  # a value of the WeakKeyDictionary holding its key would keep it forever

        def run(ids, prompt_mask, seed_):
            result = model_ref().generate(ids, max_length, search, seed_ if search.stochastic else None,
                                          padding_mask=prompt_mask, max_new_tokens=max_new_tokens,
                                          stop_sequences=stop_sequences)
            return result.tokens, result.lengths

        functions[key] = _compile(model_ref, run)
    tokens, lengths = functions[key](token_ids, mask, np.asarray(0 if seed is None else seed, dtype="int32"))
    return tokens, lengths, mask


@renamed_keyword("strategy", "search")
def generate_text(model, tokenizer, prompts, *, max_length=None, max_new_tokens=None, search="greedy",
                  seed=None, stop_strings=None, jit_compile=False):
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
        jit_compile: run the decoding loop (any search, beam search included) as one XLA-compiled function: a
            ``tf.function(jit_compile=True)`` under TensorFlow, a ``jax.jit`` of the stateless call under JAX (other
            backends: a ValueError), compiled on the first call for each prompt width bucket (prompts right-padded
            to a multiple of 64 tokens) and settings, then reused: several times faster per token on CPUs after that
            first call.

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
    if jit_compile:
        tokens, lengths, mask = _compiled_generate(model, token_ids, mask, max_length, search, seed,
                                                   max_new_tokens, stop_sequences)
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
