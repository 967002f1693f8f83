"""SavedModel export of generation: a ``generate`` signature that runs :func:`attnlayers.decoding.generate`
(greedy, beam search or sampling, with its stop tokens and caches) inside the SavedModel.

keras-hub and ``keras.export`` write the forward pass only; a server then has to reimplement the decoding
loop. Here the loop itself is exported: a ``tf.Module`` holds the model's variables (and the tokenizer's
resources) and a ``tf.function`` with a fixed input signature wraps the decoding loop, itself an XLA-compiled
``tf.function(jit_compile=True)`` (compiled once per input shape, at the first call after loading). The result
loads with ``tf.saved_model.load`` in a process that imports neither attnlayers nor keras (with a
tensorflow-text tokenizer attached, ``import tensorflow_text`` registers its ops).

TensorFlow only (SavedModel is TensorFlow's format): this module imports tensorflow and needs the TensorFlow
backend when exporting.
"""

import keras
import tensorflow as tf

from attnlayers.decoding import GreedySearch, Sampling, _check_stop_sequences, generate, get_strategy
from attnlayers.validation import one_of, positive_int, string_list


def _variables(track):
    if track is None:
        return []
    if isinstance(track, (keras.layers.Layer, keras.Variable)) or not isinstance(track, (list, tuple)):
        track = [track]
    variables = []
    for item in track:
        if isinstance(item, keras.Variable):
            variables.append(item)
        elif hasattr(item, "variables"):
            variables.extend(item.variables)
        else:
            raise ValueError(
                "`track` must be a Keras layer or model, a Keras variable, or a list of them (everything whose "
                f"variables `next` and `prepare` use); received an item {item!r}."
            )
    return variables


def assert_rank(tensor, rank, name, expected):
    """``tensor`` after an in-graph assertion that its rank at run time is ``rank``.

    A SavedModel's ``signatures[...]`` check their inputs' dtypes but not their shapes: a scalar string fed to a
    ``(None,)`` input reaches the graph, where ``tf.rank`` is constant-folded from the declared shape. This
    computes the rank from the run-time shape, and fails with ``InvalidArgumentError`` naming the input
    (``name``) and its expected shape (``expected``, e.g. "(batch,)") instead of a shape error deep inside.
    """
    shape = tf.shape(tensor)
    actual = tf.size(tf.boolean_mask(shape, shape >= 0))  # not folded: boolean_mask's length is dynamic
    check = tf.debugging.Assert(
        tf.equal(actual, rank),
        [f"`{name}` must have shape {expected} (rank {rank}); received a tensor of rank", actual, "and shape", shape],
    )
    with tf.control_dependencies([check]):
        return tf.identity(tensor)


def _default_prepare(token_ids, padding_mask):
    return {"prompt": token_ids, "prompt_mask": padding_mask}


def _text_of(token_ids, prompt_lengths, lengths, stop_token_ids, tokenizer):
    """Detokenizes the generated part of each sequence: after the prompt, before the stop token / padding."""
    shape = tf.shape(token_ids)
    flat = tf.reshape(token_ids, (-1, shape[-1]))
    lengths = tf.reshape(lengths, (-1,))
    # (B,) prompt lengths, repeated for the t beams of each row of a (B, t, L) beam search output.
    starts = tf.repeat(prompt_lengths, shape[1]) if token_ids.shape.rank == 3 else prompt_lengths
    positions = tf.range(shape[-1])[None, :]
    keep = (positions >= starts[:, None]) & (positions < lengths[:, None])
    for stop in stop_token_ids:
        keep &= tf.not_equal(flat, stop)
    text = tokenizer.detokenize(tf.ragged.boolean_mask(flat, keep))
    return tf.reshape(tf.convert_to_tensor(text), shape[:-1])


def _literal(text):
    """An RE2 pattern matching ``text`` literally: every character as ``\\x{code point}``."""
    return "".join(f"\\x{{{ord(character):x}}}" for character in text)


