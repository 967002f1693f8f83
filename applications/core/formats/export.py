"""SavedModel export of a :class:`~attnlayers.applications.core.generative.GenerativeModel`: its decoding loop,
through :func:`attnlayers.export.export_generate` (the library's one export path).

TensorFlow only (this module imports tensorflow).
"""

from __future__ import annotations

import dataclasses

from attnlayers.deprecation import renamed_keyword
from attnlayers.export import GenerateExportOptions, export_generate


__all__ = ["export_generator"]


@renamed_keyword("strategy", "search")
def export_generator(path, model, max_length=None, search=None, *, options=None, **keywords):
    """Writes ``model``'s ``generate`` as a SavedModel signature (see :func:`attnlayers.export.export_generate`),
    or with ``path=None`` builds the module without saving it (to attach it to a larger module saved once).

    The signature's inputs go through ``model.generation_inputs(token_ids, padding_mask, max_length)`` (a
    seq2seq model: start tokens and the encoder's cache; a decoder-only model: the prompt and its prefilled
    cache), then ``model.next`` runs in the exported loop, stopping at ``model.stop_token_ids`` and padding
    with ``model.pad_token_id``.

    Args:
        path: the SavedModel directory, or None to build the module and save nothing.
        model: a :class:`~attnlayers.applications.core.generative.GenerativeModel`.
        max_length: L, the output length (prompt / start token included); checked against the model's limit
            (None: its default).
        search: "greedy" (default), a ``BeamSearch``, a ``Sampling`` (then the signature takes an int32
            ``seed``).
        options: None or a :class:`attnlayers.export.GenerateExportOptions` (its ``stop_token_ids`` and
            ``pad_token_id`` are replaced by the model's).
        **keywords: the other fields of :class:`~attnlayers.export.GenerateExportOptions`, replacing those of
            ``options``: ``tokenizer`` (strings in and out), ``input_length`` (the input width the loop is
            compiled for), ``source_spec`` (a source other than token ids, e.g. a captioner's images, passed to
            ``model.generation_inputs``), ``jit_compile``, ``settings``, ``stop_sequences``, ``stop_strings``,
            ``truncation``, ``require_tokens``.

    Returns:
        The saved (or, with ``path=None``, built) ``tf.Module``; its ``generate`` runs in this process too.
    """
    for name in ("stop_token_ids", "pad_token_id"):
        if name in keywords:
            raise ValueError(f"`{name}` is the model's (model.{name}): export_generator does not take it; "
                             f"received {name}={keywords[name]!r}.")
    options = GenerateExportOptions.of(options, max_length, search, **keywords)
    max_length = model.generation_length(options.max_length)
    options = dataclasses.replace(options, max_length=max_length, stop_token_ids=list(model.stop_token_ids),
                                  pad_token_id=model.pad_token_id)

    def prepare(token_ids, padding_mask=None):
        return model.generation_inputs(token_ids, padding_mask=padding_mask, max_length=max_length)

    return export_generate(path, model.next, track=model, prepare=prepare, options=options)
