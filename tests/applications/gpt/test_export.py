"""A GPT exports through the shared path (applications.core.export.export_generator, on its GenerativeModel
contract): the loaded SavedModel gives model.generate's tokens, greedy (stopping at end_token_id) and sampled
(the seed an input). TensorFlow only: skipped under other backends."""

import keras
import numpy as np
import pytest

from attnlayers.applications.gpt import GPT, GPTConfig
from attnlayers.decoding import Sampling

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="SavedModel export is TensorFlow-only (it writes a TensorFlow SavedModel)",
)

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    from attnlayers.applications.core.export import export_generator

CONFIG = dict(vocabulary_size=29, max_sequence_length=12, num_layers=2, num_heads=2, hidden_dim=16,
              intermediate_dim=32)
PROMPT = np.array([[5, 9, 3, 7], [7, 4, 0, 0], [11, 0, 0, 0]], "int32")
PROMPT_MASK = PROMPT != 0
LENGTH = 10
SEED = 7


def _gpt_that_stops():
    """A tiny GPT whose end token is one that greedy decoding emits early in row 0 (so stopping is exercised)."""
    keras.utils.set_random_seed(5)
    free = GPT(GPTConfig(**CONFIG)).generate(PROMPT, LENGTH, padding_mask=PROMPT_MASK, stop_token_ids=None)
    end = int(np.asarray(free.tokens)[0, 5])
    keras.utils.set_random_seed(5)
    return GPT(GPTConfig(**CONFIG, end_token_id=end, pad_token_id=0))


@pytest.mark.parametrize("strategy", ["greedy", Sampling(top_k=5, temperature=1.5)], ids=["greedy", "sampling"])
def test_exported_gpt_gives_the_tokens_of_generate(tmp_path, strategy):
    model = _gpt_that_stops()
    stochastic = not isinstance(strategy, str)
    seed = SEED if stochastic else None
    expected = model.generate(PROMPT, LENGTH, strategy, seed=seed, padding_mask=PROMPT_MASK)
    path = str(tmp_path / "gpt")
    export_generator(path, model, LENGTH, strategy)

    loaded = tf.saved_model.load(path)
    inputs = {"token_ids": tf.constant(PROMPT), "padding_mask": tf.constant(PROMPT_MASK)}
    if stochastic:
        inputs["seed"] = tf.constant(SEED)
    out = loaded.signatures["generate"](**inputs)
    np.testing.assert_array_equal(out["token_ids"].numpy(), np.asarray(expected.tokens))
    np.testing.assert_array_equal(out["lengths"].numpy(), np.asarray(expected.lengths))
    np.testing.assert_allclose(out["scores"].numpy(), np.asarray(expected.scores), atol=1e-4)
    if not stochastic:  # row 0 stops at the end token, then pad_token_id
        length = int(out["lengths"].numpy()[0])
        assert length <= 6 and out["token_ids"].numpy()[0, length - 1] == model.end_token_id
        assert np.all(out["token_ids"].numpy()[0, length:] == model.pad_token_id)
    else:  # the seed is an input: another seed, other tokens
        other = loaded.generate(**{**inputs, "seed": tf.constant(SEED + 1)})["token_ids"].numpy()
        assert not np.array_equal(other, out["token_ids"].numpy())


def test_export_checks_max_length_against_the_model(tmp_path):
    model = GPT(GPTConfig(**CONFIG))
    with pytest.raises(ValueError, match=r"max_length.*max_sequence_length=12.*max_length=13"):
        export_generator(str(tmp_path / "gpt"), model, 13)
