"""The captioning models by name, built and compiled the same way by examples/train_captioning.py and
benchmarks/captioning_quality.py.

    model = build_captioner("soft", vocabulary.vocabulary_size, image_size=64)   # compiled, ready for fit
"""

from __future__ import annotations

from attnlayers.validation import one_of

from .model import ShowAndTell, ShowAttendTell, TransformerCaptioner

__all__ = ["DEFAULT_DOUBLY_STOCHASTIC_STEPS", "DEFAULT_ESTIMATOR", "DEFAULT_QUERY", "MODELS", "build_captioner"]

MODELS = ("soft", "hard", "none", "transformer")


# Each attention's defaults, the better ones measured on the scenes (benchmarks/README.md, captioning): the query,
# hard attention's gradient estimator, and over how many steps the doubly stochastic penalty fades (None: constant,
# as in the paper; fading lets the maps settle on the objects).
DEFAULT_QUERY = {"soft": "current", "hard": "current"}
DEFAULT_ESTIMATOR = "gumbel"
DEFAULT_DOUBLY_STOCHASTIC_STEPS = {"soft": 1000, "hard": 1000}


def build_captioner(name, vocabulary_size, *, estimator=None, query=None, doubly_stochastic=1.0,
                    doubly_stochastic_steps=None, seed=None, learning_rate=1e-3, max_length=24,
                    scheduled_sampling=None, **encoder):
    """Builds and compiles a captioner.

    Args:
        name: "soft" / "hard" (:class:`ShowAttendTell`), "none" (:class:`ShowAndTell`) or "transformer"
            (:class:`TransformerCaptioner`).
        vocabulary_size: V.
        estimator: hard attention's gradient estimator, "reinforce" (the paper's) or "gumbel"; None:
            :data:`DEFAULT_ESTIMATOR` ("gumbel": it learns the scenes in 15 CPU minutes, REINFORCE does not).
        query: (soft / hard) the attention's query, "current" (h_t after reading the previous word, Lu et al.
            2017) or "previous" (Xu et al.'s h_{t-1}); see :class:`ShowAttendTellDecoder`. Default
            :data:`DEFAULT_QUERY`: "current" (for soft attention ahead in BLEU and far ahead in localization on
            the scenes).
        doubly_stochastic: (soft / hard) lambda of the doubly stochastic penalty (Xu et al. eq. 14).
        doubly_stochastic_steps: (soft / hard) N > 0: the penalty fades linearly to 0 over the first N training
            steps; 0: constant (the paper's); None: :data:`DEFAULT_DOUBLY_STOCHASTIC_STEPS` (1000).
        seed: seed of hard attention's samples.
        learning_rate: Adam's.
        max_length: the longest caption in tokens (the Transformer's position table; RNNs have no limit).
        scheduled_sampling: (soft / hard) None, or scheduled sampling in training (see :class:`ShowAttendTell`).
        **encoder: :class:`ImageEncoder` arguments (``image_size``, ``backbone``, ``backbone_weights``,
            ``fine_tune``, ...).

    Returns:
        The compiled model (masked cross-entropy and accuracy, Adam with gradient clipping).
    """
    one_of(name, "name", MODELS)
    if scheduled_sampling is not None and name not in ("soft", "hard"):
        raise ValueError(f"`scheduled_sampling` applies to the attention LSTM captioners ('soft', 'hard'); received "
                         f"name={name!r}.")
    if name == "none":
        model = ShowAndTell(vocabulary_size, name="show_and_tell", **encoder)
    elif name == "transformer":
        model = TransformerCaptioner(vocabulary_size, max_length=max_length, name="transformer_captioner",
                                     **encoder)
    else:
        query = DEFAULT_QUERY[name] if query is None else query
        estimator = DEFAULT_ESTIMATOR if estimator is None else estimator
        if doubly_stochastic_steps is None:
            doubly_stochastic_steps = DEFAULT_DOUBLY_STOCHASTIC_STEPS[name]
        if doubly_stochastic_steps == 0:
            doubly_stochastic_steps = None  # ShowAttendTell's constant lambda
        model = ShowAttendTell(vocabulary_size, attention=name, estimator=estimator, query=query, seed=seed,
                               doubly_stochastic=doubly_stochastic, doubly_stochastic_steps=doubly_stochastic_steps,
                               scheduled_sampling=scheduled_sampling,
                               name="show_attend_tell", **encoder)
    model.compile_for_captioning(learning_rate)
    return model
