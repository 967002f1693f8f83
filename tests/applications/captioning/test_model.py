"""The captioners: the selector gate and the doubly stochastic penalty against NumPy, weights that sum to one
over the L locations, step-by-step decoding equal to teacher forcing, REINFORCE hard attention learning inside
the Show-Attend-Tell decoder, a keras.applications backbone, the SAGAN block and the ViT encoder, serialization and
bad input."""

import keras
import numpy as np
import pytest
from harness import run_layer_test
from model_harness import run_model_test
from attnlayers import Attention, HardAttention, ReinforceLoss
from attnlayers.applications.captioning import (
    ImageEncoder,
    ShowAndTell,
    ShowAttendTell,
    ShowAttendTellDecoder,
    TransformerCaptioner,
)
from attnlayers.applications.captioning import next_tokens
from keras import ops

V = 12
SMALL = dict(units=16, embedding_dim=8, filters=(4, 8), image_size=16, dropout=0.0)  # an 4 x 4 grid, L = 16


def _batch(seed=0, batch=3, length=6):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (batch, 16, 16, 3)).astype("uint8")
    caption_in = rng.integers(4, V, (batch, length)).astype("int32")
    caption_in[:, 0] = 1
    caption_in[0, 4:] = 0  # a shorter caption: padding at the end
    return images, caption_in


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def test_next_tokens_are_the_shifted_caption_with_end():
    caption_in = np.array([[1, 5, 6, 0, 0], [1, 7, 7, 7, 7]])
    np.testing.assert_array_equal(_numpy(next_tokens(caption_in, 0, 2)), [[5, 6, 2, 0, 0], [7, 7, 7, 7, 2]])


def test_selector_gate_and_soft_context_against_numpy():
    """z_t = sigmoid(w_beta . h_{t-1} + b) * sum_i alpha_ti a_i; the LSTM reads [E y_{t-1}; z_t]."""
    keras.utils.set_random_seed(1)
    decoder = ShowAttendTellDecoder(6, Attention(score="additive"))
    rng = np.random.default_rng(0)
    memory = rng.normal(size=(2, 5, 4)).astype("float32")
    y = rng.normal(size=(2, 3, 7)).astype("float32")
    h0, c0 = rng.normal(size=(2, 6)).astype("float32"), rng.normal(size=(2, 6)).astype("float32")
    outputs, alpha = decoder(y, memory, initial_state=[h0, c0], return_attention_scores=True)
    outputs, alpha = _numpy(outputs), _numpy(alpha)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, rtol=1e-5)  # weights sum to one over the L locations
    w, b = (_numpy(v) for v in decoder.selector.weights)
    beta = 1 / (1 + np.exp(-(h0 @ w + b)))  # (B, 1), step 0's gate reads h_0
    z0 = beta * np.einsum("bs,bsd->bd", alpha[:, 0], memory)
    np.testing.assert_allclose(outputs[:, 0, 6:], z0, rtol=1e-5, atol=1e-6)  # output_t = [h_t; z_t]
    plain = ShowAttendTellDecoder(6, Attention(score="additive"), selector=False)
    assert plain.selector is None and "selector" in plain.get_config()


@pytest.mark.parametrize("query", ["previous", "current"])
def test_decoder_passes_the_layer_harness(query):
    """Build, symbolic call, config and .keras round trips, jit, mixed precision, gradients, memory masks."""
    rng = np.random.default_rng(0)
    run_layer_test(
        ShowAttendTellDecoder,
        {"units": 6, "query": query},
        {"target_embeddings": rng.normal(size=(2, 3, 4)).astype("float32"),
         "memory": rng.normal(size=(2, 5, 6)).astype("float32")},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((2, 3, 12), (2, 3, 5)),
        mask_check={"input_name": "memory", "mask_arg": "memory_mask", "zero_rows": False},
    )


def test_image_encoder_passes_the_layer_harness():
    images = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("float32")
    run_layer_test(ImageEncoder, {"image_size": 16, "filters": (4, 8)}, images, expected_output_shape=(2, 16, 8))


