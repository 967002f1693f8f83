"""GPT: a GPT-2-style decoder-only language model (Radford et al. 2019) in one flat file, from attnlayers' layers.

    token ids (B, T)
      -> TokenAndPositionEmbedding: E[token] + P[position], learned positions          wte + wpe
      -> Dropout
      -> TransformerDecoder(normalize_first=True): N pre-LN blocks                     h[0..N-1]
           x = x + Attention(LayerNorm(x)) (causal);  x = x + MLP(LayerNorm(x)) (GELU)
         then the final LayerNorm                                                       ln_f
      -> logits = h E^T (the output projection is the token embedding, tied)           lm_head
    logits (B, T, V)

``GPTConfig(architecture="llama")`` builds a LLaMA-style decoder (Touvron et al. 2023) from the same blocks:

    token ids (B, T)
      -> Embedding: E[token], no position table                                        embed_tokens
      -> TransformerDecoder(normalize_first=True, normalization="rms"): N pre-norm blocks      layers[0..N-1]
           x = x + Attention(RMSNorm(x)): causal, RoPE on queries and keys (Su et al. 2021), grouped-query
               attention with num_key_value_heads K/V heads (Ainslie et al. 2023), no biases
           x = x + SwiGLU(RMSNorm(x)) = (Swish(x W_1) * (x V)) W_2 (Shazeer 2020), no biases
         then the final RMSNorm (Zhang & Sennrich 2019)                                 norm
      -> logits = h W_out (untied, lm_head), or h E^T with tie_embeddings=True
    logits (B, T, V)

The generation contract shared by the applications (``GPT`` is a
:class:`~attnlayers.applications.core.generative.GenerativeModel`; its ``generate`` is core's):

- ``initial_cache(token_ids, padding_mask, max_length)``: prefill, one forward pass over the prompt -> the key /
  value cache (B, num_layers, 2, max_length, num_key_value_heads, head_dim) (num_key_value_heads = num_heads in
  GPT-2).
- ``next(tokens, cache, index) -> (logits (B, V), cache)``: one cached step for
  :func:`attnlayers.decoding.generate` (the newest known token is ``tokens[:, index - 1]``).
- ``generation_inputs(token_ids, padding_mask, max_length)`` -> the prompt, its mask and the prefilled cache:
  what core's ``generate`` and the SavedModel export (``applications.core.formats.export.export_generator``)
  decode from.
- ``generate(token_ids, max_length, search, seed, ...)`` -> :class:`attnlayers.decoding.DecodeResult`.
- special token ids as attributes: ``end_token_id``, ``pad_token_id`` (from the config; no start token).

Sizes: ``GPTConfig.preset(name)`` for the GPT-2 sizes of :data:`GPT_PRESETS` (tiny, small, medium, large, xl);
``config.parameter_count()`` is their closed-form parameter count (GPT-2 small: 124,439,808). A LLaMA-style size:
``GPTConfig.preset("tiny", architecture="llama", num_key_value_heads=1, tie_embeddings=False)`` or any
``GPTConfig(architecture="llama", ...)``.

Example:
>>> model = GPT(GPTConfig.preset("small"))                                           # GPT-2 small, 124M
>>> logits = model(token_ids, padding_mask=token_ids != model.pad_token_id)         # (B, T, 50257)
>>> model.generate(prompt_ids, max_length=64, search=Sampling(top_p=0.9), seed=1).tokens     # (B, 64)
"""

import dataclasses

import keras
from keras import ops

from attnlayers import lora
from attnlayers.decoding import check_seed
from attnlayers.deprecation import renamed_keyword
from attnlayers.embedding import TokenAndPositionEmbedding, padded_size
from attnlayers.layer_walk import nested_layers
from attnlayers.positional import RotaryEmbedding
from attnlayers.quantization import float_rows
from attnlayers.routes import IMPLEMENTATIONS
from attnlayers.transformer import TransformerDecoder
from attnlayers.validation import (
    check_divisible,
    check_rank,
    format_shape,
    is_int,
    one_of,
    positive_int,
    positive_number,
    rate_in_unit_interval,
)

from ..core.activations import gelu_approximate  # GPT-2's GELU, shared with BERT's ALBERT option
from ..core.generative import GenerativeModel, check_id_range, concrete_values
from ..core.runs import keras_fixes
from ..core.training.losses import ChunkedCrossEntropy
from ..core.training.metrics import Perplexity


__all__ = ["GPT", "GPTConfig", "GPT_PRESETS", "VocabularyView", "gelu_approximate"]


# (num_layers, hidden_dim, num_heads) of the GPT-2 sizes: layers and d_model from Radford et al. 2019, table 2, heads
# (d_model / 64) from the released models (Hugging Face's gpt2, gpt2-medium, gpt2-large, gpt2-xl); all with
# V = 50,257, 1,024 positions and d_ff = 4 d. "tiny" is a small size for tests and examples.
GPT_PRESETS = {
    "tiny": (2, 128, 2),
    "small": (12, 768, 12),
    "medium": (24, 1024, 16),
    "large": (36, 1280, 20),
    "xl": (48, 1600, 25),
}