def cut_at_stop_strings(text, stop_strings):
    """Strings cut before the first occurrence of any of ``stop_strings`` (TensorFlow ops, any shape).

    One leftmost regular-expression match of the stop strings (written literally) followed by ``\\C*`` (any
    bytes: the text may end inside a UTF-8 character), replaced by nothing.

    Args:
        text: a tf.string tensor. stop_strings: a list of non-empty Python strings.

    Returns:
        A tf.string tensor of the shape of ``text``.
    """
    if not stop_strings:
        return text
    pattern = "(?:" + "|".join(_literal(s) for s in stop_strings) + r")\C*"
    return tf.strings.regex_replace(text, pattern, "", replace_global=False)


def _check_stop_strings(stop_strings, tokenizer):
    stop_strings = string_list(stop_strings, "stop_strings")
    if stop_strings and tokenizer is None:
        raise ValueError("`stop_strings` needs a `tokenizer` (they are tokenized, and the text output is cut).")
    return stop_strings


def _stop_sequences_of(stop_strings, tokenizer):
    """Each stop string's token ids (eager), as :func:`attnlayers.decoding.generate`'s ``stop_sequences``."""
    sequences = []
    for text in stop_strings:
        ids = tokenizer.tokenize(tf.constant([text]))
        if isinstance(ids, tf.RaggedTensor):
            while ids.ragged_rank > 1:
                ids = ids.merge_dims(1, 2)
            ids = ids[0]
        else:
            ids = tf.reshape(ids, (-1,))
        sequences.append([int(i) for i in ids.numpy().ravel()])
    return [s for s in sequences if s]


def _left_fit(token_ids, padding_mask, input_length, pad_token_id):
    """Right-padded prompts (B, P) -> (B, input_length): the last ``input_length`` tokens of each prompt."""
    lengths = tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)
    extra = tf.maximum(input_length - tf.shape(token_ids)[1], 0)
    token_ids = tf.pad(token_ids, [[0, 0], [0, extra]], constant_values=pad_token_id)
    positions = tf.maximum(lengths - input_length, 0)[:, None] + tf.range(input_length)[None, :]
    padding_mask = positions < lengths[:, None]
    token_ids = tf.where(padding_mask, tf.gather(token_ids, positions, batch_dims=1), pad_token_id)
    return token_ids, padding_mask


class _GenerateModule(tf.Module):
    def __init__(self, variables, tokenizer):
        super().__init__(name="attnlayers_generate")
        self.model_variables = list(variables)
        if tokenizer is not None:
            self.tokenizer = tokenizer  # tracks its lookup tables / tokenizer resources


