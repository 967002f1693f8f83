"""SavedModel export of a :class:`~attnlayers.applications.core.generation.GenerativeModel`: its decoding loop,
through :func:`attnlayers.export.export_generate` (the library's one export path).

TensorFlow only (this module imports tensorflow).
"""

from __future__ import annotations

from attnlayers.export import export_generate


def export_generator(path, model, max_length, strategy="greedy", *, tokenizer=None, input_length=None,
                     source_spec=None, jit_compile=True, settings=False, stop_sequences=None, stop_strings=None,
                     truncation="right", require_tokens=False):
    """Writes ``model``'s ``generate`` as a SavedModel signature (see :func:`attnlayers.export.export_generate`),
    or with ``path=None`` builds the module without saving it (to attach it to a larger module saved once).

    The signature's inputs go through ``model.generation_inputs(token_ids, padding_mask, max_length)`` (a
    seq2seq model: start tokens and the encoder's cache; a decoder-only model: the prompt and its prefilled
    cache), then ``model.next`` runs in the exported loop, stopping at ``model.stop_token_ids`` and padding
    with ``model.pad_token_id``.

    Args:
        path: the SavedModel directory, or None to build the module and save nothing.
        model: a :class:`~attnlayers.applications.core.generation.GenerativeModel`.
        max_length: L, the output length (prompt / start token included); checked against the model's limit.
        strategy: "greedy", a ``BeamSearch``, a ``Sampling`` (then the signature takes an int32 ``seed``).
        tokenizer: None (token ids in and out) or a TensorFlow tokenizer (strings in and out).
        input_length: the input width the loop is compiled for (longer inputs are truncated).
        source_spec: a ``tf.TensorSpec`` for a source other than token ids (a captioner's images): the
            signature takes that tensor and passes it to ``model.generation_inputs``.
        jit_compile: compile the encoder and the decoding loop with XLA.
        settings, stop_sequences, stop_strings, truncation, require_tokens: as in
            :func:`attnlayers.export.export_generate` (sampling settings as signature inputs, stop sequences and
            strings fixed at export, left truncation of long prompts, empty prompts refused).

    Returns:
        The saved (or, with ``path=None``, built) ``tf.Module``; its ``generate`` runs in this process too.
    """
    max_length = model.generation_length(max_length)

    def prepare(token_ids, padding_mask=None):
        return model.generation_inputs(token_ids, padding_mask=padding_mask, max_length=max_length)

    return export_generate(
        path, model.next, max_length, strategy, track=model, prepare=prepare,
        stop_token_ids=list(model.stop_token_ids), pad_token_id=model.pad_token_id, tokenizer=tokenizer,
        input_length=input_length, source_spec=source_spec, jit_compile=jit_compile, settings=settings,
        stop_sequences=stop_sequences, stop_strings=stop_strings, truncation=truncation,
        require_tokens=require_tokens,
    )
