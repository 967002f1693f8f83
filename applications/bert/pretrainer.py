"""BERT pretraining (Devlin et al. 2019, section 3.1 and appendix A): the masked LM and next sentence prediction
heads over a :class:`~attnlayers.applications.bert.BertBackbone`, and BERT's optimizer (AdamW, linear warm-up then
linear decay, no weight decay on LayerNorm and bias weights), which the fine-tuning heads share. The sentence head is
an option (``sentence_objective``, :mod:`.objectives`): NSP (BERT, the default), ALBERT's sentence-order prediction
("sop": the same head on the pooled output, output and labels "sop") or none (the masked LM alone, RoBERTa's).

    features {"token_ids", "segment_ids", "padding_mask"} (B, T), {"mask_positions"} (B, P)
      -> BertBackbone -> sequence_output (B, T, d), pooled_output (B, d)
      -> MLM: h_p gathered at mask_positions (B, P, d)
              logits = LN(GELU(W h_p + c)) E^T + b     E: the token embedding (tied), b (V,)   -> "mlm" (B, P, V)
      -> NSP: logits = W_nsp pooled + b_nsp                                                 -> "nsp" (B, 2)
    labels {"mlm": (B, P) token ids, "nsp": (B,) 0 = IsNext / 1 = NotNext}
    sample weights {"mlm": mask_weights (B, P)}: 1 at real predictions, 0 at padded ones
    loss = mean over real predictions of the MLM cross-entropy + mean of the NSP cross-entropy

Example:
>>> pretrainer = BertPretrainer(BertBackbone("base"))
>>> pretrainer.compile_for_pretraining(1e-4, warmup_steps=10_000, total_steps=1_000_000)
>>> pretrainer.fit(dataset)       # (features, labels, sample_weights) batches, the structure above
"""

from __future__ import annotations

import keras
from keras import ops

from attnlayers import lora
from attnlayers.quantization import float_rows
from attnlayers.validation import (
    check_rank,
    concrete_value,
    format_shape,
    non_negative_number,
    positive_int,
    positive_number,
)

from ..core.training.optimizers import decoupled_adamw, no_weight_decay
from ..core.training.schedules import WarmupLinearDecay
from .backbone import build_on_zeros
from .objectives import check_sentence_objective

__all__ = ["BACKBONE_INPUTS", "BertMaskedLMHead", "BertPretrainer", "BertTask", "NO_WEIGHT_DECAY", "PACKAGE",
           "PRETRAINING_INPUTS", "bert_optimizer"]

PACKAGE = "attnlayers.bert"
BACKBONE_INPUTS = ("token_ids", "segment_ids", "padding_mask")
PRETRAINING_INPUTS = BACKBONE_INPUTS + ("mask_positions",)
# BERT excludes "LayerNorm" and "bias" weights from weight decay (the reference optimization.py); Keras names
# LayerNormalization's weights gamma / beta, biases "bias" (the MLM output bias is "output_bias"). The rule is the
# shared one of ``core.training.optimizers.no_weight_decay`` with BERT's choice of decaying the embedding tables:
# ("bias", "gamma", "beta", "scale"); no BERT weight is named "scale".
NO_WEIGHT_DECAY = no_weight_decay(decay_embeddings=True)


def _initializer():
    return keras.initializers.TruncatedNormal(stddev=0.02)  # initializer_range of the reference implementation


# ---- the optimizer --------------------------------------------------------------------------------------------


def bert_optimizer(learning_rate, warmup_steps=0, total_steps=None, weight_decay=0.01, *, beta_1=0.9,
                   beta_2=0.999, epsilon=1e-6, global_clipnorm=1.0):
    """BERT's optimizer (appendix A.2 and the reference optimization.py): the shared AdamW recipe
    (:func:`~attnlayers.applications.core.training.optimizers.decoupled_adamw`, which GPT's uses too) with BERT's betas,
    epsilon and weight decay, decoupled weight decay on every weight but LayerNorm's (gamma, beta) and the biases
    (``NO_WEIGHT_DECAY``: the embedding tables are decayed), gradients clipped to a global norm of 1, and the
    learning rate of :class:`WarmupLinearDecay`.

    Args:
        learning_rate: the peak learning rate, or a ``LearningRateSchedule`` (then ``warmup_steps`` and
            ``total_steps`` must be left out). A number with neither ``warmup_steps`` nor ``total_steps`` stays a
            constant rate, which a callback may set before every step
            (:class:`~attnlayers.applications.core.BudgetedLearningRate`, the budgeted runs' schedule).
        warmup_steps, total_steps: see :class:`WarmupLinearDecay`.
        weight_decay: the decoupled decay rate (BERT: 0.01).
        beta_1, beta_2, epsilon: Adam's (BERT: 0.9, 0.999, 1e-6). global_clipnorm: None to not clip.

    Returns:
        A ``keras.optimizers.AdamW``.
    """
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
        raise ValueError(f"`weight_decay` must be a number >= 0; received weight_decay={weight_decay!r}.")
    if isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        if warmup_steps or total_steps is not None:
            raise ValueError(
                "`learning_rate` is already a schedule; received warmup_steps / total_steps too "
                f"(warmup_steps={warmup_steps}, total_steps={total_steps}): pass one or the other."
            )
    elif warmup_steps or total_steps is not None:
        learning_rate = WarmupLinearDecay(learning_rate, warmup_steps, total_steps)
    else:
        learning_rate = positive_number(learning_rate, "learning_rate")
    return decoupled_adamw(learning_rate, float(weight_decay), beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                           global_clipnorm=global_clipnorm, decay_embeddings=True)


