"""How :class:`~attnlayers.multi_head.MultiHeadAttention` computes a call: its routes, what each needs, and the choice.

Every route computes the same function, masks included, and gives a query that sees no key an output of 0:

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V                (Vaswani et al. 2017, eq. 1)

- "exact": the layer's own ``_compute_attention`` (its override points), the (B, N, T, S) logits and weights;
- "chunked": :func:`attnlayers.chunked.chunked_attention`, the queries and keys in blocks with the online softmax;
- "fused": :func:`attnlayers.fused.fused_attention`, the backend's kernel (``jax.nn.dot_product_attention``);
- "flash": :func:`attnlayers.flash_dropout.flash_attention`, a Pallas (Triton) flash-attention kernel for JAX on a
  GPU that draws the attention dropout inside the kernel ("auto" takes it where Triton compiles it for training
  calls with attention dropout, which cuDNN's fused kernel does not take; never Pallas' interpreter, which
  :data:`FLASH_INTERPRET` allows where no GPU is, for tests, when the route is named).

:data:`ROUTES` is the table: for each route the conditions it needs (each says why a call fails it, or None),
whether ``implementation="auto"`` takes it for a call it can compute, and the function that computes it from a
:class:`Problem`. "auto" takes the first route of the table that it may take. A new route is one entry and one
function. The layer describes itself and a call in a :class:`Call` (:func:`choose`), and the blocked routes' inputs
in a :class:`Problem` (:func:`attend`); nothing here calls back into the layer.
"""

import dataclasses
import os
import warnings

import keras
from keras import backend, ops

from attnlayers import chunked, fused, masking

__all__ = ["AttentionRoute", "CHUNKED_MIN_LENGTH", "Call", "FLASH_INTERPRET", "IMPLEMENTATIONS", "Problem", "ROUTES",
           "Route", "attend", "choose", "flash_kernel", "loadable_implementation", "refusal", "resolve_implementation"]

#: The values of ``MultiHeadAttention(implementation=...)``.
IMPLEMENTATIONS = ("auto", "exact", "chunked", "fused", "flash")

#: The environment variable that lets ``implementation="flash"``, named explicitly, run its kernels in Pallas'
#: interpreter where JAX has no GPU ("1"): slow, for tests on a CPU. "auto" never takes the interpreter.
FLASH_INTERPRET = "ATTNLAYERS_FLASH_INTERPRET"

# "auto" takes the chunked route when the query length T is at least CHUNKED_MIN_LENGTH (T and S static), where the
# exact route's (B, N, T, S) logits and weights (4 N T S bytes per live copy) outgrow the chunked route's
# O(T x block); below it the exact route is the faster one (docs/results/attention-speed.md, "Long sequences").
CHUNKED_MIN_LENGTH = 4096

#: The fallback warnings already given: each is given once per process (see :func:`_fall_back`).
_WARNED = set()


