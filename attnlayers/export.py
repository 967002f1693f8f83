"""SavedModel export of generation: a ``generate`` signature that runs :func:`attnlayers.decoding.generate`
(greedy, beam search or sampling, with its stop tokens and caches) inside the SavedModel.

keras-hub and ``keras.export`` write the forward pass only; a server then has to reimplement the decoding
loop. Here the loop itself is exported: a ``tf.Module`` holds the model's variables (and the tokenizer's
resources) and a ``tf.function`` with a fixed input signature wraps the decoding loop, itself an XLA-compiled
``tf.function(jit_compile=True)`` (compiled once per input shape, at the first call after loading). The result
loads with ``tf.saved_model.load`` in a process that imports neither attnlayers nor keras (with a
tensorflow-text tokenizer attached, ``import tensorflow_text`` registers its ops).

What the signature takes and returns is one :class:`GenerateExportOptions`; the ``generate`` function is composed
from it: the inputs are fitted (:func:`fit_inputs`: text -> token ids, padding / truncation to ``input_length``),
the sampling settings checked, the loop run, and the outputs assembled (ids -> text, cut at stop strings).

TensorFlow only (SavedModel is TensorFlow's format): this module imports tensorflow and needs the TensorFlow
backend when exporting.
"""

import dataclasses
import inspect
import warnings

import keras
import tensorflow as tf

from attnlayers.decoding import GreedySearch, Sampling, check_stop_sequences, generate, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.stop_strings import check_stop_strings, cut_tensor_at_stop_strings, stop_sequences_for
from attnlayers.validation import one_of, positive_int


__all__ = ["GenerateExportOptions", "assert_rank", "export_generate", "fit_inputs", "signature_of"]


