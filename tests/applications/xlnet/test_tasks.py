"""XLNet's tasks: the permutation-LM loss equals a NumPy computation of eq. 5 over the partial-prediction targets, the
query stream never sees its own token, ``fit`` memorises a batch (and not at learning rate 0), the LM bias goes
through Hugging Face's ``lm_loss.bias``; the classification and tagging heads' outputs, losses and a fit step; the
``.keras`` round trips (tests/model_harness.py)."""

import keras
import numpy as np
from attnlayers.applications.core.formats.safetensors import read_safetensors
from attnlayers.applications.xlnet import (
    XLNetBackbone,
    XLNetClassifier,
    XLNetPretrainer,
    XLNetTokenClassifier,
)
from attnlayers.applications.xlnet.heads import IGNORE_LABEL
from keras import ops
from model_harness import run_model_test

CONFIG = {"vocabulary_size": 40, "num_layers": 1, "num_heads": 2, "hidden_dim": 16, "intermediate_dim": 24,
          "dropout": 0.0}
PAD = 5
K = 2


def _folder(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def _batch(seed=0, batch=3, length=8):
    rng = np.random.RandomState(seed)
    ids = rng.randint(6, CONFIG["vocabulary_size"], (batch, length)).astype("int32")
    ids[1, 6:] = PAD  # a right-padded row
    order = np.stack([rng.permutation(length) for _ in range(batch)]).astype("int32")
    return ids, order


def _numpy_loss(model, ids, order):
    """Eq. 5 over z_{>c}: masks and targets from their definitions, g from the backbone, logits g E^T + b."""
    real = ids != PAD
    rank = np.argsort(order, axis=-1)  # rank[b, order[b, t]] = t
    visible = real[:, None, :] & real[:, :, None]
    content = (rank[:, None, :] <= rank[:, :, None]) & visible
    query = (rank[:, None, :] < rank[:, :, None]) & visible
    _, g = model.backbone.two_stream({"token_ids": ids}, content, query)
    g = ops.convert_to_numpy(g).astype("float64")
    embeddings = ops.convert_to_numpy(model.backbone.token_embedding.embeddings).astype("float64")
    logits = g @ embeddings.T + ops.convert_to_numpy(model.lm_head.bias)
    log_p = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(
        -1, keepdims=True)
    targets = np.zeros_like(real)
    for b in range(len(ids)):
        real_order = [j for j in order[b] if real[b, j]]
        n = len(real_order)
        targets[b, real_order[n - max(1, int(n / K + 0.5)):]] = True  # the last round(n / K) real tokens
    nll = -np.take_along_axis(log_p, ids[..., None], -1)[..., 0]
    return nll[targets].mean(), targets


def test_permutation_lm_loss_targets_and_query_stream():
    keras.utils.set_random_seed(0)
    model = XLNetPretrainer(XLNetBackbone(CONFIG), K=K, seed=1)
    model.lm_head.bias.assign(np.random.RandomState(1).normal(size=CONFIG["vocabulary_size"]).astype("float32"))
    ids, order = _batch()
    x = {"token_ids": ids, "order": order}
    out = model(x)
    P = int(ids.shape[1] / K + 0.5)
    assert tuple(out["logits"].shape) == (3, P, CONFIG["vocabulary_size"])
    expected, targets = _numpy_loss(model, ids, order)
    np.testing.assert_allclose(float(model.compute_loss(x, None, out)), expected, rtol=1e-5)
    positions, weights = ops.convert_to_numpy(out["positions"]), ops.convert_to_numpy(out["weights"])
    for b in range(3):  # the weighted slots are exactly the targets; padding is never one
        assert sorted(positions[b][weights[b] == 1]) == sorted(np.flatnonzero(targets[b]))
    assert weights[1].sum() == 3 and not np.any(ids[1][positions[1][weights[1] == 1]] == PAD)

    # g_{z_t} never sees x_{z_t}: a target's own token changes nothing of its logits, but those of the later targets
    b, slot = 0, int(np.argmin(np.argsort(order[0])[positions[0]]))  # row 0's target earliest in the order
    changed = ids.copy()
    changed[b, positions[b, slot]] = 7 if ids[b, positions[b, slot]] != 7 else 8
    logits, moved = ops.convert_to_numpy(out["logits"]), ops.convert_to_numpy(model(
        {"token_ids": changed, "order": order})["logits"])
    np.testing.assert_allclose(moved[b, slot], logits[b, slot], atol=1e-6)
    assert np.abs(np.delete(moved[b], slot, 0) - np.delete(logits[b], slot, 0)).max() > 1e-4


def test_fit_memorises_a_batch_not_at_learning_rate_zero_and_round_trips(tmp_path):
    keras.utils.set_random_seed(0)
    ids, order = _batch(seed=2, batch=4)
    model = XLNetPretrainer(XLNetBackbone(CONFIG), K=K, seed=3)
    fixed = {"token_ids": ids, "order": order}

    def loss():
        return float(model.compute_loss(fixed, None, model(fixed)))

    model.compile_for_pretraining(0.0)  # one traced train step for both runs: the rate is a variable
    data = {"token_ids": np.tile(ids, (12, 1))}  # 12 steps, a new order each (the SeedGenerator's)
    state = ops.convert_to_numpy(model.seed_generator.state).copy()
    start = loss()
    model.fit(data, batch_size=4, shuffle=False, verbose=0)
    np.testing.assert_allclose(loss(), start, rtol=1e-6)  # rate 0: nothing learnt
    assert not np.array_equal(ops.convert_to_numpy(model.seed_generator.state), state)
    model.optimizer.learning_rate.assign(3e-2)
    model.fit(data, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert loss() < 0.8 * start, (start, loss())  # 3.69 -> 2.68 measured (log 40 = 3.69)

    run_model_test(lambda: model, fixed, tmp_path)  # .keras round trip: the same logits for an order
    restored = XLNetPretrainer.from_hf_checkpoint(model.save_hf_checkpoint(str(tmp_path / "hf")), K=K)
    tensors, _ = read_safetensors(str(tmp_path / "hf" / "model.safetensors"))
    np.testing.assert_array_equal(tensors["lm_loss.bias"], ops.convert_to_numpy(model.lm_head.bias))
    np.testing.assert_allclose(ops.convert_to_numpy(restored(fixed)["logits"]),
                               ops.convert_to_numpy(model(fixed)["logits"]), atol=1e-5)


def test_classification_pair_and_token_heads(tmp_path):
    keras.utils.set_random_seed(0)
    backbone = XLNetBackbone(CONFIG)
    ids, _ = _batch(seed=4)
    ids = np.concatenate([np.full((3, 2), PAD, "int32"), ids[:, :6]], axis=1)  # left-padded, as XLNet's inputs
    ids[:, -1] = 3  # <cls> last
    segments = np.array([[0, 0, 0, 0, 0, 1, 1, 2]] * 3, "int32")  # A <sep> B <sep> <cls>

    def compile_eagerly(model):  # one eager step: the traced step is the pretrainer's test (time budget)
        model.compile_for_finetuning(1e-3, run_eagerly=True)

    classifier = run_model_test(lambda: XLNetClassifier(backbone, num_classes=3, dropout=0.0),
                                {"token_ids": ids, "segment_ids": segments}, _folder(tmp_path, "pair"),
                                compile=compile_eagerly, fit_batch=({"token_ids": ids, "segment_ids": segments},
                                                                    np.array([0, 1, 2])))
    # Hugging Face's summary_type="last": logits = W tanh(W_s h_{T-1} + b_s) + b
    h = ops.convert_to_numpy(backbone({"token_ids": ids}))[:, -1]
    summary = np.tanh(h @ ops.convert_to_numpy(classifier.summary.kernel) + ops.convert_to_numpy(classifier.summary.bias))
    expected = summary @ ops.convert_to_numpy(classifier.logits_dense.kernel) + ops.convert_to_numpy(
        classifier.logits_dense.bias)
    np.testing.assert_allclose(ops.convert_to_numpy(classifier({"token_ids": ids})), expected, atol=1e-5)

    tags = np.random.RandomState(5).randint(0, 4, ids.shape)
    tags[ids == PAD] = IGNORE_LABEL
    tagger = run_model_test(lambda: XLNetTokenClassifier(backbone, num_tags=4), {"token_ids": ids},
                            _folder(tmp_path, "tags"), compile=compile_eagerly, fit_batch=({"token_ids": ids}, tags))
    logits = ops.convert_to_numpy(tagger({"token_ids": ids})).astype("float64")
    assert logits.shape == (3, 8, 4)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labelled = tags != IGNORE_LABEL
    nll = -np.take_along_axis(log_p, np.where(labelled, tags, 0)[..., None], -1)[..., 0]
    np.testing.assert_allclose(float(tagger.loss(tags, logits)), nll[labelled].mean(), rtol=1e-5)
