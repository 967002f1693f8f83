"""A GPT as a text-generation SavedModel: prompt strings in, generated text out, the sampling settings inputs.

    module = export_gpt("out/gpt-generate", model, tokenizer, max_length=256, stop_strings=["\\n\\n"])

    # in a process that imports only tensorflow:
    loaded = tf.saved_model.load("out/gpt-generate")
    out = loaded.signatures["generate"](
        text=tf.constant(["Once upon a time"]), temperature=tf.constant(0.8), top_k=tf.constant(0),
        top_p=tf.constant(0.9), seed=tf.constant(1), max_new_tokens=tf.constant(40))
    out["text"]          # (B,) the continuations (UTF-8 bytes)

The loop is :func:`attnlayers.export.export_generate`'s (through
:func:`attnlayers.applications.core.export.export_generator`), with ``settings=True``: one XLA-compiled
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

TensorFlow only.
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.export import GenerateExportOptions
from attnlayers.validation import positive_int

from ..core.export import export_generator
from .tokenizer import core_regex_split, pretokenize

__all__ = ["ServingTokenizer", "export_gpt"]


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

    def tokenize(self, text):
        """(B,) strings -> (B, None) int32 ragged ids."""
        pieces = pretokenize(text, split=core_regex_split)
        ids = self._tokenizer()._merge(pieces.flat_values)  # (P, None): each pre-token's ids
        return tf.RaggedTensor.from_row_splits(ids.flat_values, tf.gather(ids.row_splits, pieces.row_splits))

    def detokenize(self, ids):
        """(B, T) int ids (dense or ragged) -> (B,) UTF-8 strings: the tokenizer's."""
        return self._tokenizer().detokenize(ids)


def export_gpt(path, model, tokenizer, max_length=None, *, input_length=None, stop_strings=None, jit_compile=True):
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
    )
    return export_generator(path, model, options=options)