@dataclasses.dataclass(frozen=True)
class GenerateExportOptions:
    """What an exported ``generate`` signature takes, how it decodes and what it returns; checked once, here.

    Built by :func:`export_generate` (and ``applications.core.export.export_generator``) from their keyword
    arguments, or built once and passed down as ``options=``.

    Args:
        max_length: L, the output length (prompt included), a Python int (None: not known yet, e.g. the model's
            default, filled in before export).
        search: as in :func:`~attnlayers.decoding.generate` (a name, :class:`~attnlayers.decoding.GreedySearch`,
            :class:`~attnlayers.decoding.BeamSearch`, :class:`~attnlayers.decoding.Sampling`). A sampling search
            adds an int32 scalar ``seed`` input: the same seed gives the same output (as in-process
            :func:`~attnlayers.decoding.generate` with that seed); no random state is saved.
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
            Invalid values fail a ``tf.debugging`` assertion naming the input. ``search`` must then be left
            "greedy" or be a :class:`~attnlayers.decoding.Sampling` (its settings are replaced by the inputs).
        stop_sequences: None or lists of token ids, fixed at export: a row stops when its generated tokens end
            with one of them (:func:`~attnlayers.decoding.generate`'s ``stop_sequences``).
        stop_strings: None or strings, fixed at export (needs a ``tokenizer``): each is tokenized into a stop
            sequence, and the ``text`` output is cut before the first occurrence of any of them (see
            :mod:`attnlayers.stop_strings`).
        truncation: "right" (inputs longer than ``input_length`` lose their last tokens) or "left" (they keep
            their last ``input_length`` tokens, what a language model continues; the outputs then include
            ``truncated`` bool (B,), True where a prompt lost tokens). Inputs are right-padded prompts.
        require_tokens: assert that every prompt holds a token (an empty text or an all-False ``padding_mask``
            row fails a ``tf.debugging`` assertion naming the input), for models that continue the prompt.
        prompt_prefix, prompt_suffix: strings joined before and after each ``text`` input in-graph
            (``tf.strings.join``) before it is tokenized, e.g. a chat template around a user's message (needs a
            ``tokenizer``; "" or None: nothing). The prompt is then the joined text (``truncated`` and
            ``input_length`` count its tokens).

    Raises:
        ValueError: naming the argument, for a value out of its range or options that do not go together.
    """

    max_length: int | None = None
    search: object = "greedy"
    stop_token_ids: object = None
    pad_token_id: int = 0
    tokenizer: object = None
    input_length: int | None = None
    source_spec: object = None
    jit_compile: bool = True
    settings: bool = False
    stop_sequences: object = None
    stop_strings: object = None
    truncation: str = "right"
    require_tokens: bool = False
    prompt_prefix: str | None = None
    prompt_suffix: str | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("max_length", positive_int(self.max_length, "max_length", allow_none=True,
                                       what="the output length, prompt included"))
        put("input_length", positive_int(self.input_length, "input_length", allow_none=True))
        if self.source_spec is not None and (self.tokenizer is not None
                                             or not isinstance(self.source_spec, tf.TensorSpec)):
            raise ValueError(
                "`source_spec` must be a tf.TensorSpec, and cannot be combined with a `tokenizer`; received "
                f"source_spec={self.source_spec!r}, tokenizer={self.tokenizer!r}."
            )
        if self.tokenizer is not None and not (hasattr(self.tokenizer, "tokenize")
                                               and hasattr(self.tokenizer, "detokenize")):
            raise ValueError(
                "`tokenizer` must have `tokenize(strings)` and `detokenize(token_ids)` methods built from "
                f"TensorFlow ops; received {self.tokenizer!r}."
            )
        put("truncation", one_of(self.truncation, "truncation", ("right", "left")))
        put("search", get_search(self.search))
        if self.settings and not isinstance(self.search, (Sampling, GreedySearch)):
            raise ValueError(
                "`settings=True` samples with the signature's temperature / top_k / top_p (temperature 0: "
                f"greedy): `search` must be 'greedy' or a Sampling; received search={self.search!r}."
            )
        for name in ("prompt_prefix", "prompt_suffix"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"`{name}` must be a string or None; received {name}={value!r}.")
            if value and self.tokenizer is None:
                raise ValueError(f"`{name}` needs a `tokenizer` (it is joined to the text input before "
                                 f"tokenization); received {name}={value!r} without one.")
            put(name, value or None)
        put("stop_strings", tuple(check_stop_strings(self.stop_strings)))
        if self.stop_strings and self.tokenizer is None:
            raise ValueError("`stop_strings` needs a `tokenizer` (they are tokenized, and the text output is cut).")
        check_stop_sequences(list(self.stop_sequences or []) or None)
        put("stop_sequences", tuple(tuple(int(t) for t in s) for s in self.stop_sequences or ()))
        stops = self.stop_token_ids
        put("stop_token_ids", () if stops is None else tuple([stops] if isinstance(stops, int) else stops))
        if self.truncation == "left" and ((self.input_length is None and self.tokenizer is None)
                                          or self.source_spec is not None):
            raise ValueError(
                '`truncation="left"` keeps the last `input_length` tokens of each prompt: it needs token ids or '
                f"text inputs and an `input_length`; received input_length={self.input_length!r}, "
                f"source_spec={self.source_spec!r}."
            )

    @classmethod
    @renamed_keyword("strategy", "search")
    def of(cls, options=None, /, max_length=None, search=None, **fields):
        """``options`` (or the defaults) with the given fields replaced (``max_length`` and ``search``: when
        not None); the keyword arguments of the export functions go through here."""
        if max_length is not None:
            fields["max_length"] = max_length
        if search is not None:
            fields["search"] = search
        if options is None:
            return cls(**fields)
        if not isinstance(options, cls):
            raise ValueError(f"`options` must be a {cls.__name__} or None; received options={options!r}.")
        return dataclasses.replace(options, **fields) if fields else options

    @property
    def stochastic(self):
        """Whether the loop draws random numbers (and the signature takes a ``seed``)."""
        return bool(self.settings) or self.search.stochastic

    @property
    def fitted_length(self):
        """The width the inputs are padded / truncated to (None: as given)."""
        if self.input_length is None and self.tokenizer is not None:
            return self.max_length
        return self.input_length

    @property
    def strategy(self):
        """Deprecated: :attr:`search` (decoding's "strategy" was renamed "search")."""
        warnings.warn("GenerateExportOptions.strategy is deprecated; use .search.", DeprecationWarning, stacklevel=2)
        return self.search