def test_current_query_reads_the_word_then_attends_from_h_t():
    """query="current" (Lu et al. 2017): h_t = LSTM(E y_{t-1}, h_{t-1}); z_t = sigmoid(f_beta(h_t)) * sum_i
    alpha_ti a_i with alpha_t from h_t; the LSTM does not read z_t."""
    keras.utils.set_random_seed(2)
    decoder = ShowAttendTellDecoder(6, Attention(score="dot"), query="current")
    rng = np.random.default_rng(1)
    memory = rng.normal(size=(2, 5, 6)).astype("float32")
    y = rng.normal(size=(2, 3, 7)).astype("float32")
    h0, c0 = rng.normal(size=(2, 6)).astype("float32"), rng.normal(size=(2, 6)).astype("float32")
    outputs, alpha = (_numpy(x) for x in decoder(y, memory, initial_state=[h0, c0], return_attention_scores=True))
    assert decoder.cell.kernel.shape == (7, 24)  # the LSTM reads E y_{t-1} alone
    h1 = _numpy(decoder.cell(y[:, 0], [h0, c0])[0])
    np.testing.assert_allclose(outputs[:, 0, :6], h1, rtol=1e-5, atol=1e-6)
    scores = np.einsum("bd,bsd->bs", h1, memory)  # the dot score from h_t
    expected_alpha = np.exp(scores - scores.max(-1, keepdims=True))
    expected_alpha /= expected_alpha.sum(-1, keepdims=True)
    np.testing.assert_allclose(alpha[:, 0], expected_alpha, rtol=1e-5, atol=1e-6)
    w, b = (_numpy(v) for v in decoder.selector.weights)
    z = 1 / (1 + np.exp(-(h1 @ w + b))) * np.einsum("bs,bsd->bd", expected_alpha, memory)
    np.testing.assert_allclose(outputs[:, 0, 6:], z, rtol=1e-5, atol=1e-6)
    assert ShowAttendTellDecoder.from_config(decoder.get_config()).query == "current"
    with pytest.raises(ValueError, match="query"):
        ShowAttendTellDecoder(6, query="next")


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_doubly_stochastic_penalty_against_numpy(attention):
    """lambda * mean over (B, L) of (1 - sum_t m_t alpha_ti)^2 (Xu eq. 14, divided by L), t over real steps."""
    keras.utils.set_random_seed(2)
    model = ShowAttendTell(V, attention=attention, doubly_stochastic=0.7, expected_context_rate=1.0, seed=3,
                           estimator="gumbel", **SMALL)
    images, caption_in = _batch()
    model((images, caption_in), training=True)
    penalty = float(_numpy(model.losses[0]))
    alpha = _numpy(model.attention_maps(images, caption_in))  # hard: the expectation, used at every step here
    mask = (caption_in != 0).astype("float32")
    expected = 0.7 * np.mean((1.0 - np.einsum("bt,bts->bs", mask, alpha)) ** 2)
    assert penalty == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, rtol=1e-5)
    model_without = ShowAttendTell(V, attention=attention, doubly_stochastic=0.0, estimator="gumbel", **SMALL)
    model_without((images, caption_in), training=True)
    assert not model_without.losses


@pytest.mark.parametrize("make", [lambda: ShowAttendTell(V, **SMALL),
                                  lambda: ShowAttendTell(V, attention="hard", **SMALL),
                                  lambda: ShowAttendTell(V, attention="soft", query="current", **SMALL),
                                  lambda: ShowAndTell(V, **SMALL),
                                  lambda: TransformerCaptioner(V, num_layers=1, d_model=16, num_heads=2,
                                                               intermediate_dim=16, max_length=8, image_size=16,
                                                               filters=(4, 8), dropout=0.0)],
                         ids=["soft", "hard", "soft-current", "none", "transformer"])
def test_step_by_step_decoding_equals_teacher_forcing(make):
    keras.utils.set_random_seed(4)
    model = make()
    images, caption_in = _batch(batch=2)
    caption_in[0, 4:] = 5
    logits = _numpy(model((images, caption_in)))
    cache = model.initial_cache(images)
    for t in range(caption_in.shape[1]):
        step, cache = model.next(caption_in, cache, t + 1)
        np.testing.assert_allclose(_numpy(step), logits[:, t], rtol=1e-4, atol=1e-5)
    result = model.generate(images, max_length=7)
    tokens = _numpy(result.tokens)
    assert tokens.shape == (2, 7) and (tokens[:, 0] == 1).all()