def resolve_implementation(implementation, flash_attention=None, memory_efficient=None, dropout=0.0):
    """``implementation`` with its aliases applied: keras' ``flash_attention`` (True: "fused" where the backend has
    a fused kernel, JAX; "chunked", FlashAttention's algorithm in keras ops, elsewhere; False: "exact") and the
    older ``memory_efficient`` (True: "chunked", False: "exact"). Conflicting settings raise, and so does
    ``flash_attention=True`` with a ``dropout`` rate > 0, in keras' words."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"`implementation` must be one of {IMPLEMENTATIONS}; received implementation={implementation!r}.")
    if flash_attention not in (None, True, False) or memory_efficient not in (None, True, False):
        raise ValueError(
            f"`flash_attention` and `memory_efficient` must be None, True or False; received "
            f"flash_attention={flash_attention!r}, memory_efficient={memory_efficient!r}."
        )
    flash = "fused" if keras.backend.backend() == "jax" and fused.platform() != "tpu" else "chunked"
    settings = [("implementation", implementation)] if implementation != "auto" else []
    if flash_attention is not None:
        settings.append(("flash_attention", flash if flash_attention else "exact"))
    if memory_efficient is not None:
        settings.append(("memory_efficient", "chunked" if memory_efficient else "exact"))
    if len({route for _, route in settings}) > 1:
        received = ", ".join(f"{name} selects {route!r}" for name, route in settings)
        raise ValueError(f"`flash_attention`, `memory_efficient` and `implementation` disagree: {received}; "
                         "pass `implementation` alone.")
    if flash_attention and dropout > 0:  # keras' refusal, word for word; implementation="chunked" keeps the dropout
        raise ValueError("Dropout is not supported when flash attention is enabled. Please set dropout to 0.0 to "
                         "use flash attention (or implementation='chunked', which applies it).")
    return settings[0][1] if settings else "auto"


def loadable_implementation(implementation):
    """The ``implementation`` a saved config loads with: "fused" becomes "auto" under a backend without a fused
    kernel (a model trained under JAX, exported under TensorFlow): every route computes the same function."""
    if implementation == "fused" and fused.kernel("bfloat16", 8, explicit=True) is None:
        return "auto"
    if implementation == "flash" and flash_kernel() is None:
        return "auto"
    return implementation


def flash_kernel():
    """How the flash route runs here: "triton" (JAX on a GPU), "interpret" (JAX elsewhere with
    :data:`FLASH_INTERPRET` set to "1": Pallas' interpreter) or None (not here)."""
    if keras.backend.backend() != "jax":
        return None
    if fused.platform() == "gpu":
        return "triton"
    return "interpret" if os.environ.get(FLASH_INTERPRET) == "1" else None


@dataclasses.dataclass(frozen=True)
class AttentionRoute:
    """What computed a :class:`MultiHeadAttention` call (:attr:`MultiHeadAttention.last_attention`).

    Attributes:
        route: "exact", "chunked", "fused" or "flash": the route that computed the call.
        kernel: on the fused route, the implementation of ``jax.nn.dot_product_attention`` that took the call:
            "cudnn" (cuDNN's flash attention accepted it: its custom call is in the traced program) or "xla"; on the
            flash route "triton" (the Pallas kernel compiled for the GPU) or "interpret" (Pallas' interpreter);
            None on the other routes.
        fallback: None, or why the kernel the ``implementation`` option asks for did not compute the call and what
            did instead (the text of the warning it gave).
    """

    route: str
    kernel: str | None = None
    fallback: str | None = None


@dataclasses.dataclass(frozen=True)
class Call:
    """What the route policy reads of a layer and of one of its calls.

    Attributes:
        implementation: the layer's resolved ``implementation`` option; flash_attention: its keras alias as given.
        query_length, key_length: T and S (None when not static); dtype: the compute dtype of the heads.
        key_dim, value_dim: H and Hv.
        scale: the fused dot / scaled-dot scale of the layer's score, None for any other score; score: the score as
            the layer was given it (for messages).
        layer_class: the layer's class name; overridden: the override points its class overrides.
        position_bias: the class name of the layer's ``position_bias`` hook, or None.
        dropout: the layer's attention dropout rate where it applies to this call (training), else 0.
        return_attention_scores, cached, per_head_mask: the call returns its weights, has a cache, has a
            (B, N, T, S) attention mask.
        attention_bias: the call passes an ``attention_bias``.
    """

    implementation: str
    flash_attention: bool | None
    query_length: int | None
    key_length: int | None
    dtype: str
    key_dim: int
    value_dim: int
    scale: float | None
    score: object
    layer_class: str
    overridden: tuple = ()
    position_bias: str | None = None
    dropout: float = 0.0
    return_attention_scores: bool = False
    cached: bool = False
    per_head_mask: bool = False
    attention_bias: bool = False

    @property
    def option(self):
        return _option(self.implementation, self.flash_attention)


@dataclasses.dataclass(frozen=True)
class Problem:
    """The inputs of a blocked route (chunked or fused): projected per-head tensors and the masks as their pieces,
    never as a (T, S) tensor.

    Attributes:
        query: (B, T, N, H); key: (B, S, N_kv, H); value: (B, S, N_kv, Hv).
        bias: (1 or B, N or 1, T, S) float32 additive logit bias, or None.
        structure: the mask pieces as :func:`attnlayers.chunked.chunked_attention` takes them: ``query_mask``
            (B, T), ``key_mask`` (B, S), ``attention_mask`` (B, T, S), ``causal``, ``offset`` (the position of
            query 0 among the keys) and ``window``.
        scale: the logits' scale (1 / sqrt(d_k) for the scaled dot).
        dropout: the attention dropout rate of this call (0 outside training); seed_generator: the layer's dropout
            seed generator (a seed is drawn only where dropout applies).
        chunk_sizes: (query, key) rows per block of the chunked route.
        implementation, flash_attention, layer_name: the layer's option and name (for the fallback warning).
    """

    query: object
    key: object
    value: object
    bias: object
    structure: dict
    scale: float
    dropout: float = 0.0
    seed_generator: object = None
    chunk_sizes: tuple = (chunked.DEFAULT_QUERY_CHUNK, chunked.DEFAULT_KEY_CHUNK)
    implementation: str = "auto"
    flash_attention: bool | None = None
    layer_name: str = ""


def _option(implementation, flash_attention):
    """How a layer's option reads in messages."""
    return f"flash_attention={flash_attention}" if flash_attention else f"implementation={implementation!r}"


# --------------------------------------------------------------------------------------------------------------
# What the routes need: each condition says why a call fails it (a sentence), or None.

def _dot_score(call):
    if call.scale is None:
        return f"it needs a dot or scaled-dot score; this layer's score is {call.score!r}"
    return None


def _no_returned_scores(call):
    if call.return_attention_scores:
        return "it never forms the attention weights; received return_attention_scores=True"
    return None


def _no_override(call):
    if call.overridden:
        return f"{call.layer_class} overrides {', '.join(call.overridden)}"
    return None


def _one_mask_for_all_heads(call):
    if call.per_head_mask:
        return "it takes one attention mask for all heads; received a per-head (batch, num_heads, T, S) mask"
    return None


def _no_position_bias_hook(call):
    if call.position_bias is not None:
        return (f"it does not compute the position_bias hook ({call.position_bias}); "
                "pass the bias as `attention_bias` instead")
    return None


def _no_attention_dropout(call):
    if call.dropout > 0:
        return f"the fused kernel has no attention dropout; this layer has dropout={call.dropout} in training"
    return None


def _a_fused_kernel(call):
    explicit = call.implementation == "fused"
    if fused.kernel(call.dtype, call.key_dim, call.value_dim, explicit=explicit) is not None:
        return None
    if call.value_dim != call.key_dim:
        return f"the fused kernel needs value_dim == key_dim; received {call.value_dim} and {call.key_dim}"
    if explicit:
        return (f"the {keras.backend.backend()} backend has no fused attention kernel here (keras.ops."
                "dot_product_attention(flash_attention=True) has none either); implementation='chunked' "
                "computes the same function in blocks")
    return f"no cuDNN kernel for {backend.standardize_dtype(call.dtype)} heads of {call.key_dim} here"


def _no_attention_bias(call):
    if call.attention_bias:
        return "it adds no bias to the logits; received an attention_bias"
    return None


def _static_lengths(call):
    if call.query_length is None or call.key_length is None:
        return ("its kernels are compiled for the lengths; received query and key lengths "
                f"{call.query_length} and {call.key_length}")
    return None


def _a_flash_kernel(call):
    if backend.standardize_dtype(call.dtype) not in ("float32", "float16", "bfloat16"):
        return f"its kernel takes float32, float16 or bfloat16; received {backend.standardize_dtype(call.dtype)}"
    if flash_kernel() is not None:
        return None
    if keras.backend.backend() != "jax":
        return f"it is a Pallas kernel for JAX; the backend is {keras.backend.backend()}"
    return (f"its Pallas kernel runs on a GPU (Triton) and the JAX device is a {fused.platform()}; set the "
            f"environment variable {FLASH_INTERPRET}=1 to run it in Pallas' interpreter (slow: for tests)")


_BLOCKED = (_dot_score, _no_returned_scores, _no_override, _one_mask_for_all_heads)


def _always(call):
    return True


def _compiled_flash_kernel(call):
    """"auto" takes the flash route for a training call with attention dropout (which cuDNN's fused kernel does
    not take) and heads of at most 128 where Triton compiles its kernels (JAX on a GPU), never in Pallas'
    interpreter (slow: for tests). On an H200 its forward + backward at GPT-2 small sizes with dropout 0.1 took
    0.97 ms against the exact route's 4.39 ms (docs/results/training.md, "Attention dropout inside a kernel");
    calls without dropout keep the routes they had (cuDNN's where it takes them)."""
    return call.dropout > 0 and max(call.key_dim, call.value_dim) <= 128 and flash_kernel() == "triton"


def _long_queries(call):
    return call.query_length is not None and call.key_length is not None and call.query_length >= CHUNKED_MIN_LENGTH


# --------------------------------------------------------------------------------------------------------------
# How the blocked routes compute a call: each returns (heads (B, T, N, Hv) or None, the AttentionRoute it took).

def _chunked(problem):
    """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) in blocks (:func:`attnlayers.chunked.chunked_attention`)."""
    seed = problem.seed_generator.next() if problem.dropout > 0 else None
    heads = chunked.chunked_attention(
        problem.query, problem.key, problem.value, problem.bias, scale=problem.scale, dropout_rate=problem.dropout,
        seed=seed, query_chunk_size=problem.chunk_sizes[0], key_chunk_size=problem.chunk_sizes[1],
        **problem.structure,
    )
    return heads, AttentionRoute("chunked")


def _fused(problem):
    """softmax(Q K^T / sqrt(d_k) + bias) V (eq. 1) through the backend's kernel (:mod:`attnlayers.fused`).

    Where cuDNN does not take the call (its checks here, or its refusal while traced,
    :func:`attnlayers.fused.cudnn_refusal`), an explicit "fused" runs XLA's implementation and "auto" the exact
    route (heads None), each with a warning (:func:`_fall_back`); any other error propagates.
    """
    query, key, value = problem.query, problem.key, problem.value
    head_size, value_head_size = query.shape[-1], value.shape[-1]
    explicit = problem.implementation == "fused"
    kernel = fused.kernel(query.dtype, head_size, value_head_size, explicit=explicit)
    reason = fused.why_not_cudnn(query.dtype, head_size) if kernel == "xla" else None
    heads = None
    if kernel == "cudnn":
        try:
            heads = fused.fused_attention(query, key, value, problem.bias, scale=problem.scale,
                                          implementation="cudnn", **problem.structure)
        except (RuntimeError, NotImplementedError) as error:
            refusal = fused.cudnn_refusal(error)
            if refusal is None:  # not cuDNN declining the call: an error
                raise
            reason, kernel = f"cuDNN refused the call: {refusal}", "xla" if explicit else None
    fallback = None if reason is None else _fall_back(problem, reason, "fused" if kernel else "exact")
    if kernel == "xla":
        heads = fused.fused_attention(query, key, value, problem.bias, scale=problem.scale, implementation="xla",
                                      **problem.structure)
    return heads, AttentionRoute("fused" if kernel else "exact", kernel, fallback)


def _flash(problem):
    """dropout(softmax(Q K^T / sqrt(d_k))) V (eq. 1) through the Pallas kernel of :mod:`attnlayers.flash_dropout`,
    the dropout mask drawn inside it from this call's seed (a fresh one each training step)."""
    from attnlayers import flash_dropout  # imports JAX's Pallas: only when the route runs

    kernel = flash_kernel()
    seed = problem.seed_generator.next() if problem.dropout > 0 else None
    heads = flash_dropout.flash_attention(problem.query, problem.key, problem.value, scale=problem.scale,
                                          dropout_rate=problem.dropout, seed=seed, interpret=kernel == "interpret",
                                          **problem.structure)
    return heads, AttentionRoute("flash", kernel)


def _fall_back(problem, reason, route):
    """Warns, once per process for each message, that cuDNN does not take a call and what computes it instead
    (XLA's implementation on the fused route, or the exact route); returns the message."""
    instead = ("XLA's implementation of jax.nn.dot_product_attention computes it (the same function; it forms "
               "the (B, N, T, S) logits)" if route == "fused" else "the exact route computes it")
    option = _option(problem.implementation, problem.flash_attention)
    message = f"MultiHeadAttention({option}): cuDNN's flash attention does not take this call ({reason}); " \
              f"{instead}."
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(f"{message} Layer {problem.layer_name!r}; `layer.last_attention` records each call's kernel.",
                      stacklevel=2)
    return message


@dataclasses.dataclass(frozen=True)
class Route:
    """An entry of :data:`ROUTES`.

    Attributes:
        needs: the conditions a call must meet, in the order their reasons are reported.
        automatic: whether ``implementation="auto"`` takes the route for a call it can compute.
        attend: computes a :class:`Problem` on the route; None for the exact route, which the layer computes.
    """

    needs: tuple
    automatic: object
    attend: object = None


#: The routes, in the order "auto" tries them.
ROUTES = {
    "fused": Route(_BLOCKED + (_no_attention_dropout, _a_fused_kernel), _always, _fused),
    "flash": Route(_BLOCKED + (_no_position_bias_hook, _no_attention_bias, _static_lengths, _a_flash_kernel),
                   _compiled_flash_kernel, _flash),
    "chunked": Route(_BLOCKED + (_no_position_bias_hook,), _long_queries, _chunked),
    "exact": Route((), _always),
}


def refusal(route, call):
    """Why ``route`` cannot compute ``call`` (the first unmet need, a sentence), or None."""
    return next((reason for need in ROUTES[route].needs if (reason := need(call)) is not None), None)


def choose(call):
    """The route of a :class:`Call`: "exact" for a cached call (decoding attends over its cache exactly) and for
    implementation="exact"; the route named by the option, or a ValueError saying why it cannot compute the call;
    under "auto" the first route of :data:`ROUTES` that takes the call."""
    if call.implementation == "exact" or call.cached:
        return "exact"
    if call.implementation != "auto":
        reason = refusal(call.implementation, call)
        if reason is not None:
            raise ValueError(f"`{call.option}`: the {call.implementation} route cannot compute this call: {reason}.")
        return call.implementation
    return next(name for name, route in ROUTES.items() if route.automatic(call) and refusal(name, call) is None)


def attend(route, problem):
    """Computes a :class:`Problem` on a blocked route.

    Returns:
        ``(heads, visible, record)``: (B, T, N, Hv) heads, a (B|1, T, 1) mask of the queries that see a key (None
        when all do), and the :class:`AttentionRoute` taken; heads and visible are None where the fused route left
        the call to the exact route (cuDNN refused it under "auto").
    """
    heads, record = ROUTES[route].attend(problem)
    if heads is None:
        return None, None, record
    length = masking.sequence_length
    visible = masking.visible_queries(length(problem.query), length(problem.key), **problem.structure)
    return heads, None if visible is None else ops.expand_dims(visible, -1), record
