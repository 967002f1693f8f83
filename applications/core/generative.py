"""The generation contract of the application models: one decoding loop over a step function.

A model that generates token sequences (a translator, a captioner, a GPT) subclasses :class:`GenerativeModel`
(or :class:`Seq2SeqGenerator` when it reads a source and starts from a start token) and implements

- ``initial_cache(inputs, max_length=None)`` -> a nest of tensors with the batch on axis 0 (encoder memory,
  key/value caches sized for ``max_length``, RNN states);
- ``next(tokens, cache, index)`` -> ``(logits (B, V), cache)``: the distribution of position ``index`` given
  ``tokens[:, :index]`` (the :func:`attnlayers.decoding.generate` convention);
- ``generation_inputs(inputs, padding_mask=None, max_length=None)`` -> ``{"prompt": (B, P), "cache": ...,
  optional "prompt_mask": (B, P)}`` (:class:`Seq2SeqGenerator` implements it: start tokens + initial cache);

and gets ``generate(inputs, max_length, search, seed)`` (greedy, beam search, sampling) written once here,
on :func:`attnlayers.decoding.generate`, and the SavedModel export of ``applications.core.formats.export``. The special
token ids (``pad_token_id``, ``start_token_id``, ``end_token_id``) are attributes of the model, set in the
constructor and saved in ``get_config``, so vocabularies with other reserved ids need no code change.

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers.decoding import generate as _generate
from attnlayers.deprecation import renamed_keyword
from attnlayers.validation import concrete_value, is_int, non_negative_int


def _token_id(value, name):
    return None if value is None else non_negative_int(value, name)


class GenerativeModel(keras.Model):
    """Base of the autoregressive application models: ``generate`` over ``generation_inputs`` and ``next``.

    Args:
        pad_token_id: written after the end of each generated sequence; also the padding of inputs.
        start_token_id: the first decoder input of sequence-to-sequence models (None for decoder-only models,
            whose prompt is given).
        end_token_id: generation of a row stops after this token (None: run to ``max_length``).
        **kwargs: ``keras.Model`` arguments (``name``, ``dtype``, ...).

    Attributes:
        default_max_length: the output length used when ``generate`` gets none and the model has no
            ``max_generation_length``.
        max_generation_length: the longest output the model can produce (e.g. the size of a position table),
            or None for no limit.
    """

    default_max_length = 64

    def __init__(self, *, pad_token_id=0, start_token_id=None, end_token_id=None, **kwargs):
        super().__init__(**kwargs)
        self.pad_token_id = non_negative_int(pad_token_id, "pad_token_id")
        self.start_token_id = _token_id(start_token_id, "start_token_id")
        self.end_token_id = _token_id(end_token_id, "end_token_id")

    @property
    def stop_token_ids(self):
        """The ids that end a generated row: ``(end_token_id,)``, or ``()`` without one."""
        return () if self.end_token_id is None else (self.end_token_id,)

    @property
    def max_generation_length(self):
        return None

    # -- to implement --------------------------------------------------------------------------------------

    def encode(self, inputs, training=None):
        """The encoder's output for ``inputs`` (models with an encoder).

        Args:
            inputs: what the encoder reads: source ids (B, S) int (translators), images (B, H, W, C) (captioners),
                pixels or patches (vision).
            training: whether dropout is active.

        Returns:
            The encoder memory, e.g. (B, S, D) (each model says what it returns).
        """
        raise NotImplementedError(f"{type(self).__name__} has no encoder (`encode` is not implemented).")

    def initial_cache(self, inputs, max_length=None):
        """The decoding state before the first step: a nest of tensors, batch on axis 0.

        Args:
            inputs: the checked source (seq2seq models: what :meth:`Seq2SeqGenerator.check_source` returns) or prompt.
            max_length: L, the longest sequence the cache must hold (key / value caches are sized for it), or None.

        Returns:
            A nest of tensors, batch B on axis 0 (encoder memory, key / value caches, RNN states), that :meth:`next`
            takes and returns.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `initial_cache(inputs, max_length)`.")

    def next(self, tokens, cache, index):
        """One decoding step: the distribution of position ``index`` given ``tokens[:, :index]``.

        Args:
            tokens: (B, L) int32 token ids; only the positions before ``index`` are read.
            cache: the state :meth:`initial_cache` (or the previous step) returned.
            index: () int32, the position being predicted.

        Returns:
            ``(logits, cache)``: logits (B, V) of position ``index`` and the updated cache (same structure).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `next(tokens, cache, index)`.")

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """What :meth:`generate` decodes from: the prompt, the cache and the prompt's mask.

        Args:
            inputs: source ids (B, S) of a seq2seq model, a prompt (B, P) of a decoder-only one.
            padding_mask: (B, P) bool, True at real tokens of right-padded prompts, or None.
            max_length: L, the output length (sizes the caches).

        Returns:
            ``{"prompt": (B, P) int32, "cache": nest, optional "prompt_mask": (B, P) bool}``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `generation_inputs(inputs, padding_mask, max_length)`."
        )

    def attention_maps(self, *inputs):
        """The model's attention weights for ``inputs`` (for alignment pictures).

        Args:
            *inputs: the model's inputs, as its subclass documents them (e.g. source ids (B, S) and target ids (B, T)).

        Returns:
            The weights, e.g. (B, T, S) (each model says what it returns).
        """
        raise NotImplementedError(f"{type(self).__name__} does not expose attention maps.")

    # -- written once ----------------------------------------------------------------------------------------

    def generation_length(self, max_length=None):
        """``max_length`` checked against ``max_generation_length`` (its default when None).

        Args:
            max_length: L, the output length, or None (``max_generation_length``, else ``default_max_length``).

        Returns:
            L, an int.

        Raises:
            ValueError: ``max_length`` is not a positive integer, or exceeds ``max_generation_length``.
        """
        limit = self.max_generation_length
        if max_length is None:
            max_length = limit or self.default_max_length
        if not is_int(max_length) or max_length < 1:
            raise ValueError(f"`max_length` must be a positive integer; received max_length={max_length!r}.")
        if limit is not None and max_length > limit:
            raise ValueError(
                f"`max_length` ({max_length}) exceeds the model's max_length={limit} (the longest sequence it "
                "can generate)."
            )
        return int(max_length)

    @renamed_keyword("strategy", "search")
    def generate(self, inputs, max_length=None, search="greedy", seed=None, padding_mask=None, *,
                 stop_token_ids="auto", max_new_tokens=None, stop_sequences=None):
        """Generates token ids with :func:`attnlayers.decoding.generate`.

        Args:
            inputs: what ``generation_inputs`` reads (source ids (B, S) for a seq2seq model, a prompt (B, P)
                for a decoder-only one).
            max_length: L, the output length, prompt / start token included (default: the model's).
            search: "greedy", "beam", "sample", or a :class:`~attnlayers.decoding.Search`
                (:class:`~attnlayers.decoding.BeamSearch`, :class:`~attnlayers.decoding.Sampling`).
            seed: sampling seed for this call (an int or a scalar integer tensor).
            padding_mask: (B, P) bool, True at real tokens of right-padded inputs (decoder-only prompts).
            stop_token_ids: "auto" (the model's ``stop_token_ids``: ``end_token_id``), None (never stop early:
                run every row to ``max_length``) or an int / a list of ids.
            max_new_tokens: None or an int >= 1 (or a scalar integer tensor): each row stops after generating
                this many tokens (greedy search and sampling).
            stop_sequences: None or lists of token ids: a row stops when its generated tokens end with one.

        Returns:
            A :class:`~attnlayers.decoding.DecodeResult`: ``tokens`` (B, L) (beam search: (B, t, L)) that
            start with the prompt / start token and end with ``end_token_id`` then ``pad_token_id``;
            ``scores``, ``log_probs``, ``lengths`` (B,) (beam search: (B, t)).
        """
        if isinstance(stop_token_ids, str):
            if stop_token_ids != "auto":
                raise ValueError(
                    '`stop_token_ids` must be "auto", None, an int or a list of ints; received '
                    f"stop_token_ids={stop_token_ids!r}."
                )
            stop_token_ids = list(self.stop_token_ids)
        max_length = self.generation_length(max_length)
        prepared = self.generation_inputs(inputs, padding_mask=padding_mask, max_length=max_length)
        return _generate(
            self.next, prepared["prompt"], max_length, search, cache=prepared.get("cache"),
            prompt_mask=prepared.get("prompt_mask"), stop_token_ids=stop_token_ids,
            pad_token_id=self.pad_token_id, seed=seed, max_new_tokens=max_new_tokens, stop_sequences=stop_sequences,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "pad_token_id": self.pad_token_id,
            "start_token_id": self.start_token_id,
            "end_token_id": self.end_token_id,
        }