# ---- the task base ------------------------------------------------------------------------------------------


class BertTask(keras.Model):
    """What the BERT task models share: the backbone (serialized in the config), the input dict check, and the
    compile helper's optimizer. Subclasses implement ``call`` and their ``compile_for_*`` helper."""

    input_names = BACKBONE_INPUTS
    required_inputs = ("token_ids",)

    def __init__(self, backbone, **kwargs):
        if not (hasattr(backbone, "config") and hasattr(backbone, "token_embedding")):
            raise ValueError(f"`backbone` must be a BertBackbone; received {type(backbone).__name__}.")
        kwargs.setdefault("dtype", backbone.dtype_policy)  # the heads compute in the backbone's precision
        super().__init__(**kwargs)
        self.backbone = backbone

    # LoRA on the backbone (attnlayers.lora): the task's head stays trainable, as with keras-hub's
    # task.backbone.enable_lora(rank); the adapter file holds the backbone's adapters (save the head's weights apart)
    def enable_lora(self, rank, target=("query", "value"), alpha=None):
        """LoRA adapters on the backbone's projections (:func:`attnlayers.lora.enable_lora`); the head stays
        trainable.

        Args:
            rank: r, a positive int.
            target: the projections to adapt (default: query and value).
            alpha: the scale's numerator, alpha / r; None: r (scale 1).

        Returns:
            The keys of the backbone's projections that got adapters.
        """
        return lora.enable_lora(self.backbone, rank, target=target, alpha=alpha)

    def save_lora_weights(self, path):
        """Writes the backbone's LoRA adapters (:func:`attnlayers.lora.save_lora_weights`; not the head's weights).

        Args:
            path: the adapter file.
        """
        lora.save_lora_weights(self.backbone, path)

    def load_lora_weights(self, path):
        """Reads the backbone's LoRA adapters from a :meth:`save_lora_weights` file.

        Args:
            path: the adapter file.
        """
        lora.load_lora_weights(self.backbone, path)

    def merge_lora(self):
        return lora.merge_lora(self.backbone)

    @property
    def hidden_dim(self):
        return self.backbone.config.hidden_dim

    def _check_inputs(self, inputs):
        """The inputs dict, checked; the backbone's part of it."""
        if not isinstance(inputs, dict):
            raise ValueError(
                f"{type(self).__name__} takes a dict with keys {list(self.input_names)} "
                f"(required: {list(self.required_inputs)}); received {type(inputs).__name__}."
            )
        missing = [k for k in self.required_inputs if k not in inputs]
        unknown = sorted(set(inputs) - set(self.input_names))
        if missing or unknown:
            raise ValueError(
                f"{type(self).__name__} takes a dict with keys {list(self.input_names)} (required: "
                f"{list(self.required_inputs)}); received keys {sorted(inputs)}"
                + (f", missing {missing}" if missing else "") + (f", unknown {unknown}" if unknown else "") + "."
            )
        return {k: v for k, v in inputs.items() if k in BACKBONE_INPUTS}

    def _padding_mask(self, inputs):
        mask = inputs.get("padding_mask")
        if mask is None:
            return ops.not_equal(inputs["token_ids"], self.backbone.config.pad_token_id)
        return ops.cast(mask, "bool")

    def build_from_config(self, config):
        """Rebuilds a loaded model (``.keras`` files) by calling it once on zeros of the saved input shapes."""
        shapes = (config or {}).get("input_shape")
        if not isinstance(shapes, dict):
            return super().build_from_config(config)
        build_on_zeros(self, shapes)

    def get_config(self):
        return {**super().get_config(), "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


# ---- pretraining --------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package=PACKAGE)
class BertMaskedLMHead(keras.layers.Layer):
    """BERT's masked-LM head ("cls/predictions" of the reference checkpoints): the hidden states at the masked
    positions, a d -> d dense layer with GELU, LayerNorm, then the decoder tied to the token embeddings with an
    output bias:

        ``logits = LN(GELU(W h + c)) E^T + b``,  h = sequence_output gathered at ``mask_positions``.

    The embedding matrix E (V, d) is an argument of the call, not a weight of this layer: pass the backbone's
    ``token_embedding.embeddings`` and the decoder is that variable (its gradient reaches the embeddings); after
    ``model.quantize``, ``attnlayers.quantization.float_rows(backbone.token_embedding)`` (the table dequantized; an
    integer table is refused).

    Args:
        vocabulary_size: V (the output bias b has shape (V,)).
        activation: the transform's activation (BERT: exact "gelu").
        layer_norm_epsilon: LayerNorm's epsilon (BERT: 1e-12).
        kernel_initializer: the dense layer's.

    Call arguments:
        inputs: hidden states (B, T, d).
        mask_positions: int (B, P), the positions to predict, each in [0, T).
        embeddings: the token embedding matrix (V, d).

    Returns:
        logits (B, P, V).

    Example:
    >>> head = BertMaskedLMHead(backbone.config.vocabulary_size)
    >>> logits = head(out["sequence_output"], mask_positions, backbone.token_embedding.embeddings)
    """

    def __init__(self, vocabulary_size, activation="gelu", layer_norm_epsilon=1e-12, kernel_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = positive_int(vocabulary_size, "vocabulary_size")
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer or _initializer())

    def build(self, inputs_shape, mask_positions_shape=None, embeddings_shape=None):
        check_rank(inputs_shape, 3, "inputs", "(batch, length, hidden_dim)")
        hidden_dim = positive_int(inputs_shape[-1], "hidden_dim", what="the last axis of `inputs`")
        self.dense = keras.layers.Dense(hidden_dim, activation=self.activation,
                                        kernel_initializer=self.kernel_initializer, name="transform",
                                        dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon,
                                                          name="transform_layer_norm", dtype=self.dtype_policy)
        self.dense.build((None, None, hidden_dim))
        self.layer_norm.build((None, None, hidden_dim))
        self.bias = self.add_weight(name="output_bias", shape=(self.vocabulary_size,), initializer="zeros")

    def call(self, inputs, mask_positions, embeddings):
        check_rank(mask_positions.shape, 2, "mask_positions", "(batch, predictions) of positions")
        if not keras.backend.is_float_dtype(embeddings.dtype):
            raise ValueError(
                f"`embeddings` must be the float token embedding matrix; received dtype {embeddings.dtype}: a "
                "quantized table (model.quantize) without its scale. Pass "
                "attnlayers.quantization.float_rows(backbone.token_embedding), the table dequantized."
            )
        if tuple(embeddings.shape) != (self.vocabulary_size, inputs.shape[-1]):
            raise ValueError(
                f"`embeddings` must be the (vocabulary_size, hidden_dim) = ({self.vocabulary_size}, "
                f"{inputs.shape[-1]}) token embedding matrix; received shape {format_shape(embeddings.shape)}."
            )
        positions = ops.cast(mask_positions, "int32")
        hidden = ops.take_along_axis(inputs, positions[..., None], axis=1)  # (B, P, d): h at the masked tokens
        hidden = self.layer_norm(self.dense(hidden))  # LN(GELU(W h + c))
        logits = ops.matmul(hidden, ops.transpose(ops.cast(embeddings, hidden.dtype)))  # tied decoder: E^T
        return logits + ops.cast(self.bias, logits.dtype)

    def compute_output_shape(self, inputs_shape, mask_positions_shape=None, embeddings_shape=None):
        return tuple(mask_positions_shape[:2]) + (self.vocabulary_size,)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "activation": keras.activations.serialize(self.activation),
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class BertPretrainer(BertTask):
    """BERT's pretraining model: the masked LM and next sentence prediction over a backbone (Devlin et al. 2019,
    section 3.1), trained with ``model.fit``; or the masked LM with ALBERT's sentence-order prediction, or alone
    (``sentence_objective``).

    Args:
        backbone: a :class:`~attnlayers.applications.bert.BertBackbone`.
        sentence_objective: "nsp" (BERT: output "nsp", 0 = IsNext, 1 = NotNext), "sop" (ALBERT, Lan et al. 2020,
            section 3.1: output "sop", 0 = in order, 1 = swapped) or None (the masked LM alone, RoBERTa's: output
            "mlm" only, no sentence head). "nsp" and "sop" classify the pooled output: a backbone without a pooler
            (``BertConfig(pooler=False)``, DistilBERT's) takes None only.

    Call arguments:
        inputs: a dict: "token_ids" int (B, T) (with the masked tokens replaced by [MASK] / random / kept, as
            the data pipeline chose), optional "segment_ids" int (B, T) and "padding_mask" bool (B, T) (the
            backbone's defaults), and "mask_positions" int (B, P): the positions to predict, each in [0, T)
            (padded predictions point anywhere in range, 0 by convention, and get weight 0).
        training: enables dropout.

    Returns:
        {"mlm": (B, P, V) logits at mask_positions, "nsp": (B, 2) logits, 0 = IsNext, 1 = NotNext}; with
        ``sentence_objective="sop"``, "sop" (B, 2) (0 = in order, 1 = swapped) instead of "nsp"; with None, "mlm"
        alone.

    Training: labels {"mlm": (B, P) original token ids, "nsp": (B,) int} ("sop" for SOP; "mlm" alone for None:
    ``pretraining_dataset(sentence_objective=...)`` gives each); sample weights {"mlm": mask_weights (B, P)}, 1 at
    real predictions and 0 at padded ones (weights for "nsp" / "sop" may be given too; missing ones are 1).
    :meth:`compile_for_pretraining` sets the loss: the MLM cross-entropy averaged over real predictions
    (``reduction="mean_with_sample_weight"``) + the sentence cross-entropy averaged over the batch; metrics
    "mlm_accuracy" (weighted by mask_weights) and "nsp_accuracy" (or "sop_accuracy"; none for None).

    Example:
    >>> model = BertPretrainer(BertBackbone(BertConfig.preset("mini", vocabulary_size=8000)))
    >>> model.compile_for_pretraining(1e-4, warmup_steps=1000, total_steps=100_000)
    >>> model.fit(dataset)  # yields (features, {"mlm": ids, "nsp": is_random}, {"mlm": mask_weights})
    >>> roberta_style = BertPretrainer(BertBackbone(BertConfig.preset("mini", pooler=False)), sentence_objective=None)
    """

    input_names = PRETRAINING_INPUTS
    required_inputs = ("token_ids", "mask_positions")

    def __init__(self, backbone, sentence_objective="nsp", **kwargs):
        super().__init__(backbone, **kwargs)
        self.sentence_objective = check_sentence_objective(sentence_objective)
        config = backbone.config
        if self.sentence_objective is not None and not config.pooler:
            raise ValueError(
                f"BertPretrainer(sentence_objective={self.sentence_objective!r}) classifies the backbone's "
                "pooled_output; this backbone has none (its config has pooler=False, as DistilBERT's). Pass "
                "sentence_objective=None (the masked LM alone, as RoBERTa and DistilBERT pretrain) or give the "
                "backbone a pooler (BertConfig(pooler=True))."
            )
        self.mlm_head = BertMaskedLMHead(config.vocabulary_size, layer_norm_epsilon=config.layer_norm_epsilon,
                                         name="mlm_head", dtype=self.dtype_policy)
        self.mlm_head.build((None, None, config.hidden_dim))
        if self.sentence_objective is not None:
            # self.nsp_head or self.sop_head: the attribute and layer name that .keras files and checkpoints know
            head = keras.layers.Dense(2, kernel_initializer=_initializer(), name=f"{self.sentence_objective}_head",
                                      dtype=self.dtype_policy)
            head.build((None, config.hidden_dim))
            setattr(self, f"{self.sentence_objective}_head", head)

    @property
    def pretraining_outputs(self):
        """The outputs' keys: ("mlm", "nsp"), ("mlm", "sop") or ("mlm",)."""
        return ("mlm",) if self.sentence_objective is None else ("mlm", self.sentence_objective)

    def _check_positions(self, mask_positions, token_ids):
        check_rank(mask_positions.shape, 2, "mask_positions", "(batch, predictions) of positions")
        if not keras.backend.is_int_dtype(mask_positions.dtype):
            raise ValueError(f"`mask_positions` must hold integer positions; received dtype {mask_positions.dtype}.")
        length = token_ids.shape[1]
        value = concrete_value(mask_positions, "mask_positions")  # None inside tf.function / jax.jit
        if value is not None and length is not None and value.size and (value.min() < 0 or value.max() >= length):
            raise ValueError(
                f"`mask_positions` must be positions in [0, {length}) (the length of `token_ids`); received values "
                f"in [{value.min()}, {value.max()}]."
            )

    def call(self, inputs, training=None):
        backbone_inputs = self._check_inputs(inputs)
        mask_positions = inputs["mask_positions"]
        self._check_positions(mask_positions, inputs["token_ids"])
        out = self.backbone(backbone_inputs, training=training)
        # E read through the embedding layer: dequantized under model.quantize (its `embeddings` would be the integers)
        mlm = self.mlm_head(out["sequence_output"], mask_positions, float_rows(self.backbone.token_embedding))
        if self.sentence_objective is None:
            return {"mlm": mlm}
        head = getattr(self, f"{self.sentence_objective}_head")
        return {"mlm": mlm, self.sentence_objective: head(out["pooled_output"])}

    # ---- training ---------------------------------------------------------------------------------------------

    def _sample_weight(self, y, sample_weight):
        """The sample weights as a dict over every output (Keras needs every output's, or none): missing ones
        are ones."""
        if sample_weight is None:
            return None
        names = self.pretraining_outputs
        if not isinstance(sample_weight, dict):
            optional = f" (and optionally {names[1]!r} (B,))" if len(names) > 1 else ""
            raise ValueError(
                f"BertPretrainer's sample weights are a dict, {{'mlm': mask_weights (B, P)}}{optional}; received "
                f"{type(sample_weight).__name__}."
            )
        unknown = sorted(set(sample_weight) - set(names))
        if unknown:
            raise ValueError(f"BertPretrainer's sample weights have keys {', '.join(map(repr, names))} "
                             f"(sentence_objective={self.sentence_objective!r}); received unknown {unknown}.")
        completed = {}
        for key in names:
            weight = sample_weight.get(key)
            if weight is None:
                weight = ops.ones(ops.shape(y[key])[:2] if key == "mlm" else ops.shape(y[key])[:1], "float32")
            completed[key] = weight
        return completed

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return super().compute_loss(x, y, y_pred, self._sample_weight(y, sample_weight), training=training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, y_pred, self._sample_weight(y, sample_weight))

    def compile_for_pretraining(self, learning_rate=1e-4, warmup_steps=10_000, total_steps=1_000_000,
                                weight_decay=0.01, nsp_weight=1.0, **kwargs):
        """``compile`` as BERT pretrains (appendix A.2): :func:`bert_optimizer` (AdamW, linear warm-up to
        ``learning_rate`` over ``warmup_steps``, linear decay to 0 at ``total_steps``, no decay of LayerNorm
        and bias weights), the loss MLM + ``nsp_weight`` x the sentence objective's (NSP's, or SOP's; BERT and
        ALBERT sum them: 1.0) and the accuracies; the MLM loss and accuracy alone with ``sentence_objective=None``
        (the logs then hold "loss", the MLM's, and "mlm_accuracy", no "mlm_loss").

        Args:
            learning_rate: the peak learning rate (or a schedule: see :func:`bert_optimizer`).
            warmup_steps, total_steps: the linear warm-up and decay (:class:`WarmupLinearDecay`).
            weight_decay: the decoupled weight decay (BERT: 0.01).
            nsp_weight: the sentence objective's weight in the loss (BERT's 1.0); with ``sentence_objective=None``
                it weighs nothing and must stay 1.0 (another value is refused).
            **kwargs: go to ``compile`` (e.g. ``jit_compile``, ``steps_per_execution``).
        """
        nsp_weight = non_negative_number(nsp_weight, "nsp_weight")
        objective = self.sentence_objective
        if objective is None and nsp_weight != 1.0:
            raise ValueError(
                "`nsp_weight` weighs the sentence objective's loss; this BertPretrainer has none "
                f"(sentence_objective=None: the masked LM alone). Leave it out; received nsp_weight={nsp_weight!r}."
            )
        # the mean over real predictions: sum(w * nll) / sum(w)
        losses = {"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                    reduction="mean_with_sample_weight")}
        loss_weights = {"mlm": 1.0}
        metrics = {}
        if objective is not None:
            losses[objective] = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            loss_weights[objective] = nsp_weight
            metrics[objective] = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        self.compile(
            loss_weights=loss_weights,
            optimizer=bert_optimizer(learning_rate, warmup_steps, total_steps, weight_decay),
            loss=losses,
            # Keras prefixes the output's name only when there are several outputs: "mlm_accuracy" in every case
            weighted_metrics={"mlm": [keras.metrics.SparseCategoricalAccuracy(
                name="accuracy" if objective else "mlm_accuracy")]},
            metrics=metrics or None,
            **kwargs,
        )

    def get_config(self):
        return {**super().get_config(), "sentence_objective": self.sentence_objective}