GenerateExportOptions.__init__ = renamed_keyword("strategy", "search")(GenerateExportOptions.__init__)


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


# ---- the signature: its parameters, in order ------------------------------------------------------------------

_IDS = [("token_ids", tf.TensorSpec((None, None), tf.int32, name="token_ids")),
        ("padding_mask", tf.TensorSpec((None, None), tf.bool, name="padding_mask"))]
_TEXT = [("text", tf.TensorSpec((None,), tf.string, name="text"))]
_SEED = [("seed", tf.TensorSpec((), tf.int32, name="seed"))]
_SETTINGS = [("temperature", tf.TensorSpec((), tf.float32, name="temperature")),
             ("top_k", tf.TensorSpec((), tf.int32, name="top_k")),
             ("top_p", tf.TensorSpec((), tf.float32, name="top_p")),
             ("seed", tf.TensorSpec((), tf.int32, name="seed")),
             ("max_new_tokens", tf.TensorSpec((), tf.int32, name="max_new_tokens"))]


def signature_of(options):
    """The ``generate`` function's parameters, ``[(name, tf.TensorSpec)]`` in order: the source (token ids and
    padding mask, text, or the ``source_spec`` tensor as ``source``), then the sampling settings or the seed."""
    if options.source_spec is not None:
        source = [("source", options.source_spec)]
    else:
        source = _IDS if options.tokenizer is None else _TEXT
    return source + (_SETTINGS if options.settings else _SEED if options.stochastic else [])


def _with_parameters(function, names):
    """``function(*args)`` presented with named parameters, so that the ``tf.function`` (the module's and the
    loaded SavedModel's) takes its inputs by keyword as well as in order."""
    function.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    return function


# ---- input: strings -> ids, padding / truncation ---------------------------------------------------------------

def _tokenize(text, tokenizer, pad_token_id):
    """(B,) strings -> right-padded (B, P) int32 ids and their bool mask."""
    ids = tokenizer.tokenize(assert_rank(text, 1, "text", "(batch,): one string per prompt"))
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.RaggedTensor.from_tensor(ids)
    while ids.ragged_rank > 1:  # tokenizers that return (batch, words, pieces)
        ids = ids.merge_dims(1, 2)
    ids = tf.cast(ids, tf.int32)
    token_ids = ids.to_tensor(default_value=pad_token_id)
    return token_ids, tf.sequence_mask(ids.row_lengths(), tf.shape(token_ids)[1])


def _left_fit(token_ids, padding_mask, input_length, pad_token_id):
    """Right-padded prompts (B, P) -> (B, input_length): the last ``input_length`` tokens of each prompt."""
    lengths = tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)
    extra = tf.maximum(input_length - tf.shape(token_ids)[1], 0)
    token_ids = tf.pad(token_ids, [[0, 0], [0, extra]], constant_values=pad_token_id)
    positions = tf.maximum(lengths - input_length, 0)[:, None] + tf.range(input_length)[None, :]
    padding_mask = positions < lengths[:, None]
    token_ids = tf.where(padding_mask, tf.gather(token_ids, positions, batch_dims=1), pad_token_id)
    return token_ids, padding_mask


def _right_fit(token_ids, padding_mask, input_length, pad_token_id):
    """Right-padded prompts (B, P) -> (B, input_length): the first ``input_length`` tokens, padded."""
    token_ids, padding_mask = token_ids[:, :input_length], padding_mask[:, :input_length]
    extra = input_length - tf.shape(token_ids)[1]
    token_ids = tf.pad(token_ids, [[0, 0], [0, extra]], constant_values=pad_token_id)
    return token_ids, tf.pad(padding_mask, [[0, 0], [0, extra]], constant_values=False)