def test_reinforce_hard_attention_learns_inside_the_show_attend_tell_decoder():
    """A copy task: the decoder must attend to source position t at step t. With REINFORCE, its moving-average
    baseline and the expected context half of the time (Xu et al. 4.1), it learns; the test model is argmax."""
    vocabulary, length = 8, 5

    class Copier(keras.Model):
        def __init__(self):
            super().__init__()
            self.source = keras.layers.Embedding(vocabulary, 16)
            self.positions = keras.layers.Embedding(length, 16)
            self.target = keras.layers.Embedding(vocabulary, 16)
            self.target_positions = keras.layers.Embedding(length, 16)
            attention = HardAttention(score="general", estimator="reinforce", inference="argmax", seed=0)
            self.decoder = ShowAttendTellDecoder(32, attention, cell="gru", selector=False)
            self.project = keras.layers.Dense(vocabulary)
            self.reinforce = ReinforceLoss(entropy_weight=0.001)

        def call(self, inputs, training=None):
            source, decoder_in, target = inputs
            positions = ops.broadcast_to(self.positions(ops.arange(length)[None]), (ops.shape(source)[0], length, 16))
            memory = ops.concatenate([self.source(source), positions], -1)
            y = self.target(decoder_in) + self.target_positions(ops.arange(length)[None])
            if not training:
                return self.project(self.decoder(y, memory))
            outputs, sample = self.decoder(y, memory, return_sample=True, training=True)
            logits = self.project(outputs)
            step_loss = keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)
            self.reinforce(ops.mean(step_loss, axis=-1), sample, training=True)
            return logits

    def data(n, seed):
        source = np.random.default_rng(seed).integers(1, vocabulary, (n, length)).astype("int32")
        return source, np.concatenate([np.zeros((n, 1), "int32"), source[:, :-1]], 1), source.copy()

    keras.utils.set_random_seed(0)
    model = Copier()
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x, x_test = data(2000, 0), data(500, 1)
    model.fit(list(x), x[2], batch_size=64, epochs=6, verbose=0)
    _, accuracy = model.evaluate(list(x_test), x_test[2], batch_size=500, verbose=0)
    assert accuracy >= 0.95, accuracy


def test_keras_applications_backbone_trains_a_step():
    keras.utils.set_random_seed(6)
    model = ShowAttendTell(V, image_size=32, backbone="MobileNetV2", backbone_weights=None, fine_tune=True,
                           units=16, embedding_dim=8)
    model.compile_for_captioning(run_eagerly=True)  # one step: tracing the deep backbone would cost more
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 32, 32, 3)).astype("uint8")
    caption_in = np.array([[1, 4, 5], [1, 6, 0]], "int32")
    model((images, caption_in))
    backbone = model.encoder.layers_[0]
    before = [w.copy() for w in backbone.get_weights()]
    model.fit((images, caption_in), _numpy(next_tokens(caption_in, 0, 2)), epochs=1, verbose=0)
    assert model.grid_shape == (1, 1) and backbone.trainable  # fine-tuned: its weights moved
    assert any(not np.allclose(a, b) for a, b in zip(before, backbone.get_weights()))
    with pytest.raises(ValueError, match="Unknown backbone 'NoSuchNet'"):
        ImageEncoder(64, backbone="NoSuchNet")


TINY_VIT = {"hidden_dim": 8, "num_heads": 2, "mlp_dim": 16}


@pytest.mark.parametrize("encoder, grid", [({"self_attention": True}, (4, 4)),
                                           ({"backbone": "vit", "vit": {"patch_size": 4, **TINY_VIT}}, (4, 4)),
                                           ({"backbone": "hybrid", "filters": (4,), "vit": TINY_VIT}, (4, 4))])