@dataclasses.dataclass
class GPTConfig:
    """The sizes of a :class:`GPT` (keras-hub's ``GPT2Backbone`` argument names; Hugging Face's ``GPT2Config``
    names in brackets). The default is tiny; :meth:`preset` gives GPT-2's sizes.

    Attributes:
        vocabulary_size: V [vocab_size].
        max_sequence_length: the longest sequence, prompt and generated tokens together (learned positions)
            [n_positions].
        num_layers [n_layer], num_heads [n_head], hidden_dim: d_model [n_embd], intermediate_dim: the MLP's hidden
            size, 4 d_model in GPT-2 [n_inner, None meaning 4 n_embd].
        dropout: on the embeddings and each residual branch [embd_pdrop, resid_pdrop].
        attention_dropout: on the attention weights [attn_pdrop; LLaMA's attention_dropout]; None (the default):
            ``dropout``'s rate. Only training reads either: at inference every route is open to the attention,
            the fused kernel included, whatever the rates.
        attention_implementation: the route of every attention (:class:`attnlayers.MultiHeadAttention`'s
            ``implementation``): "auto" (the default), "exact", "chunked", "fused" or "flash" (the Pallas kernel
            that keeps the attention dropout: JAX on a GPU). A named route that cannot compute a call raises.
        layer_norm_epsilon: LayerNorm epsilon [layer_norm_epsilon].
        end_token_id: the end-of-text token (generation stops there). None: V - 1, GPT-2's <|endoftext|>
            [eos_token_id].
        pad_token_id: written after the end of generated sequences. None: ``end_token_id``, as GPT-2 does
            [pad_token_id].
        architecture: "gpt2" (the default: learned positions, LayerNorm, GELU MLP, biases) or "llama" (RoPE,
            RMSNorm, SwiGLU feed-forward, grouped-query attention, no biases; Hugging Face's ``LlamaConfig``
            names: intermediate_dim [intermediate_size], layer_norm_epsilon [rms_norm_eps], max_sequence_length
            [max_position_embeddings]: the longest sequence and cache, no position table).
        num_key_value_heads: "llama": N_kv key / value heads, dividing num_heads (1 = multi-query attention);
            None: num_heads [num_key_value_heads]. "gpt2" has one K/V head per query head.
        rope_theta: "llama": the RoPE frequency base (10,000 in LLaMA 1 and 2) [rope_theta].
        tie_embeddings: the output projection is the token embedding (GPT-2 always; "llama" either)
            [tie_word_embeddings].
        vocabulary_padding: the token table and the output projection hold V_pad = ceil(V / m) m rows for
            m = vocabulary_padding (1: none, the default; 128 gives GPT-2's 50,257 -> 50,304, as nanoGPT and llm.c
            pad it, so that the output GEMMs run on whole tiles). The padded rows are zero, never looked up, and
            their logits never leave the model: ``call`` and ``next`` return the V real columns, so greedy search,
            sampling and beam search never pick an id >= V. Checkpoints (Hugging Face, GGUF, keras-hub) are read
            and written with the real V (``GPT.vocabulary_view``); ``parameter_count`` counts the real V.
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
    architecture: str = "gpt2"
    num_key_value_heads: int | None = None
    rope_theta: float = 10000.0
    tie_embeddings: bool = True
    vocabulary_padding: int = 1
    attention_dropout: float | None = None
    attention_implementation: str = "auto"

    def __post_init__(self):
        for name in ("vocabulary_size", "max_sequence_length", "num_layers", "num_heads", "hidden_dim",
                     "intermediate_dim", "vocabulary_padding"):
            positive_int(getattr(self, name), name)
        check_divisible(self.hidden_dim, "hidden_dim", self.num_heads, "num_heads")
        self.dropout = rate_in_unit_interval(self.dropout, "dropout")
        if self.attention_dropout is None:
            self.attention_dropout = self.dropout
        self.attention_dropout = rate_in_unit_interval(self.attention_dropout, "attention_dropout")
        one_of(self.attention_implementation, "attention_implementation", IMPLEMENTATIONS)
        if not (isinstance(self.layer_norm_epsilon, (int, float)) and self.layer_norm_epsilon > 0):
            raise ValueError(f"`layer_norm_epsilon` must be a positive number; received {self.layer_norm_epsilon!r}.")
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
        self._check_architecture()

    def _check_architecture(self):
        one_of(self.architecture, "architecture", ("gpt2", "llama"))
        positive_int(self.num_key_value_heads, "num_key_value_heads", allow_none=True)
        self.rope_theta = positive_number(self.rope_theta, "rope_theta")
        if not isinstance(self.tie_embeddings, bool):
            raise ValueError(f"`tie_embeddings` must be True or False; received {self.tie_embeddings!r}.")
        if self.architecture == "gpt2":
            if self.num_key_value_heads not in (None, self.num_heads):
                raise ValueError(
                    f"`num_key_value_heads` (grouped-query attention) needs architecture='llama'; GPT-2 has "
                    f"num_key_value_heads = num_heads = {self.num_heads}; received "
                    f"num_key_value_heads={self.num_key_value_heads}."
                )
            if not self.tie_embeddings:
                raise ValueError("`tie_embeddings=False` needs architecture='llama': GPT-2 ties its output projection "
                                 "to the token embedding.")
            return
        if self.num_key_value_heads is not None:
            check_divisible(self.num_heads, "num_heads", self.num_key_value_heads, "num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError(
                f"RoPE rotates feature pairs: architecture='llama' needs an even head size hidden_dim / num_heads; "
                f"received hidden_dim={self.hidden_dim}, num_heads={self.num_heads} (head size {self.head_dim})."
            )

    @property
    def padded_vocabulary_size(self):
        """V_pad = ceil(V / vocabulary_padding) vocabulary_padding: the rows of the token table and output
        projection."""
        return padded_size(self.vocabulary_size, self.vocabulary_padding)

    @property
    def head_dim(self):
        """H = hidden_dim / num_heads."""
        return self.hidden_dim // self.num_heads

    @property
    def key_value_heads(self):
        """N_kv, the key / value heads of each attention (num_heads unless grouped-query attention)."""
        return self.num_key_value_heads or self.num_heads

    @classmethod
    def preset(cls, name, **overrides):
        """The GPT-2 size ``name`` of :data:`GPT_PRESETS` (tiny, small, medium, large, xl) with GPT-2's
        vocabulary (50,257), 1,024 positions, d_ff = 4 d, dropout 0.1 and LayerNorm epsilon 1e-5, unless
        ``overrides`` (other GPTConfig fields) say otherwise.

        Args:
            name: a key of :data:`GPT_PRESETS`.
            **overrides: GPTConfig fields that replace the preset's.

        Returns:
            A :class:`GPTConfig`.

        Raises:
            ValueError: an unknown preset, or overrides that are not GPTConfig fields.
        """
        if name not in GPT_PRESETS:
            raise ValueError(f"Unknown GPT preset {name!r}; expected one of {list(GPT_PRESETS)}.")
        layers, hidden, heads = GPT_PRESETS[name]
        sizes = {"vocabulary_size": 50257, "max_sequence_length": 1024, "num_layers": layers, "num_heads": heads,
                 "hidden_dim": hidden, "intermediate_dim": 4 * hidden, "dropout": 0.1, "layer_norm_epsilon": 1e-5}
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"Unknown GPTConfig fields {unknown} in the overrides of preset {name!r}.")
        return cls(**{**sizes, **overrides})

    def parameter_count(self):
        """The number of weights of a :class:`GPT` of these sizes, in closed form.

        GPT-2 (the output projection is the token embedding, tied: it adds nothing):
        embeddings: (V + P) d (wte, wpe);
        each block: 2 d (ln_1) + 3 (d^2 + d) (c_attn: Q, K, V) + d^2 + d (c_proj) + 2 d (ln_2)
                    + d d_ff + d_ff (c_fc) + d_ff d + d (mlp.c_proj)  = 4 d^2 + 2 d d_ff + d_ff + 9 d;
        final LayerNorm: 2 d (ln_f).
        GPT-2 small / medium / large / xl: 124,439,808 / 354,823,168 / 774,030,080 / 1,557,611,200, Hugging Face's
        ``GPT2LMHeadModel(...).num_parameters()`` (the paper's table 2 says 117M / 345M / 762M / 1542M).

        LLaMA (no biases, no position table; d_kv = N_kv H):
        embeddings: V d (embed_tokens), + V d for an untied lm_head;
        each block: d (input_layernorm) + d^2 (q_proj) + 2 d d_kv (k_proj, v_proj) + d^2 (o_proj)
                    + d (post_attention_layernorm) + 3 d d_ff (gate_proj, up_proj, down_proj)
                    = 2 d^2 + 2 d d_kv + 3 d d_ff + 2 d;
        final RMSNorm: d (norm).

        The real V is counted: with ``vocabulary_padding`` the model holds (V_pad - V) d more weights per vocabulary
        table (zeros, never saved in a checkpoint).
        """
        d, f = self.hidden_dim, self.intermediate_dim
        if self.architecture == "llama":
            d_kv = self.key_value_heads * self.head_dim
            block = 2 * d * d + 2 * d * d_kv + 3 * d * f + 2 * d
            embeddings = self.vocabulary_size * d * (1 if self.tie_embeddings else 2)
            return embeddings + self.num_layers * block + d
        block = 4 * d * d + 2 * d * f + f + 9 * d
        return (self.vocabulary_size + self.max_sequence_length) * d + self.num_layers * block + 2 * d


def _calibrated_through_call(layer, mode):
    """``layer.quantized_call``, except while ``layer`` is in GPTQ / AWQ ``mode`` and not yet calibrated: then
    ``layer.call`` (the float kernel), which Keras' calibration wraps to read the layer's inputs (GPT.quantize)."""
    quantized_call = type(layer).quantized_call.__get__(layer)

    def call(*args, **kwargs):
        if layer.quantization_mode == mode and not getattr(layer, f"is_{mode}_calibrated", True):
            return layer.call(*args, **kwargs)
        return quantized_call(*args, **kwargs)

    return call


def _zero_padded_rows(variable, vocabulary_size, axis):
    """Zeros the padded rows (axis 0) or columns (axis 1) >= V of a vocabulary table."""
    if variable.shape[axis] != vocabulary_size:
        keep = ops.arange(variable.shape[axis]) < vocabulary_size
        keep = keep[:, None] if axis == 0 else keep[None, :]
        variable.assign(ops.where(keep, variable.value, ops.zeros((), variable.dtype)))


class VocabularyView:
    """The real V rows (``axis=0``) or columns (``axis=1``) of a padded vocabulary table, as checkpoint readers
    and writers use a variable: ``path``, ``dtype``, ``shape`` (V in place of V_pad), ``value``, ``numpy()`` and
    ``assign(value)`` (which writes the real part and zeros the padding)."""

    def __init__(self, variable, vocabulary_size, axis):
        self.variable, self.vocabulary_size, self.axis = variable, vocabulary_size, axis
        self.path, self.name, self.dtype = variable.path, variable.name, variable.dtype
        shape = list(variable.shape)
        shape[axis] = vocabulary_size
        self.shape = tuple(shape)

    @property
    def value(self):
        value = self.variable.value
        return value[:self.vocabulary_size] if self.axis == 0 else value[:, :self.vocabulary_size]

    def numpy(self):
        return ops.convert_to_numpy(self.value)

    def assign(self, value):
        value = ops.cast(ops.convert_to_tensor(value), self.dtype)
        if tuple(value.shape) != self.shape:
            raise ValueError(f"`value` for the real vocabulary of {self.path!r} must have shape {self.shape}; received "
                             f"{tuple(value.shape)}.")
        padding = [(0, 0), (0, 0)]
        padding[self.axis] = (0, self.variable.shape[self.axis] - self.vocabulary_size)
        self.variable.assign(ops.pad(value, padding))


@keras.saving.register_keras_serializable(package="attnlayers.gpt")
class GPT(GenerativeModel):
    """A GPT-2-style decoder-only Transformer language model, or a LLaMA-style one with
    ``GPTConfig(architecture="llama")`` (see the module docstring).

    Args:
        config: a :class:`GPTConfig`, a dict of its fields, a preset name of :data:`GPT_PRESETS` ("small"...), or
            None (the tiny default of GPTConfig()).

    Call arguments:
        token_ids: int (B, T), T <= ``max_sequence_length``; or a dict ``{"token_ids", "padding_mask"}`` (what
            ``fit`` passes for such inputs, as keras-hub's ``GPT2CausalLM`` takes them).
        padding_mask: None or bool (B, T), True at real tokens (right padding).
        training: enables dropout.

    Returns:
        logits (B, T, V): position t scores the token at t + 1 (the V real columns, whatever
        ``vocabulary_padding``). One exception: ``call(..., training=True)`` of a model compiled with a
        :class:`~attnlayers.applications.core.training.losses.ChunkedCrossEntropy` loss returns the final hidden
        states (B, T, d), ``fit``'s ``y_pred`` for that loss (:meth:`compute_loss`), so that a training step never
        forms the (B, T, V) logits; :meth:`hidden_states` gives them in any case.

    Token ids must lie in [0, V). With concrete (eager) ids, ``call``, ``generate``, ``generation_inputs`` and
    ``initial_cache`` check them and raise a ValueError naming ``token_ids`` and the first bad id. A compiled call
    (``tf.function`` / ``jax.jit`` / ``fit`` / ``predict``, symbolic ids) cannot check values without breaking XLA
    and does not: the ids go to ``keras.ops.take``, which wraps negative ids in [-V, 0) to V + id (as NumPy does)
    and looks ids >= V up as the backend's gather does: clamped to V - 1 (V_pad - 1, a zero row, with
    ``vocabulary_padding``) under XLA (``jit_compile=True``, any device), a NaN embedding (hence NaN logits) under JAX, zeros on a GPU and an ``InvalidArgumentError``
    ("indices[...] = ... is not in [0, V)") on a CPU under TensorFlow without XLA. Check ids before compiling.

    Example:
    >>> model = GPT(GPTConfig(vocabulary_size=1000, max_sequence_length=128))
    >>> logits = model(token_ids)                                     # (B, T, 1000)
    >>> result = model.generate(token_ids, max_length=128)            # greedy, stops at end_token_id
    """

    # LoRA (attnlayers.lora): model.enable_lora(rank, target, alpha), save_lora_weights(path), load_lora_weights(path),
    # merge_lora(), as keras-hub's backbones have them
    enable_lora, merge_lora = lora.enable_lora, lora.merge_lora
    save_lora_weights, load_lora_weights = lora.save_lora_weights, lora.load_lora_weights

    def __init__(self, config=None, **kwargs):
        if config is None:
            config = GPTConfig()
        elif isinstance(config, str) and config in GPT_PRESETS:
            config = GPTConfig.preset(config)
        elif isinstance(config, dict):
            config = GPTConfig(**config)
        elif not isinstance(config, GPTConfig):
            raise ValueError(
                f"`config` must be a GPTConfig, a dict, a preset name of {list(GPT_PRESETS)} or None; received "
                f"config={config!r}."
            )
        super().__init__(pad_token_id=config.pad_token_id, end_token_id=config.end_token_id, **kwargs)
        self.config = c = config
        init = keras.initializers.RandomNormal(stddev=0.02)  # GPT-2's (and LLaMA's) initialisation
        if c.architecture == "llama":
            self._build_llama(c, init)
        else:
            self._build_gpt2(c, init)
        self.decoder.build((None, c.max_sequence_length, c.hidden_dim))
        if c.architecture == "gpt2":
            # GPT-2's residual scaling (Radford et al. 2019, section 2.3; as GPT-2's and nanoGPT's code do it): the
            # two projections of each block that add into the residual stream, the attention output (c_proj) and
            # the MLP's second layer (mlp.c_proj), ~ N(0, 0.02 / sqrt(2 N)) for N blocks (2 N residual layers).
            # Drawn after the build, as every other weight, from Keras' global seed (keras.utils.set_random_seed).
            residual = keras.initializers.RandomNormal(stddev=0.02 * (2 * c.num_layers) ** -0.5)
            for weight in self.decoder.weights:
                if weight.path.endswith(("self_attention/attention_output/kernel", "feedforward/output_dense/kernel")):
                    weight.assign(residual(weight.shape, weight.dtype))
        self.built = True

    def _build_gpt2(self, c, init):
        """Learned positions, pre-LN blocks with biases and GELU, tied output."""
        self.embedding = TokenAndPositionEmbedding(
            c.vocabulary_size, c.max_sequence_length, c.hidden_dim, embeddings_initializer=init,
            vocabulary_padding=c.vocabulary_padding, name="embedding", dtype=self.dtype_policy,
        )
        self.embedding.build((None, c.max_sequence_length))
        _zero_padded_rows(self.embedding.token_embedding.embeddings, c.vocabulary_size, axis=0)
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        self.decoder = TransformerDecoder(
            c.num_layers, c.num_heads, c.intermediate_dim, dropout=c.dropout, activation=gelu_approximate,
            layer_norm_epsilon=c.layer_norm_epsilon, normalize_first=True, kernel_initializer=init,
            attention_kwargs={"dropout": c.attention_dropout, "implementation": c.attention_implementation},
            name="decoder", dtype=self.dtype_policy,
        )

    def _build_llama(self, c, init):
        """Token embedding only (RoPE in the attention), pre-RMSNorm blocks with SwiGLU, GQA and no biases."""
        # Tied, the output projection is this table's reverse (keras' ReversibleEmbedding: correct under
        # model.quantize, which scales the table in both directions).
        self.token_embedding = keras.layers.ReversibleEmbedding(
            c.padded_vocabulary_size, c.hidden_dim, tie_weights=True, embeddings_initializer=init,
            reverse_dtype=self.dtype_policy.compute_dtype,  # logits in the compute dtype, as the untied lm_head's
            name="token_embedding", dtype=self.dtype_policy,
        )
        self.token_embedding.build((None, None))
        _zero_padded_rows(self.token_embedding.embeddings, c.vocabulary_size, axis=0)
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        attention = {"num_key_value_heads": c.num_key_value_heads, "rotary": RotaryEmbedding(c.rope_theta),
                     "dropout": c.attention_dropout, "implementation": c.attention_implementation}
        self.decoder = TransformerDecoder(
            c.num_layers, c.num_heads, c.intermediate_dim, dropout=c.dropout, activation="swiglu",
            layer_norm_epsilon=c.layer_norm_epsilon, normalize_first=True, normalization="rms", use_bias=False,
            kernel_initializer=init, attention_kwargs=attention, name="decoder", dtype=self.dtype_policy,
        )
        self.lm_head = None
        if not c.tie_embeddings:
            self.lm_head = keras.layers.Dense(
                c.padded_vocabulary_size, use_bias=False, kernel_initializer=init, name="lm_head",
                dtype=self.dtype_policy,
            )
            self.lm_head.build((None, None, c.hidden_dim))
            _zero_padded_rows(self.lm_head.kernel, c.vocabulary_size, axis=1)

    def _embed(self, token_ids, start_index=0):
        """(B, T) token ids at positions start_index.. -> (B, T, d): E[token] + P[position] (GPT-2) or E[token]
        (LLaMA: the positions enter the attention through RoPE)."""
        if self.config.architecture == "llama":
            return self.token_embedding(token_ids)
        return self.embedding(token_ids, start_index=start_index)

    def _logits(self, hidden):
        """(B, T, d) final hidden states -> (B, T, V) logits: h E^T (tied) or h W_out (LLaMA's lm_head); with
        ``vocabulary_padding`` the V_pad-column product is cut to its V real columns (padded ids never win)."""
        if self.config.architecture == "gpt2":
            return self.embedding(hidden, reverse=True)  # cuts the padded columns itself
        if self.lm_head is not None:
            logits = self.lm_head(hidden)
        else:
            logits = self.token_embedding(hidden, reverse=True)  # h E^T, E dequantized where quantized
        if self.config.padded_vocabulary_size != self.config.vocabulary_size:
            logits = logits[..., :self.config.vocabulary_size]
        return logits

    def get_quantization_layer_structure(self, mode=None):
        """Keras' hook for the structure-aware quantizers (``model.quantize("gptq" | "awq", config=...)``).

        The layers that map token ids to the first block's input (GPT-2's token + position embedding, LLaMA's token
        table) and the decoder blocks, which GPTQ quantizes one after the other on calibration activations (Frantar
        et al. 2023, Algorithm 1). Each block called alone is causal at positions 0..T-1 (RoPE included). The
        token table / output projection and the final norm are not in a block, so GPTQ leaves them float.

        Args:
            mode: the quantization mode.

        Returns:
            ``{"pre_block_layers": [embedding], "sequential_blocks": [blocks]}`` for "gptq" and "awq", else None.
        """
        if mode not in ("gptq", "awq"):
            return None
        embedding = self.token_embedding if self.config.architecture == "llama" else self.embedding
        return {"pre_block_layers": [embedding], "sequential_blocks": list(self.decoder.blocks)}

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Keras' ``Model.quantize``, with GPTQ's and AWQ's calibration restored ("gptq" / "awq").

        Keras (3.15.1 here) calibrates by wrapping each block projection's ``call`` to read its inputs (GPTQ's
        Hessian 2 X X^T, AWQ's per-channel activation magnitudes), but it first switches the layer to the mode, after
        which a call goes to ``quantized_call`` and the wrapper never runs: the Hessian stays 0, so GPTQ is
        round-to-nearest, and AWQ's scale search sees no activations (fixed upstream by keras-team/keras#23512).
        Here each block projection's ``quantized_call`` goes through ``call`` until the layer is calibrated (its
        float kernel either way), so the wrappers see the calibration inputs; other modes are Keras' own.

        Args:
            mode: "int8", "int4", "float8", "gptq", "awq", ... (or None with a ``config`` that names it).
            config: the quantization config (GPTQ's and AWQ's hold the calibration data), or None.
            filters: which layers to quantize (Keras' ``filters``), or None.
            **kwargs: more ``Model.quantize`` arguments.
        """
        resolved = mode if mode is not None else getattr(config, "mode", None)
        if resolved not in ("gptq", "awq"):
            return super().quantize(mode, config=config, filters=filters, **kwargs)
        projections = [layer for block in self.decoder.blocks for layer in nested_layers(block)
                       if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))]
        for layer in projections:
            layer.quantized_call = _calibrated_through_call(layer, resolved)
        try:
            return super().quantize(mode, config=config, filters=filters, **kwargs)
        finally:
            for layer in projections:
                del layer.quantized_call

    @property
    def output_matrix(self):
        """The output projection as rows, (V_pad, d): the token table (tied) or ``transpose(lm_head.kernel)``: what
        :func:`attnlayers.chunked_cross_entropy` multiplies the hidden states by (with ``vocabulary_size=V``).
        Quantized (``quantize``), the rows dequantized by the layer's own call (``attnlayers.quantization``)."""
        if self.config.architecture == "llama" and self.lm_head is not None:
            return float_rows(self.lm_head)
        table = self.embedding.token_embedding if self.config.architecture == "gpt2" else self.token_embedding
        return float_rows(table)

    def vocabulary_view(self, weight):
        """``weight`` as checkpoints see it.

        Args:
            weight: a variable of the model.

        Returns:
            A padded vocabulary table (``vocabulary_padding``) as a :class:`VocabularyView` of its V real rows (or
            columns, for ``lm_head``'s kernel); any other weight itself.
        """
        c = self.config
        if c.padded_vocabulary_size == c.vocabulary_size:
            return weight
        if self.config.architecture == "llama" and self.lm_head is not None and weight is self.lm_head.kernel:
            return VocabularyView(weight, c.vocabulary_size, axis=1)
        table = self.embedding.token_embedding if c.architecture == "gpt2" else self.token_embedding
        return VocabularyView(weight, c.vocabulary_size, axis=0) if weight is table.embeddings else weight

    def hidden_states(self, token_ids, padding_mask=None, training=None):
        """The final hidden states (after the last norm): ``call`` without the output projection.

        With :attr:`output_matrix`, the input of :func:`attnlayers.chunked_cross_entropy` in a custom training loop.

        Args:
            token_ids: (B, T) int token ids, or ``call``'s dict ``{"token_ids", optional "padding_mask"}``.
            padding_mask: (B, T) bool, True at real tokens, or None.
            training: whether dropout is active.

        Returns:
            (B, T, d) hidden states.

        Raises:
            ValueError: a dict without ``token_ids`` or with other keys (or with a ``padding_mask`` passed again),
                token ids that are not (B, T) integers or lie outside [0, V) (eager values), T >
                ``max_sequence_length``, or a ``padding_mask`` of another shape or a float dtype.
        """
        if isinstance(token_ids, dict):  # fit's x = {"token_ids", "padding_mask"}, as keras-hub's GPT2CausalLM takes
            unknown = sorted(set(token_ids) - {"token_ids", "padding_mask"})
            if "token_ids" not in token_ids or unknown or padding_mask is not None:
                raise ValueError(
                    "A dict of inputs must hold `token_ids` (and optionally `padding_mask`, then not passed again); "
                    f"received keys {sorted(token_ids)}{' and padding_mask' if padding_mask is not None else ''}."
                )
            token_ids, padding_mask = token_ids["token_ids"], token_ids.get("padding_mask")
        self._check_inputs(token_ids, padding_mask)
        x = self.embedding_dropout(self._embed(token_ids), training=training)
        return self.decoder(x, decoder_padding_mask=padding_mask, training=training)  # blocks + final norm

    def _loss_reads_hidden_states(self, training):
        """Whether this training step's loss is computed from the hidden states (compiled with a
        :class:`~attnlayers.applications.core.training.losses.ChunkedCrossEntropy`)."""
        return training is True and isinstance(getattr(self, "loss", None), ChunkedCrossEntropy)

    def call(self, token_ids, padding_mask=None, training=None):
        x = self.hidden_states(token_ids, padding_mask, training=training)
        if self._loss_reads_hidden_states(training):
            return x  # fit's y_pred for the chunked loss (compute_loss): no (B, T, V) logits
        return self._logits(x)  # logits = h E^T (or h W_out)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras' loss, or, in a training step compiled with a ``ChunkedCrossEntropy``, that loss from the hidden
        states ``y_pred`` and :attr:`output_matrix`, chunk by chunk; the compiled :class:`Perplexity` metrics are
        updated from its NLL there (the step has no logits for metrics to read)."""
        self._metrics_updated_by_loss = self._loss_reads_hidden_states(training)
        if not self._metrics_updated_by_loss:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        loss, nll_sum, tokens = self.loss.from_hidden_states(
            y, y_pred, self.output_matrix, sample_weight, vocabulary_size=self.config.vocabulary_size)
        compiled = keras_fixes.compiled_metrics(self)  # Keras' container of compile(metrics=...), or None
        if compiled is not None and not compiled.built:  # built from the logits' spec (TensorFlow builds late)
            compiled.build(y, keras.KerasTensor((*y.shape, self.config.vocabulary_size), "float32"))
        for metric in compiled.metrics if compiled is not None else ():
            if not isinstance(metric, Perplexity):
                raise ValueError(
                    f"The chunked loss (ChunkedCrossEntropy) never forms the training logits, so the metric "
                    f"{metric.name!r} ({type(metric).__name__}) has nothing to read; compile it with Perplexity "
                    "metrics only (they are updated from the loss' NLL), or with a loss from logits."
                )
            metric.total_nll.assign_add(nll_sum)  # Perplexity's state: sum_t w_t NLL_t and sum_t w_t
            metric.tokens.assign_add(tokens)
        if self.losses:
            loss = loss + ops.sum(self.losses)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if getattr(self, "_metrics_updated_by_loss", False):  # y_pred are hidden states; compute_loss updated them
            return self.get_metrics_result()
        return super().compute_metrics(x, y, y_pred, sample_weight)

    # ---- generation -------------------------------------------------------------------------------------

    def initial_cache(self, token_ids, padding_mask=None, max_length=None):
        """Prefill: runs the prompt once and returns its keys and values.

        Args:
            token_ids: int (B, P) prompts, right-padded. padding_mask: None or bool (B, P).
            max_length: L >= P, the cache length (prompt and generated tokens). Default ``max_sequence_length``.

        Returns:
            The cache (B, num_layers, 2, L, num_key_value_heads, head_dim), filled at positions [0, P).
        """
        token_ids, padding_mask = self._check_inputs(token_ids, padding_mask, convert=True)
        max_length = self._check_max_length(max_length, token_ids.shape[1])
        c = self.config
        shape = (ops.shape(token_ids)[0], c.num_layers, 2, max_length, c.key_value_heads, c.head_dim)
        out = self.decoder(
            self._embed(token_ids), decoder_padding_mask=padding_mask,
            self_attention_cache=ops.zeros(shape, self.compute_dtype), self_attention_cache_update_index=0,
        )
        return out["self_attention_cache"]

    def next(self, tokens, cache, index):
        """One cached step (as :meth:`GenerativeModel.next`).

        Args:
            tokens: (B, L) int32 token ids; position ``index - 1`` is read.
            cache: (B, num_layers, 2, L, num_key_value_heads, head_dim), from :meth:`initial_cache`.
            index: () int32, the position to predict.

        Returns:
            ``(logits (B, V) of position index, the cache with entry index - 1 written)``.
        """
        token = ops.take(tokens, ops.reshape(index - 1, (1,)), axis=1)  # (B, 1): the newest known token
        x = self._embed(token, start_index=index - 1)
        out = self.decoder(x, self_attention_cache=cache, self_attention_cache_update_index=index - 1)
        return self._logits(out["sequence_output"])[:, 0], out["self_attention_cache"]

    def prefill(self, token_ids, cache, start_index):
        """Prefill by chunks: writes the keys and values of ``token_ids`` (B, C), the tokens at positions
        ``start_index`` .. ``start_index + C - 1``, into ``cache``, whose positions before ``start_index`` already
        hold the earlier tokens' (no logits are computed). ``start_index`` may be a scalar tensor, so that one
        compiled chunk serves every position: a prompt of any length is C tokens at a time.

        Args:
            token_ids: int (B, C). cache: (B, num_layers, 2, L, num_key_value_heads, head_dim), L static.
            start_index: int or scalar int tensor, with start_index + C <= L.

        Returns:
            The cache with positions [start_index, start_index + C) written (a query sees the positions up to its
            own: causal, the later positions of the cache are masked).
        """
        x = self._embed(token_ids, start_index=start_index)
        out = self.decoder(x, self_attention_cache=cache, self_attention_cache_update_index=start_index)
        return out["self_attention_cache"]

    def generation_inputs(self, inputs, padding_mask=None, max_length=None):
        """The decoding's inputs for right-padded prompts (as :meth:`GenerativeModel.generation_inputs`).

        Args:
            inputs: (B, P) int prompts, right-padded.
            padding_mask: (B, P) bool, True at real tokens, or None.
            max_length: L, the cache length (default ``max_sequence_length``).

        Returns:
            ``{"prompt": (B, P) int32, "prompt_mask": (B, P) bool or None, "cache": initial_cache(...)}``.

        Raises:
            ValueError: malformed prompts, a prompt with no token, or ``max_length`` outside
                [P, ``max_sequence_length``].
        """
        token_ids, padding_mask = self._check_inputs(inputs, padding_mask, convert=True)
        max_length = self._check_max_length(max_length, token_ids.shape[1])
        self._check_prompts_have_tokens(token_ids, padding_mask)
        return {"prompt": token_ids, "prompt_mask": padding_mask,
                "cache": self.initial_cache(token_ids, padding_mask, max_length)}

    @renamed_keyword("strategy", "search")
    def generate(self, token_ids, max_length=None, search="greedy", seed=None, *, padding_mask=None,
                 stop_token_ids="auto", max_new_tokens=None, stop_sequences=None):
        """Continues prompts with :func:`attnlayers.decoding.generate` over a prefilled cache (the shared
        ``GenerativeModel.generate``, under GPT's argument names).

        Args:
            token_ids: int (B, P) prompts, right-padded (``padding_mask`` True at real tokens).
            max_length: L, the output length, prompt included (P <= L <= ``max_sequence_length``). Default
                ``max_sequence_length``, or P + ``max_new_tokens`` when that is given and fits.
            search: "greedy", "beam", "sample", "top_k", "top_p", "random" or an ``attnlayers.decoding``
                search (``Sampling(temperature, top_k, top_p)``, ``BeamSearch(num_beams)``).
            seed: the sampling seed (an int or an integer tensor); the same seed gives the same tokens.
            padding_mask: None or bool (B, P).
            stop_token_ids: "auto" (``[end_token_id]``), None (never stop early) or a list of ids.
            max_new_tokens: None or an int >= 1: each row stops after generating this many tokens (greedy search
                and sampling); more than L - P (e.g. 2**31 - 1) is clipped to that: a row runs to L.
            stop_sequences: None or lists of token ids: a row stops when its generated tokens end with one.

        Returns:
            A ``DecodeResult``: ``tokens`` (B, L) (or (B, t, L) for beam search) then ``pad_token_id``,
            ``scores``, ``log_probs``, ``lengths``.

        Raises:
            ValueError: for a prompt longer than ``max_sequence_length`` (naming both: no left truncation here,
                the caller chooses what to keep, e.g. ``token_ids[:, -max_sequence_length + n:]``), a row with no
                token (an all-False ``padding_mask`` row or an empty prompt), a token id outside [0, V) (eager
                values), a ``max_length`` outside [P, ``max_sequence_length``], a ``seed`` that is not an int or an
                integer tensor, or unknown search settings.
        """
        check_seed(seed)
        if token_ids is None:
            raise ValueError("`token_ids` is required: integer token ids of shape (batch, length); received None.")
        if not hasattr(token_ids, "shape"):
            token_ids = ops.convert_to_tensor(token_ids)
        width = ops.shape(token_ids)[1] if len(token_ids.shape) == 2 else None
        limit = self.config.max_sequence_length
        if is_int(width) and width > limit:
            mask = concrete_values(padding_mask)
            longest = width if mask is None or mask.ndim != 2 else int(mask.sum(axis=1).max())
            raise ValueError(
                f"`token_ids`: the prompt length {longest} exceeds max_sequence_length={limit} (the longest "
                f"sequence the model reads); shorten the prompts, e.g. keep their last tokens, leaving room for "
                f"the generated ones. Received token_ids of shape {tuple(token_ids.shape)}."
            )
        if max_new_tokens is not None and is_int(max_new_tokens) and is_int(width):
            max_new_tokens = int(max_new_tokens)
            if max_length is None:
                max_length = min(limit, width + max(max_new_tokens, 1))
            if max_new_tokens > 1 and is_int(max_length):
                # No row can generate more than max_length - its prompt length tokens: a larger max_new_tokens
                # (2**31 - 1 for "no limit") is clipped to that room, before the loop adds it to the int32 prompt
                # lengths (where it would wrap around and stop every row after one token).
                mask = concrete_values(padding_mask)
                shortest = width if mask is None or mask.ndim != 2 or not mask.size else int(mask.sum(axis=1).min())
                max_new_tokens = min(max_new_tokens, max(int(max_length) - shortest, 1))
        return super().generate(token_ids, max_length, search, seed, padding_mask=padding_mask,
                                stop_token_ids=stop_token_ids, max_new_tokens=max_new_tokens,
                                stop_sequences=stop_sequences)

    @property
    def max_generation_length(self):
        return self.config.max_sequence_length

    def generation_length(self, max_length=None):
        """``max_length`` checked against ``max_sequence_length`` (its default when None).

        Args:
            max_length: L, or None.

        Returns:
            L, an int.

        Raises:
            ValueError: ``max_length`` is not a positive int or exceeds ``max_sequence_length``.
        """
        return self._check_max_length(max_length, None)

    def _check_prompts_have_tokens(self, token_ids, padding_mask):
        """Every prompt holds at least one token (generation continues it); checked when the values are known
        (an exported signature asserts it on its inputs)."""
        if token_ids.shape[1] == 0:
            raise ValueError(
                f"`token_ids` holds empty prompts (shape {tuple(token_ids.shape)}): every prompt needs at least one "
                "token (e.g. end_token_id, GPT-2's start of text)."
            )
        mask = concrete_values(padding_mask)
        if mask is not None and mask.ndim == 2 and mask.shape[1]:
            empty = (~mask.any(axis=1)).nonzero()[0]
            if empty.size:
                raise ValueError(
                    f"`padding_mask` rows {empty.tolist()[:10]} are all False: those prompts hold no token, and "
                    "every prompt needs at least one (e.g. end_token_id, GPT-2's start of text)."
                )

    # ---- checks and config ------------------------------------------------------------------------------

    def _check_inputs(self, token_ids, padding_mask, convert=False):
        if token_ids is None:
            raise ValueError("`token_ids` is required: integer token ids of shape (batch, length); received None.")
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
        if getattr(padding_mask, "dtype", None) is not None and not (
            keras.backend.standardize_dtype(padding_mask.dtype) == "bool" or keras.backend.is_int_dtype(padding_mask.dtype)
        ):  # as the layers' masks: a float mask is ambiguous (additive 0/-inf or multiplicative 1/0)
            raise ValueError(
                "`padding_mask` must be a boolean (True = real token) or integer 0/1 mask; received dtype "
                f"{keras.backend.standardize_dtype(padding_mask.dtype)}. Convert it explicitly, e.g. `padding_mask > 0`."
            )
        self._check_token_range(token_ids)
        if convert:
            token_ids = ops.cast(token_ids, "int32")
            padding_mask = None if padding_mask is None else ops.cast(padding_mask, "bool")
        return token_ids, padding_mask

    def _check_token_range(self, token_ids, name="token_ids"):
        """Every id in [0, vocabulary_size), padding included (every position is looked up), checked when the
        values are known (eager); a compiled call cannot check them (see the class docstring)."""
        check_id_range(token_ids, name, self.config.vocabulary_size, what="token ids")

    def _check_max_length(self, max_length, prompt_length):
        """``max_length`` (default ``max_sequence_length``) in [prompt length, max_sequence_length]."""
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
