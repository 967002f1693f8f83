"""XLNet pretraining: permutation language modelling with partial prediction (Yang et al. 2019, sections 2.2 - 2.3)
over an :class:`~attnlayers.applications.xlnet.XLNetBackbone`, trained with ``model.fit``.

    {"token_ids", "segment_ids", "padding_mask"} (B, T) [, "order" (B, T)]
      -> z ~ Z_T, one order per row, sampled in the train step from the model's SeedGenerator (or "order" given)
      -> permutation masks -> backbone.two_stream -> h, g (B, T, d)
      -> the P = round(T / K) positions z_{>c} of partial prediction (fewer real ones in padded rows: weight 0)
      -> logits = g_{z_t} E^T + b     E: the token embedding (tied), b (V,): Hugging Face's lm_loss  (B, P, V)
    loss = sum_targets -log p(x_{z_t} | x_{z<t}) / number of targets          (eq. 5, the targets only)

Example:
>>> pretrainer = XLNetPretrainer(XLNetBackbone("base"), K=6, seed=0)
>>> pretrainer.compile_for_pretraining(1e-4, warmup_steps=1000, total_steps=100_000)
>>> pretrainer.fit({"token_ids": ids, "padding_mask": ids != 5}, batch_size=16)    # no labels: the tokens are
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from attnlayers.distribution import scale_for_replicas
from attnlayers.permutation import (
    num_predictions,
    permutation_masks,
    prediction_targets,
    sample_factorization_order,
)
from attnlayers.quantization import float_rows
from attnlayers.validation import format_shape, positive_int

from ..core.formats.safetensors import read_safetensors
from ..core.training.optimizers import decoupled_adamw
from ..core.training.schedules import WarmupLinearDecay
from .backbone import XLNetBackbone, call_on_saved_shapes
from .checkpoint import load_hf_checkpoint, save_hf_checkpoint

__all__ = ["BACKBONE_INPUTS", "LM_BIAS", "PACKAGE", "XLNetLMHead", "XLNetPretrainer", "XLNetTask", "xlnet_optimizer"]

PACKAGE = "attnlayers.xlnet"
BACKBONE_INPUTS = ("token_ids", "segment_ids", "padding_mask")
LM_BIAS = "lm_loss.bias"  # Hugging Face's XLNetLMHeadModel name of the LM head's bias (its weight is E, tied)


def xlnet_optimizer(learning_rate, warmup_steps=0, total_steps=None, weight_decay=0.01):
    """XLNet's optimizer (Yang et al. 2019, appendix A.3 / A.4: Adam with epsilon 1e-6, linear warm-up and decay,
    weight decay 0.01, gradient clipping at 1): the shared AdamW recipe with BERT's betas, no decay of LayerNorm and
    bias weights (:func:`~attnlayers.applications.core.training.optimizers.decoupled_adamw`).

    Args:
        learning_rate: the peak rate. warmup_steps, total_steps: of :class:`WarmupLinearDecay` (both left out: a
            constant rate). weight_decay: the decoupled decay.

    Returns:
        A ``keras.optimizers.AdamW``.
    """
    if warmup_steps or total_steps is not None:
        learning_rate = WarmupLinearDecay(learning_rate, warmup_steps, total_steps)
    return decoupled_adamw(learning_rate, weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                           global_clipnorm=1.0, decay_embeddings=True)


class XLNetTask(keras.Model):
    """What the XLNet task models share: the backbone (serialized in the config), the input dict check and the
    rebuild of a loaded model. Subclasses implement ``call``."""

    input_names = BACKBONE_INPUTS

    def __init__(self, backbone, **kwargs):
        if not isinstance(backbone, XLNetBackbone):
            raise ValueError(f"`backbone` must be an XLNetBackbone; received {type(backbone).__name__}.")
        kwargs.setdefault("dtype", backbone.dtype_policy)  # the heads compute in the backbone's precision
        super().__init__(**kwargs)
        if not backbone.built:  # a task may reach it through two_stream only, which does not build the model
            backbone({"token_ids": ops.zeros((1, 2), "int32")})
        self.backbone = backbone

    @property
    def hidden_dim(self):
        return self.backbone.config.hidden_dim

    def _check_inputs(self, inputs):
        """The inputs dict, checked; the backbone's part of it."""
        if not isinstance(inputs, dict):
            inputs = {"token_ids": inputs}
        unknown = sorted(set(inputs) - set(self.input_names))
        if unknown or "token_ids" not in inputs:
            raise ValueError(
                f"{type(self).__name__} takes a dict with keys {list(self.input_names)} (required: 'token_ids'); "
                f"received keys {sorted(inputs)}."
            )
        return {k: v for k, v in inputs.items() if k in BACKBONE_INPUTS and v is not None}

    def _padding_mask(self, inputs):
        mask = inputs.get("padding_mask")
        if mask is None:
            return ops.not_equal(inputs["token_ids"], self.backbone.config.pad_token_id)
        return ops.cast(mask, "bool")

    def build_from_config(self, config):
        """Rebuilds a loaded model (``.keras`` files) by calling it once on zeros of the saved input shapes."""
        call_on_saved_shapes(self, config, batch=2)

    def get_config(self):
        return {**super().get_config(), "backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class XLNetLMHead(keras.layers.Layer):
    """XLNet's language-model head (Hugging Face's ``lm_loss``): the query stream's states times the tied token
    embeddings plus an output bias, ``logits = g E^T + b``.

    Args:
        vocabulary_size: V (the bias b has shape (V,)).

    Call arguments:
        inputs: (B, P, d), the query stream at the predicted positions.
        embeddings: (V, d), the token embedding matrix (the backbone's, dequantized: ``float_rows``).

    Returns:
        logits (B, P, V).
    """

    def __init__(self, vocabulary_size, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = positive_int(vocabulary_size, "vocabulary_size")

    def build(self, inputs_shape=None, embeddings_shape=None):
        self.bias = self.add_weight(name="bias", shape=(self.vocabulary_size,), initializer="zeros")

    def call(self, inputs, embeddings):
        if tuple(embeddings.shape) != (self.vocabulary_size, inputs.shape[-1]):
            raise ValueError(
                f"`embeddings` must be the (vocabulary_size, hidden_dim) = ({self.vocabulary_size}, "
                f"{inputs.shape[-1]}) token embedding matrix; received shape {format_shape(embeddings.shape)}."
            )
        logits = ops.matmul(inputs, ops.transpose(ops.cast(embeddings, inputs.dtype)))  # g E^T
        return logits + ops.cast(self.bias, logits.dtype)

    def compute_output_shape(self, inputs_shape, embeddings_shape=None):
        return tuple(inputs_shape[:-1]) + (self.vocabulary_size,)

    def get_config(self):
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size}


@keras.saving.register_keras_serializable(package=PACKAGE)
class XLNetPretrainer(XLNetTask):
    """XLNet's permutation language model with partial prediction (Yang et al. 2019, eq. 5 and section 2.3).

    Every call (every step of ``fit``, ``evaluate``, ``predict``) draws a new factorisation order per row from the
    model's ``keras.random.SeedGenerator`` (stateless seeds: the same under ``jit_compile``, TensorFlow and JAX),
    unless the inputs carry one.

    Args:
        backbone: an :class:`~attnlayers.applications.xlnet.XLNetBackbone`.
        K: |z| / (|z| - c) of partial prediction (the paper: 6 for XLNet-Large, 7 for Base): the last round(n / K)
            real tokens of each order are predicted.
        seed: the SeedGenerator's seed (None: a random one).

    Call arguments:
        inputs: a dict: "token_ids" int (B, T), optional "segment_ids" int (B, T) and "padding_mask" bool (B, T)
            (default ``token_ids != pad_token_id``), and optional "order" int (B, T), each row a permutation of
            0 .. T-1 (absent: sampled).
        training: enables dropout.

    Returns:
        {"logits": (B, P, V) from the query stream at the predicted positions, "positions": (B, P) int32 those
        positions, "weights": (B, P) float32, 1 at a real target and 0 at a slot left over in a padded row}, with
        P = round(T / K) (at least 1).

    Training: no labels (the targets are the input tokens); :meth:`compute_loss` is the cross-entropy averaged over
    the targets, padding never one.

    Example:
    >>> model = XLNetPretrainer(XLNetBackbone(XLNetConfig.preset("tiny", vocabulary_size=8000)), seed=0)
    >>> model.compile_for_pretraining(1e-4, warmup_steps=100, total_steps=10_000)
    >>> model.fit({"token_ids": ids, "padding_mask": ids != 5}, batch_size=16)
    """

    input_names = BACKBONE_INPUTS + ("order",)

    def __init__(self, backbone, K=6, seed=None, **kwargs):
        super().__init__(backbone, **kwargs)
        num_predictions(1, K)  # checks K
        self.K, self.seed = float(K), seed
        self.seed_generator = keras.random.SeedGenerator(seed, name="order_seed")
        self.lm_head = XLNetLMHead(backbone.config.vocabulary_size, name="lm_head", dtype=self.dtype_policy)
        self.lm_head.build()

    def call(self, inputs, training=None):
        backbone_inputs = self._check_inputs(inputs)
        token_ids = backbone_inputs["token_ids"]
        padding = self._padding_mask(backbone_inputs)
        order = inputs.get("order") if isinstance(inputs, dict) else None
        if order is None:  # z ~ Z_T (section 2.2), a new order per row and per step
            shape = ops.shape(token_ids)
            order = sample_factorization_order(shape[0], shape[1], self.seed_generator, padding_mask=padding)
        content_mask, query_mask = permutation_masks(order, padding_mask=padding)
        targets = prediction_targets(order, self.K, padding_mask=padding)  # z_{>c}, real tokens only
        _, query = self.backbone.two_stream(backbone_inputs, content_mask, query_mask, training=training)
        positions, weights = self._target_slots(targets)
        g = ops.take_along_axis(query, positions[..., None], axis=1)  # (B, P, d): g_{z_t} at the targets
        logits = self.lm_head(g, float_rows(self.backbone.token_embedding))
        return {"logits": logits, "positions": positions, "weights": weights}

    def _target_slots(self, targets):
        """``(positions (B, P) int32, weights (B, P) float32)``: each row's target positions first (in position
        order), then non-targets with weight 0. P = round(T / K) bounds every row's count (round(n / K), n <= T);
        with T unknown when traced, P = T."""
        length = targets.shape[1]
        count = num_predictions(length, self.K) if length is not None else ops.shape(targets)[1]
        index = ops.arange(ops.shape(targets)[1], dtype="int32")[None, :]
        key = ops.where(targets, index, index + ops.shape(targets)[1])  # targets sort first
        positions = ops.cast(ops.argsort(key, axis=-1)[:, :count], "int32")
        weights = ops.cast(ops.take_along_axis(targets, positions, axis=-1), "float32")
        return positions, weights

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """-sum_targets log p(x_{z_t} | x_{z<t}) / number of targets (eq. 5 over z_{>c}), plus the model's
        regularisation losses. ``y`` and ``sample_weight`` are not read: the targets are ``x``'s tokens."""
        token_ids = x["token_ids"] if isinstance(x, dict) else x
        labels = ops.take_along_axis(ops.cast(token_ids, "int32"), y_pred["positions"], axis=-1)
        log_p = ops.log_softmax(ops.cast(y_pred["logits"], "float32"), axis=-1)
        nll = -ops.squeeze(ops.take_along_axis(log_p, labels[..., None], axis=-1), -1)  # (B, P)
        weights = y_pred["weights"]
        loss = scale_for_replicas(ops.sum(nll * weights) / ops.maximum(ops.sum(weights), 1.0))
        for extra in self.losses:
            loss = loss + scale_for_replicas(ops.cast(extra, "float32"))
        return loss

    def compile_for_pretraining(self, learning_rate=1e-4, warmup_steps=0, total_steps=None, weight_decay=0.01,
                                **kwargs):
        """``compile`` with :func:`xlnet_optimizer`; the loss is :meth:`compute_loss`'s.

        Args:
            learning_rate: the peak learning rate.
            warmup_steps: linear warm-up steps.
            total_steps: the step at which the rate has decayed linearly to 0, or None (no decay).
            weight_decay: decoupled weight decay.
            **kwargs: more ``compile`` arguments (e.g. ``jit_compile``).
        """
        self.compile(optimizer=xlnet_optimizer(learning_rate, warmup_steps, total_steps, weight_decay), **kwargs)

    # ---- Hugging Face's XLNetLMHeadModel ----------------------------------------------------------------------

    def save_hf_checkpoint(self, directory):
        """Writes backbone and head as Hugging Face's ``XLNetLMHeadModel`` (``transformer.`` names plus
        ``lm_loss.bias``; the head's weight is the tied embedding).

        Args:
            directory: created if missing; its config.json and model.safetensors are replaced.

        Returns:
            ``directory``.
        """
        return save_hf_checkpoint(self.backbone, directory, architecture="XLNetLMHeadModel",
                                  lm_bias=self.lm_head.bias.value)

    @classmethod
    def from_hf_checkpoint(cls, directory, **kwargs):
        """A pretrainer with the backbone and the ``lm_loss.bias`` of a Hugging Face ``XLNetLMHeadModel`` checkpoint.

        A file without ``lm_loss.bias`` (an ``XLNetModel``) is refused: its head would be untrained.

        Args:
            directory: the checkpoint directory (config.json and model.safetensors).
            **kwargs: constructor arguments (``K``, ``seed``).

        Returns:
            An :class:`XLNetPretrainer`.

        Raises:
            ValueError: the checkpoint has no ``lm_loss.bias``, or one of another size than the vocabulary.
        """
        backbone, info = load_hf_checkpoint(directory)
        tensors, _ = read_safetensors(info["file"])
        if LM_BIAS not in tensors:
            raise ValueError(f"{info['file']!r} has no {LM_BIAS!r} (an XLNetModel checkpoint, no LM head): load it "
                             "with load_hf_checkpoint and build XLNetPretrainer(backbone) for a fresh head.")
        model = cls(backbone, **kwargs)
        bias = np.asarray(tensors[LM_BIAS], np.float32)
        if bias.shape != tuple(model.lm_head.bias.shape):
            raise ValueError(f"{info['file']!r}: {LM_BIAS!r} has shape {bias.shape}; expected "
                             f"{tuple(model.lm_head.bias.shape)} (vocabulary_size).")
        model.lm_head.bias.assign(bias)
        return model

    def get_config(self):
        return {**super().get_config(), "K": self.K, "seed": self.seed}