def export_generate(
    path,
    next,
    max_length,
    strategy="greedy",
    *,
    track=None,
    prepare=None,
    stop_token_ids=None,
    pad_token_id=0,
    tokenizer=None,
    input_length=None,
    source_spec=None,
    jit_compile=True,
    settings=False,
    stop_sequences=None,
    stop_strings=None,
    truncation="right",
    require_tokens=False,
):
    """Writes a SavedModel whose ``generate`` signature runs the decoding loop (or, with ``path=None``, builds
    the module without saving it).

    Args:
        path: the SavedModel directory; or None: build the ``tf.Module`` (its ``generate`` ``tf.function``
            traced for its input signature) and save nothing, so that the caller can attach the module to its
            own, or add functions to it, and save once (see the second example).
        next: the step function of :func:`attnlayers.decoding.generate`, ``next(tokens, cache, index) ->
            (logits, cache)``.
        max_length: L, the output length (prompt included), a Python int.
        strategy: as in :func:`~attnlayers.decoding.generate` (a name, :class:`~attnlayers.decoding.GreedySearch`,
            :class:`~attnlayers.decoding.BeamSearch`, :class:`~attnlayers.decoding.Sampling`). A sampling strategy
            adds an int32 scalar ``seed`` input: the same seed gives the same output (as in-process
            :func:`~attnlayers.decoding.generate` with that seed); no random state is saved.
        track: the Keras layers / models (or variables) whose variables ``next`` and ``prepare`` read; they are
            saved with the function.
        prepare: ``prepare(token_ids, padding_mask) -> dict`` with "prompt" (B, P) and optionally "prompt_mask"
            (B, P) and "cache": turns the signature's inputs into the decoding's. Default: the inputs are the
            (decoder-only) prompt, no cache. A cached GPT returns its prefilled cache; a translator returns
            start tokens as the prompt and a cache holding the encoder memory of ``token_ids``.
        stop_token_ids, pad_token_id: as in :func:`~attnlayers.decoding.generate`.
        tokenizer: None, or an object whose ``tokenize(strings)`` returns (ragged) int token ids and
            ``detokenize(ids)`` strings, built from TensorFlow / tensorflow-text ops (e.g. a keras-hub
            ``WordPieceTokenizer``, or a ``tensorflow_text`` tokenizer). The signature then takes strings.
        input_length: None or an int: the inputs are padded (and truncated) to this length, so that the
            compiled loop sees one input shape per batch size. Default: ``max_length`` with a tokenizer (the
            text's length varies), the given width of ``token_ids`` without.
        source_spec: None, or a ``tf.TensorSpec`` of an input other than token ids (e.g. images
            ``tf.TensorSpec((None, 64, 64, 3), tf.uint8, name="images")``): the signature then takes that one
            tensor (named after the spec) and ``prepare(source)`` turns it into the decoding's inputs.
        jit_compile: compile the decoding loop with XLA.
        settings: False, or True: sampling whose settings are signature inputs (one compiled loop for every
            setting): ``temperature`` float32 () (0: greedy search), ``top_k`` int32 () (0: off), ``top_p``
            float32 () (1.0: off), ``seed`` int32 () and ``max_new_tokens`` int32 () (a row stops after that
            many generated tokens; the loop keeps its static ``max_length``, so a value >= L means no limit).
            Invalid values fail a ``tf.debugging`` assertion naming the input. ``strategy`` must then be left
            "greedy" or be a :class:`~attnlayers.decoding.Sampling` (its settings are replaced by the inputs).
        stop_sequences: None or lists of token ids, fixed at export: a row stops when its generated tokens end
            with one of them (:func:`~attnlayers.decoding.generate`'s ``stop_sequences``).
        stop_strings: None or strings, fixed at export (needs a ``tokenizer``): each is tokenized into a stop
            sequence, and the ``text`` output is cut before the first occurrence of any of them. A tokenizer may
            spell a stop string with other tokens in context (BPE merges across its boundary): the text is still
            cut at it, the row only runs on (to another stop or the length limit).
        truncation: "right" (inputs longer than ``input_length`` lose their last tokens) or "left" (they keep
            their last ``input_length`` tokens, what a language model continues; the outputs then include
            ``truncated`` bool (B,), True where a prompt lost tokens). Inputs are right-padded prompts.
        require_tokens: assert that every prompt holds a token (an empty text or an all-False ``padding_mask``
            row fails a ``tf.debugging`` assertion naming the input), for models that continue the prompt.

    Returns:
        The ``tf.Module`` that was saved (or only built, when ``path`` is None); its ``generate`` method runs in
        this process too. The signature to save it with is ``{"generate": module.generate.get_concrete_function()}``.

    Signature ``generate`` (``loaded.signatures["generate"](**inputs)``, or ``loaded.generate(...)`` with the
    inputs by keyword or in this order):
        inputs: ``token_ids`` int32 (B, P) and ``padding_mask`` bool (B, P) (right-padded prompts); with a
            tokenizer, ``text`` string (B,) instead; with ``source_spec``, that tensor instead; then ``seed``
            int32 () for sampling strategies; with ``settings``, ``temperature``, ``top_k``, ``top_p``, ``seed``,
            ``max_new_tokens`` instead.
        outputs (a dict): ``token_ids`` int32 (B, L), ``scores`` / ``log_probs`` float32 (B,), ``lengths``
            int32 (B,); with :class:`~attnlayers.decoding.BeamSearch`, (B, t, L) and (B, t). With a tokenizer,
            also ``text`` string (B,) or (B, t): the detokenized generated tokens (prompt, stop token and
            padding left out, cut before a stop string). With ``truncation="left"``, also ``truncated``.
        Input checks: ``text`` of another rank than 1 (a scalar string fed through ``signatures[...]``, which
        check dtypes but not shapes) fails an ``InvalidArgumentError`` assertion naming ``text`` and its shape
        (batch,): wrap a single prompt in a list. A wrong dtype is refused by TensorFlow before the graph runs
        (``loaded.generate``: "Can not cast TensorSpec..."; ``signatures[...]``: "input #N(zero-based) was
        expected to be a ... tensor", N the input's position among the signature's inputs); the SavedModel
        cannot reword those.

    Example:
    >>> export_generate("/tmp/gpt", lm_next, 64, BeamSearch(4, 2), track=[embedding, decoder],
    ...                 prepare=lambda ids, mask: {"prompt": ids, "prompt_mask": mask, "cache": prefill(ids)},
    ...                 stop_token_ids=[eos])
    >>> # in a process with only TensorFlow:
    >>> loaded = tf.saved_model.load("/tmp/gpt")
    >>> out = loaded.generate(token_ids=ids, padding_mask=ids != 0)   # or loaded.signatures["generate"](...)
    >>> out["token_ids"].shape, out["scores"].shape
    (TensorShape([B, 2, 64]), TensorShape([B, 2]))

    Building without saving, then adding a function and saving once:
    >>> module = export_generate(None, lm_next, 64, track=lm, prepare=prepare, stop_token_ids=[eos])
    >>> module.first_token = tf.function(lambda ids, mask: module.generate(ids, mask)["token_ids"][:, :1],
    ...                                  input_signature=[tf.TensorSpec((None, None), tf.int32),
    ...                                                   tf.TensorSpec((None, None), tf.bool)])
    >>> tf.saved_model.save(module, "/tmp/gpt", signatures={
    ...     "generate": module.generate.get_concrete_function(),
    ...     "first_token": module.first_token.get_concrete_function()})
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "export_generate writes a TensorFlow SavedModel and needs the TensorFlow backend; received "
            f"KERAS_BACKEND={keras.backend.backend()!r}."
        )
    max_length = positive_int(max_length, "max_length", what="the output length, prompt included")
    input_length = positive_int(input_length, "input_length", allow_none=True)
    if source_spec is not None and (tokenizer is not None or not isinstance(source_spec, tf.TensorSpec)):
        raise ValueError(
            "`source_spec` must be a tf.TensorSpec, and cannot be combined with a `tokenizer`; received "
            f"source_spec={source_spec!r}, tokenizer={tokenizer!r}."
        )
    if tokenizer is not None and not (hasattr(tokenizer, "tokenize") and hasattr(tokenizer, "detokenize")):
        raise ValueError(
            "`tokenizer` must have `tokenize(strings)` and `detokenize(token_ids)` methods built from TensorFlow "
            f"ops; received {tokenizer!r}."
        )
    truncation = one_of(truncation, "truncation", ("right", "left"))
    strategy = get_strategy(strategy)
    if settings and not isinstance(strategy, (Sampling, GreedySearch)):
        raise ValueError(
            "`settings=True` samples with the signature's temperature / top_k / top_p (temperature 0: greedy): "
            f"`strategy` must be 'greedy' or a Sampling; received strategy={strategy!r}."
        )
    stop_strings = _check_stop_strings(stop_strings, tokenizer)
    sequences = list(stop_sequences or [])
    _check_stop_sequences(sequences or None)
    sequences += _stop_sequences_of(stop_strings, tokenizer) if stop_strings else []
    prepare = prepare or _default_prepare
    stops = () if stop_token_ids is None else tuple(
        [stop_token_ids] if isinstance(stop_token_ids, int) else stop_token_ids
    )
    if tokenizer is not None and input_length is None:
        input_length = max_length
    if truncation == "left" and (input_length is None or source_spec is not None):
        raise ValueError(
            '`truncation="left"` keeps the last `input_length` tokens of each prompt: it needs token ids or text '
            f"inputs and an `input_length`; received input_length={input_length!r}, source_spec={source_spec!r}."
        )
    stochastic = settings or strategy.stochastic
    module = _GenerateModule(_variables(track), tokenizer)

    @tf.function(jit_compile=jit_compile, autograph=False)
    def decode(source, seed, values):  # source: (token_ids, padding_mask) or (the source_spec tensor,)
        inputs = prepare(*source)
        if not isinstance(inputs, dict) or "prompt" not in inputs:
            raise ValueError(
                "`prepare(token_ids, padding_mask)` (or `prepare(source)`) must return a dict with 'prompt' (and "
                f"optionally 'prompt_mask', 'cache'); received {inputs!r}."
            )
        prompt = tf.cast(inputs["prompt"], tf.int32)
        prompt_mask = inputs.get("prompt_mask")
        if prompt_mask is None:
            prompt_mask = tf.ones_like(prompt, dtype=tf.bool)
        chosen, max_new_tokens = strategy, None
        if values is not None:
            temperature, top_k, top_p, max_new_tokens = values
            chosen = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
        result = generate(
            next, prompt, max_length, chosen, cache=inputs.get("cache"), prompt_mask=prompt_mask,
            stop_token_ids=stops, pad_token_id=pad_token_id, seed=seed if stochastic else None,
            max_new_tokens=max_new_tokens, stop_sequences=sequences or None,
        )
        prompt_lengths = tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)
        return result, prompt_lengths

    def checked(values):
        """The settings after assertions naming the input that is out of range."""
        if values is None:
            return None
        temperature, top_k, top_p, max_new_tokens = values
        checks = [
            tf.debugging.assert_all_finite(temperature, "`temperature` must be a finite number >= 0 (0: greedy)"),
            tf.debugging.assert_greater_equal(temperature, 0.0,
                                              message="`temperature` must be a finite number >= 0 (0: greedy)"),
            tf.debugging.assert_greater_equal(top_k, 0, message="`top_k` must be an integer >= 0 (0: off)"),
            tf.debugging.assert_greater(top_p, 0.0, message="`top_p` must be a probability in (0, 1] (1.0: off)"),
            tf.debugging.assert_less_equal(top_p, 1.0,
                                           message="`top_p` must be a probability in (0, 1] (1.0: off)"),
            tf.debugging.assert_greater_equal(max_new_tokens, 1,
                                              message="`max_new_tokens` must be an integer >= 1"),
        ]
        with tf.control_dependencies(checks):
            return tuple(tf.identity(v) for v in values)

    def fit(token_ids, padding_mask, name):
        """The inputs at ``input_length`` (truncated as asked), and whether each row was truncated."""
        lengths = tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)
        if require_tokens:
            check = tf.debugging.assert_positive(
                lengths, message=f"`{name}`: every prompt needs at least one token; a row is empty")
            with tf.control_dependencies([check]):
                token_ids = tf.identity(token_ids)
        if input_length is None:
            return token_ids, padding_mask, tf.zeros_like(lengths, tf.bool)
        truncated = lengths > input_length
        if truncation == "left":
            token_ids, padding_mask = _left_fit(token_ids, padding_mask, input_length, pad_token_id)
        else:
            token_ids, padding_mask = token_ids[:, :input_length], padding_mask[:, :input_length]
            extra = input_length - tf.shape(token_ids)[1]
            token_ids = tf.pad(token_ids, [[0, 0], [0, extra]], constant_values=pad_token_id)
            padding_mask = tf.pad(padding_mask, [[0, 0], [0, extra]], constant_values=False)
        token_ids = tf.ensure_shape(token_ids, (None, input_length))
        return token_ids, tf.ensure_shape(padding_mask, (None, input_length)), truncated

    def outputs(result, truncated=None):
        result, _ = result
        out = {"token_ids": result.tokens, "scores": result.scores, "log_probs": result.log_probs,
               "lengths": result.lengths}
        if truncation == "left":
            out["truncated"] = truncated
        return out

    def from_ids(token_ids, padding_mask, seed, values=None):
        token_ids, padding_mask, truncated = fit(tf.cast(token_ids, tf.int32), tf.cast(padding_mask, tf.bool),
                                                 "padding_mask")
        return outputs(decode((token_ids, padding_mask), seed, checked(values)), truncated)

    def from_source(source, seed, values=None):
        return outputs(decode((source,), seed, checked(values)))

    def from_text(text, seed, values=None):
        ids = tokenizer.tokenize(assert_rank(text, 1, "text", "(batch,): one string per prompt"))
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        while ids.ragged_rank > 1:  # tokenizers that return (batch, words, pieces)
            ids = ids.merge_dims(1, 2)
        ids = tf.cast(ids, tf.int32)
        token_ids = ids.to_tensor(default_value=pad_token_id)
        padding_mask = tf.sequence_mask(ids.row_lengths(), tf.shape(token_ids)[1])
        token_ids, padding_mask, truncated = fit(token_ids, padding_mask, "text")
        result = decode((token_ids, padding_mask), seed, checked(values))
        out = outputs(result, truncated)
        text = _text_of(out["token_ids"], result[1], out["lengths"], stops, tokenizer)
        out["text"] = cut_at_stop_strings(text, stop_strings)
        return out

    # One function per input set, with named parameters (no *args): the module and the loaded SavedModel then
    # take keyword arguments as well as positional ones.
    ids_spec = [tf.TensorSpec((None, None), tf.int32, name="token_ids"),
                tf.TensorSpec((None, None), tf.bool, name="padding_mask")]
    text_spec = [tf.TensorSpec((None,), tf.string, name="text")]
    seed_spec = [tf.TensorSpec((), tf.int32, name="seed")]
    settings_spec = [tf.TensorSpec((), tf.float32, name="temperature"), tf.TensorSpec((), tf.int32, name="top_k"),
                     tf.TensorSpec((), tf.float32, name="top_p"), tf.TensorSpec((), tf.int32, name="seed"),
                     tf.TensorSpec((), tf.int32, name="max_new_tokens")]
    if settings and source_spec is not None:
        def serve(source, temperature, top_k, top_p, seed, max_new_tokens):
            return from_source(source, seed, (temperature, top_k, top_p, max_new_tokens))
    elif settings and tokenizer is None:
        def serve(token_ids, padding_mask, temperature, top_k, top_p, seed, max_new_tokens):
            return from_ids(token_ids, padding_mask, seed, (temperature, top_k, top_p, max_new_tokens))
    elif settings:
        def serve(text, temperature, top_k, top_p, seed, max_new_tokens):
            return from_text(text, seed, (temperature, top_k, top_p, max_new_tokens))
    elif source_spec is not None and stochastic:
        def serve(source, seed):
            return from_source(source, seed)
    elif source_spec is not None:
        def serve(source):
            return from_source(source, tf.constant(0))
    elif tokenizer is None and stochastic:
        def serve(token_ids, padding_mask, seed):
            return from_ids(token_ids, padding_mask, seed)
    elif tokenizer is None:
        def serve(token_ids, padding_mask):
            return from_ids(token_ids, padding_mask, tf.constant(0))
    elif stochastic:
        def serve(text, seed):
            return from_text(text, seed)
    else:
        def serve(text):
            return from_text(text, tf.constant(0))
    signature = ([source_spec] if source_spec is not None else ids_spec if tokenizer is None else text_spec)
    signature += settings_spec if settings else seed_spec if stochastic else []
    function = tf.function(serve, input_signature=signature, autograph=False)

    module.generate = function
    concrete = function.get_concrete_function()  # traced here: errors surface now, and the save reuses it
    if path is not None:
        tf.saved_model.save(module, str(path), signatures={"generate": concrete})
    return module