class Seq2SeqGenerator(GenerativeModel):
    """A :class:`GenerativeModel` that reads a source and generates from ``start_token_id``.

    ``generation_inputs(source)`` gives the prompt ``[start_token_id]`` for every row and the cache of
    ``initial_cache(source, max_length)``. The source is token ids (B, S) by default, padded where
    ``source_ids == pad_token_id``; a model that reads something else (images) overrides :meth:`check_source`.
    Subclasses implement ``encode``, ``initial_cache`` and ``next``.

    Args:
        pad_token_id, start_token_id, end_token_id, **kwargs: as :class:`GenerativeModel`.
    """

    def check_source(self, inputs):
        """``inputs`` as the source :meth:`~GenerativeModel.initial_cache` reads (batch on axis 0).

        Args:
            inputs: source token ids (B, S), of an integer dtype.

        Returns:
            (B, S) int32 ids.

        Raises:
            ValueError: ``inputs`` is not of rank 2.
        """
        source_ids = ops.cast(ops.convert_to_tensor(inputs), "int32")
        if len(source_ids.shape) != 2:
            raise ValueError(
                f"`inputs` must be int source ids of shape (batch, length); received shape {tuple(source_ids.shape)}."
            )
        return source_ids

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """The prompt ``[start_token_id]`` for every row and the cache of ``initial_cache(source, max_length)``
        (as :meth:`GenerativeModel.generation_inputs`).

        Args:
            inputs: the source, as :meth:`check_source` takes it (ids (B, S) here).
            padding_mask: unused (the source's padding is ``pad_token_id``).
            max_length: L, the output length (sizes the caches).

        Returns:
            ``{"prompt": (B, 1) int32, "cache": nest}``.

        Raises:
            ValueError: the model has no ``start_token_id``, or the source is malformed.
        """
        if self.start_token_id is None:
            raise ValueError(f"{type(self).__name__} needs a `start_token_id` to generate; received None.")
        source = self.check_source(inputs)
        prompt = ops.full((ops.shape(source)[0], 1), self.start_token_id, "int32")
        return {"prompt": prompt, "cache": self.initial_cache(source, max_length=max_length)}


