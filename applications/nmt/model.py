"""Translation models: RNN seq2seq (with and without attention) and the Transformer translator.

Every model is a ``keras.Model`` with the same contract, so training, decoding, evaluation and export treat
them alike:

- ``model((source_ids, target_in_ids))`` -> (B, T, V) logits, teacher forced (``target_in`` = [START] + y);
  train with ``model.fit`` on ``make_dataset`` batches and :class:`MaskedCrossEntropy`.
- ``model.initial_cache(source_ids, max_length=None)`` -> a nest of tensors (batch on axis 0): the encoded
  source and the decoder's starting state; ``model.next(tokens, cache, index)`` -> (logits (B, V), cache): one
  decoder step in the ``attnlayers.decoding.generate`` convention.
- ``model.generate(source_ids, max_length, search, seed)`` -> ``DecodeResult``: greedy / beam / sampling
  (the generation contract of ``applications.core``: :class:`~attnlayers.applications.core.Seq2SeqGenerator`).
- ``model.attention_maps(source_ids, target_in_ids)``: the alignment weights, (B, T, S) for the RNN models
  and a per-layer list of (B, heads, T, S) cross-attention maps for the Transformer.

The special ids are model attributes (``pad_token_id``, ``start_token_id``, ``end_token_id``, saved in the
config), by default the reserved ids of ``tokenizer``: [PAD]=0, [START]=2, [END]=3. The loss, metric and
schedule live in ``applications.core`` and are re-exported here.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from attnlayers import (
    AdditiveScore,
    Attention,
    BahdanauDecoder,
    LocalAttention,
    LuongDecoder,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from attnlayers import lora, masking
from attnlayers.scheduled_sampling import get_sampler
from attnlayers.validation import check_divisible, format_shape

from ..core.generative import Seq2SeqGenerator, check_id_range, check_token_ids
from ..core.training.losses import MaskedCrossEntropy
from ..core.training.metrics import MaskedAccuracy
from ..core.training.schedules import TransformerSchedule
from .tokenizer import END_ID, PAD_ID, START_ID

__all__ = ["MODELS", "RNNSeq2Seq", "TransformerTranslator", "Translator", "build_model"]

MODELS = ("seq2seq", "bahdanau", "luong", "local", "transformer")

# Files saved before the loss, metric and schedule moved to applications.core name them "attnlayers.nmt>...".
for _cls in (MaskedCrossEntropy, MaskedAccuracy, TransformerSchedule):
    keras.saving.get_custom_objects().setdefault(f"attnlayers.nmt>{_cls.__name__}", _cls)
del _cls


# --------------------------------------------------------------------------------------------------
# The shared contract


class Translator(Seq2SeqGenerator):
    """Base of the translation models: teacher-forced ``call`` + ``encode`` / ``initial_cache`` / ``next`` for
    decoding; ``generate`` comes from :class:`~attnlayers.applications.core.Seq2SeqGenerator`.

    The special ids default to the reserved ids of ``nmt.tokenizer`` ([PAD]=0, [START]=2, [END]=3); pass
    ``pad_token_id`` / ``start_token_id`` / ``end_token_id`` for vocabularies with other ids.

    Args:
        pad_token_id: the [PAD] id (``nmt.tokenizer.PAD_ID``, 0).
        start_token_id: the [START] id (``START_ID``, 2).
        end_token_id: the [END] id (``END_ID``, 3).
        **kwargs: ``keras.Model`` arguments.
    """

    def __init__(self, *, pad_token_id=PAD_ID, start_token_id=START_ID, end_token_id=END_ID, **kwargs):
        super().__init__(pad_token_id=pad_token_id, start_token_id=start_token_id, end_token_id=end_token_id,
                         **kwargs)

    def check_source(self, inputs):
        """``inputs`` as int32 source ids (B, S), as :meth:`Seq2SeqGenerator.check_source`.

        An integer dtype (floats, bools and strings are refused rather than cast), rank 2, at least one position, ids in
        [0, source_vocabulary_size) when the values are known (eager; a compiled call cannot check them). Padding is
        ``pad_token_id``; an all-padding row is allowed (it sees no source: its context is 0).

        Args:
            inputs: source token ids (B, S), of an integer dtype.

        Returns:
            (B, S) int32 ids.

        Raises:
            ValueError: ``inputs`` is None, not of an integer dtype, not of rank 2, empty, or holds an id outside the
                source vocabulary.
        """
        if inputs is None:
            raise ValueError("`inputs` (the source ids) is required: integer token ids of shape (batch, length); "
                             "received None.")
        dtype = _dtype_name(inputs)
        if "int" not in dtype:
            raise ValueError(
                f"`inputs` must be integer source token ids of shape (batch, length); received dtype {dtype}"
                + (" (translate text with nmt.evaluate.translate or the exported `translate` signature)."
                   if dtype in ("string", "object") or dtype.startswith("<U") or dtype.startswith("|S") else ".")
            )
        source_ids = ops.convert_to_tensor(inputs)
        if len(source_ids.shape) != 2:
            raise ValueError(
                f"`inputs` must be int source ids of shape (batch, length); received shape {tuple(source_ids.shape)}."
            )
        if source_ids.shape[1] == 0 and source_ids.shape[0] != 0:
            raise ValueError(
                f"`inputs` holds empty sources (shape {format_shape(source_ids.shape)}): every row needs at least one "
                f"position (an all-[PAD] row, pad_token_id={self.pad_token_id}, is allowed)."
            )
        size = getattr(self, "source_vocabulary_size", None)
        if size is not None:
            check_id_range(source_ids, "inputs", size, "source_vocabulary_size", "source token ids")
        return ops.cast(source_ids, "int32")

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """As :meth:`Seq2SeqGenerator.generation_inputs`, with a ``padding_mask`` applied: masked positions become
        ``pad_token_id`` (the encoder's padding).

        Args:
            inputs: source ids (B, S) int.
            padding_mask: (B, S) bool, True at real tokens, or None.
            max_length: L, the output length (sizes the caches).

        Returns:
            ``{"prompt": (B, 1) int32 start tokens, "cache": nest}``.

        Raises:
            ValueError: a malformed source, or a ``padding_mask`` that does not match it.
        """
        if padding_mask is not None:
            source_ids = self.check_source(inputs)
            padding_mask = masking.check_mask(padding_mask, "padding_mask", tuple(ops.shape(source_ids)))
            inputs = ops.where(padding_mask, source_ids, ops.cast(self.pad_token_id, "int32"))
        return super().generation_inputs(inputs, None, max_length)

    def compile_for_translation(self, learning_rate=1e-3, label_smoothing=0.0, clipnorm=1.0, **kwargs):
        """``compile`` with Adam, :class:`MaskedCrossEntropy` and :class:`MaskedAccuracy`.

        Args:
            learning_rate: Adam's learning rate (a float or a schedule).
            label_smoothing: the loss's label smoothing.
            clipnorm: Adam's gradient-norm clipping, or None.
            **kwargs: more ``compile`` arguments (``jit_compile``, ``steps_per_execution``, ...).
        """
        optimizer = keras.optimizers.Adam(learning_rate, clipnorm=clipnorm)
        self.compile(optimizer=optimizer, loss=MaskedCrossEntropy(label_smoothing, pad_token_id=self.pad_token_id),
                     metrics=[MaskedAccuracy(pad_token_id=self.pad_token_id)], **kwargs)


def _dtype_name(x):
    """The dtype of ``x`` (a tensor, array or nested list) as a name: "int32", "float32", "bool", "string"..."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    try:
        return keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError, AttributeError):
        return str(dtype)


