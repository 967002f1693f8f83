"""The servable translator: a SavedModel with a ``translate`` signature, strings in and strings out.

    export_translator("/tmp/translator", model, tokenizers, search=BeamSearch(4))
    # anywhere with only TensorFlow:
    import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    translator = tf.saved_model.load("/tmp/translator")
    translator.translate(tf.constant(["Ich habe keine Zeit."]))["translation"]

The decoding is the library's one export path: ``applications.core.formats.export.export_generator`` (on
:func:`attnlayers.export.export_generate`) exports the model's encoder + decoding loop (greedy / beam /
sampling, XLA-compiled); this module adds the text around it: SentencePiece tokenization of the source
(tensorflow-text), detokenization of the best hypothesis with the target tokenizer, and the flags below. The
SavedModel needs neither attnlayers nor keras to load and run.

Inputs the model cannot translate as such are handled in the graph, never by a crash inside TensorFlow:
- an empty or whitespace-only string translates to "" (``empty`` is True);
- characters the tokenizer never saw become [UNK] pieces (the rest of the sentence is translated);
- a source longer than ``max_source_length`` pieces is truncated, and ``truncated`` is True for it;
- an empty batch gives empty outputs.
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.decoding import BeamSearch, get_search
from attnlayers.deprecation import renamed_keyword
from attnlayers.export import assert_rank

from ..core.formats.export import export_generator


__all__ = ["export_translator"]


class _Translator(tf.Module):
    def __init__(self, generator, tokenizers):
        super().__init__(name="attnlayers_translator")
        self.generator = generator  # the exported decoding loop (it holds the model's variables)
        self.source_tokenizer = tokenizers.source
        self.target_tokenizer = tokenizers.target


@renamed_keyword("strategy", "search")
def export_translator(path, model, tokenizers, *, search="greedy", max_source_length=64, max_length=64,
                      jit_compile=True):
    """Writes a SavedModel whose ``translate`` signature translates a batch of strings.

    Args:
        path: the SavedModel directory.
        model: a trained ``attnlayers.applications.nmt.model.Translator`` (any of the five models).
        tokenizers: its ``Tokenizers`` (source and target ``SubwordTokenizer``).
        search: decoding: "greedy", ``BeamSearch(k, alpha=...)`` (the best of the k beams is returned), or
            a sampling search (then the signature takes an int32 ``seed`` too).
        max_source_length: source pieces kept (longer inputs are truncated and flagged).
        max_length: the longest translation in pieces, [START] and [END] included.
        jit_compile: compile the encoder + decoding loop with XLA.

    Signature ``translate`` (``loaded.signatures["translate"](text=...)`` or ``loaded.translate(text)``):
        inputs: ``text`` string (B,); ``seed`` int32 () for sampling searches. A ``text`` of another rank (a
            scalar string, which ``signatures[...]`` let through) fails an assertion naming ``text`` and the shape
            (batch,); a wrong dtype is refused by TensorFlow before the graph runs.
        outputs: ``translation`` string (B,); ``token_ids`` int32 (B, max_length) (the target pieces, [START]
            first, [END] then padding at the end); ``score`` float32 (B,) (the decoder's score: log-probability,
            length-normalised for beam search); ``truncated`` bool (B,); ``empty`` bool (B,).

    Returns:
        The saved ``tf.Module`` (its ``translate`` works in this process too).
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"export_translator needs the TensorFlow backend; received {keras.backend.backend()!r}.")
    search = get_search(search)
    beam = isinstance(search, BeamSearch)
    start, pad = model.start_token_id, model.pad_token_id
    stops = list(model.stop_token_ids) + [pad]
    # The decoding loop, from token ids (padded and truncated to max_source_length) to token ids: built, not
    # saved on its own; it is saved once, inside the translator.
    generator = export_generator(None, model, max_length, search, input_length=max_source_length,
                                 jit_compile=jit_compile)
    module = _Translator(generator, tokenizers)

    def translate(text, seed=None):
        # signatures[...] check dtypes, not shapes: a scalar or 2-D `text` would be served as a batch of one.
        text = assert_rank(text, 1, "text", "(batch,)")
        pieces = tf.cast(module.source_tokenizer.tokenize(tf.strings.strip(text)), tf.int32)
        lengths = pieces.row_lengths()
        truncated = lengths > max_source_length
        empty = tf.equal(lengths, 0)
        source_ids = pieces.to_tensor(default_value=pad)
        padding_mask = tf.sequence_mask(lengths, tf.shape(source_ids)[1])
        out = module.generator.generate(source_ids, padding_mask, *([] if seed is None else [seed]))
        tokens, scores = out["token_ids"], out["scores"]
        if beam:  # (B, k, L) -> the best hypothesis
            tokens, scores = tokens[:, 0], scores[:, 0]
        positions = tf.range(max_length)[None, :]
        # Keep the generated pieces: after [START] (position 0), before the first [END] / padding.
        stop = tf.reduce_any(tf.equal(tokens[..., None], stops), axis=-1) & (positions > 0)
        first_stop = tf.reduce_min(tf.where(stop, positions, max_length), axis=1)
        keep = (positions > 0) & (positions < first_stop[:, None]) & tf.not_equal(tokens, start)
        translation = module.target_tokenizer.detokenize(tf.ragged.boolean_mask(tokens, keep))
        translation = tf.where(empty, tf.constant("", tf.string), tf.convert_to_tensor(translation))
        return {"translation": translation, "token_ids": tokens, "score": scores, "truncated": truncated,
                "empty": empty}

    # Named parameters (no *args): the module and the loaded SavedModel take keyword arguments too.
    text_spec = tf.TensorSpec((None,), tf.string, name="text")
    if search.stochastic:
        def serve(text, seed):
            return translate(text, seed)

        specs = [text_spec, tf.TensorSpec((), tf.int32, name="seed")]
    else:
        def serve(text):
            return translate(text)

        specs = [text_spec]
    function = tf.function(serve, input_signature=specs, autograph=False)
    module.translate = function
    tf.saved_model.save(module, str(path), signatures={"translate": function.get_concrete_function()})
    return module