def test_sagan_block_and_vit_encoders_train_with_fit(encoder, grid):
    """The encoder options: a SAGAN block after the small CNN (identity at gamma = 0, then trained), a ViT's patch
    tokens as the annotation vectors, the hybrid ViT over 2 x 2 patches of a CNN map (here 8 x 8 -> 4 x 4); each gives
    the decoder its grid, trains under fit and round-trips the config."""
    keras.utils.set_random_seed(8)
    model = ShowAttendTell(V, **{**SMALL, **encoder})
    # Two steps: eager costs less than tracing the train step (the traced model: tests/test_built.py's symbolic call
    # of each encoder's captioner; the captioner's traced train step: the harness and the example run).
    model.compile_for_captioning(1e-2, run_eagerly=True)
    images, caption_in = _batch()
    model((images, caption_in))
    assert model.grid_shape == grid
    before = [w.copy() for w in model.encoder.get_weights()]
    model.fit((images, caption_in), _numpy(next_tokens(caption_in, 0, 2)), epochs=2, verbose=0)
    assert all(not np.allclose(a, b) for a, b in zip(before, model.encoder.get_weights()))  # gamma included
    clone = ShowAttendTell.from_config(model.get_config())
    clone((images, caption_in))
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(_numpy(clone((images, caption_in))), _numpy(model((images, caption_in))), rtol=1e-5)
    with pytest.raises(ValueError, match="`self_attention` adds a SAGAN block to the small CNN"):
        ImageEncoder(64, backbone="vit", self_attention=True)
    with pytest.raises(ValueError, match=r"Unknown `vit` sizes \['depth'\]"):
        ImageEncoder(64, backbone="vit", vit={"depth": 2})
    with pytest.raises(ValueError, match="divisible by the ViT's patch_size"):
        ImageEncoder(60, backbone="vit")
    with pytest.raises(ValueError, match=r"the CNN's feature map \(16\) must be divisible by the ViT's patch_size"):
        ImageEncoder(64, backbone="hybrid", vit={"patch_size": 3})
    assert ImageEncoder(64, backbone="hybrid").filters == (32, 64) and ImageEncoder(64).filters == (32, 64, 128)


def test_hard_attention_captioner_passes_the_model_harness(tmp_path):
    """Config and .keras round trips of a hard-attention captioner with the doubly stochastic penalty, and one fit
    step that trains it with REINFORCE (the step updates the baseline)."""
    images, caption_in = _batch(batch=4)

    def make():
        keras.utils.set_random_seed(5)
        return ShowAttendTell(V, attention="hard", doubly_stochastic=0.5, seed=0, **SMALL)

    model = run_model_test(make, (images, caption_in), tmp_path, atol=1e-5,
                           compile=lambda m: m.compile_for_captioning(),
                           fit_batch=((images, caption_in), _numpy(next_tokens(caption_in, 0, 2))))
    assert model.sampled and model.reinforce is not None
    assert float(_numpy(model.reinforce.baseline_steps)) == 1  # the step updated the baseline
    config = model.get_config()
    assert (config["attention"], config["doubly_stochastic"], config["image_size"]) == ("hard", 0.5, 16)
    assert not ShowAttendTell(V, attention="hard", estimator="gumbel", **SMALL).sampled
    for other in (ShowAndTell(V, **SMALL), TransformerCaptioner(V, num_layers=1, d_model=16, num_heads=2)):
        assert type(other).from_config(other.get_config()).get_config() == other.get_config()


def test_bad_input_gets_clear_errors():
    model = ShowAttendTell(V, **SMALL)
    images, caption_in = _batch()
    model((images, caption_in))
    with pytest.raises(ValueError, match=r"RGB images of shape \(batch, height, width, 3\)"):
        model((images[..., :1], caption_in))
    with pytest.raises(ValueError, match="must be 16 x 16"):
        model((np.zeros((1, 20, 20, 3), "uint8"), caption_in[:1]))
    with pytest.raises(ValueError, match=r"called on `\(images, caption_in\)`"):
        model(images)
    with pytest.raises(ValueError, match="RGB images"):
        model.generate(np.zeros((2, 16, 16), "uint8"))
    with pytest.raises(ValueError, match="attention"):
        ShowAttendTell(V, attention="local")
    with pytest.raises(ValueError, match="expected_context_rate"):
        ShowAttendTellDecoder(8, expected_context_rate=1.5)
    with pytest.raises(ValueError, match="doubly_stochastic"):
        ShowAttendTell(V, doubly_stochastic=-1.0)