def _sampler_config(sampler):
    """``{"scheduled_sampling": its config}`` with a sampler, else {} (configs without one are unchanged)."""
    return {} if sampler is None else {"scheduled_sampling": keras.saving.serialize_keras_object(sampler)}


def _split_inputs(inputs):
    if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
        raise ValueError(
            "Translation models are called on `(source_ids, target_in_ids)`, two (batch, length) int tensors; "
            f"received {type(inputs).__name__}."
        )
    return check_token_ids(inputs[0], "source_ids"), check_token_ids(inputs[1], "target_in_ids")


# --------------------------------------------------------------------------------------------------
# RNN seq2seq


@keras.saving.register_keras_serializable(package="attnlayers.nmt")
class RNNSeq2Seq(Translator):
    """Bidirectional RNN encoder + RNN decoder, without or with attention.

    - ``attention=None``: Cho et al. (2014) / Sutskever et al. (2014): the encoder's final states, through a
      tanh bridge, are the decoder's initial state *and* a fixed context c fed at every step,
      ``s_i = f(s_{i-1}, [y_{i-1}; c])``: the whole source is one vector.
    - ``"bahdanau"``: :class:`~attnlayers.BahdanauDecoder` with the additive score (Bahdanau et al. 2015).
    - ``"luong"``: :class:`~attnlayers.LuongDecoder`, global attention with the ``score`` and input feeding
      (Luong et al. 2015). The default score is "scaled_general" (the paper's "general" / sqrt(units)), which
      keeps attention from saturating under Adam (see benchmarks/README.md).
    - ``"local"``: the Luong decoder with local-p attention (predictive window of half-width ``window``; its
      centre p_t predicted around the monotone diagonal unless ``position="paper"``, as
      :class:`~attnlayers.LocalAttention`).

    Args:
        source_vocabulary_size, target_vocabulary_size: V_s, V_t.
        embedding_dim: E. units: the decoder's state size; the encoder has units // 2 per direction, so the
            annotations h_j = [h_fw; h_bw] are (B, S, units).
        attention: None, "bahdanau", "luong" or "local". score: Luong's score ("scaled_general", "general",
            "dot", ...).
        window: local-p half-width D. position: local-p's p_t, "diagonal" or "paper" (LocalAttention's
            ``position``). cell: "gru" or "lstm". dropout: on embeddings and decoder outputs.
        scheduled_sampling: None (teacher forcing), or scheduled sampling in training (Bengio et al. 2015; the
            models with attention): an ``attnlayers.ScheduledSampler`` or a schedule spec such as
            ``"inverse_sigmoid:1000"`` (``attnlayers.scheduled_sampling.get``). The decoder then reads its own
            previous token (from ``logits`` without dropout) with probability 1 - eps_i at each step.

    Call: ``model((source_ids (B, S), target_in_ids (B, T)))`` -> logits (B, T, V_t).
    """

    def __init__(self, source_vocabulary_size, target_vocabulary_size, embedding_dim=256, units=256,
                 attention="bahdanau", score="scaled_general", window=4, cell="gru", dropout=0.2,
                 position="diagonal", scheduled_sampling=None, **kwargs):
        super().__init__(**kwargs)
        if attention not in (None, "none", "bahdanau", "luong", "local"):
            raise ValueError(f"`attention` must be None, 'bahdanau', 'luong' or 'local'; received {attention!r}.")
        if cell not in ("gru", "lstm"):
            raise ValueError(f"`cell` must be 'gru' or 'lstm'; received {cell!r}.")
        if units % 2:
            raise ValueError(f"`units` must be even (units // 2 per encoder direction); received {units}.")
        self.source_vocabulary_size, self.target_vocabulary_size = source_vocabulary_size, target_vocabulary_size
        self.embedding_dim, self.units, self.score, self.window = embedding_dim, units, score, window
        self.position = position
        self.attention_type = None if attention in (None, "none") else attention
        self.cell_type, self.dropout_rate = cell, dropout
        rnn = keras.layers.GRU if cell == "gru" else keras.layers.LSTM
        self.source_embedding = keras.layers.Embedding(source_vocabulary_size, embedding_dim, name="source_embedding")
        self.target_embedding = keras.layers.Embedding(target_vocabulary_size, embedding_dim, name="target_embedding")
        self.encoder = keras.layers.Bidirectional(
            rnn(units // 2, return_sequences=True, return_state=True), name="encoder"
        )
        # s_0 = tanh(W_s [h_fw_S; h_bw_1]) (Bahdanau et al. 2015, appendix A.2.2); one bridge per state (h, c).
        self.bridges = [keras.layers.Dense(units, activation="tanh", name=f"bridge_{i}")
                        for i in range(1 if cell == "gru" else 2)]
        self.dropout = keras.layers.Dropout(dropout)
        if self.attention_type is None:
            self.decoder_cell = (keras.layers.GRUCell if cell == "gru" else keras.layers.LSTMCell)(units, name="cell")
            self.plain_decoder = keras.layers.RNN(self.decoder_cell, return_sequences=True, name="decoder")
            self.decoder = None
        elif self.attention_type == "bahdanau":
            self.decoder = BahdanauDecoder(units, Attention(score=AdditiveScore(units), name="attention"),
                                           cell=cell, name="decoder")
        else:
            attention_layer = (Attention(score=score, name="attention") if self.attention_type == "luong" else
                               LocalAttention(window, mode="local-p", score=score, position=position,
                                              name="attention"))
            self.decoder = LuongDecoder(units, attention_layer, cell=cell, input_feeding=True, name="decoder")
        self.output_layer = keras.layers.Dense(target_vocabulary_size, name="logits")
        if scheduled_sampling is not None and self.decoder is None:
            raise ValueError("`scheduled_sampling` needs an attention decoder (attention 'bahdanau', 'luong' or "
                             "'local'); received attention=None.")
        self.scheduled_sampler = get_sampler(scheduled_sampling)  # last: the other layers' seeds are unchanged

    # The encoder: annotations (B, S, units), their mask and the bridged initial state.
    def encode(self, source_ids, training=None):
        """The encoder: annotations, their mask and the bridged initial decoder state.

        Args:
            source_ids: (B, S) int source ids (``pad_token_id`` = padding).
            training: whether dropout is active.

        Returns:
            ``(memory, mask, state)``: memory (B, S, units) (the bidirectional annotations, units // 2 per direction),
            mask (B, S) bool (True at real tokens), state the decoder's initial states, a list of (B, units) (``[h]``,
            or ``[h, c]`` for LSTM).

        Raises:
            ValueError: ``source_ids`` is not of rank 2.
        """
        source_ids = check_token_ids(source_ids, "source_ids")
        mask = ops.not_equal(source_ids, self.pad_token_id)
        x = self.dropout(self.source_embedding(source_ids), training=training)
        memory, *final = self.encoder(x, mask=mask, training=training)
        if self.cell_type == "gru":
            summaries = [ops.concatenate(final, axis=-1)]  # [h_fw; h_bw]
        else:  # final = h_fw, c_fw, h_bw, c_bw
            summaries = [ops.concatenate([final[0], final[2]], -1), ops.concatenate([final[1], final[3]], -1)]
        state = [bridge(s) for bridge, s in zip(self.bridges, summaries)]
        return memory, mask, state

    def initial_cache(self, source_ids, max_length=None):
        """The decoder's state before the first step (as :meth:`GenerativeModel.initial_cache`).

        Args:
            source_ids: (B, S) int source ids.
            max_length: unused (an RNN's state does not grow).

        Returns:
            The attention decoder's cache (:meth:`attnlayers.AttentionRNNDecoder.initial_cache`: states, memory, its
            prepared keys and mask), or ``{"states": [...], "context": (B, units)}`` for the model without attention.
        """
        memory, mask, state = self.encode(source_ids)
        if self.decoder is None:
            # c: the fixed summary of the source, fed at every step; the RNN states start from it.
            return {"states": state, "context": state[0]}
        if not self.decoder.built:  # decoding before any teacher-forced call
            self.decoder.build((None, None, self.embedding_dim), tuple(memory.shape))
        return self.decoder.initial_cache(memory, mask, state)

    def _plain_step(self, y, cache, training=None):
        x = ops.concatenate([y, ops.cast(cache["context"], y.dtype)], axis=-1)
        output, states = self.decoder_cell(x, cache["states"], training=training)
        states = keras.tree.flatten(states)
        return output, {"states": states, "context": cache["context"]}

    def next(self, tokens, cache, index):
        """One decoding step (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: the state of :meth:`initial_cache` or of the previous step.
            index: () int32, the position being predicted.

        Returns:
            ``(logits (B, V), cache)``.
        """
        y = self.target_embedding(ops.take(tokens, index - 1, axis=1))
        if self.decoder is None:
            output, cache = self._plain_step(y, cache)
        else:
            output, cache, _ = self.decoder.step(y, cache, index - 1)
        return self.output_layer(output), cache

    def call(self, inputs, training=None):
        source_ids, target_in = _split_inputs(inputs)
        memory, mask, state = self.encode(source_ids, training=training)
        y = self.dropout(self.target_embedding(target_in), training=training)
        if self.decoder is None:
            context = ops.repeat(ops.expand_dims(state[0], 1), ops.shape(y)[1], axis=1)
            outputs = self.plain_decoder(ops.concatenate([y, context], -1), initial_state=state, training=training)
        elif self.scheduled_sampler is not None and training:
            # Scheduled sampling: the decoder's loop feeds back its tokens, chosen from the logits without dropout.
            feedback = self.scheduled_sampler.feedback(target_in, training, embed=self.target_embedding,
                                                       logits=lambda output, token: self.output_layer(output))
            outputs, _ = self.decoder(y, memory, memory_mask=mask, initial_state=state, training=training,
                                      feedback=feedback)
        else:
            outputs = self.decoder(y, memory, memory_mask=mask, initial_state=state, training=training)
        return self.output_layer(self.dropout(outputs, training=training))

    def attention_maps(self, source_ids, target_in_ids):
        """The alignment weights under teacher forcing (as :meth:`GenerativeModel.attention_maps`).

        Args:
            source_ids: (B, S) int source ids.
            target_in_ids: (B, T) int decoder inputs ([START] + target).

        Returns:
            (B, T, S) weights, or None for the model without attention.
        """
        if self.decoder is None:
            return None
        memory, mask, state = self.encode(source_ids)
        y = self.target_embedding(check_token_ids(target_in_ids, "target_in_ids"))
        _, weights = self.decoder(y, memory, memory_mask=mask, initial_state=state, return_attention_scores=True)
        return weights

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocabulary_size": self.source_vocabulary_size,
            "target_vocabulary_size": self.target_vocabulary_size,
            "embedding_dim": self.embedding_dim, "units": self.units, "attention": self.attention_type,
            "score": self.score, "window": self.window, "cell": self.cell_type, "dropout": self.dropout_rate,
            "position": self.position, **_sampler_config(self.scheduled_sampler),
        }

    @classmethod
    def from_config(cls, config):
        # Saved before ``position`` existed: local-p computed eq. 9 as published.
        return cls(**{"position": "paper", **config})


