"""Transformer-XL (Dai et al. 2019): a decoder-only language model that reads a long text segment after segment,
keeping for every layer the states of the previous segments (its *memory*, section 3.2) and scoring with relative
positions (section 3.3), from attnlayers' layers.

    token ids (B, T) of segment tau + 1
      -> Embedding E[token] (no position table), Dropout                               h^0
      -> N pre-LN TransformerDecoderBlocks, block n reading [SG(m^{n-1}_tau); h^{n-1}] as keys and values
         and scoring with TransformerXLRelativeBias (terms (b) + (c) + (d) of A^rel)
      -> final LayerNorm -> logits = h E^T (tied)
    logits (B, T, V); the memories m^{n-1}_{tau+1} = last M steps of [m^{n-1}_tau; h^{n-1}_{tau+1}] (update_memory)

The model keeps the memories itself, in non-trainable variables (B, M, d) per layer plus their validity (B, M) (0
until a step has been written there): every ``call`` (``fit``, ``evaluate``, ``predict``, ``train_on_batch``, a plain
loop) reads them and writes the next ones, so that ``fit`` over consecutive segments carries the memory from batch to
batch, as Keras' stateful RNNs do. The batch size B is therefore fixed (``TransformerXLConfig.batch_size``), row b of
each batch must continue row b of the batch before (:func:`attnlayers.applications.gpt.data.stateful_windows`), and
``reset_memory()`` starts afresh (a new text, a new epoch). The writes are Keras variable assignments: under JAX
(stateless) ``fit`` / ``evaluate`` / ``predict`` carry them as the non-trainable state, as BatchNormalization's moving
statistics. A ``tf.distribute`` strategy with several replicas is refused (each replica would need its own rows of
the memory).

:meth:`TransformerXL.segment` is the same computation as a function of explicit memories (any length: evaluation
with a memory longer than the training one, :func:`memory_perplexity`), and :meth:`TransformerXL.generate` decodes
with a key / value cache after writing a memory into it (the memory at cache positions 0..M-1, the prompt after it):
``model.generate(prompt, 64, memories=model.memory_state()[0], memory_mask=model.memory_state()[1])``.

Why a model of its own rather than an option of :class:`~attnlayers.applications.gpt.GPT`: GPT's call, cache,
prefill, compiled decoding, checkpoints (Hugging Face, GGUF, keras-hub), LoRA and quantization all assume a stateless
forward pass over absolute positions; a memory held between calls and a fixed batch would touch each of them.

Example:
>>> model = TransformerXL(TransformerXLConfig(vocabulary_size=4096, segment_length=128, memory_length=128,
...                                           batch_size=16))
>>> model.compile("adamw", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
>>> windows, mask = data.stateful_windows(stream, batch_size=16, segment_length=128, pad_token_id=end)
>>> model.fit(data.stateful_dataset(windows, mask, 16), callbacks=[ResetMemory()])
"""

import dataclasses

import keras
import numpy as np
from keras import ops

from attnlayers.decoding import generate as decode
from attnlayers.relative_positional import TransformerXLRelativeBias
from attnlayers.segment_memory import update_memory
from attnlayers.transformer_blocks import TransformerDecoderBlock
from attnlayers.validation import (
    check_divisible, is_int, non_negative_int, positive_int, rate_in_unit_interval,
)

from .model import gelu_approximate


@dataclasses.dataclass
class TransformerXLConfig:
    """The sizes of a :class:`TransformerXL`.

    Attributes:
        vocabulary_size: V.
        segment_length: T, the tokens of one training segment (a documentation value and the default prompt room
            of generation: relative positions have no table, so any length runs).
        memory_length: M, the steps of each layer's memory kept between calls (0: none, a plain segment LM with
            relative positions).
        batch_size: B, the rows of every batch (the memory variables are (B, M, d)).
        num_layers, num_heads, hidden_dim (d), intermediate_dim: the blocks' sizes.
        dropout: on the embeddings, each residual branch and the attention weights.
        layer_norm_epsilon: the LayerNorms'.
        clamp_length: None, or the largest relative distance (Transformer-XL's / XLNet's clamp_len).
        end_token_id: the end-of-text token (None: V - 1). pad_token_id: None: ``end_token_id``.
    """

    vocabulary_size: int = 256
    segment_length: int = 32
    memory_length: int = 32
    batch_size: int = 1
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 32
    intermediate_dim: int = 128
    dropout: float = 0.0
    layer_norm_epsilon: float = 1e-5
    clamp_length: int | None = None
    end_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        for name in ("vocabulary_size", "segment_length", "batch_size", "num_layers", "num_heads", "hidden_dim",
                     "intermediate_dim"):
            positive_int(getattr(self, name), name)
        non_negative_int(self.memory_length, "memory_length")
        positive_int(self.clamp_length, "clamp_length", allow_none=True)
        check_divisible(self.hidden_dim, "hidden_dim", self.num_heads, "num_heads")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        if self.end_token_id is None:
            self.end_token_id = self.vocabulary_size - 1
        if self.pad_token_id is None:
            self.pad_token_id = self.end_token_id
        for name in ("end_token_id", "pad_token_id"):
            value = getattr(self, name)
            if not (is_int(value) and 0 <= value < self.vocabulary_size):
                raise ValueError(f"`{name}` must be a token id in [0, vocabulary_size={self.vocabulary_size}); "
                                 f"received {name}={value!r}.")

    @property
    def head_dim(self):
        return self.hidden_dim // self.num_heads


