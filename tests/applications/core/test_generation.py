"""The generation contract: a model implements encode / initial_cache / next and gets generate (greedy, beam,
sampling) once; its special ids are constructor arguments saved in the config, not module constants."""

import keras
import numpy as np
import pytest
from keras import ops

from attnlayers.applications.core import GenerativeModel, Seq2SeqGenerator
from attnlayers.decoding import BeamSearch, Sampling

VOCABULARY = 12


class Reverser(Seq2SeqGenerator):
    """A fixed (weightless) "translator" that emits the source backwards, then end_token_id: its logits put 5.0
    on source[S - index] (counting real tokens), then on the end token."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def encode(self, source_ids, training=None):
        return source_ids, ops.not_equal(source_ids, self.pad_token_id)

    def initial_cache(self, source_ids, max_length=None):
        self.calls += 1
        ids, mask = self.encode(source_ids)
        return {"source": ids, "length": ops.sum(ops.cast(mask, "int32"), axis=1)}

    def next(self, tokens, cache, index):
        position = cache["length"] - index  # (B,): the source token to emit now
        token = ops.take_along_axis(cache["source"], ops.maximum(position, 0)[:, None], axis=1)[:, 0]
        token = ops.where(position >= 0, token, self.end_token_id)
        return 5.0 * ops.one_hot(token, VOCABULARY), cache


def _expected(source, start, end, pad, length):
    rows = []
    for row in source:
        real = [t for t in row if t != pad]
        out = [start] + real[::-1] + [end]
        rows.append((out + [pad] * length)[:length])
    return np.array(rows)


@pytest.mark.parametrize("ids", [dict(pad_token_id=0, start_token_id=1, end_token_id=2),
                                 dict(pad_token_id=11, start_token_id=9, end_token_id=10)])
def test_generate_uses_the_models_special_ids(ids):
    pad = ids["pad_token_id"]
    model = Reverser(**ids)
    source = np.array([[3, 4, 5, 6], [7, 8, pad, pad]], "int32")
    expected = _expected(source, ids["start_token_id"], ids["end_token_id"], pad, 8)
    greedy = model.generate(source, max_length=8)
    np.testing.assert_array_equal(np.asarray(greedy.tokens), expected)
    np.testing.assert_array_equal(np.asarray(greedy.lengths), [6, 4])
    beam = model.generate(source, 8, BeamSearch(3))
    np.testing.assert_array_equal(np.asarray(beam.tokens)[:, 0], expected)
    seeded = [np.asarray(model.generate(source, 8, Sampling(temperature=0.5), seed=3).tokens) for _ in range(2)]
    np.testing.assert_array_equal(*seeded)  # a seed per call
    assert model.stop_token_ids == (ids["end_token_id"],)


def test_generate_takes_search_and_the_deprecated_strategy_keyword():
    """``search=`` is the decoding's keyword; ``strategy=`` (its old name, tf.distribute's word) still works with a
    DeprecationWarning, and not together with ``search``."""
    model = Reverser(pad_token_id=0, start_token_id=1, end_token_id=2)
    source = np.array([[3, 4, 5, 6], [7, 8, 0, 0]], "int32")
    beam = model.generate(source, 8, search=BeamSearch(3, 2))
    with pytest.warns(DeprecationWarning, match="`strategy=` is deprecated; use `search=`"):
        old = model.generate(source, 8, strategy=BeamSearch(3, 2))
    for new, got in zip(beam, old):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(new))
    with pytest.raises(ValueError, match="`strategy` is the deprecated name of `search`"):
        model.generate(source, 8, "greedy", strategy="beam")


def test_special_ids_are_in_the_config_and_checked():
    model = Reverser(pad_token_id=11, start_token_id=9, end_token_id=10, name="reverser")
    config = model.get_config()
    assert (config["pad_token_id"], config["start_token_id"], config["end_token_id"]) == (11, 9, 10)
    clone = Reverser.from_config(config)
    assert (clone.pad_token_id, clone.start_token_id, clone.end_token_id) == (11, 9, 10)
    with pytest.raises(ValueError, match="pad_token_id"):
        Reverser(pad_token_id=-1)
    with pytest.raises(ValueError, match="start_token_id"):
        Reverser(start_token_id=None).generate(np.ones((1, 2), "int32"), 4)
    with pytest.raises(ValueError, match="shape \\(batch, length\\)"):
        Reverser(start_token_id=1).generate(np.ones((3,), "int32"), 4)


def test_generation_length_defaults_and_limits():
    class Limited(Reverser):
        @property
        def max_generation_length(self):
            return 6

    source = np.array([[3, 4]], "int32")
    assert Limited(start_token_id=1, end_token_id=2).generate(source).tokens.shape == (1, 6)  # default: the limit
    default = Reverser(start_token_id=1, end_token_id=2).generate(source)
    assert default.tokens.shape == (1, GenerativeModel.default_max_length)
    with pytest.raises(ValueError, match="exceeds the model's max_length=6"):
        Limited(start_token_id=1, end_token_id=2).generate(source, 7)
    with pytest.raises(ValueError, match="max_length"):
        Reverser(start_token_id=1, end_token_id=2).generate(source, 0)


def test_unimplemented_parts_say_what_to_implement():
    model = GenerativeModel()
    for call, name in ((lambda: model.next(None, None, 1), "next"),
                       (lambda: model.initial_cache(None), "initial_cache"),
                       (lambda: model.generate(np.ones((1, 2), "int32"), 4), "generation_inputs"),
                       (lambda: model.attention_maps(None), "attention maps"),
                       (lambda: model.encode(None), "encode")):
        with pytest.raises(NotImplementedError, match=name):
            call()
    assert model.stop_token_ids == () and model.pad_token_id == 0 and model.start_token_id is None


def test_a_decoder_only_model_overrides_generation_inputs():
    """The contract fits a GPT too: the prompt is the input, no start token, a cache prefilled from it."""

    class Counter(GenerativeModel):  # predicts previous token + 1
        def generation_inputs(self, inputs, padding_mask=None, max_length=None):
            return {"prompt": inputs, "prompt_mask": padding_mask, "cache": ()}

        def next(self, tokens, cache, index):
            previous = ops.take(tokens, index - 1, axis=1)
            return 5.0 * ops.one_hot((previous + 1) % VOCABULARY, VOCABULARY), cache

    model = Counter(end_token_id=9)
    prompt = np.array([[3, 4, 0], [6, 0, 0]], "int32")
    out = model.generate(prompt, 7, padding_mask=prompt != 0)
    np.testing.assert_array_equal(np.asarray(out.tokens), [[3, 4, 5, 6, 7, 8, 9], [6, 7, 8, 9, 0, 0, 0]])
    assert isinstance(model, keras.Model)


def test_generate_stop_token_ids_argument():
    """"auto" (the default) stops at the model's end_token_id; None never stops early; a list overrides."""
    model = Reverser(start_token_id=1, end_token_id=2)
    source = np.array([[3, 4, 5, 0]], "int32")
    np.testing.assert_array_equal(np.asarray(model.generate(source, 8).tokens), [[1, 5, 4, 3, 2, 0, 0, 0]])
    auto = model.generate(source, 8, stop_token_ids="auto")
    np.testing.assert_array_equal(np.asarray(auto.tokens), [[1, 5, 4, 3, 2, 0, 0, 0]])
    free = model.generate(source, 8, stop_token_ids=None)
    np.testing.assert_array_equal(np.asarray(free.tokens), [[1, 5, 4, 3, 2, 2, 2, 2]])
    np.testing.assert_array_equal(np.asarray(free.lengths), [8])
    other = model.generate(source, 8, stop_token_ids=[4])
    np.testing.assert_array_equal(np.asarray(other.tokens), [[1, 5, 4, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="stop_token_ids.*'end'"):
        model.generate(source, 8, stop_token_ids="end")


def test_check_id_range_checks_concrete_ids_and_skips_only_symbolic_ones():
    """A ragged list of ids used to skip the check silently (any exception meant "symbolic"): it is named now."""
    from attnlayers.applications.core.generative import check_id_range

    with pytest.raises(ValueError, match=r"`token_ids` must hold ids in \[0, vocabulary_size=10\).*\[0, 1\] = 12"):
        check_id_range(np.array([[3, 12]]), "token_ids", 10)
    with pytest.raises(ValueError, match=r"`token_ids` must be a rectangular .*ragged"):
        check_id_range([[3, 4], [12]], "token_ids", 10)
    assert check_id_range(keras.KerasTensor((2, 3), "int32"), "token_ids", 10) is None  # symbolic: no values