# --------------------------------------------------------------------------------------------------
# Transformer


@keras.saving.register_keras_serializable(package="attnlayers.nmt")
class TransformerTranslator(Translator):
    """The Transformer of Vaswani et al. (2017) for translation, from attnlayers' blocks.

    Token embeddings scaled by sqrt(d_model) + sinusoidal positions (section 3.5), dropout on their sum,
    a post-LN encoder and decoder stack, and either a separate output projection or, with
    ``shared_embeddings=True`` (one joint vocabulary), one embedding matrix shared by the source, the target
    and the pre-softmax projection (section 3.4, Press & Wolf 2017).

    Args:
        source_vocabulary_size, target_vocabulary_size: V_s, V_t (equal when ``shared_embeddings``).
        num_layers, d_model, num_heads, intermediate_dim (d_ff), dropout: as in the paper (base model: 6,
            512, 8, 2048, 0.1).
        max_length: the longest source / target sequence (positions, cache size).
        shared_embeddings: tie source, target and output embeddings.
        normalize_first: pre-LN blocks instead of the paper's post-LN.
        scheduled_sampling: None (teacher forcing), or scheduled sampling in training, two-pass as in Mihaylova &
            Martins (2019): a first decoder pass on the gold inputs (inference mode, no gradient) predicts every
            position; each decoder input of the second pass, the one trained, is then the gold token with
            probability eps_i and the first pass's prediction of it otherwise (the "argmax" mix, or a sample:
            the sampler's ``prediction``). An ``attnlayers.ScheduledSampler`` or a spec such as
            ``"inverse_sigmoid:1000"``.

    Call: ``model((source_ids (B, S), target_in_ids (B, T)))`` -> logits (B, T, V_t).
    """

    # LoRA (attnlayers.lora): model.enable_lora(rank, target, alpha), save_lora_weights(path), load_lora_weights(path),
    # merge_lora(), as keras-hub's backbones have them
    enable_lora, merge_lora = lora.enable_lora, lora.merge_lora
    save_lora_weights, load_lora_weights = lora.save_lora_weights, lora.load_lora_weights

    def __init__(self, source_vocabulary_size, target_vocabulary_size, num_layers=3, d_model=256, num_heads=4,
                 intermediate_dim=1024, dropout=0.1, max_length=64, shared_embeddings=False,
                 normalize_first=False, scheduled_sampling=None, **kwargs):
        super().__init__(**kwargs)
        if shared_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "`shared_embeddings=True` needs one joint vocabulary; received source_vocabulary_size="
                f"{source_vocabulary_size} != target_vocabulary_size={target_vocabulary_size}."
            )
        check_divisible(d_model, "d_model", num_heads, "num_heads")
        self.source_vocabulary_size, self.target_vocabulary_size = source_vocabulary_size, target_vocabulary_size
        self.num_layers, self.d_model, self.num_heads = num_layers, d_model, num_heads
        self.intermediate_dim, self.dropout_rate, self.max_length = intermediate_dim, dropout, max_length
        self.shared_embeddings, self.normalize_first = shared_embeddings, normalize_first

        def embedding(vocabulary_size, name):
            return TokenAndPositionEmbedding(
                vocabulary_size, max_length, d_model, position="sinusoidal", scale_embeddings=True,
                embeddings_initializer=keras.initializers.RandomNormal(stddev=d_model**-0.5), name=name,
            )

        self.target_embedding = embedding(target_vocabulary_size, "target_embedding")
        self.source_embedding = (self.target_embedding if shared_embeddings
                                 else embedding(source_vocabulary_size, "source_embedding"))
        block = dict(num_heads=num_heads, intermediate_dim=intermediate_dim, dropout=dropout,
                     normalize_first=normalize_first)
        self.encoder = TransformerEncoder(num_layers, **block, name="encoder")
        self.decoder = TransformerDecoder(num_layers, **block, name="decoder")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.output_layer = None if shared_embeddings else keras.layers.Dense(target_vocabulary_size, name="logits")
        self.scheduled_sampler = get_sampler(scheduled_sampling)  # last: the other layers' seeds are unchanged

    def _logits(self, h):
        if self.output_layer is None:
            return self.target_embedding(h, reverse=True)
        return self.output_layer(h)

    def _check_length(self, ids, name):
        if ids.shape[1] is not None and ids.shape[1] > self.max_length:
            raise ValueError(
                f"`{name}` has {ids.shape[1]} tokens, more than max_length={self.max_length} (the size of the "
                "position table); truncate it or build the model with a larger max_length."
            )

    def encode(self, source_ids, training=None):
        """The encoder's output and the source's padding mask.

        Args:
            source_ids: (B, S) int source ids (``pad_token_id`` = padding).
            training: whether dropout is active.

        Returns:
            ``(memory, mask)``: memory (B, S, d_model), mask (B, S) bool (True at real tokens).

        Raises:
            ValueError: ``source_ids`` is not of rank 2, or S > ``max_length``.
        """
        source_ids = check_token_ids(source_ids, "source_ids")
        self._check_length(source_ids, "source_ids")
        mask = ops.not_equal(source_ids, self.pad_token_id)
        x = self.embedding_dropout(self.source_embedding(source_ids), training=training)
        return self.encoder(x, padding_mask=mask, training=training), mask

    def call(self, inputs, training=None):
        source_ids, target_in = _split_inputs(inputs)
        self._check_length(target_in, "target_in_ids")
        memory, mask = self.encode(source_ids, training=training)
        padding = ops.not_equal(target_in, self.pad_token_id)  # of the gold inputs, also with scheduled sampling
        if self.scheduled_sampler is not None and training:
            target_in = self._scheduled_inputs(target_in, padding, memory, mask, training)
        y = self.embedding_dropout(self.target_embedding(target_in), training=training)
        h = self.decoder(y, memory, decoder_padding_mask=padding, encoder_padding_mask=mask, training=training)
        return self._logits(h)

    def _scheduled_inputs(self, target_in, padding, memory, mask, training):
        """Scheduled sampling for the Transformer (Mihaylova & Martins 2019): a first decoder pass on the gold
        inputs, in inference mode and without gradient, predicts every position; the second pass reads the gold
        token where the coin (probability eps_i) says so and the first pass's prediction otherwise. Padding stays
        padding. -> (B, T) int32 decoder inputs."""
        feedback = self.scheduled_sampler.feedback(target_in, training)
        h = self.decoder(self.target_embedding(target_in), memory, decoder_padding_mask=padding,
                         encoder_padding_mask=mask, training=False)
        predictions = feedback.choose(ops.stop_gradient(self._logits(h)), feedback.uniform)
        return ops.where(padding, feedback.mix(predictions), target_in)

    def _cache_shape(self, batch, length):
        return (batch, self.num_layers, 2, length, self.num_heads, self.d_model // self.num_heads)

    def initial_cache(self, source_ids, max_length=None):
        """The encoder's keys and values for every decoder layer, projected once per source (as
        :meth:`GenerativeModel.initial_cache`).

        Args:
            source_ids: (B, S) int source ids.
            max_length: the length of the self-attention cache (default: the model's ``max_length``).

        Returns:
            ``{"memory_mask": (B, S), "self": (B, num_layers, 2, max_length, N, H) (slot 0 holds [START]),
            "cross": (B, num_layers, 2, S, N, H)}``.
        """
        memory, mask = self.encode(source_ids)
        batch, source_length = ops.shape(memory)[0], ops.shape(memory)[1]
        start = self.target_embedding(ops.full((batch, 1), self.start_token_id, "int32"))
        out = self.decoder(
            start, memory, encoder_padding_mask=mask,
            self_attention_cache=ops.zeros(self._cache_shape(batch, max_length or self.max_length), memory.dtype),
            self_attention_cache_update_index=0,
            cross_attention_cache=ops.zeros(self._cache_shape(batch, source_length), memory.dtype),
            cross_attention_cache_update_index=0,
        )
        # The self-attention cache now holds [START] at slot 0, which the first step rewrites identically.
        return {"memory_mask": mask, "self": out["self_attention_cache"], "cross": out["cross_attention_cache"]}

    def next(self, tokens, cache, index):
        """One decoding step on the caches (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: the caches of :meth:`initial_cache` or of the previous step.
            index: () int32, the position being predicted.

        Returns:
            ``(logits (B, V), cache)``.
        """
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)  # (B, 1)
        y = self.target_embedding(token, start_index=index - 1)
        out = self.decoder(
            y, None, encoder_padding_mask=cache["memory_mask"],
            self_attention_cache=cache["self"], self_attention_cache_update_index=index - 1,
            cross_attention_cache=cache["cross"], cross_attention_cache_update_index=None,
        )
        logits = self._logits(out["sequence_output"])[:, 0]
        return logits, {"memory_mask": cache["memory_mask"], "self": out["self_attention_cache"],
                        "cross": out["cross_attention_cache"]}

    @property
    def max_generation_length(self):
        return self.max_length

    def attention_maps(self, source_ids, target_in_ids):
        """Per decoder layer, the cross-attention weights under teacher forcing (as
        :meth:`GenerativeModel.attention_maps`).

        Args:
            source_ids: (B, S) int source ids.
            target_in_ids: (B, T) int decoder inputs ([START] + target).

        Returns:
            A list, one (B, N, T, S) array per decoder layer (N heads).
        """
        target_in = check_token_ids(target_in_ids, "target_in_ids")
        memory, mask = self.encode(source_ids)
        out = self.decoder(self.target_embedding(target_in), memory,
                           decoder_padding_mask=ops.not_equal(target_in, self.pad_token_id), encoder_padding_mask=mask,
                           return_attention_scores=True)
        return [scores["cross_attention"] for scores in out["attention_scores"]]

    def compile_for_translation(self, learning_rate=None, label_smoothing=0.1, warmup_steps=4000, clipnorm=None,
                                **kwargs):
        """Adam(beta_2=0.98, eps=1e-9) on :class:`TransformerSchedule` (section 5.3) unless a learning rate is
        given, label smoothing 0.1 (section 5.4); as :meth:`Translator.compile_for_translation`.

        Args:
            learning_rate: a float or a schedule; None: :class:`TransformerSchedule` (d_model, ``warmup_steps``).
            label_smoothing: the loss's label smoothing.
            warmup_steps: the schedule's warm-up steps (when ``learning_rate`` is None).
            clipnorm: Adam's gradient-norm clipping, or None.
            **kwargs: more ``compile`` arguments.
        """
        if learning_rate is None:
            learning_rate = TransformerSchedule(self.d_model, warmup_steps)
        optimizer = keras.optimizers.Adam(learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=clipnorm)
        self.compile(optimizer=optimizer, loss=MaskedCrossEntropy(label_smoothing), metrics=[MaskedAccuracy()],
                     **kwargs)

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocabulary_size": self.source_vocabulary_size,
            "target_vocabulary_size": self.target_vocabulary_size,
            "num_layers": self.num_layers, "d_model": self.d_model, "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim, "dropout": self.dropout_rate, "max_length": self.max_length,
            "shared_embeddings": self.shared_embeddings, "normalize_first": self.normalize_first,
            **_sampler_config(self.scheduled_sampler),
        }


def build_model(name, source_vocabulary_size, target_vocabulary_size, **kwargs):
    """One of :data:`MODELS`: "seq2seq" (no attention), "bahdanau", "luong", "local" or "transformer".

    Args:
        name: a name of :data:`MODELS`.
        source_vocabulary_size: the source vocabulary's size.
        target_vocabulary_size: the target vocabulary's size.
        **kwargs: the model's other arguments.
    """
    if name == "transformer":
        return TransformerTranslator(source_vocabulary_size, target_vocabulary_size, name=name, **kwargs)
    if name in MODELS:
        attention = None if name == "seq2seq" else name
        return RNNSeq2Seq(source_vocabulary_size, target_vocabulary_size, attention=attention, name=name, **kwargs)
    raise ValueError(f"Unknown model {name!r}; expected one of {MODELS}.")