def check_token_ids(x, name):
    """``x`` as int32 token ids of shape (batch, length); else a ValueError naming ``name``.

    Args:
        x: the token ids, (batch, length), of an integer dtype.
        name: the argument's name in the error.
    """
    x = ops.convert_to_tensor(x)
    if len(x.shape) != 2:
        raise ValueError(f"`{name}` must be int token ids of shape (batch, length); received {tuple(x.shape)}.")
    return ops.cast(x, "int32")


def concrete_values(x):
    """``x`` as a NumPy array when it holds values (eager), else None (None, or a symbolic tensor: a compiled call,
    checked elsewhere or not at all): :func:`attnlayers.validation.concrete_value`, under its old name here."""
    return concrete_value(x)


def check_id_range(ids, name, size, size_name="vocabulary_size", what="ids"):
    """Every id of ``ids`` in [0, ``size``) when its values are known (eager); else a ValueError naming ``name`` (and
    ``what`` it holds), the first bad position and value, and how many are out of range (a ragged list: a ValueError
    naming ``name``). Nothing is checked in a compiled call."""
    values = concrete_value(ids, name)  # None for a symbolic tensor (tf.function, jax.jit)
    if values is None or values.size == 0:
        return
    bad = (values < 0) | (values >= size)
    if bad.any():
        where = tuple(int(i) for i in next(zip(*bad.nonzero())))
        raise ValueError(
            f"`{name}` must hold {what} in [0, {size_name}={size}); received {name}{list(where)} = "
            f"{int(values[where])} ({int(bad.sum())} id(s) out of range, from {int(values.min())} to "
            f"{int(values.max())})."
        )


__all__ = ["GenerativeModel", "Seq2SeqGenerator", "check_id_range", "check_token_ids", "concrete_values"]
