"""Captioning models on one generation contract (``applications.core.Seq2SeqGenerator`` over images):

- :class:`ShowAttendTell`: Xu et al. (2015), an LSTM that attends over the annotation vectors at every word,
  with soft (section 4.2) or hard (section 4.1, REINFORCE or Gumbel straight-through) attention;
- :class:`ShowAndTell`: the no-attention baseline (Vinyals et al. 2015, with the mean annotation fed at every
  step), the same encoder, embedding and output;
- :class:`TransformerCaptioner`: the same encoder under the library's Transformer decoder (cross-attention
  over the grid).

``model((images (B, S, S, 3) uint8, caption_in (B, T) int))`` -> logits (B, T, V), teacher forced
(``caption_in`` = [start] + words, the targets ``caption_out`` = words + [end]); ``model.generate(images)``
decodes (greedy / beam / sampling); ``model.attention_maps(images, caption_in)`` -> (B, T, L).

Backend-agnostic (``keras.ops`` only).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from attnlayers import (
    AdditiveScore,
    Attention,
    BahdanauDecoder,
    HardAttention,
    ReinforceLoss,
    TokenAndPositionEmbedding,
    TransformerDecoder,
)
from attnlayers.scheduled_sampling import get_sampler
from attnlayers.training_step import count_step, step_counter
from attnlayers.validation import (
    check_divisible, concrete_value, is_number, one_of, positive_int, rate_in_unit_interval,
)

from ..core.generative import Seq2SeqGenerator, check_token_ids
from ..core.training.losses import MaskedCrossEntropy
from ..core.training.metrics import MaskedAccuracy
from .encoder import PACKAGE, ImageEncoder, check_pixel_values

__all__ = ["ATTENTIONS", "ShowAndTell", "ShowAttendTell", "ShowAttendTellDecoder", "TransformerCaptioner", "next_tokens"]

ATTENTIONS = ("soft", "hard")


def next_tokens(caption_in, pad_token_id, end_token_id):
    """The teacher-forcing targets of ``caption_in`` = [start] + words: words + [end], padded (B, T) int32.

    Args:
        caption_in: (B, T) int token ids, [start] + words, padded.
        pad_token_id: the padding id.
        end_token_id: the [end] id.
    """
    caption_in = ops.cast(caption_in, "int32")
    following = ops.concatenate([caption_in[:, 1:], ops.full_like(caption_in[:, :1], pad_token_id)], axis=1)
    last = ops.logical_and(ops.not_equal(caption_in, pad_token_id), ops.equal(following, pad_token_id))
    return ops.where(last, end_token_id, following)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShowAttendTellDecoder(BahdanauDecoder):
    """The attention LSTM of Show, Attend and Tell (Xu et al. 2015), one step t, ``query="previous"``::

        e_ti = f_att(a_i, h_{t-1}),  alpha_t = softmax(e_t)                    (eq. 4, 5)
        z_t  = beta_t * phi({a_i}, {alpha_i}),  beta_t = sigmoid(f_beta(h_{t-1}))  (section 4.2.1, the selector)
        h_t, c_t = LSTM([E y_{t-1}; z_t], h_{t-1}, c_t-1)                     (eq. 1-3)
        output_t = [h_t; z_t]

    ``query="current"`` attends from the state that has read y_{t-1}, as the spatial attention of Lu et al.
    (2017, "Knowing When to Look", eq. 1-6) does::

        h_t, c_t = LSTM(E y_{t-1}, h_{t-1}, c_{t-1})
        e_ti = f_att(a_i, h_t),  z_t = beta_t * phi({a_i}, {alpha_i}),  beta_t = sigmoid(f_beta(h_t))
        output_t = [h_t; z_t]

    There z_t reaches the word t only through the deep output, so the map for word t is where that word was
    read; with Xu's order the LSTM can carry what z_{t-1} read, and the map may move on one word early.

    phi is the soft expectation sum_i alpha_ti a_i (eq. 13, with ``Attention``) or, with ``HardAttention``,
    a sampled a_{s_t}, s_t ~ Multinoulli(alpha_t) (eq. 8-9). In training a hard decoder uses the attention
    layer's inference weights (the expectation alpha, with ``HardAttention(inference="expectation")``) instead
    of the sample with probability ``expected_context_rate`` per example and step, as Xu et al. do "with
    probability 0.5" (section 4.1); those steps contribute no score-function term (their log-probability is
    returned as 0) and train the scorer through the soft context.

    Args:
        units: the LSTM's size.
        attention: an attnlayers attention layer over the annotations (default: soft ``Attention`` with the
            additive score).
        selector: use the gating scalar beta_t.
        query: "previous" (Xu et al.: h_{t-1}, z_t fed to the LSTM) or "current" (Lu et al.: h_t after reading
            y_{t-1}; the LSTM reads the word alone).
        expected_context_rate: (hard attention) probability of the expected context in training, in [0, 1].
        cell: "lstm" (default, the paper's) or another single cell (see ``BahdanauDecoder``).

    Call arguments and returns as :class:`~attnlayers.BahdanauDecoder` (outputs (B, T, units + D)).
    """

    default_cell = "lstm"
    queries = ("previous", "current")

    def __init__(self, units=None, attention=None, cell=None, selector=True, expected_context_rate=0.5,
                 query="previous", **kwargs):
        super().__init__(units, attention, cell, **kwargs)
        self.query = one_of(query, "query", self.queries)
        if isinstance(self.cell, keras.layers.StackedRNNCells):
            raise ValueError("ShowAttendTellDecoder needs a single cell (its query is that cell's h); received a "
                             "StackedRNNCells.")
        self.use_selector = bool(selector)
        if not is_number(expected_context_rate) or not 0.0 <= expected_context_rate <= 1.0:
            raise ValueError("`expected_context_rate` must be a number in [0, 1]; received "
                             f"expected_context_rate={expected_context_rate!r}.")
        self.expected_context_rate = float(expected_context_rate)
        self.selector = keras.layers.Dense(1, name="selector") if self.use_selector else None

    def build(self, target_embeddings_shape=None, memory_shape=None):
        super().build(target_embeddings_shape, memory_shape)
        if self.selector is not None and not self.selector.built:
            self.selector.build((None, self.units))

    def _cell_input_dim(self, embedding_dim, memory_dim):
        return embedding_dim + (memory_dim if self.query == "previous" else 0)  # [E y_{t-1}; z_t] or E y_{t-1}

    def _context(self, query, cache, index, training, return_sample):
        """z_t, alpha_t (B, L) and the sample dict (or None) from one (B, units) query."""
        context, weights, sample = self._attend(query, cache, index, training, return_sample)  # eq. 4-5, 8-9
        if training and self.attention.stochastic and self.expected_context_rate > 0:
            # Xu et al. section 4.1: with probability 0.5 the expected context instead of the sample.
            expected_context, alpha, _ = self._attend(query, cache, index, training=False)
            use_expectation = keras.random.uniform((ops.shape(query)[0], 1), seed=self.attention.seed_generator)
            use_expectation = use_expectation < self.expected_context_rate  # (B, 1)
            context = ops.where(use_expectation, expected_context, context)
            weights = ops.where(use_expectation, alpha, weights)
            if sample is not None:
                sample = {"log_prob": ops.where(use_expectation[:, 0], 0.0, sample["log_prob"]),
                          "entropy": sample["entropy"]}
        if self.selector is not None:
            beta = ops.sigmoid(ops.cast(self.selector(query), context.dtype))  # (B, 1), section 4.2.1
            context = beta * context
        return context, weights, sample

    def _step(self, y_prev, cache, index, training, return_sample=False):
        states, y_prev = cache["states"], ops.cast(y_prev, self.compute_dtype)
        if self.query == "current":  # Lu et al.: read y_{t-1}, then attend from h_t
            h, new_states = self._run_cell(y_prev, states, training)
            h = ops.cast(h, self.compute_dtype)
            context, weights, sample = self._context(h, cache, index, training, return_sample)
        else:  # Xu et al.: attend from h_{t-1} (the LSTM's first state; a GRU's only one), then read [y; z]
            context, weights, sample = self._context(states[0], cache, index, training, return_sample)
            h, new_states = self._run_cell(ops.concatenate([y_prev, context], -1), states, training)  # eq. 1-3
            h = ops.cast(h, self.compute_dtype)
        return ops.concatenate([h, context], axis=-1), {"states": new_states}, weights, sample

    def get_config(self):
        return {**super().get_config(), "selector": self.use_selector,
                "expected_context_rate": self.expected_context_rate, "query": self.query}


class _CaptionerBase(Seq2SeqGenerator):
    """What every captioner shares: images as the source, the :class:`ImageEncoder`, the inputs
    ``(images, caption_in)``, ``compile_for_captioning`` and the encoder's part of the config."""

    default_max_length = 24

    def __init__(self, vocabulary_size, *, image_size=64, backbone="small", filters=None,
                 backbone_weights=None, fine_tune=False, position_embedding=True, self_attention=False, vit=None,
                 dropout=0.3, pad_token_id=0, start_token_id=1, end_token_id=2, **kwargs):
        super().__init__(pad_token_id=pad_token_id, start_token_id=start_token_id, end_token_id=end_token_id,
                         **kwargs)
        self.vocabulary_size = positive_int(vocabulary_size, "vocabulary_size")
        self.dropout_rate = rate_in_unit_interval(dropout, "dropout")
        self.encoder_config = dict(image_size=image_size, backbone=backbone,
                                   filters=None if filters is None else tuple(filters),
                                   weights=backbone_weights, fine_tune=fine_tune,
                                   position_embedding=position_embedding, self_attention=self_attention, vit=vit)
        self.encoder = ImageEncoder(**self.encoder_config, name="encoder")
        self.dropout = keras.layers.Dropout(dropout)

    def check_source(self, inputs):
        """The images as the encoder reads them (as :meth:`Seq2SeqGenerator.check_source`).

        Args:
            inputs: (B, S, S, 3) pixel values 0..255 (eager values are checked against the pixel rule of
                :func:`check_pixel_values`), or (B, L, D) features of a frozen backbone.

        Returns:
            The checked tensor, (B, S, S, 3) or (B, L, D).

        Raises:
            ValueError: ``inputs`` is None, breaks the pixel rule, or has the wrong shape.
        """
        if inputs is None:
            raise ValueError("`images` are required: pixel values of shape (batch, height, width, 3) (uint8 0..255); "
                             "received None.")
        values = _eager_values(inputs)
        if values is not None:  # eager values (arrays, lists, eager tensors): the pixel rule of check_pixel_values
            inputs = check_pixel_values(values)
        return self.encoder.check_input(inputs)

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """As :meth:`Seq2SeqGenerator.generation_inputs` (images have no padding).

        Args:
            inputs: (B, S, S, 3) images (or (B, L, D) features of a frozen backbone).
            padding_mask: must be None.
            max_length: L, the output length (sizes the caches).

        Returns:
            ``{"prompt": (B, 1) int32 start tokens, "cache": nest}``.

        Raises:
            ValueError: a ``padding_mask`` is given, or the images are malformed.
        """
        if padding_mask is not None:  # images have no padding: a mask would be silently ignored
            raise ValueError(
                f"Captioners generate from images, which have no padding: `padding_mask` must be None; received a "
                f"{type(padding_mask).__name__}."
            )
        return super().generation_inputs(inputs, None, max_length)

    @property
    def grid_shape(self):
        return self.encoder.grid_shape

    def _split(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError("Captioners are called on `(images, caption_in)`: (B, S, S, 3) images and (B, T) "
                             f"int token ids; received {type(inputs).__name__}.")
        return self.encoder.check_input(inputs[0]), check_token_ids(inputs[1], "caption_in")

    def compile_for_captioning(self, learning_rate=1e-3, label_smoothing=0.0, clipnorm=5.0, **kwargs):
        """``compile`` with Adam, :class:`MaskedCrossEntropy` and :class:`MaskedAccuracy` (pad masked).

        Args:
            learning_rate: Adam's learning rate (a float or a schedule).
            label_smoothing: the loss's label smoothing.
            clipnorm: Adam's gradient-norm clipping, or None.
            **kwargs: more ``compile`` arguments.
        """
        self.compile(optimizer=keras.optimizers.Adam(learning_rate, clipnorm=clipnorm),
                     loss=MaskedCrossEntropy(label_smoothing, pad_token_id=self.pad_token_id),
                     metrics=[MaskedAccuracy(pad_token_id=self.pad_token_id)], **kwargs)

    def get_config(self):
        encoder = dict(self.encoder_config)
        encoder["backbone_weights"] = encoder.pop("weights")
        encoder["filters"] = list(self.encoder.filters)  # the encoder's choice when None was given
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size, **encoder,
                "dropout": self.dropout_rate}


def _eager_values(x):
    """``x`` as a NumPy array when its values are known (NumPy arrays, lists, eager tensors), else None (a symbolic
    tensor, or something that is not numbers or tensors: left to the shape checks). A ragged list is a ValueError
    naming `images`."""
    if isinstance(x, np.ndarray):
        return x
    if ops.is_tensor(x) or isinstance(x, (list, tuple)):
        return concrete_value(x, "images")
    return None


class _Captioner(_CaptionerBase):
    """What the RNN captioners share: the word embedding E, the initial state from the mean annotation, and
    the deep output layer (Xu et al. eq. 7): ``p(y_t) ~ exp(L_o tanh(E y_{t-1} + L_h h_t + L_z z_t))`` (the
    tanh as in the authors' code)."""

    def __init__(self, vocabulary_size, *, embedding_dim=128, units=256, **kwargs):
        super().__init__(vocabulary_size, **kwargs)
        self.embedding_dim, self.units = positive_int(embedding_dim, "embedding_dim"), positive_int(units, "units")
        self.embedding = keras.layers.Embedding(vocabulary_size, embedding_dim, name="embedding")  # E
        # h_0 = f_init,h(mean_i a_i), c_0 = f_init,c(mean_i a_i): one tanh layer each (section 3.1.2).
        self.init_h = keras.layers.Dense(units, activation="tanh", name="init_h")
        self.init_c = keras.layers.Dense(units, activation="tanh", name="init_c")
        self.output_h = keras.layers.Dense(embedding_dim, name="L_h")
        self.output_z = keras.layers.Dense(embedding_dim, use_bias=False, name="L_z")
        self.output_layer = keras.layers.Dense(vocabulary_size, name="L_o")

    def encode(self, images, training=None):
        """The annotations and the initial LSTM state (Xu et al. section 3.1.2).

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            training: whether dropout is active.

        Returns:
            ``(annotations, [h_0, c_0])``: annotations (B, L, D), h_0 and c_0 each (B, units).
        """
        annotations = self.encoder(images, training=training)
        mean = ops.mean(annotations, axis=1)
        return annotations, [self.init_h(mean), self.init_c(mean)]

    def _logits(self, y_prev, output, training=None):
        """Deep output (eq. 7): y_prev (..., E), output [h_t; z_t] (..., units + D) -> logits (..., V)."""
        h, z = output[..., : self.units], output[..., self.units:]
        hidden = ops.tanh(y_prev + self.output_h(self.dropout(h, training=training)) + self.output_z(z))
        return self.output_layer(self.dropout(hidden, training=training))

    def get_config(self):
        return {**super().get_config(), "embedding_dim": self.embedding_dim, "units": self.units}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShowAttendTell(_Captioner):
    """Show, Attend and Tell (Xu et al. 2015): :class:`ImageEncoder` + :class:`ShowAttendTellDecoder` + the
    deep output, trained with the doubly stochastic regularisation (eq. 14) and, for REINFORCE hard attention,
    the score-function loss (eq. 11-13) through ``attnlayers.ReinforceLoss``, all inside ``model.fit``.

    Args:
        vocabulary_size: V (special ids: ``pad_token_id`` 0, ``start_token_id`` 1, ``end_token_id`` 2).
        attention: "soft" (section 4.2) or "hard" (section 4.1).
        estimator: (hard) "reinforce" (the paper's; moving-average baseline, entropy bonus) or "gumbel"
            (straight-through Gumbel-softmax, no extra loss).
        inference: (hard) the weights used when not training: "expectation" (alpha, as the authors' code does
            at test time) or "argmax" (the most likely location).
        doubly_stochastic: lambda of eq. 14, ``lambda * sum_i (1 - sum_t alpha_ti)^2`` per caption (t over its
            real words), divided by L (as common implementations do, so that lambda does not grow with the
            grid) and averaged over the batch; 0 turns it off.
        doubly_stochastic_steps: None (lambda constant), or N: lambda_i = lambda * max(0, 1 - i / N) at training
            step i, the penalty fading out over the first N steps (a step counter, saved with the weights, counts
            the training calls). Eq. 14 pushes every cell's total attention over the caption towards 1, the
            background's too; early it makes the maps visit the cells, later it rewards flat maps.
        entropy_weight, baseline_decay: (REINFORCE) lambda_e of eq. 13 and the decay of the baseline.
        selector, expected_context_rate, query: see :class:`ShowAttendTellDecoder`.
        **kwargs: the base captioner's arguments: ``image_size``, ``backbone``, ``filters``,
            ``backbone_weights``, ``fine_tune``, ``position_embedding`` (the :class:`ImageEncoder`'s;
            ``backbone_weights`` is its ``weights``), and ``embedding_dim``, ``units``, ``dropout`` (E, the LSTM's
            size, dropout on h_t and the deep output).
        seed: seed of the hard attention's samples.
        scheduled_sampling: None (teacher forcing), or scheduled sampling in training (Bengio et al. 2015): an
            ``attnlayers.ScheduledSampler`` or a schedule spec such as ``"inverse_sigmoid:1000"``. The LSTM then
            reads its own previous word (chosen from the deep output without dropout) with probability 1 - eps_i
            at each step, and the deep output's E y_{t-1} is that word's embedding.

    Call: ``model((images (B, S, S, 3), caption_in (B, T)))`` -> logits (B, T, V).
    """

    def __init__(self, vocabulary_size, *, attention="soft", estimator="reinforce", inference="expectation",
                 doubly_stochastic=1.0, entropy_weight=0.01, baseline_decay=0.9, selector=True,
                 expected_context_rate=0.5, query="previous", seed=None, scheduled_sampling=None,
                 doubly_stochastic_steps=None, **kwargs):
        super().__init__(vocabulary_size, **kwargs)
        self.attention_type = one_of(attention, "attention", ATTENTIONS)
        self.estimator, self.inference, self.seed = estimator, inference, seed
        self.doubly_stochastic = float(doubly_stochastic)
        if self.doubly_stochastic < 0:
            raise ValueError(f"`doubly_stochastic` must be >= 0; received {doubly_stochastic!r}.")
        self.doubly_stochastic_steps = (None if doubly_stochastic_steps is None else
                                        positive_int(doubly_stochastic_steps, "doubly_stochastic_steps"))
        self.penalty_iterations = None
        if self.doubly_stochastic_steps is not None:  # i of lambda_i: the same on every replica, saved
            self.penalty_iterations = step_counter(self, "penalty_iterations")
        self.entropy_weight, self.baseline_decay = entropy_weight, baseline_decay
        score = AdditiveScore(self.units, name="f_att")
        if attention == "soft":
            layer = Attention(score=score, name="attention")
        else:
            layer = HardAttention(score=score, estimator=estimator, inference=inference, seed=seed,
                                  name="attention")
        self.decoder = ShowAttendTellDecoder(self.units, layer, selector=selector, query=query,
                                             expected_context_rate=expected_context_rate, name="decoder")
        self.reinforce = (ReinforceLoss(baseline_decay, entropy_weight, name="reinforce")
                          if attention == "hard" and estimator == "reinforce" else None)
        self.scheduled_sampler = get_sampler(scheduled_sampling, seed=seed)  # last: other layers' seeds unchanged

    @property
    def sampled(self):
        """True when training samples the attention and needs the REINFORCE loss."""
        return self.reinforce is not None

    def _decode(self, images, caption_in, training=None, return_sample=False):
        annotations, state = self.encode(images, training=training)
        y = self.embedding(caption_in)
        if self.scheduled_sampler is not None and training:
            # Scheduled sampling: the LSTM feeds back its words, chosen from the deep output without dropout; the
            # deep output's E y_{t-1} is then the embedding of the word each step read.
            feedback = self.scheduled_sampler.feedback(
                caption_in, training, embed=self.embedding,
                logits=lambda output, token: self._logits(self.embedding(token), output))
            *result, fed = self.decoder(self.dropout(y, training=training), annotations, initial_state=state,
                                        return_attention_scores=True, return_sample=return_sample,
                                        training=training, feedback=feedback)
            return (self.embedding(fed),) + tuple(result)
        result = self.decoder(self.dropout(y, training=training), annotations, initial_state=state,
                              return_attention_scores=True, return_sample=return_sample, training=training)
        return (y,) + tuple(result)

    def call(self, inputs, training=None):
        images, caption_in = self._split(inputs)
        sampled = bool(training) and self.sampled
        y, outputs, alpha, *sample = self._decode(images, caption_in, training, return_sample=sampled)
        logits = self._logits(y, outputs, training=training)
        step_mask = ops.not_equal(caption_in, self.pad_token_id)  # (B, T) real words (+ the start token)
        if training and self.doubly_stochastic > 0:
            # eq. 14: lambda * sum_i (1 - sum_t alpha_ti)^2 over the caption's real steps, divided by L.
            coverage = ops.sum(ops.cast(alpha, "float32") * ops.cast(step_mask, "float32")[..., None], axis=1)
            penalty = self.doubly_stochastic * ops.mean(ops.square(1.0 - coverage))
            if self.penalty_iterations is not None:  # lambda_i = lambda * max(0, 1 - i / N)
                i = count_step(self.penalty_iterations, training)  # this step's i; the count becomes i + 1
                penalty = penalty * ops.maximum(0.0, 1.0 - i / self.doubly_stochastic_steps)
            self.add_loss(penalty)  # Keras divides add_loss terms by the replicas itself
        if sampled:
            # REINFORCE (eq. 11-13): the reward is minus the caption's mean word log-loss.
            targets = next_tokens(caption_in, self.pad_token_id, self.end_token_id)
            step_loss = keras.losses.sparse_categorical_crossentropy(targets, ops.cast(logits, "float32"),
                                                                     from_logits=True)
            mask = ops.cast(step_mask, "float32")
            per_example = ops.sum(step_loss * mask, axis=-1) / ops.maximum(ops.sum(mask, axis=-1), 1.0)
            self.reinforce(per_example, sample[0], step_mask=step_mask, training=training)
        return logits

    def initial_cache(self, images, max_length=None):
        """The decoder's state before the first step (as :meth:`GenerativeModel.initial_cache`).

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            max_length: unused (an RNN's state does not grow).

        Returns:
            The :class:`ShowAttendTellDecoder` cache: the LSTM states [h, c] (B, units), the annotations (B, L, D) and
            their prepared keys and mask (:meth:`attnlayers.AttentionRNNDecoder.initial_cache`).
        """
        annotations, state = self.encode(images)
        if not self.decoder.built:  # decoding before any teacher-forced call
            self.decoder.build((None, None, self.embedding_dim), tuple(annotations.shape))
        return self.decoder.initial_cache(annotations, initial_state=state)

    def next(self, tokens, cache, index):
        """One decoding step (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: the state of :meth:`initial_cache` or of the previous step.
            index: () int32, the position being predicted.

        Returns:
            ``(logits (B, V), cache)``.
        """
        y = self.embedding(ops.take(tokens, index - 1, axis=1))
        output, cache, _ = self.decoder.step(y, cache, index - 1)
        return self._logits(y, output), cache

    def attention_maps(self, images, caption_in):
        """The attention weights under teacher forcing (inference weights: hard attention's ``inference``); row t
        is the map used to predict word t of ``caption_out``.

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            caption_in: (B, T) int decoder inputs ([START] + caption).

        Returns:
            (B, T, L) weights.
        """
        images, caption_in = self.encoder.check_input(images), check_token_ids(caption_in, "caption_in")
        return self._decode(images, caption_in)[2]

    def get_config(self):
        return {**super().get_config(), "attention": self.attention_type, "estimator": self.estimator,
                "inference": self.inference, "doubly_stochastic": self.doubly_stochastic,
                "entropy_weight": self.entropy_weight, "baseline_decay": self.baseline_decay,
                "selector": self.decoder.use_selector, "expected_context_rate": self.decoder.expected_context_rate,
                "query": self.decoder.query, "seed": self.seed,
                "doubly_stochastic_steps": self.doubly_stochastic_steps,
                **({} if self.scheduled_sampler is None else
                   {"scheduled_sampling": keras.saving.serialize_keras_object(self.scheduled_sampler)})}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShowAndTell(_Captioner):
    """The no-attention baseline with the same encoder, embedding and deep output: the mean annotation
    abar = mean_i a_i initialises the LSTM and is fed at every step, ``h_t = LSTM([E y_{t-1}; abar])``, and
    the output is ``[h_t; abar]`` (one vector must summarise the whole image, the setting attention improves).

    Args:
        vocabulary_size: V.
        **kwargs: as :class:`ShowAttendTell`'s shared ones (the encoder's, embedding_dim, units, dropout).

    Call: ``model((images (B, S, S, 3), caption_in (B, T)))`` -> logits (B, T, V).
    """

    def __init__(self, vocabulary_size, **kwargs):
        super().__init__(vocabulary_size, **kwargs)
        self.cell = keras.layers.LSTMCell(self.units, name="cell")
        self.rnn = keras.layers.RNN(self.cell, return_sequences=True, name="decoder")

    def call(self, inputs, training=None):
        images, caption_in = self._split(inputs)
        annotations, state = self.encode(images, training=training)
        mean = ops.mean(annotations, axis=1)
        y = self.embedding(caption_in)
        fed = ops.repeat(ops.expand_dims(mean, 1), ops.shape(y)[1], axis=1)  # abar at every step
        h = self.rnn(ops.concatenate([self.dropout(y, training=training), fed], -1), initial_state=state,
                     training=training)
        return self._logits(y, ops.concatenate([h, fed], -1), training=training)

    def initial_cache(self, images, max_length=None):
        """The LSTM state before the first step and the mean annotation fed at every step (as
        :meth:`GenerativeModel.initial_cache`).

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            max_length: unused (an RNN's state does not grow).

        Returns:
            ``{"states": [h_0, c_0] each (B, units), "mean": (B, D)}``.
        """
        annotations, state = self.encode(images)
        return {"states": state, "mean": ops.mean(annotations, axis=1)}

    def next(self, tokens, cache, index):
        """One decoding step (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: the state of :meth:`initial_cache` or of the previous step.
            index: () int32, the position being predicted.

        Returns:
            ``(logits (B, V), cache)``.
        """
        y = self.embedding(ops.take(tokens, index - 1, axis=1))
        h, states = self.cell(ops.concatenate([y, cache["mean"]], -1), cache["states"])
        logits = self._logits(y, ops.concatenate([h, cache["mean"]], -1))
        return logits, {"states": keras.tree.flatten(states), "mean": cache["mean"]}

    def attention_maps(self, images, caption_in):
        """None: the baseline has no attention (as :meth:`GenerativeModel.attention_maps`).

        Args:
            images: unused.
            caption_in: unused.

        Returns:
            None.
        """
        return None


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerCaptioner(_CaptionerBase):
    """The Transformer comparison model: the same :class:`ImageEncoder`, its annotation vectors projected to
    ``d_model`` as the memory, and the library's pre-LN :class:`~attnlayers.TransformerDecoder` (masked
    self-attention, cross-attention over the L grid positions, feed-forward) over learned word + position
    embeddings, the output tied to the word embedding.

    Args:
        vocabulary_size: V (``pad_token_id`` 0, ``start_token_id`` 1, ``end_token_id`` 2).
        num_layers, d_model, num_heads, intermediate_dim, dropout: the decoder's sizes.
        max_length: the longest caption in tokens (the position table).
        **kwargs: the encoder's arguments, ``image_size``, ``backbone``, ``filters``, ``backbone_weights``,
            ``fine_tune``, ``position_embedding`` (see :class:`ShowAttendTell`).

    Call: ``model((images (B, S, S, 3), caption_in (B, T)))`` -> logits (B, T, V).
    """

    default_max_length = 24

    def __init__(self, vocabulary_size, *, num_layers=2, d_model=128, num_heads=4, intermediate_dim=256,
                 dropout=0.1, max_length=24, **kwargs):
        super().__init__(vocabulary_size, dropout=dropout, **kwargs)
        check_divisible(d_model, "d_model", num_heads, "num_heads")
        self.num_layers, self.d_model, self.num_heads = num_layers, d_model, num_heads
        self.intermediate_dim, self.max_length = intermediate_dim, max_length
        self.project = keras.layers.Dense(d_model, name="project")
        self.embedding = TokenAndPositionEmbedding(vocabulary_size, max_length, d_model, name="embedding")
        self.decoder = TransformerDecoder(num_layers, num_heads=num_heads, intermediate_dim=intermediate_dim,
                                          dropout=dropout, normalize_first=True, name="decoder")

    @property
    def max_generation_length(self):
        return self.max_length

    def encode(self, images, training=None):
        """The annotations projected to ``d_model``: the decoder's memory.

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            training: whether dropout is active.

        Returns:
            (B, L, d_model) memory.
        """
        return self.project(self.encoder(images, training=training))

    def call(self, inputs, training=None):
        images, caption_in = self._split(inputs)
        memory = self.encode(images, training=training)
        y = self.dropout(self.embedding(caption_in), training=training)
        h = self.decoder(y, memory, decoder_padding_mask=ops.not_equal(caption_in, self.pad_token_id),
                         training=training)
        return self.embedding(h, reverse=True)

    def _cache_shape(self, batch, length):
        return (batch, self.num_layers, 2, length, self.num_heads, self.d_model // self.num_heads)

    def initial_cache(self, images, max_length=None):
        """The caches before the first step, [START] written at slot 0 (as :meth:`GenerativeModel.initial_cache`).

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            max_length: the length of the self-attention cache (default: the model's ``max_length``).

        Returns:
            ``{"self": (B, num_layers, 2, max_length, heads, head_dim), "cross": (B, num_layers, 2, L, heads,
            head_dim)}``: the self-attention cache and the memory's keys and values.
        """
        memory = self.encode(images)
        batch, length = ops.shape(memory)[0], ops.shape(memory)[1]
        start = self.embedding(ops.full((batch, 1), self.start_token_id, "int32"))
        out = self.decoder(
            start, memory,
            self_attention_cache=ops.zeros(self._cache_shape(batch, max_length or self.max_length), memory.dtype),
            self_attention_cache_update_index=0,
            cross_attention_cache=ops.zeros(self._cache_shape(batch, length), memory.dtype),
            cross_attention_cache_update_index=0,
        )
        return {"self": out["self_attention_cache"], "cross": out["cross_attention_cache"]}

    def next(self, tokens, cache, index):
        """One decoding step (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: the state of :meth:`initial_cache` or of the previous step.
            index: () int32, the position being predicted.

        Returns:
            ``(logits (B, V), cache)``.
        """
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)  # (B, 1)
        y = self.embedding(token, start_index=index - 1)
        out = self.decoder(y, None, self_attention_cache=cache["self"], self_attention_cache_update_index=index - 1,
                           cross_attention_cache=cache["cross"], cross_attention_cache_update_index=None)
        logits = self.embedding(out["sequence_output"], reverse=True)[:, 0]
        return logits, {"self": out["self_attention_cache"], "cross": out["cross_attention_cache"]}

    def attention_maps(self, images, caption_in):
        """The last decoder layer's cross-attention under teacher forcing, averaged over the heads.

        Args:
            images: (B, S, S, 3) images, or (B, L, D) features of a frozen backbone.
            caption_in: (B, T) int decoder inputs ([START] + caption).

        Returns:
            (B, T, L) weights.
        """
        caption_in = check_token_ids(caption_in, "caption_in")
        memory = self.encode(self.encoder.check_input(images))
        out = self.decoder(self.embedding(caption_in), memory,
                           decoder_padding_mask=ops.not_equal(caption_in, self.pad_token_id),
                           return_attention_scores=True)
        return ops.mean(out["attention_scores"][-1]["cross_attention"], axis=1)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "d_model": self.d_model,
                "num_heads": self.num_heads, "intermediate_dim": self.intermediate_dim, "max_length": self.max_length}