def fit_inputs(inputs, options):
    """The signature's source inputs (a dict by parameter name) -> the decoding's.

    Returns:
        ``(source, truncated)``: ``source`` the arguments of ``prepare`` (``(token_ids, padding_mask)`` at
        ``options.fitted_length``, truncated as asked, or ``(the source_spec tensor,)``); ``truncated`` bool (B,),
        True where a prompt lost tokens (None for a ``source_spec``).
    """
    if options.source_spec is not None:
        return (inputs["source"],), None
    if options.tokenizer is not None:
        text = inputs["text"]
        if options.prompt_prefix or options.prompt_suffix:  # the text's rank is checked by _tokenize
            text = tf.strings.join([options.prompt_prefix or "", text, options.prompt_suffix or ""])
        token_ids, padding_mask = _tokenize(text, options.tokenizer, options.pad_token_id)
        name = "text"
    else:
        token_ids, padding_mask = tf.cast(inputs["token_ids"], tf.int32), tf.cast(inputs["padding_mask"], tf.bool)
        name = "padding_mask"
    lengths = tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1)
    if options.require_tokens:
        check = tf.debugging.assert_positive(
            lengths, message=f"`{name}`: every prompt needs at least one token; a row is empty")
        with tf.control_dependencies([check]):
            token_ids = tf.identity(token_ids)
    width = options.fitted_length
    if width is None:
        return (token_ids, padding_mask), tf.zeros_like(lengths, tf.bool)
    fit = _left_fit if options.truncation == "left" else _right_fit
    token_ids, padding_mask = fit(token_ids, padding_mask, width, options.pad_token_id)
    source = (tf.ensure_shape(token_ids, (None, width)), tf.ensure_shape(padding_mask, (None, width)))
    return source, lengths > width


def _checked_settings(inputs):
    """(temperature, top_k, top_p, max_new_tokens) after assertions naming the input that is out of range."""
    values = tuple(inputs[name] for name in ("temperature", "top_k", "top_p", "max_new_tokens"))
    temperature, top_k, top_p, max_new_tokens = values
    checks = [
        tf.debugging.assert_all_finite(temperature, "`temperature` must be a finite number >= 0 (0: greedy)"),
        tf.debugging.assert_greater_equal(temperature, 0.0,
                                          message="`temperature` must be a finite number >= 0 (0: greedy)"),
        tf.debugging.assert_greater_equal(top_k, 0, message="`top_k` must be an integer >= 0 (0: off)"),
        tf.debugging.assert_greater(top_p, 0.0, message="`top_p` must be a probability in (0, 1] (1.0: off)"),
        tf.debugging.assert_less_equal(top_p, 1.0, message="`top_p` must be a probability in (0, 1] (1.0: off)"),
        tf.debugging.assert_greater_equal(max_new_tokens, 1, message="`max_new_tokens` must be an integer >= 1"),
    ]
    with tf.control_dependencies(checks):
        return tuple(tf.identity(v) for v in values)


# ---- decoding ---------------------------------------------------------------------------------------------------

def _decoder(next, prepare, options, stop_sequences):
    """The (XLA-compiled) loop: ``decode(source, seed, settings) -> (DecodeResult, prompt lengths (B,))``."""

    @tf.function(jit_compile=options.jit_compile, autograph=False)
    def decode(source, seed, settings):
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
        search, max_new_tokens = options.search, None
        if settings is not None:
            temperature, top_k, top_p, max_new_tokens = settings
            search = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
        result = generate(
            next, prompt, options.max_length, search, cache=inputs.get("cache"), prompt_mask=prompt_mask,
            stop_token_ids=options.stop_token_ids, pad_token_id=options.pad_token_id,
            seed=seed if options.stochastic else None, max_new_tokens=max_new_tokens,
            stop_sequences=stop_sequences or None,
        )
        return result, tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)

    return decode


# ---- output: ids -> strings, cut at stop strings ------------------------------------------------------------------

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


def _outputs(result, prompt_lengths, truncated, options):
    """The signature's outputs: the loop's, ``truncated`` with left truncation, ``text`` with a tokenizer."""
    out = {"token_ids": result.tokens, "scores": result.scores, "log_probs": result.log_probs,
           "lengths": result.lengths}
    if options.truncation == "left":
        out["truncated"] = truncated
    if options.tokenizer is not None:
        text = _text_of(result.tokens, prompt_lengths, result.lengths, options.stop_token_ids, options.tokenizer)
        out["text"] = cut_tensor_at_stop_strings(text, list(options.stop_strings))
    return out


