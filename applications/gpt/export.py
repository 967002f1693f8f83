"""A GPT as a text-generation SavedModel: prompt strings in, generated text out, the sampling settings inputs.

    module = export_gpt("out/gpt-generate", model, tokenizer, max_length=256, stop_strings=["\\n\\n"])

    # in a process that imports only tensorflow:
    loaded = tf.saved_model.load("out/gpt-generate")
    out = loaded.signatures["generate"](
        text=tf.constant(["Once upon a time"]), temperature=tf.constant(0.8), top_k=tf.constant(0),
        top_p=tf.constant(0.9), seed=tf.constant(1), max_new_tokens=tf.constant(40))
    out["text"]          # (B,) the continuations (UTF-8 bytes)

The loop is :func:`attnlayers.export.export_generate`'s (through
:func:`attnlayers.applications.core.formats.export.export_generator`), with ``settings=True``: one XLA-compiled
loop for every temperature, top-k, top-p, seed and max_new_tokens. The tokenizer is the model's
:class:`~attnlayers.applications.gpt.GPT2Tokenizer`, its pre-tokenizer rewritten with TensorFlow's own string ops
(``pretokenize(text, split=core_regex_split)``, the same pre-tokens): ``GPT2Tokenizer.tokenize`` uses
tensorflow_text's ``RegexSplitWithOffsets``, an op that a process without ``import tensorflow_text`` cannot
load; the merges (keras-hub's tables and loops) and the detokenizer are core TensorFlow ops. So the SavedModel
serves with tensorflow alone.

Choices: a prompt longer than ``input_length`` tokens keeps its last ``input_length`` tokens (what a language
model continues) and the output ``truncated`` says so (in-process, ``GPT.generate`` raises instead); an empty
prompt fails an assertion naming ``text``, and so does a scalar ``text`` (its shape is (batch,)); stop strings
are fixed at export (they are tokenized into stop sequences and cut the text: see
:mod:`attnlayers.stop_strings`).

A GGUF file's tokenizer (:func:`~.gguf.load_gguf`'s, with its special tokens and isolated digits) is served the
same way (core ops, the same ids). :func:`export_chat` writes a chat SavedModel for a ChatML model: the template
joined around each message in-graph (``prompt_prefix`` / ``prompt_suffix``), ``<|im_end|>`` a stop string, and a
``chat(message) -> text`` signature (greedy) beside ``generate``.

TensorFlow only.
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.export import GenerateExportOptions
from attnlayers.validation import positive_int

from ..core.formats.export import export_generator
from .tokenizer import core_regex_split, pretokenize, row_ids, special_segment_ids

__all__ = ["ServingTokenizer", "chat_prompt_parts", "export_chat", "export_gpt"]


class ServingTokenizer(tf.Module):
    """A :class:`~attnlayers.applications.gpt.GPT2Tokenizer` whose ``tokenize`` needs no tensorflow_text op
    (same ids: ``pretokenize(text, split=core_regex_split)``, then the tokenizer's merges);
    ``detokenize`` is the tokenizer's. Tracks the tokenizer's tables, for a SavedModel."""

    def __init__(self, tokenizer):
        super().__init__(name="gpt2_serving_tokenizer")
        for method in ("_merge", "detokenize", "_tables"):
            if not hasattr(tokenizer, method):
                raise ValueError(
                    f"`tokenizer` must be a GPT2Tokenizer (byte-level BPE); received {type(tokenizer).__name__}."
                )
        # The tokenizer is not tracked itself: a SavedModel would then hold its own `tokenize` function, with the
        # tensorflow_text op. Its tables (the resources its merges and detokenizer read) are.
        self._tokenizer = lambda: tokenizer
        self.tables = list(tokenizer._tables)
        self.end_token_id = tokenizer.end_token_id
        # A GGUF file's tokenizer (gguf.GGUFTokenizer): its special tokens (and, for StarCoder-family vocabularies,
        # each digit) are cut out of the text before pre-tokenization, and ids past the file's vocabulary (byte
        # symbols it lacks) are dropped: the same here, with core_regex_split for tensorflow_text's split.
        self._isolate = getattr(tokenizer, "_isolate", "")
        self._size = getattr(tokenizer, "_size", None)
        special = getattr(tokenizer, "_special_table", None)
        if special is not None:
            self.tables.append(special)
        self._special = lambda: special

    def tokenize(self, text):
        """(B,) strings -> (B, None) int32 ragged ids."""
        ids = self._segment_ids(text) if self._isolate else self._ids(text)
        return ids if self._size is None else tf.ragged.boolean_mask(ids, ids < self._size)

    def _segment_ids(self, text):
        """GGUFTokenizer's: special tokens (and digits) as their own segments, the rest BPE-tokenized."""
        safe = tf.strings.regex_replace(text, r"\x00", "\x01")  # core_regex_split splits at NUL
        begin, end = core_regex_split(safe, self._isolate)
        return special_segment_ids(text, begin, end, row_ids(begin), self._special(), self._ids)

    def _ids(self, text):
        pieces = pretokenize(text, split=core_regex_split)
        ids = self._tokenizer()._merge(pieces.flat_values)  # (P, None): each pre-token's ids
        return tf.RaggedTensor.from_row_splits(ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits))

    def detokenize(self, ids):
        """(B, T) int ids (dense or ragged) -> (B,) UTF-8 strings: the tokenizer's."""
        return self._tokenizer().detokenize(ids)


