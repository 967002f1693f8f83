"""HardAttention, ReinforceModel and GumbelTemperatureSchedule: harness, numerics against NumPy, sampling
statistics, masks, mixed precision, the estimators' gradients, the REINFORCE wiring, bad input."""

import warnings

import keras
import numpy as np
import pytest
from harness import BACKEND, run_layer_test
from keras import ops

from attnlayers import masking
from attnlayers.hard import (
    GumbelTemperatureSchedule,
    HardAttention,
    ReinforceLoss,
    ReinforceModel,
    reinforce_surrogate,
    straight_through,
)

B, T, S, D = 2, 3, 5, 4


def _np(x):
    return np.asarray(ops.convert_to_numpy(ops.cast(x, "float32")))


def _softmax(x, mask=None):
    x = np.where(mask, x, -np.inf) if mask is not None else x
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(-1, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def _value_and_grad(fn, *arrays):
    """Value of ``fn(*tensors)`` (a scalar) and its gradients with respect to every input, both backends."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = fn(*tensors)
        return _np(value), [_np(g) for g in tape.gradient(value, tensors)]
    import jax

    value, grads = jax.value_and_grad(lambda args: fn(*args))([ops.convert_to_tensor(a) for a in arrays])
    return _np(value), [_np(g) for g in grads]


# ------------------------------------------------------------------------------------------------- harness
# Gradient checks, per estimator:
# - gumbel: the straight-through path gives every scorer weight a gradient in training, so the harness checks
#   gradients at training=True (the gradient the layer actually provides).
# - reinforce: the sampled one-hot has no pathwise gradient by design (its gradient is the surrogate that
#   ReinforceModel adds; checked in test_reinforce_surrogate_trains_the_scorer), and neither has the argmax
#   used at inference. With inference="expectation" the inference weights are soft, so the harness checks
#   that path (training=False); with inference="argmax" there is no layer-level gradient to check.
HARNESS_CONFIGS = [
    ({"score": "general", "estimator": "gumbel"}, {"gradient_training": True}),
    ({"score": "additive", "estimator": "gumbel", "num_samples": 3, "inference": "expectation",
      "temperature": 0.5}, {"gradient_training": True}),
    ({"score": "general", "estimator": "reinforce", "inference": "expectation"}, {"gradient_training": False}),
    ({"score": "general", "estimator": "reinforce", "num_samples": 2}, {"run_gradients": False}),
    ({"score": "dot", "estimator": "reinforce", "seed": 3}, {}),  # dot has no weights: nothing to check
]


@pytest.mark.parametrize("init_kwargs,options", HARNESS_CONFIGS, ids=lambda c: str(c))
def test_hard_attention_harness(init_kwargs, options, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        HardAttention,
        init_kwargs,
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, T, D), (B, T, S)),
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
        deterministic=True,  # inference (training=False) is deterministic: argmax or alpha
        **options,
    )


def test_hard_attention_harness_single_step(rng):
    q = rng.normal(size=(B, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    run_layer_test(
        HardAttention,
        {"score": "scaled_dot", "estimator": "gumbel"},
        {"query": q, "value": v},
        call_kwargs={"return_attention_scores": True},
        expected_output_shape=((B, D), (B, S)),
        mask_check={"input_name": "value", "mask_arg": "value_mask"},
    )


# ------------------------------------------------------------------------------------------------ numerics


@pytest.mark.parametrize("estimator", ["gumbel", "reinforce"])
def test_inference_matches_numpy(estimator, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    mask = rng.random((B, S)) < 0.7
    mask[:, 1] = True
    logits = np.einsum("btd,bsd->bts", q, v)
    visible = np.broadcast_to(mask[:, None, :], logits.shape)

    argmax = HardAttention(estimator=estimator)
    context, weights = argmax(q, v, value_mask=mask, return_attention_scores=True, training=False)
    expected = np.eye(S)[np.argmax(np.where(visible, logits, -np.inf), axis=-1)]
    np.testing.assert_array_equal(_np(weights), expected)
    np.testing.assert_allclose(_np(context), expected @ v, atol=1e-5)

    soft = HardAttention(estimator=estimator, inference="expectation")
    context, weights = soft(q, v, value_mask=mask, return_attention_scores=True)  # training=None: inference
    alpha = _softmax(logits, visible)
    np.testing.assert_allclose(_np(weights), alpha, atol=1e-5)
    np.testing.assert_allclose(_np(context), alpha @ v, atol=1e-5)


def _logits_layer_inputs(logits, rows):
    """Query / key such that the dot score gives ``logits`` (S,) for every one of ``rows`` queries."""
    s = len(logits)
    q = np.tile(np.asarray(logits, "float32")[None, None, :], (rows, 1, 1))  # (rows, 1, S)
    k = np.tile(np.eye(s, dtype="float32")[None], (rows, 1, 1))  # (rows, S, S): logits = q . e_s
    return q, k


@pytest.mark.parametrize("estimator", ["gumbel", "reinforce"])
def test_sample_frequencies_match_alpha(estimator):
    alpha = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
    rows = 20000
    q, k = _logits_layer_inputs(np.log(alpha), rows)
    layer = HardAttention(estimator=estimator, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, weights = layer(q, k, return_attention_scores=True, training=True)
    weights = _np(weights)[:, 0]
    assert set(np.unique(weights)) <= {0.0, 1.0}
    np.testing.assert_array_equal(weights.sum(-1), 1.0)
    counts = weights.sum(0)
    expected = alpha * rows
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 18.47, (counts, expected)  # chi-square, 4 degrees of freedom, p = 0.001


def test_num_samples_average_one_hots():
    alpha = np.array([0.2, 0.3, 0.5])
    q, k = _logits_layer_inputs(np.log(alpha), 4000)
    layer = HardAttention(estimator="gumbel", num_samples=4, seed=1)
    _, weights = layer(q, k, return_attention_scores=True, training=True)
    weights = _np(weights)[:, 0]
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert set(np.unique(np.round(weights * 4, 6))) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    np.testing.assert_allclose(weights.mean(0), alpha, atol=0.02)


@pytest.mark.parametrize("estimator", ["gumbel", "reinforce"])
def test_masked_positions_never_sampled(estimator):
    rng = np.random.default_rng(3)
    rows = 2000
    logits = rng.normal(size=(rows, 1, S)).astype("float32")
    mask = rng.random((rows, S)) < 0.5
    mask[:, 0] = False
    mask[np.arange(rows), rng.integers(1, S, rows)] = True
    mask[-5:] = False  # rows with nothing visible
    logits[:, 0, 0] = 80.0  # the most likely position is always masked
    q = logits
    k = np.tile(np.eye(S, dtype="float32")[None], (rows, 1, 1))
    layer = HardAttention(estimator=estimator, num_samples=3, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context, weights = layer(q, k, value_mask=mask, return_attention_scores=True, training=True)
    weights = _np(weights)[:, 0]
    assert np.all(weights[~mask] == 0.0)
    np.testing.assert_allclose(weights[:-5].sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[-5:] == 0.0) and np.all(_np(context)[-5:] == 0.0)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("estimator", ["gumbel", "reinforce"])
@pytest.mark.parametrize("training", [True, False])
def test_fully_masked_rows_zero_and_finite_gradients(policy, estimator, training, rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    mask = np.ones((B, T, S), bool)
    mask[0, 1] = False  # one query sees nothing
    mask[1, :, 2:] = False
    inference = "expectation" if not training else "argmax"
    layer = HardAttention(score="general", estimator=estimator, inference=inference, dtype=policy, seed=0)
    layer._reward_wired = True  # as inside a ReinforceModel: record log p(s) for the surrogate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        context, weights = layer(q, v, attention_mask=mask, return_attention_scores=True, training=training)
    layer._pop_log_probs()
    expected_dtype = "float32" if policy == "float32" else policy.split("_")[1]
    assert keras.backend.standardize_dtype(context.dtype) == expected_dtype
    context, weights = _np(context), _np(weights)
    np.testing.assert_array_equal(weights[0, 1], 0.0)
    np.testing.assert_array_equal(context[0, 1], 0.0)
    np.testing.assert_array_equal(weights[1, :, 2:], 0.0)
    assert np.all(np.isfinite(context))

    def loss_fn(query, value):
        context, weights = layer(query, value, attention_mask=mask, return_attention_scores=True, training=training)
        loss = ops.sum(ops.square(ops.cast(context, "float32"))) + ops.sum(ops.cast(weights, "float32") * 0.5)
        for log_prob in layer._pop_log_probs():  # REINFORCE: the surrogate's log p(s)
            loss = loss + ops.sum(log_prob)
        for extra in layer.losses:  # the entropy bonus
            loss = loss + ops.cast(extra, "float32")
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, grads = _value_and_grad(loss_fn, q, v)
    assert np.isfinite(value)
    for grad in grads:
        assert np.all(np.isfinite(grad))
    assert np.any(grads[0] != 0)  # the query gets a gradient through the score


def test_straight_through_gradient_equals_soft_gradient(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    mask = rng.random((B, S)) < 0.7
    mask[:, 0] = True
    tau = 0.7
    noise = rng.gumbel(size=(B, T, 1, S)).astype("float32")
    c = rng.normal(size=(B, T, S)).astype("float32")  # a loss sum(c * weights) that depends on every weight
    layer = HardAttention(estimator="gumbel", temperature=tau)
    layer._gumbel_noise = lambda shape: ops.convert_to_tensor(noise)

    def hard_loss(query):
        _, weights = layer(query, v, value_mask=mask, return_attention_scores=True, training=True)
        return ops.sum(weights * c), weights

    def soft_loss(query):  # softmax((logits + g) / tau) over the visible keys, written from Jang et al. eq. 1
        logits = ops.matmul(query, ops.swapaxes(ops.convert_to_tensor(v), -1, -2))
        y = masking.masked_softmax((logits + noise[:, :, 0]) / tau, mask[:, None, :])
        return ops.sum(y * c), y

    weights = _np(hard_loss(q)[1])
    logits = np.einsum("btd,bsd->bts", q, v)
    perturbed = np.where(mask[:, None, :], logits + noise[:, :, 0], -np.inf)
    np.testing.assert_array_equal(weights, np.eye(S)[np.argmax(perturbed, -1)])  # forward: the hard one-hot
    _, (hard_grad,) = _value_and_grad(lambda x: hard_loss(x)[0], q)
    _, (soft_grad,) = _value_and_grad(lambda x: soft_loss(x)[0], q)
    assert np.any(hard_grad != 0)
    np.testing.assert_allclose(hard_grad, soft_grad, rtol=1e-5, atol=1e-6)


def test_straight_through_helper():
    hard = np.array([[0.0, 1.0, 0.0]], "float32")
    logits = np.array([[0.3, 0.2, -0.1]], "float32")
    c = np.array([[1.0, -2.0, 0.5]], "float32")
    value, (grad,) = _value_and_grad(lambda x: ops.sum(c * straight_through(hard, ops.softmax(x))), logits)
    _, (soft_grad,) = _value_and_grad(lambda x: ops.sum(c * ops.softmax(x)), logits)
    np.testing.assert_allclose(value, -2.0)
    np.testing.assert_allclose(grad, soft_grad, atol=1e-7)


# ------------------------------------------------------------------------------------- REINFORCE wiring


def _reinforce_model(score="general", entropy_weight=0.0, length=S, dim=D, seed=0, outputs=1):
    query = keras.Input((dim,), name="query")
    value = keras.Input((length, dim), name="value")
    mask = keras.Input((length,), dtype="int32", name="mask")  # 0/1 (bool inputs break tf.distribute)
    layer = HardAttention(score=score, estimator="reinforce", entropy_weight=entropy_weight, seed=seed)
    context = layer(query, value, value_mask=mask)
    out = keras.layers.Dense(outputs, kernel_initializer="ones", use_bias=False)(context)
    return ReinforceModel([query, value, mask], out), layer


def test_reinforce_log_prob_and_entropy_match_numpy(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    mask = rng.random((B, S)) < 0.7
    mask[:, 0] = True
    mask[-1] = False  # nothing visible: contributes log p = 0 and H = 0
    layer = HardAttention(estimator="reinforce", num_samples=3, entropy_weight=0.1, seed=2)
    layer._reward_wired = True  # as inside a ReinforceModel
    _, weights = layer(q, v, value_mask=mask, return_attention_scores=True, training=True)
    (log_prob,) = layer._pop_log_probs()
    visible = np.broadcast_to(mask[:, None, :], (B, T, S))
    alpha = _softmax(np.einsum("btd,bsd->bts", q, v), visible)
    log_alpha = np.log(np.where(alpha > 0, alpha, 1.0))
    counts = np.round(_np(weights) * 3)  # how often each key was drawn
    # log p(s) of all draws of all queries of an example: sum over draws of log alpha (Xu eq. 8, independent).
    np.testing.assert_allclose(_np(log_prob), (counts * log_alpha).sum((1, 2)), rtol=1e-5, atol=1e-5)
    entropy = -(alpha * log_alpha).sum(-1).sum(-1).mean()
    (bonus,) = layer.losses
    np.testing.assert_allclose(_np(bonus), -0.1 * entropy, rtol=1e-5)


@pytest.mark.parametrize("policy,jit_compile", [("float32", False), ("mixed_float16", True), ("mixed_bfloat16", True)])
def test_reinforce_surrogate_trains_the_scorer(policy, jit_compile, rng):
    # With entropy_weight=0 the only gradient that can reach the score kernel is the REINFORCE surrogate.
    keras.config.set_dtype_policy(policy)
    model, layer = _reinforce_model()
    model.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=jit_compile)
    x = [rng.normal(size=(16, D)).astype("float32"), rng.normal(size=(16, S, D)).astype("float32"),
         np.ones((16, S), "int32")]
    y = rng.normal(size=(16, 1)).astype("float32")
    kernel = _np(layer.scorer.kernel)
    steps = 4  # under mixed_float16 the loss scale optimizer may skip the first steps (scale too large)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ReinforceModel wires the reward: no warning
        for _ in range(steps):
            model.train_on_batch(x, y)
    assert np.all(np.isfinite(_np(layer.scorer.kernel)))
    assert np.any(_np(layer.scorer.kernel) != kernel), "REINFORCE gave the scorer no gradient"
    assert _np(layer.baseline_steps) == steps and np.isfinite(_np(layer.baseline))

    # A plain keras.Model gives the scorer nothing.
    plain = keras.Model(model.inputs, model.outputs)
    plain.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=jit_compile)
    kernel = _np(layer.scorer.kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            plain.train_on_batch(x, y)
    np.testing.assert_array_equal(_np(layer.scorer.kernel), kernel)


def test_reinforce_baseline_update(rng):
    # One visible key per row: the sample is deterministic, so the per-example loss is known in advance and
    # the moving average can be checked exactly (this is the JAX trainer's compute_loss state update too).
    n = 8
    model, layer = _reinforce_model()
    model.compile(keras.optimizers.SGD(0.05), "mse")
    mask = np.zeros((n, S), "int32")
    mask[np.arange(n), rng.integers(0, S, n)] = 1
    x = [rng.normal(size=(n, D)).astype("float32"), rng.normal(size=(n, S, D)).astype("float32"), mask]
    y = rng.normal(size=(n, 1)).astype("float32")

    def mean_loss():
        return float(np.mean((_np(model.predict_on_batch(x)) - y) ** 2))

    loss1 = mean_loss()
    model.train_on_batch(x, y)
    np.testing.assert_allclose(_np(layer.baseline), loss1, rtol=1e-5)
    loss2 = mean_loss()
    model.train_on_batch(x, y)
    np.testing.assert_allclose(_np(layer.baseline), 0.9 * loss1 + 0.1 * loss2, rtol=1e-5)
    assert _np(layer.baseline_steps) == 2.0


def test_per_example_loss(rng):
    model, _ = _reinforce_model(outputs=3)
    y = rng.integers(0, 3, size=(6,))
    y_pred = rng.normal(size=(6, 3)).astype("float32")
    probs = _softmax(y_pred).astype("float32")
    expected = -np.log(probs[np.arange(6), y])
    for loss in [
        "sparse_categorical_crossentropy",
        keras.losses.SparseCategoricalCrossentropy(),
        keras.losses.sparse_categorical_crossentropy,
        ["sparse_categorical_crossentropy"],
    ]:
        model.compile("sgd", loss)
        np.testing.assert_allclose(_np(model.per_example_loss(y, probs)), expected, rtol=1e-5)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    np.testing.assert_allclose(_np(model.per_example_loss(y, y_pred)), expected, rtol=1e-5)
    weights = rng.random(6).astype("float32")
    np.testing.assert_allclose(_np(model.per_example_loss(y, y_pred, weights)), expected * weights, rtol=1e-5)
    # Sequence outputs: the time axis is averaged.
    model.compile("sgd", "mse")
    seq_true, seq_pred = rng.normal(size=(6, 4, 2)), rng.normal(size=(6, 4, 2)).astype("float32")
    np.testing.assert_allclose(
        _np(model.per_example_loss(seq_true, seq_pred)), ((seq_true - seq_pred) ** 2).mean((1, 2)), rtol=1e-5
    )


def test_per_example_loss_errors(rng):
    model, _ = _reinforce_model()
    with pytest.raises(ValueError, match="compiled `loss`"):
        model.per_example_loss(np.zeros((2, 1)), np.zeros((2, 1), "float32"))
    model.compile("sgd", {"a": "mse", "b": "mae"})
    with pytest.raises(ValueError, match="one output with one loss"):
        model.per_example_loss(np.zeros((2, 1)), np.zeros((2, 1), "float32"))
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match="one output with one loss"):
        model.per_example_loss([np.zeros((2, 1))] * 2, [np.zeros((2, 1), "float32")] * 2)
    model.compile("sgd", lambda y_true, y_pred: ops.mean(y_pred))
    with pytest.raises(ValueError, match="scalar"):
        model.per_example_loss(np.zeros((2, 1)), np.zeros((2, 1), "float32"))


def test_reinforce_model_saving(tmp_path, rng):
    model, _ = _reinforce_model()
    x = [rng.normal(size=(3, D)).astype("float32"), rng.normal(size=(3, S, D)).astype("float32"),
         np.ones((3, S), "int32")]
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, ReinforceModel)
    np.testing.assert_allclose(_np(loaded.predict_on_batch(x)), _np(model.predict_on_batch(x)), atol=1e-6)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf.distribute is TensorFlow-only")
def test_reinforce_model_mirrored_strategy(rng):
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model, layer = _reinforce_model(entropy_weight=0.01)
        model.compile(keras.optimizers.SGD(0.1), "mse")
    x = [rng.normal(size=(32, D)).astype("float32"), rng.normal(size=(32, S, D)).astype("float32"),
         np.ones((32, S), "int32")]
    y = rng.normal(size=(32, 1)).astype("float32")
    kernel = _np(layer.scorer.kernel)
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert np.any(_np(layer.scorer.kernel) != kernel)
    assert _np(layer.baseline_steps) >= 1.0 and np.isfinite(_np(layer.baseline))


# ---------------------------------------------------------------------------------------------- warnings


def test_unwired_reinforce_warns_once(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = HardAttention(estimator="reinforce")
    with pytest.warns(UserWarning, match=r"ReinforceModel.*estimator='gumbel'"):
        layer(q, v, training=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(q, v, training=True)  # once
        layer(q, v, training=False)
        HardAttention(estimator="gumbel")(q, v, training=True)  # gumbel needs no wiring
        model, _ = _reinforce_model()
        model([q[:, 0], v, np.ones((B, S), "int32")], training=True)  # wired by the ReinforceModel


# ---------------------------------------------------------------------------------------------- callback


def _gumbel_model():
    query = keras.Input((D,))
    value = keras.Input((S, D))
    layer = HardAttention(score="general", estimator="gumbel", seed=0)
    model = keras.Model([query, value], keras.layers.Dense(1)(layer(query, value)))
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model, layer


@pytest.mark.parametrize("target", ["layer", "none"])  # a model as the target: the per-step test
def test_gumbel_temperature_schedule_per_epoch(target, rng):
    model, layer = _gumbel_model()
    x = [rng.normal(size=(8, D)).astype("float32"), rng.normal(size=(8, S, D)).astype("float32")]
    y = rng.normal(size=(8, 1)).astype("float32")
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.model  # noqa: B018 - under JAX, syncs the trainer state into the variables
            seen.append(float(_np(layer.tau)))

    schedule = GumbelTemperatureSchedule({"model": model, "layer": layer, "none": None}[target], lambda e: 2.0 * 0.5**e)
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[schedule, Record()])
    np.testing.assert_allclose(seen, [2.0, 2.0, 1.0, 1.0, 0.5, 0.5])
    np.testing.assert_allclose(float(_np(layer.tau)), 0.5)  # survives the end-of-fit state sync (JAX)
    np.testing.assert_allclose(history.history["gumbel_temperature"], [2.0, 1.0, 0.5])


def test_gumbel_temperature_schedule_per_step(rng):
    model, layer = _gumbel_model()
    x = [rng.normal(size=(8, D)).astype("float32"), rng.normal(size=(8, S, D)).astype("float32")]
    y = rng.normal(size=(8, 1)).astype("float32")
    schedule = GumbelTemperatureSchedule(model, lambda step: 1.0 / (1 + step), per="step")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[schedule])
    np.testing.assert_allclose(float(_np(layer.tau)), 0.25)  # steps 0..3


class Nested(keras.layers.Layer):
    """Holds its attention layers in a private list and in a dict (both tracked by Keras)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._attention = [HardAttention(score="general", estimator="reinforce", seed=0)]
        self.gumbel = {"layer": HardAttention(score="general", estimator="gumbel", seed=1)}

    def call(self, query, value, training=None):
        return self._attention[0](query, value, training=training) + self.gumbel["layer"](query, value,
                                                                                          training=training)


def test_layers_nested_in_a_custom_layer_are_found(rng):
    """A ReinforceModel finds the REINFORCE layer inside a custom layer's list (its baseline moves, no "unwired"
    warning) and the schedule of the model being trained finds the gumbel one in a dict."""
    query, value = keras.Input((D,)), keras.Input((S, D))
    block = Nested()
    model = ReinforceModel([query, value], keras.layers.Dense(1)(block(query, value)))
    model.compile(keras.optimizers.SGD(0.1), "mse", run_eagerly=BACKEND == "tensorflow")  # the cheaper way
    x = [rng.normal(size=(4, D)).astype("float32"), rng.normal(size=(4, S, D)).astype("float32")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.train_on_batch(x, np.zeros((4, 1), "float32"))
    assert not [w for w in caught if "wires its reward" in str(w.message)]
    assert float(_np(block._attention[0].baseline_steps)) == 1.0
    schedule = GumbelTemperatureSchedule(None, lambda epoch: 0.25)
    schedule.set_model(model)  # what fit does
    schedule.on_epoch_begin(0)
    assert float(_np(block.gumbel["layer"].tau)) == 0.25


def test_gumbel_temperature_schedule_errors():
    model, layer = _gumbel_model()
    with pytest.raises(ValueError, match="schedule"):
        GumbelTemperatureSchedule(model, 0.5)
    with pytest.raises(ValueError, match="per"):
        GumbelTemperatureSchedule(model, lambda e: 1.0, per="batch")
    with pytest.raises(ValueError, match="tau > 0"):
        GumbelTemperatureSchedule(layer, lambda e: 0.0).on_epoch_begin(0)
    reinforce, _ = _reinforce_model()
    with pytest.raises(ValueError, match="no HardAttention"):
        GumbelTemperatureSchedule(reinforce, lambda e: 1.0).on_epoch_begin(0)


# ------------------------------------------------------------------------------------------ config, errors


def test_config_round_trips_every_argument():
    layer = HardAttention(
        score="additive", estimator="gumbel", num_samples=3, inference="expectation", temperature=0.3,
        baseline_decay=0.5, entropy_weight=0.2, seed=11, name="hard",
    )
    config = layer.get_config()
    for name, value in dict(score="additive", estimator="gumbel", num_samples=3, inference="expectation",
                            temperature=0.3, baseline_decay=0.5, entropy_weight=0.2, seed=11).items():
        assert config[name] == value
    assert "dropout" not in config
    clone = HardAttention.from_config(config)
    assert clone.get_config() == config


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"estimator": "straight_through"}, r"`estimator` 'straight_through'.*'reinforce', 'gumbel'"),
        ({"inference": "mode"}, r"`inference` 'mode'.*'argmax', 'expectation'"),
        ({"num_samples": 0}, r"`num_samples` must be a positive integer.*received num_samples=0"),
        ({"num_samples": 1.5}, r"`num_samples`.*1.5"),
        ({"temperature": 0.0}, r"`temperature` must be a number > 0; received temperature=0.0"),
        ({"temperature": -1}, r"`temperature`.*-1"),
        ({"baseline_decay": 1.0}, r"`baseline_decay` must be a number in \[0, 1\); received baseline_decay=1.0"),
        ({"baseline_decay": -0.1}, r"`baseline_decay`.*-0.1"),
        ({"entropy_weight": -0.01}, r"`entropy_weight` must be a number >= 0; received entropy_weight=-0.01"),
        ({"dropout": 0.1}, r"`dropout`.*0.1"),
        ({"score": "nope"}, r"Unknown `score` 'nope'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HardAttention(**kwargs)


def test_bad_inputs(rng):
    layer = HardAttention()
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    with pytest.raises(ValueError, match=r"`value` must have shape \(batch, source_length, value_dim\); received shape \(5, 4\)"):
        layer(q, v[0])
    with pytest.raises(ValueError, match="`value_mask`"):
        layer(q, v, value_mask=np.ones((B, S + 1), bool))
    with pytest.raises(ValueError, match="float mask is ambiguous"):
        layer(q, v, value_mask=np.ones((B, S), "float32"))


# ------------------------------------------------------------------------------ explicit REINFORCE path


def test_return_sample_matches_numpy_and_has_no_side_effects(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    mask = rng.random((B, S)) < 0.7
    mask[:, 0] = True
    mask[-1] = False  # nothing visible: log p = 0, H = 0
    layer = HardAttention(estimator="reinforce", num_samples=3, entropy_weight=0.1, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # explicit: nothing to wire, no warning
        _, weights, sample = layer(q, v, value_mask=mask, return_attention_scores=True, return_sample=True,
                                   training=True)
    assert layer.losses == [] and layer._pop_log_probs() == []  # no add_loss, nothing recorded
    visible = np.broadcast_to(mask[:, None, :], (B, T, S))
    alpha = _softmax(np.einsum("btd,bsd->bts", q, v), visible)
    log_alpha = np.log(np.where(alpha > 0, alpha, 1.0))
    counts = np.round(_np(weights) * 3)
    assert sorted(sample) == ["entropy", "log_prob"]
    np.testing.assert_allclose(_np(sample["log_prob"]), (counts * log_alpha).sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(sample["entropy"]), -(alpha * log_alpha).sum(-1), rtol=1e-5, atol=1e-6)
    # Inference with argmax: the log-probability of the argmax; one query per sequence: (B,).
    _, weights, sample = layer(q[:, 0], v, value_mask=mask, return_attention_scores=True, return_sample=True)
    assert tuple(sample["log_prob"].shape) == (B,)
    expected = (_np(weights) * log_alpha[:, 0]).sum(-1)
    np.testing.assert_allclose(_np(sample["log_prob"]), expected, rtol=1e-5, atol=1e-6)


def test_return_sample_in_a_functional_model(rng):
    query, value = keras.Input((T, D)), keras.Input((S, D))
    context, sample = HardAttention(score="general")(query, value, return_sample=True)
    model = keras.Model([query, value], [context, sample["log_prob"], sample["entropy"]])
    outputs = model([rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")])
    assert [tuple(x.shape) for x in outputs] == [(B, T, D), (B, T), (B, T)]


def _np_surrogate(loss, log_prob, baseline, entropy=None, weight=0.0, mask=None):
    m = np.ones_like(log_prob) if mask is None else mask.astype("float32")
    if loss.ndim == 1:
        terms = (loss - baseline) * (log_prob * m).sum(-1)
        bonus = (entropy * m).sum(-1).mean() if entropy is not None else 0.0
        return terms.mean() - weight * bonus
    terms = ((loss - baseline) * log_prob * m).sum() / m.sum()
    bonus = (entropy * m).sum() / m.sum() if entropy is not None else 0.0
    return terms - weight * bonus


def test_reinforce_surrogate_matches_numpy(rng):
    loss, step_loss = rng.random(B).astype("float32"), rng.random((B, T)).astype("float32")
    log_prob, entropy = -rng.random((B, T)).astype("float32"), rng.random((B, T)).astype("float32")
    step_mask = np.array([[1, 1, 0], [1, 1, 1]], bool)
    for per_example in (loss, step_loss):
        for mask in (None, step_mask):
            value = reinforce_surrogate(per_example, log_prob, 0.3, entropy, 0.05, mask)
            np.testing.assert_allclose(
                _np(value), _np_surrogate(per_example, log_prob, 0.3, entropy, 0.05, mask), rtol=1e-5
            )
    # The gradient with respect to log p(s) is the advantage (Xu eq. 12).
    _, (grad,) = _value_and_grad(lambda lp: reinforce_surrogate(loss, lp, 0.3), log_prob)
    np.testing.assert_allclose(grad, np.repeat(((loss - 0.3) / B)[:, None], T, 1), rtol=1e-5)
    with pytest.raises(ValueError, match="`per_example_loss` must have shape"):
        reinforce_surrogate(np.zeros((B, T, 1)), log_prob, 0.0)


def test_reinforce_loss_layer_baseline_and_added_loss(rng):
    layer = ReinforceLoss(baseline_decay=0.5, entropy_weight=0.1)
    sample = {"log_prob": -rng.random((B, T)).astype("float32"), "entropy": rng.random((B, T)).astype("float32")}
    loss1, loss2 = np.array([1.0, 3.0], "float32"), np.array([5.0, 7.0], "float32")
    value = layer(loss1, sample)  # not training: no loss, no update
    np.testing.assert_allclose(_np(value), _np_surrogate(loss1, sample["log_prob"], 2.0, sample["entropy"], 0.1),
                               rtol=1e-5)
    assert layer.losses == [] and _np(layer.baseline_steps) == 0
    layer(loss1, sample, training=True)  # first batch: b = its mean
    np.testing.assert_allclose(_np(layer.baseline), 2.0)
    (added,) = layer.losses
    assert _np(added) == 0.0  # zero-valued: the logged loss stays the task loss; the gradient is the surrogate's
    value = layer(loss2, sample, training=True)  # uses b = 2 (before this batch), then b = 0.5 * 2 + 0.5 * 6
    np.testing.assert_allclose(_np(value), _np_surrogate(loss2, sample["log_prob"], 2.0, sample["entropy"], 0.1),
                               rtol=1e-5)
    np.testing.assert_allclose(_np(layer.baseline), 4.0)
    assert _np(layer.baseline_steps) == 2
    config = layer.get_config()
    assert config["baseline_decay"] == 0.5 and config["entropy_weight"] == 0.1
    with pytest.raises(ValueError, match="`sample` must be the dict"):
        layer(loss1, sample["log_prob"])
    with pytest.raises(ValueError, match="`baseline_decay` must be a number in"):
        ReinforceLoss(baseline_decay=1.0)


def test_missing_inputs_and_feature_sizes(rng):
    q = rng.normal(size=(B, T, D)).astype("float32")
    v = rng.normal(size=(B, S, D)).astype("float32")
    layer = HardAttention(score="general", estimator="gumbel")
    with pytest.raises(ValueError, match="`query` is required"):
        layer(None, v)
    layer(q, v)
    with pytest.raises(ValueError, match="`value` is required"):
        layer(q, None)
    with pytest.raises(ValueError, match=r"`query` must have last axis 4"):
        layer(q[..., :2], v)