class _GenerateModule(tf.Module):
    def __init__(self, variables, tokenizer):
        super().__init__(name="attnlayers_generate")
        self.model_variables = list(variables)
        if tokenizer is not None:
            self.tokenizer = tokenizer  # tracks its lookup tables / tokenizer resources


@renamed_keyword("strategy", "search")
def export_generate(path, next, max_length=None, search=None, *, track=None, prepare=None, options=None,
                    **keywords):
    """Writes a SavedModel whose ``generate`` signature runs the decoding loop (or, with ``path=None``, builds
    the module without saving it).

    Args:
        path: the SavedModel directory; or None: build the ``tf.Module`` (its ``generate`` ``tf.function``
            traced for its input signature) and save nothing, so that the caller can attach the module to its
            own, or add functions to it, and save once (see the second example).
        next: the step function of :func:`attnlayers.decoding.generate`, ``next(tokens, cache, index) ->
            (logits, cache)``.
        max_length: L, the output length (prompt included), a Python int (required, here or in ``options``).
        search: as in :func:`~attnlayers.decoding.generate` (default "greedy"); see
            :class:`GenerateExportOptions`.
        track: the Keras layers / models (or variables) whose variables ``next`` and ``prepare`` read; they are
            saved with the function.
        prepare: ``prepare(token_ids, padding_mask) -> dict`` with "prompt" (B, P) and optionally "prompt_mask"
            (B, P) and "cache": turns the signature's inputs into the decoding's. Default: the inputs are the
            (decoder-only) prompt, no cache. A cached GPT returns its prefilled cache; a translator returns
            start tokens as the prompt and a cache holding the encoder memory of ``token_ids``.
        options: None or a :class:`GenerateExportOptions`: the signature's options.
        **keywords: the fields of :class:`GenerateExportOptions` (``stop_token_ids``, ``pad_token_id``,
            ``tokenizer``, ``input_length``, ``source_spec``, ``jit_compile``, ``settings``, ``stop_sequences``,
            ``stop_strings``, ``truncation``, ``require_tokens``, ``prompt_prefix``, ``prompt_suffix``), replacing
            those of ``options``.

    Returns:
        The ``tf.Module`` that was saved (or only built, when ``path`` is None); its ``generate`` method runs in
        this process too. The signature to save it with is ``{"generate": module.generate.get_concrete_function()}``.

    Signature ``generate`` (``loaded.signatures["generate"](**inputs)``, or ``loaded.generate(...)`` with the
    inputs by keyword or in this order):
        inputs: ``token_ids`` int32 (B, P) and ``padding_mask`` bool (B, P) (right-padded prompts); with a
            tokenizer, ``text`` string (B,) instead; with ``source_spec``, that tensor instead; then ``seed``
            int32 () for sampling searches; with ``settings``, ``temperature``, ``top_k``, ``top_p``, ``seed``,
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
    options = GenerateExportOptions.of(options, max_length, search, **keywords)
    positive_int(options.max_length, "max_length", what="the output length, prompt included")  # None: refused
    stop_sequences = list(options.stop_sequences) + stop_sequences_for(options.tokenizer, options.stop_strings)
    decode = _decoder(next, prepare or _default_prepare, options, stop_sequences)
    module = _GenerateModule(_variables(track), options.tokenizer)
    parameters = signature_of(options)
    names = [name for name, _ in parameters]

    def serve(*args):
        inputs = dict(zip(names, args))
        source, truncated = fit_inputs(inputs, options)
        settings = _checked_settings(inputs) if options.settings else None
        result, prompt_lengths = decode(source, inputs.get("seed", tf.constant(0)), settings)
        return _outputs(result, prompt_lengths, truncated, options)

    module.generate = tf.function(_with_parameters(serve, names), input_signature=[spec for _, spec in parameters],
                                  autograph=False)
    concrete = module.generate.get_concrete_function()  # traced here: errors surface now, and the save reuses it
    if path is not None:
        tf.saved_model.save(module, str(path), signatures={"generate": concrete})
    return module