def export_gpt(path, model, tokenizer, max_length=None, *, input_length=None, stop_strings=None, jit_compile=True,
               prompt_prefix=None, prompt_suffix=None):
    """Writes a GPT's text generation as a SavedModel (or, with ``path=None``, builds the module only).

    Args:
        path: the SavedModel directory, or None.
        model: a :class:`~attnlayers.applications.gpt.GPT`; generation stops at its ``end_token_id``.
        tokenizer: its :class:`~attnlayers.applications.gpt.GPT2Tokenizer`.
        max_length: L, the static output length in tokens (prompt included), <= ``max_sequence_length``
            (default).
        input_length: the prompt width the loop is compiled for, < L (default L // 2): longer prompts keep their
            last ``input_length`` tokens (output ``truncated``).
        stop_strings: None or non-empty strings, fixed at export: rows stop when their generated tokens end with
            one (as tokenized alone), and ``text`` is cut before the first occurrence of any.
        jit_compile: compile the prefill and the decoding loop with XLA.
        prompt_prefix, prompt_suffix: None or strings joined before and after each ``text`` in-graph, before it
            is tokenized (e.g. a chat template around a message: :func:`export_chat`).

    Returns:
        The ``tf.Module``; its ``generate`` runs in this process too.

    Signature ``generate`` (``loaded.signatures["generate"](**inputs)`` or ``loaded.generate(...)``):
        inputs: ``text`` string (B,) (UTF-8 prompts, each at least one token); ``temperature`` float32 ()
            (0: greedy search; else the softmax temperature), ``top_k`` int32 () (0: off; else sample among the k
            most probable tokens, Fan et al. 2018), ``top_p`` float32 () in (0, 1] (1.0: off; else the nucleus,
            Holtzman et al. 2020), ``seed`` int32 () (the same seed gives the same text), ``max_new_tokens``
            int32 () >= 1 (a row stops after that many generated tokens; the loop still runs at most to L).
            Invalid values fail an assertion naming the input. ``text`` must be a 1-D batch: a scalar string
            (which ``signatures[...]``, checking dtypes but not shapes, let through) fails an assertion naming
            ``text`` and the shape (batch,); wrap a single prompt in a list. A wrong dtype is refused by
            TensorFlow before the graph runs (``signatures[...]``: "input #N(zero-based) was expected to be a
            ... tensor", N the input's position among the signature's inputs), which the SavedModel cannot reword.
        outputs: ``text`` string (B,) (the generated continuation: prompt, end token and stop string left out),
            ``token_ids`` int32 (B, L) (the prompt as fed, the generated tokens, then ``pad_token_id``),
            ``lengths`` int32 (B,), ``scores`` and ``log_probs`` float32 (B,) (log-probability of the generated
            tokens under the model), ``truncated`` bool (B,) (the prompt lost its first tokens).

    Raises:
        ValueError: naming the argument, for a ``max_length`` beyond ``max_sequence_length``, an ``input_length``
            not below it, bad stop strings or a tokenizer that is not a GPT2Tokenizer.
    """
    max_length = model.generation_length(max_length)
    if max_length < 2:
        raise ValueError(f"`max_length` must be at least 2 (a prompt token and a generated one); received {max_length}.")
    if input_length is None:
        input_length = max_length // 2
    input_length = positive_int(input_length, "input_length", what="the prompt width")
    if input_length >= max_length:
        raise ValueError(
            f"`input_length` (the prompt width, {input_length}) must be below max_length={max_length}, to leave "
            "room for generated tokens."
        )
    options = GenerateExportOptions(
        max_length, "greedy", stop_strings=stop_strings, tokenizer=ServingTokenizer(tokenizer),
        input_length=input_length, jit_compile=jit_compile, settings=True, truncation="left", require_tokens=True,
        prompt_prefix=prompt_prefix, prompt_suffix=prompt_suffix,
    )
    return export_generator(path, model, options=options)