def test_doubly_stochastic_penalty_fades_over_its_steps():
    """lambda_i = lambda (1 - i / N): with N = 2 the same batch's penalty is p, p / 2, then 0; the step counter
    round-trips with the config and the weights."""
    keras.utils.set_random_seed(9)
    model = ShowAttendTell(V, doubly_stochastic_steps=2, **SMALL)
    images, caption_in = _batch()
    model((images, caption_in))
    penalties = []
    for _ in range(3):
        model((images, caption_in), training=True)
        penalties.append(float(sum(_numpy(loss) for loss in model.losses)))
    assert penalties[0] > 0
    np.testing.assert_allclose(penalties, [penalties[0], penalties[0] / 2, 0.0], atol=1e-7)
    clone = ShowAttendTell.from_config(model.get_config())
    clone((images, caption_in))
    clone.set_weights(model.get_weights())
    assert clone.doubly_stochastic_steps == 2 and float(_numpy(clone.penalty_iterations)) == 3
    with pytest.raises(ValueError, match="doubly_stochastic_steps"):
        ShowAttendTell(V, doubly_stochastic_steps=0, **SMALL)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.distribute")
def test_fading_penalty_under_mirrored_strategy_equals_one_device():
    """``train_on_batch`` over 2 replicas returns one device's loss at every step and ends with its weights: both
    replicas read the step's i (lambda_i = lambda (1 - i / 3): lambda, 2/3 lambda, 1/3 lambda) and the count's
    update is no sync point inside the call (with one, replica 1 also summed replica 0's penalty into its loss:
    the scale-out job logged 3.4245 against 3.2554)."""
    import tensorflow as tf

    images, caption_in = _batch(batch=8)
    caption_in[0, 4:] = 5  # no padding: each replica's mean is over as many words
    caption_out = _numpy(next_tokens(caption_in, 0, 2))

    def train(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(5)
            model = ShowAttendTell(V, doubly_stochastic_steps=3, **SMALL)
            model((images, caption_in))  # built in the scope: mirrored weights
            model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        initial = model.get_weights()
        return model, initial, [float(model.train_on_batch((images, caption_in), caption_out)) for _ in range(3)]

    one, initial, one_losses = train(tf.distribute.get_strategy())
    # ReductionToOneDevice, as core.runtime does on CPUs (collective all-reduces of several MirroredStrategy objects
    # in one process reuse instance keys).
    mirrored, _, mirrored_losses = train(tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()))
    np.testing.assert_allclose(mirrored_losses, one_losses, rtol=1e-5)
    for a, b in zip(mirrored.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert float(_numpy(mirrored.penalty_iterations)) == 3.0  # once per step, not once per replica
    assert max(np.abs(a - b).max() for a, b in zip(one.get_weights(), initial)) > 1e-3  # it trained



def test_recipe_defaults_fade_the_penalty_and_use_gumbel():
    """build_captioner: soft and hard attention fade eq. 14 over 1000 steps unless told otherwise (0: constant); hard
    attention's default estimator is Gumbel straight-through, REINFORCE on request."""
    from attnlayers.applications.captioning.builders import build_captioner

    small = dict(image_size=16, filters=(4, 8), units=8, embedding_dim=8)
    assert build_captioner("soft", V, **small).doubly_stochastic_steps == 1000
    assert build_captioner("soft", V, doubly_stochastic_steps=0, **small).penalty_iterations is None
    hard = build_captioner("hard", V, **small)
    assert (hard.doubly_stochastic_steps, hard.estimator, hard.decoder.query, hard.sampled) == (1000, "gumbel",
                                                                                                "current", False)
    assert build_captioner("hard", V, estimator="reinforce", **small).sampled  # the REINFORCE loss
    assert build_captioner("hard", V, doubly_stochastic_steps=7, **small).doubly_stochastic_steps == 7
