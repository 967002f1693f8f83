"""The servable translator: a SavedModel with a ``translate`` signature, strings in and strings out.

    export_translator("/tmp/translator", model, tokenizers, strategy=BeamSearch(4))
    # anywhere with only TensorFlow:
    import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    translator = tf.saved_model.load("/tmp/translator")
    translator.translate(tf.constant(["Ich habe keine Zeit."]))["translation"]

Tokenization (tensorflow-text SentencePiece), the encoder, the decoding loop (greedy / beam / sampling from
``attnlayers.decoding``, XLA-compiled) and detokenization are all inside the graph, so the SavedModel needs
neither attnlayers nor keras to load and run.

Inputs the model cannot translate as such are handled in the graph, never by a crash inside TensorFlow:
- an empty or whitespace-only string translates to "" (``empty`` is True);
- characters the tokenizer never saw become [UNK] pieces (the rest of the sentence is translated);
- a source longer than ``max_source_length`` pieces is truncated, and ``truncated`` is True for it;
- an empty batch gives empty outputs.
"""

from __future__ import annotations

import tensorflow as tf

from attnlayers.decoding import BeamSearch, get_strategy

from .tokenizer import END_ID, PAD_ID, START_ID


class _Translator(tf.Module):
    def __init__(self, model, tokenizers):
        super().__init__(name="attnlayers_translator")
        self.model_variables = list(model.variables)  # saved with the functions that read them
        self.source_tokenizer = tokenizers.source
        self.target_tokenizer = tokenizers.target


def export_translator(path, model, tokenizers, *, strategy="greedy", max_source_length=64, max_length=64,
                      jit_compile=True):
    """Writes a SavedModel whose ``translate`` signature translates a batch of strings.

    Args:
        path: the SavedModel directory.
        model: a trained ``attnlayers.applications.nmt.model.Translator`` (any of the five models).
        tokenizers: its ``Tokenizers`` (source and target ``SubwordTokenizer``).
        strategy: decoding: "greedy", ``BeamSearch(k, alpha=...)`` (the best of the k beams is returned), or
            a sampling strategy (then the signature takes an int32 ``seed`` too).
        max_source_length: source pieces kept (longer inputs are truncated and flagged).
        max_length: the longest translation in pieces, [START] and [END] included.
        jit_compile: compile the encoder + decoding loop with XLA.

    Signature ``translate`` (``loaded.signatures["translate"](text=...)`` or ``loaded.translate(text)``):
        inputs: ``text`` string (B,); ``seed`` int32 () for sampling strategies.
        outputs: ``translation`` string (B,); ``token_ids`` int32 (B, max_length) (the target pieces, [START]
            first, [END] then padding at the end); ``score`` float32 (B,) (the decoder's score: log-probability,
            length-normalised for beam search); ``truncated`` bool (B,); ``empty`` bool (B,).

    Returns:
        The saved ``tf.Module`` (its ``translate`` works in this process too).
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise ValueError(f"export_translator needs the TensorFlow backend; received {keras.backend.backend()!r}.")
    strategy = get_strategy(strategy)
    beam = isinstance(strategy, BeamSearch)
    module = _Translator(model, tokenizers)

    @tf.function(jit_compile=jit_compile, autograph=False)
    def decode(source_ids, seed):
        result = model.generate(source_ids, max_length, strategy, seed=seed if strategy.stochastic else None)
        tokens, scores = result.tokens, result.scores
        if beam:  # (B, t, L) -> the best hypothesis
            tokens, scores = tokens[:, 0], scores[:, 0]
        return tokens, scores

    def translate(text, *seed):
        text = tf.strings.strip(text)
        pieces = tf.cast(module.source_tokenizer.tokenize(text), tf.int32)
        lengths = pieces.row_lengths()
        truncated = lengths > max_source_length
        empty = tf.equal(lengths, 0)
        source_ids = pieces[:, :max_source_length].to_tensor(default_value=PAD_ID)
        width = tf.shape(source_ids)[1]
        source_ids = tf.pad(source_ids, [[0, 0], [0, max_source_length - width]], constant_values=PAD_ID)
        source_ids = tf.ensure_shape(source_ids, (None, max_source_length))
        tokens, scores = decode(source_ids, seed[0] if seed else tf.constant(0))
        positions = tf.range(max_length)[None, :]
        # Keep the generated pieces: after [START] (position 0), before the first [END] / padding.
        stop = tf.logical_or(tf.equal(tokens, END_ID), tf.equal(tokens, PAD_ID)) & (positions > 0)
        first_stop = tf.reduce_min(tf.where(stop, positions, max_length), axis=1)
        keep = (positions > 0) & (positions < first_stop[:, None]) & tf.not_equal(tokens, START_ID)
        translation = module.target_tokenizer.detokenize(tf.ragged.boolean_mask(tokens, keep))
        translation = tf.where(empty, tf.constant("", tf.string), tf.convert_to_tensor(translation))
        return {"translation": translation, "token_ids": tokens, "score": scores, "truncated": truncated,
                "empty": empty}

    specs = [tf.TensorSpec((None,), tf.string, name="text")]
    if strategy.stochastic:
        specs.append(tf.TensorSpec((), tf.int32, name="seed"))
    function = tf.function(translate, input_signature=specs, autograph=False)
    module.translate = function
    tf.saved_model.save(module, str(path), signatures={"translate": function.get_concrete_function()})
    return module