CHAT_END = "<|im_end|>"  # the end of a ChatML turn
_MESSAGE = "\x00message\x00"


def chat_prompt_parts(metadata):
    """``(prefix, suffix)``: the text :func:`~.gguf.apply_chat_template` writes before and after a single user
    message (the template's default system message and the user header; the end of the turn and the assistant's
    header)."""
    from .gguf import apply_chat_template

    prefix, suffix = apply_chat_template([{"role": "user", "content": _MESSAGE}], metadata).split(_MESSAGE)
    return prefix, suffix


def export_chat(path, model, tokenizer, metadata, max_length=None, *, input_length=None, max_new_tokens=None,
                jit_compile=True):
    """Writes a ChatML model (e.g. a GGUF file's, :func:`~.gguf.load_gguf`) as a chat SavedModel that serves with
    TensorFlow alone: a message in, the assistant's answer out.

    It is :func:`export_gpt` with the chat template around each text (``prompt_prefix`` / ``prompt_suffix``:
    :func:`chat_prompt_parts`, what ``apply_chat_template([{"role": "user", "content": message}], metadata)``
    writes) and ``<|im_end|>`` as a stop string, plus a ``chat`` signature: greedy, ``max_new_tokens`` fixed here.

    Args:
        path: the SavedModel directory, or None (build the module only).
        model, tokenizer, metadata: :func:`~.gguf.load_gguf`'s (the metadata's ChatML ``chat_template``).
        max_length: L, the loop's output length in tokens, chat template included (default:
            ``input_length + max_new_tokens``, within ``max_sequence_length``).
        input_length: the prompt width (chat template included) the loop is compiled for (default 256): longer
            prompts keep their last tokens (``truncated``).
        max_new_tokens: the ``chat`` signature's answer length in tokens (default 128).
        jit_compile: compile the prefill and the decoding loop with XLA.

    Returns:
        The ``tf.Module`` (its ``chat`` and ``generate`` run in this process too).

    Signatures:
        ``chat``: ``message`` string (B,) -> ``text`` string (B,) (the answer, cut at ``<|im_end|>``),
        ``token_ids`` int32 (B, L), ``lengths`` int32 (B,), ``truncated`` bool (B,).
        ``generate``: :func:`export_gpt`'s (``text`` being the user's message; the sampling settings and
        ``max_new_tokens`` as inputs).

    Raises:
        ValueError: as :func:`export_gpt`, and for a chat template that is not ChatML.
    """
    input_length = positive_int(256 if input_length is None else input_length, "input_length",
                                what="the prompt width")
    max_new_tokens = positive_int(128 if max_new_tokens is None else max_new_tokens, "max_new_tokens",
                                  what="tokens generated per answer")
    if max_length is None:
        max_length = min(input_length + max_new_tokens, model.config.max_sequence_length)
    prefix, suffix = chat_prompt_parts(metadata)
    module = export_gpt(None, model, tokenizer, max_length, input_length=input_length, stop_strings=[CHAT_END],
                        jit_compile=jit_compile, prompt_prefix=prefix, prompt_suffix=suffix)

    def chat(message):
        out = module.generate(text=message, temperature=tf.constant(0.0), top_k=tf.constant(0),
                              top_p=tf.constant(1.0), seed=tf.constant(0),
                              max_new_tokens=tf.constant(max_new_tokens))
        return {key: out[key] for key in ("text", "token_ids", "lengths", "truncated")}

    module.chat = tf.function(chat, input_signature=[tf.TensorSpec((None,), tf.string, name="message")],
                              autograph=False)
    if path is not None:
        tf.saved_model.save(module, str(path), signatures={"chat": module.chat.get_concrete_function(),
                                                           "generate": module.generate.get_concrete_function()})
    return module