def _check_single_replica():
    """Refuses a ``tf.distribute`` strategy of several replicas: the memory rows are per replica there."""
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        raise ValueError(
            f"TransformerXL keeps its memory in variables of the global batch; a tf.distribute strategy with "
            f"{replicas} replicas would give each replica other rows. Build it outside the strategy's scope (one "
            "device), or carry the memories yourself with TransformerXL.segment."
        )


@keras.saving.register_keras_serializable(package="attnlayers.gpt")
class TransformerXL(keras.Model):
    """A Transformer-XL language model that keeps its memory between calls (see the module docstring).

    Args:
        config: a :class:`TransformerXLConfig`, a dict of its fields, or None (its defaults).

    Call arguments:
        token_ids: int (B, T) with B = ``config.batch_size``, the segment after the one of the previous call (row
            by row); or a dict ``{"token_ids", "padding_mask"}`` (what ``fit`` passes for
            :func:`~attnlayers.applications.gpt.data.lm_examples`-style inputs).
        padding_mask: None or bool (B, T), True at real tokens; padded steps enter the memory marked invalid.
        training: enables dropout.

    Returns:
        logits (B, T, V); the memory variables hold the last M steps of each layer's input after the call.

    Example:
    >>> model = TransformerXL({"vocabulary_size": 100, "segment_length": 16, "memory_length": 16, "batch_size": 4})
    >>> logits = model(token_ids)          # (4, 16, 100); the memory now holds this segment
    >>> logits = model(next_token_ids)     # attends over [memory; segment]
    >>> model.reset_memory()
    """

    def __init__(self, config=None, **kwargs):
        if config is None:
            config = TransformerXLConfig()
        elif isinstance(config, dict):
            config = TransformerXLConfig(**config)
        elif not isinstance(config, TransformerXLConfig):
            raise ValueError(f"`config` must be a TransformerXLConfig, a dict or None; received config={config!r}.")
        _check_single_replica()
        super().__init__(**kwargs)
        self.config = c = config
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = keras.layers.ReversibleEmbedding(
            c.vocabulary_size, c.hidden_dim, embeddings_initializer=init, name="token_embedding",
            dtype=self.dtype_policy)
        self.token_embedding.build((None, None))
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        self.blocks = []
        for n in range(c.num_layers):
            block = TransformerDecoderBlock(
                c.num_heads, c.intermediate_dim, dropout=c.dropout, activation=gelu_approximate,
                layer_norm_epsilon=c.layer_norm_epsilon, normalize_first=True, kernel_initializer=init,
                attention_kwargs={"position_bias": TransformerXLRelativeBias(c.num_heads,
                                                                             clamp_length=c.clamp_length)},
                name=f"block_{n}", dtype=self.dtype_policy)
            block.build((None, None, c.hidden_dim))
            self.blocks.append(block)
        self.final_norm = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon, name="final_norm",
                                                          dtype=self.dtype_policy)
        self.final_norm.build((None, None, c.hidden_dim))
        # The memory m^{n-1}_tau of each layer (its input states of the last M steps) and which steps hold one.
        shape = (c.batch_size, c.memory_length, c.hidden_dim)
        self.memories = [self.add_weight(shape=shape, initializer="zeros", trainable=False, name=f"memory_{n}")
                         for n in range(c.num_layers if c.memory_length else 0)]
        self.memory_valid = (self.add_weight(shape=shape[:2], initializer="zeros", trainable=False,
                                             name="memory_valid") if c.memory_length else None)
        self.built = True

    @property
    def end_token_id(self):
        return self.config.end_token_id

    def reset_memory(self):
        """Empties the memory (every step invalid): the next call starts a new text."""
        for variable in [*self.memories] + ([self.memory_valid] if self.memory_valid is not None else []):
            variable.assign(ops.zeros(variable.shape, variable.dtype))

    def memory_state(self):
        """``(memories, memory_mask)``: the kept memories, a list of (B, M, d) tensors (None without memory), and
        their (B, M) boolean validity: what :meth:`segment` and :meth:`generate` take."""
        if not self.memories:
            return None, None
        return [ops.convert_to_tensor(m) for m in self.memories], ops.cast(self.memory_valid, "bool")

    def segment(self, token_ids, memories=None, memory_mask=None, padding_mask=None, memory_length=None,
                training=None):
        """One segment with explicit memories: a pure function (the kept memory is neither read nor written).

        Args:
            token_ids: int (B, T). memories: None, or a list of num_layers (B, M, d) tensors (any M).
            memory_mask: None or bool (B, M), True at valid memory steps. padding_mask: None or bool (B, T).
            memory_length: the length M' of the memories returned (default ``config.memory_length``).
            training: enables dropout.

        Returns:
            ``(logits (B, T, V), next_memories, next_memory_mask)``: the last M' steps of [memory; each layer's
            input] (stop-gradient; None for M' = 0) and their validity.
        """
        memory_length = self.config.memory_length if memory_length is None else memory_length
        x = self.embedding_dropout(self.token_embedding(token_ids), training=training)
        inputs = []
        for n, block in enumerate(self.blocks):
            inputs.append(x)
            x = block(x, decoder_padding_mask=padding_mask, memory=None if memories is None else memories[n],
                      memory_mask=None if memories is None else memory_mask, training=training)
        logits = self.token_embedding(self.final_norm(x), reverse=True)  # h E^T, tied
        if not memory_length:
            return logits, None, None
        valid = ops.ones(ops.shape(token_ids), "bool") if padding_mask is None else ops.cast(padding_mask, "bool")
        if memories is not None and memory_mask is None:
            memory_mask = ops.ones(ops.shape(memories[0])[:2], "bool")
        next_memories = [update_memory(None if memories is None else memories[n], h, memory_length)
                         for n, h in enumerate(inputs)]  # m_{tau+1} = last M of [SG(m_tau); h_{tau+1}] (sec. 3.2)
        next_mask = update_memory(memory_mask if memories is not None else None, valid, memory_length)
        return logits, next_memories, next_mask

    def call(self, token_ids, padding_mask=None, training=None):
        if isinstance(token_ids, dict):
            unknown = sorted(set(token_ids) - {"token_ids", "padding_mask"})
            if "token_ids" not in token_ids or unknown or padding_mask is not None:
                raise ValueError("A dict of inputs must hold `token_ids` (and optionally `padding_mask`, then not "
                                 f"passed again); received keys {sorted(token_ids)}.")
            token_ids, padding_mask = token_ids["token_ids"], token_ids.get("padding_mask")
        batch = token_ids.shape[0]
        if self.memories and batch is not None and batch != self.config.batch_size:
            raise ValueError(
                f"TransformerXL keeps a memory of {self.config.batch_size} rows (config.batch_size); `token_ids` "
                f"has {batch} rows. Feed every batch with batch_size rows (data.stateful_windows)."
            )
        memories, memory_mask = self.memory_state()
        logits, next_memories, next_mask = self.segment(token_ids, memories, memory_mask, padding_mask,
                                                        training=training)
        for variable, value in zip(self.memories, next_memories or ()):  # the state the next call reads
            variable.assign(ops.cast(value, variable.dtype))
        if self.memory_valid is not None:
            self.memory_valid.assign(ops.cast(next_mask, self.memory_valid.dtype))
        return logits

    # ---- generation -------------------------------------------------------------------------------------

    def generate(self, token_ids, max_length, search="greedy", seed=None, memories=None, memory_mask=None,
                 stop_token_ids=None):
        """Cached decoding after a memory: each layer's memory is written into its key / value cache at positions
        0..M-1 (the block called on it at cache index 0), the prompt at M..M+P-1, and decoding steps from there
        (docs/guides/transformer-xl.md). Greedy search equals recomputing :meth:`segment` over the growing text with the
        same memory.

        Args:
            token_ids: int (B, P) prompts (every position given). max_length: L >= P, the output length.
            search, seed, stop_token_ids: as :func:`attnlayers.decoding.generate`.
            memories, memory_mask: a list of num_layers (B, M, d) tensors (any M) and their (B, M) bool validity
                (None: all valid), e.g. ``model.memory_state()``'s to continue the text the model has read; None:
                no memory.

        Returns:
            :class:`attnlayers.decoding.DecodeResult` (tokens (B, L)); the kept memory is unchanged.
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        batch, prompt_length = token_ids.shape
        max_length = positive_int(max_length, "max_length")
        if max_length < prompt_length:
            raise ValueError(f"`max_length` must be at least the prompt length {prompt_length}; received "
                             f"max_length={max_length}.")
        c = self.config
        offset = 0 if memories is None else memories[0].shape[1]
        shape = (batch, 2, offset + max_length, c.num_heads, c.head_dim)
        mask = None
        if memories is not None and memory_mask is not None:  # invalid memory steps stay masked in every step
            mask = ops.concatenate([ops.cast(memory_mask, "bool"), ops.ones((batch, max_length), "bool")], axis=1)
            mask = mask[:, None, :]

        def run_blocks(x, caches, index):
            new = []
            for block, cache in zip(self.blocks, caches):
                attention_mask = None if mask is None else ops.broadcast_to(
                    mask, (batch, x.shape[1], offset + max_length))
                x, cache = block(x, decoder_attention_mask=attention_mask, self_attention_cache=cache,
                                 self_attention_cache_update_index=index)
                new.append(cache)
            return x, tuple(new)

        caches = []
        for n, block in enumerate(self.blocks):
            cache = ops.zeros(shape, self.compute_dtype)
            if offset:
                _, cache = block(ops.cast(memories[n], self.compute_dtype), self_attention_cache=cache,
                                 self_attention_cache_update_index=0)  # the memory's keys and values
            caches.append(cache)
        _, caches = run_blocks(self.token_embedding(token_ids), caches, offset)  # prefill the prompt

        def next(tokens, cache, index):
            token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)
            x, cache = run_blocks(self.token_embedding(token), cache, offset + index - 1)
            return self.token_embedding(self.final_norm(x), reverse=True)[:, 0], cache

        return decode(next, token_ids, max_length, search, cache=tuple(caches), index=prompt_length,
                      stop_token_ids=stop_token_ids, pad_token_id=c.pad_token_id, seed=seed)

    def get_config(self):
        return {**super().get_config(), "config": dataclasses.asdict(self.config)}


def memory_perplexity(model, windows, mask, batch_size, memory_length):
    """Held-out perplexity of ``model`` reading the stateful windows in order with a memory of ``memory_length``
    steps (any length, e.g. 4x the training segment; 0: each segment alone), through :meth:`TransformerXL.segment`
    (the model's kept memory is untouched).

    Args:
        windows, mask: (S * B, T + 1) of :func:`~attnlayers.applications.gpt.data.stateful_windows` for
            ``batch_size`` B. memory_length: int >= 0.

    Returns:
        ``{"perplexity", "loss", "tokens"}``: exp of the token-weighted mean NLL over the real labels.
    """
    memory_length = non_negative_int(memory_length, "memory_length")
    windows, mask = np.asarray(windows), np.asarray(mask, bool)
    if len(windows) % batch_size:
        raise ValueError(f"`windows` must hold whole batches of batch_size={batch_size} rows; received "
                         f"{len(windows)}.")
    memories = memory_mask = None
    total, tokens = 0.0, 0.0
    for start in range(0, len(windows), batch_size):
        w, m = windows[start:start + batch_size], mask[start:start + batch_size]
        logits, memories, memory_mask = model.segment(w[:, :-1], memories, memory_mask, m[:, :-1],
                                                      memory_length=memory_length)
        nll = keras.losses.sparse_categorical_crossentropy(w[:, 1:], ops.cast(logits, "float32"), from_logits=True)
        weight = m[:, 1:].astype("float32")
        total += float(ops.sum(nll * weight))
        tokens += float(weight.sum())
    loss = total / max(tokens, 1.0)
    return {"perplexity": float(np.exp(loss)), "loss": loss, "tokens": int(tokens)}


class ResetMemory(keras.callbacks.Callback):
    """Empties a :class:`TransformerXL`'s memory at the start of every epoch and of every evaluation, so that
    each pass reads the text from its start (the stateful order restarts)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.model.reset_memory()

    def on_test_begin(self, logs=None):
        self.model.reset_memory()

    def on_test_end(self, logs=None):
        self.model.reset_memory()


__all__ = ["ResetMemory", "TransformerXL", "TransformerXLConfig", "memory_perplexity"]
