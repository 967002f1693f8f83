"""GPT: a GPT-2-style decoder-only language model (Radford et al. 2019) in one flat file, from attnlayers' layers.

    token ids (B, T)
      -> TokenAndPositionEmbedding: E[token] + P[position], learned positions          wte + wpe
      -> Dropout
      -> TransformerDecoder(normalize_first=True): N pre-LN blocks                     h[0..N-1]
           x = x + Attention(LayerNorm(x)) (causal);  x = x + MLP(LayerNorm(x)) (GELU)
         then the final LayerNorm                                                       ln_f
      -> logits = h E^T (the output projection is the token embedding, tied)           lm_head
    logits (B, T, V)

The generation contract shared by the applications (``GPT`` is a
:class:`~attnlayers.applications.core.generation.GenerativeModel`; its ``generate`` is core's):

- ``initial_cache(token_ids, padding_mask, max_length)``: prefill, one forward pass over the prompt -> the key /
  value cache (B, num_layers, 2, max_length, num_heads, head_dim).
- ``next(tokens, cache, index) -> (logits (B, V), cache)``: one cached step for
  :func:`attnlayers.decoding.generate` (the newest known token is ``tokens[:, index - 1]``).
- ``generation_inputs(token_ids, padding_mask, max_length)`` -> the prompt, its mask and the prefilled cache:
  what core's ``generate`` and the SavedModel export (``applications.core.export.export_generator``) decode from.
- ``generate(token_ids, max_length, strategy, seed, ...)`` -> :class:`attnlayers.decoding.DecodeResult`.
- special token ids as attributes: ``end_token_id``, ``pad_token_id`` (from the config; no start token).

Example:
>>> model = GPT(GPTConfig(vocabulary_size=50257, max_sequence_length=1024, num_layers=12, num_heads=12,
...                       hidden_dim=768, intermediate_dim=3072, dropout=0.1))      # GPT-2 small
>>> logits = model(token_ids, padding_mask=token_ids != model.pad_token_id)         # (B, T, 50257)
>>> model.generate(prompt_ids, max_length=64, strategy=Sampling(top_p=0.9), seed=1).tokens   # (B, 64)
"""

import dataclasses

import keras
from keras import ops

from attnlayers.embedding import TokenAndPositionEmbedding
from attnlayers.transformer import TransformerDecoder
from attnlayers.validation import check_rank, format_shape, is_int, positive_int, rate_in_unit_interval

from ..core.generation import GenerativeModel


@keras.saving.register_keras_serializable(package="attnlayers.gpt")
def gelu_approximate(x):
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return keras.activations.gelu(x, approximate=True)


@dataclasses.dataclass
class GPTConfig:
    """The sizes of a :class:`GPT` (keras-hub's ``GPT2Backbone`` argument names). The default is tiny.

    Attributes:
        vocabulary_size: V.
        max_sequence_length: the longest sequence, prompt and generated tokens together (learned positions).
        num_layers, num_heads, hidden_dim (d_model), intermediate_dim (the MLP's hidden size, 4 d_model in
            GPT-2).
        dropout: on the embeddings, the attention weights and each residual branch.
        layer_norm_epsilon: LayerNorm epsilon.
        end_token_id: the end-of-text token (generation stops there). None: V - 1, GPT-2's <|endoftext|>.
        pad_token_id: written after the end of generated sequences. None: ``end_token_id``, as GPT-2 does.
    """

    vocabulary_size: int = 256
    max_sequence_length: int = 64
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 32
    intermediate_dim: int = 128
    dropout: float = 0.0
    layer_norm_epsilon: float = 1e-5
    end_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        for name in ("vocabulary_size", "max_sequence_length", "num_layers", "num_heads", "hidden_dim",
                     "intermediate_dim"):
            positive_int(getattr(self, name), name)
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"`hidden_dim` must be divisible by `num_heads`; received hidden_dim={self.hidden_dim}, "
                f"num_heads={self.num_heads}."
            )
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        if self.end_token_id is None:
            self.end_token_id = self.vocabulary_size - 1
        if self.pad_token_id is None:
            self.pad_token_id = self.end_token_id
        for name in ("end_token_id", "pad_token_id"):
            value = getattr(self, name)
            if not (is_int(value) and 0 <= value < self.vocabulary_size):
                raise ValueError(
                    f"`{name}` must be a token id in [0, vocabulary_size={self.vocabulary_size}); received "
                    f"{name}={value!r}."
                )


@keras.saving.register_keras_serializable(package="attnlayers.gpt")
class GPT(GenerativeModel):
    """A GPT-2-style decoder-only Transformer language model.

    Args:
        config: a :class:`GPTConfig`, a dict of its fields, or None (the tiny default).

    Call arguments:
        token_ids: int (B, T), T <= ``max_sequence_length``.
        padding_mask: None or bool (B, T), True at real tokens (right padding).
        training: enables dropout.

    Returns:
        logits (B, T, V): position t scores the token at t + 1.

    Example:
    >>> model = GPT(GPTConfig(vocabulary_size=1000, max_sequence_length=128))
    >>> logits = model(token_ids)                                     # (B, T, 1000)
    >>> result = model.generate(token_ids, max_length=128)            # greedy, stops at end_token_id
    """

    def __init__(self, config=None, **kwargs):
        if config is None:
            config = GPTConfig()
        elif isinstance(config, dict):
            config = GPTConfig(**config)
        elif not isinstance(config, GPTConfig):
            raise ValueError(f"`config` must be a GPTConfig, a dict or None; received config={config!r}.")
        super().__init__(pad_token_id=config.pad_token_id, end_token_id=config.end_token_id, **kwargs)
        self.config = c = config
        init = keras.initializers.RandomNormal(stddev=0.02)  # GPT-2's initialisation
        self.embedding = TokenAndPositionEmbedding(
            c.vocabulary_size, c.max_sequence_length, c.hidden_dim, embeddings_initializer=init,
            name="embedding", dtype=self.dtype_policy,
        )
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        self.decoder = TransformerDecoder(
            c.num_layers, c.num_heads, c.intermediate_dim, dropout=c.dropout, activation=gelu_approximate,
            layer_norm_epsilon=c.layer_norm_epsilon, normalize_first=True, kernel_initializer=init,
            name="decoder", dtype=self.dtype_policy,
        )
        self.embedding.build((None, c.max_sequence_length))
        self.decoder.build((None, c.max_sequence_length, c.hidden_dim))
        self.built = True

    def call(self, token_ids, padding_mask=None, training=None):
        self._check_inputs(token_ids, padding_mask)
        x = self.embedding_dropout(self.embedding(token_ids), training=training)
        x = self.decoder(x, decoder_padding_mask=padding_mask, training=training)  # blocks + final LayerNorm
        return self.embedding(x, reverse=True)  # logits = h E^T

    # ---- generation -------------------------------------------------------------------------------------

    def initial_cache(self, token_ids, padding_mask=None, max_length=None):
        """Prefill: runs the prompt once and returns its keys and values.

        Args:
            token_ids: int (B, P) prompts, right-padded. padding_mask: None or bool (B, P).
            max_length: L >= P, the cache length (prompt and generated tokens). Default ``max_sequence_length``.

        Returns:
            The cache (B, num_layers, 2, L, num_heads, head_dim), filled at positions [0, P).
        """
        token_ids, padding_mask = self._check_inputs(token_ids, padding_mask, convert=True)
        max_length = self._check_max_length(max_length, token_ids.shape[1])
        c = self.config
        shape = (ops.shape(token_ids)[0], c.num_layers, 2, max_length, c.num_heads, c.hidden_dim // c.num_heads)
        out = self.decoder(
            self.embedding(token_ids), decoder_padding_mask=padding_mask,
            self_attention_cache=ops.zeros(shape, self.compute_dtype), self_attention_cache_update_index=0,
        )
        return out["self_attention_cache"]

    def next(self, tokens, cache, index):
        """One cached step: ``tokens`` (B, L), ``cache`` from :meth:`initial_cache`, ``index`` the scalar
        position to predict -> (logits (B, V) of position ``index``, the cache with entry ``index - 1``
        written)."""
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)  # (B, 1): the newest known token
        x = self.embedding(token, start_index=index - 1)
        out = self.decoder(x, self_attention_cache=cache, self_attention_cache_update_index=index - 1)
        return self.embedding(out["sequence_output"], reverse=True)[:, 0], out["self_attention_cache"]

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """The decoding's inputs for prompts ``inputs`` (B, P) (right-padded, ``padding_mask`` True at real
        tokens): ``{"prompt": (B, P) int32, "prompt_mask": (B, P) bool or None, "cache": initial_cache(...)}``,
        the cache sized for ``max_length`` (default ``max_sequence_length``)."""
        token_ids, padding_mask = self._check_inputs(inputs, padding_mask, convert=True)
        max_length = self._check_max_length(max_length, token_ids.shape[1])
        return {"prompt": token_ids, "prompt_mask": padding_mask,
                "cache": self.initial_cache(token_ids, padding_mask, max_length)}

    def generate(self, token_ids, max_length=None, strategy="greedy", seed=None, *, padding_mask=None,
                 stop_token_ids="auto"):
        """Continues prompts with :func:`attnlayers.decoding.generate` over a prefilled cache (the shared
        ``GenerativeModel.generate``, under GPT's argument names).

        Args:
            token_ids: int (B, P) prompts, right-padded (``padding_mask`` True at real tokens).
            max_length: L, the output length, prompt included (P <= L <= ``max_sequence_length``). Default
                ``max_sequence_length``.
            strategy: "greedy", "beam", "top_k", "top_p", "random" or an ``attnlayers.decoding`` strategy.
            seed: the sampling seed (an int or an integer tensor); the same seed gives the same tokens.
            padding_mask: None or bool (B, P).
            stop_token_ids: "auto" (``[end_token_id]``), None (never stop early) or a list of ids.

        Returns:
            A ``DecodeResult``: ``tokens`` (B, L) (or (B, t, L) for beam search) then ``pad_token_id``,
            ``scores``, ``log_probs``, ``lengths``.
        """
        return super().generate(token_ids, max_length, strategy, seed, padding_mask=padding_mask,
                                stop_token_ids=stop_token_ids)

    @property
    def max_generation_length(self):
        return self.config.max_sequence_length

    def generation_length(self, max_length=None):
        """``max_length`` checked against ``max_sequence_length`` (its default when None)."""
        return self._check_max_length(max_length, None)

    # ---- checks and config ------------------------------------------------------------------------------

    def _check_inputs(self, token_ids, padding_mask, convert=False):
        if convert:
            token_ids = ops.convert_to_tensor(token_ids)
            padding_mask = None if padding_mask is None else ops.convert_to_tensor(padding_mask)
        check_rank(token_ids.shape, 2, "token_ids", "(batch, length)")
        if not keras.backend.is_int_dtype(token_ids.dtype):
            raise ValueError(f"`token_ids` must hold integer token ids; received dtype {token_ids.dtype}.")
        length = token_ids.shape[1]
        if length is not None and length > self.config.max_sequence_length:
            raise ValueError(
                f"`token_ids` may hold at most max_sequence_length={self.config.max_sequence_length} tokens; "
                f"received shape {format_shape(token_ids.shape)}."
            )
        if padding_mask is not None and (
            len(padding_mask.shape) != 2
            or any(a is not None and b is not None and a != b for a, b in zip(padding_mask.shape, token_ids.shape))
        ):
            raise ValueError(
                f"`padding_mask` must have the shape of `token_ids` {format_shape(token_ids.shape)}; received "
                f"shape {format_shape(padding_mask.shape)}."
            )
        if convert:
            token_ids = ops.cast(token_ids, "int32")
            padding_mask = None if padding_mask is None else ops.cast(padding_mask, "bool")
        return token_ids, padding_mask

    def _check_max_length(self, max_length, prompt_length):
        limit = self.config.max_sequence_length
        if max_length is None:
            max_length = limit
        max_length = positive_int(max_length, "max_length")
        if max_length > limit or (prompt_length is not None and max_length < prompt_length):
            low = "1" if prompt_length is None else f"prompt length {prompt_length}"
            raise ValueError(
                f"`max_length` must be in [{low}, max_sequence_length={limit}]; received max_length={max_length}."
            )
        return max_length

    def get_config(self):
        config = super().get_config()
        for name in ("pad_token_id", "start_token_id", "end_token_id"):  # held by `config`
            config.pop(name, None)
        return {**config, "config": dataclasses.asdict(self.config)}
