"""GPT's padded vocabulary (``vocabulary_padding``) and chunked loss (``ChunkedCrossEntropy``): a padded model with
the real weights of an unpadded one gives its logits and generated ids (its padded rows, made to dominate, never
win); checkpoints read and write the real V; fit with the chunked loss follows fit with the plain loss, and a custom
loop's gradients equal the plain ones. Runs under the TensorFlow and JAX backends."""

import json

import keras
import keras_hub
import numpy as np
import pytest
from attnlayers.applications.core.training.losses import ChunkedCrossEntropy
from attnlayers.applications.gpt import (
    GPT,
    GPTConfig,
    data,
    from_keras_hub,
    load_hf_checkpoint,
    runs,
    save_hf_checkpoint,
)
from attnlayers.applications.gpt.llama_checkpoint import load_hf_llama_checkpoint, save_hf_llama_checkpoint
from keras import ops

from attnlayers.chunked_cross_entropy import chunked_cross_entropy_mean
from attnlayers.decoding import BeamSearch, Sampling

SIZES = {"vocabulary_size": 29, "max_sequence_length": 12, "num_layers": 1, "num_heads": 2, "hidden_dim": 16,
         "intermediate_dim": 32}
PADDING = 16  # V_pad = 32
PROMPT = np.array([[5, 9, 3, 7], [7, 4, 0, 0]], "int32")
PROMPT_MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
ARCHITECTURES = {"gpt2": {}, "llama_tied": {"architecture": "llama"},
                 "llama_untied": {"architecture": "llama", "tie_embeddings": False}}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _copy(source, target):
    """``source``'s weights into ``target`` (the vocabulary tables through their real rows)."""
    for a, b in zip(source.weights, target.weights, strict=True):
        target.vocabulary_view(b).assign(np.array(_np(a.value)))
    return target


def _pair(fields, seed=3):
    keras.utils.set_random_seed(seed)
    plain = GPT(GPTConfig(**SIZES, **fields))
    padded = _copy(plain, GPT(GPTConfig(**SIZES, **fields, vocabulary_padding=PADDING)))
    return plain, padded


def _dominating_padded_rows(model):
    """Fills the padded rows (columns of lm_head's kernel) with 100 x real ones: their logits would win everywhere
    if they left the model."""
    for weight in model.weights:
        view = model.vocabulary_view(weight)
        if view is not weight:
            value = _np(weight.value)
            if view.axis == 0:
                value[29:] = 100.0 * value[:3]
            else:
                value[:, 29:] = 100.0 * value[:, :3]
            weight.assign(value)


@pytest.mark.parametrize("fields", ARCHITECTURES.values(), ids=ARCHITECTURES.keys())
def test_padded_model_gives_the_unpadded_logits_and_ids(fields):
    plain, padded = _pair(fields)
    assert padded.config.padded_vocabulary_size == 32
    assert padded.count_params() - plain.count_params() == 3 * 16 * (2 if fields.get("tie_embeddings") is False else 1)
    assert padded.config.parameter_count() == plain.config.parameter_count() == plain.count_params()
    _dominating_padded_rows(padded)
    expected, logits = _np(plain(PROMPT, padding_mask=PROMPT_MASK)), _np(padded(PROMPT, padding_mask=PROMPT_MASK))
    assert logits.shape == (2, 4, 29)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    labels = np.roll(PROMPT, -1, axis=1)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    np.testing.assert_allclose(float(loss(labels, logits)), float(loss(labels, expected)), rtol=1e-6)
    searches = [("greedy", None)]
    if not fields:  # the other searches once (GPT-2): the logits they read are the ones compared above
        searches += [(Sampling(temperature=2.0), 7), (BeamSearch(num_beams=2), None)]
    for search, seed in searches:
        ours = padded.generate(PROMPT, 10, search, seed, padding_mask=PROMPT_MASK, stop_token_ids=None).tokens
        np.testing.assert_array_equal(_np(ours), _np(plain.generate(PROMPT, 10, search, seed, padding_mask=PROMPT_MASK,
                                                                    stop_token_ids=None).tokens))
        assert _np(ours).max() < 29


def test_checkpoints_keep_the_real_vocabulary(tmp_path):
    plain, padded = _pair({})
    save_hf_checkpoint(padded, str(tmp_path / "gpt2"))
    header = _safetensors_shapes(tmp_path / "gpt2" / "model.safetensors")
    assert header["transformer.wte.weight"] == [29, 16]
    assert json.loads((tmp_path / "gpt2" / "config.json").read_text())["vocab_size"] == 29
    loaded, _ = load_hf_checkpoint(str(tmp_path / "gpt2"), vocabulary_padding=PADDING)
    unpadded, _ = load_hf_checkpoint(str(tmp_path / "gpt2"))
    assert tuple(loaded.embedding.token_embedding.embeddings.shape) == (32, 16)
    assert GPT.from_config(loaded.get_config()).config.vocabulary_padding == PADDING
    np.testing.assert_allclose(_np(loaded(PROMPT)), _np(plain(PROMPT)), atol=1e-6)
    np.testing.assert_allclose(_np(unpadded(PROMPT)), _np(plain(PROMPT)), atol=1e-6)

    plain, padded = _pair(ARCHITECTURES["llama_untied"])
    save_hf_llama_checkpoint(padded, str(tmp_path / "llama"))
    header = _safetensors_shapes(tmp_path / "llama" / "model.safetensors")
    assert header["model.embed_tokens.weight"] == header["lm_head.weight"] == [29, 16]
    loaded, _ = load_hf_llama_checkpoint(str(tmp_path / "llama"), vocabulary_padding=PADDING)
    assert not _np(loaded.lm_head.kernel)[:, 29:].any()  # the padding is zero
    np.testing.assert_allclose(_np(loaded(PROMPT)), _np(plain(PROMPT)), atol=1e-6)

    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=29, num_layers=1, num_heads=2, hidden_dim=16,
                                             intermediate_dim=32, max_sequence_length=12, dropout=0.0)
    np.testing.assert_allclose(_np(from_keras_hub(backbone, vocabulary_padding=PADDING)(PROMPT)),
                               _np(from_keras_hub(backbone)(PROMPT)), atol=1e-6)


def _safetensors_shapes(path):
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return {name: entry["shape"] for name, entry in json.loads(f.read(size)).items() if name != "__metadata__"}


def _batches():
    rng = np.random.default_rng(0)
    windows = rng.integers(0, 29, (8, 9)).astype("int32")
    mask = np.ones_like(windows, bool)
    mask[1, 6:] = mask[6, 3:] = False  # padding
    return data.lm_examples(windows, mask)  # what run_training feeds fit: x = {"token_ids", "padding_mask"}


def test_fit_with_the_chunked_loss_follows_the_plain_loss():
    """runs.compile_for_training (the run's loss, Perplexity and AdamW) with loss_chunk_size None and 24 (64 tokens
    a batch: a partial chunk), the same fit: the same losses, perplexities (training and held out) and weights."""
    x, y, weights = _batches()
    histories, models = [], []
    for chunk_size in (None, 24):
        keras.utils.set_random_seed(5)
        model = GPT(GPTConfig(**SIZES, vocabulary_padding=PADDING))
        settings = runs.TrainingSettings(vocabulary_size=29, sequence_length=8, batch_size=4, learning_rate=1e-2,
                                         loss_chunk_size=chunk_size, vocabulary_padding=PADDING,
                                         jit_compile=keras.backend.backend() == "jax")  # XLA costs more at this size
        runs.compile_for_training(model, settings)
        history = model.fit(x, y, sample_weight=weights, batch_size=4, epochs=2, shuffle=False, verbose=0).history
        history.update({f"val_{k}": v for k, v in model.evaluate(x, y, sample_weight=weights, verbose=0,
                                                                 return_dict=True).items()})
        histories.append(history)
        models.append(model)
    assert isinstance(models[1].loss, ChunkedCrossEntropy) and histories[0].keys() == histories[1].keys()
    restored = keras.losses.deserialize(keras.losses.serialize(models[1].loss))
    assert isinstance(restored, ChunkedCrossEntropy) and restored.chunk_size == 24
    for key, values in histories[0].items():
        np.testing.assert_allclose(histories[1][key], values, rtol=1e-5, err_msg=key)
    for a, b in zip(*[m.weights for m in models]):
        np.testing.assert_allclose(_np(b.value), _np(a.value), atol=2e-5, err_msg=a.path)
    chunked = models[1]
    assert tuple(chunked(x, training=True).shape) == (8, 8, 16)  # fit's y_pred: the hidden states
    assert tuple(chunked(x).shape) == (8, 8, 29)  # users get logits
    chunked.compile(optimizer="adam", loss=ChunkedCrossEntropy(), metrics=["accuracy"])
    with pytest.raises(ValueError, match="accuracy"):
        chunked.fit(x, y, sample_weight=weights, verbose=0)


@pytest.mark.parametrize("fields", ARCHITECTURES.values(), ids=ARCHITECTURES.keys())
def test_custom_loop_gradients_equal_the_plain_loss(fields):
    x, y, weights = _batches()
    model = GPT(GPTConfig(**SIZES, **fields, vocabulary_padding=PADDING))
    trainable = model.trainable_variables

    def plain():
        logits = ops.cast(model(x, training=True), "float32")
        nll = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        return ops.sum(nll * weights) / np.sum(weights)

    def chunked():
        return chunked_cross_entropy_mean(model.hidden_states(x, training=True), model.output_matrix, y, weights,
                                          vocabulary_size=29, chunk_size=16)

    results = [_gradients(model, trainable, f) for f in (plain, chunked)]
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    for variable, a, b in zip(trainable, results[0][1], results[1][1]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6, err_msg=variable.path)


def _gradients(model, variables, loss_fn):
    if keras.backend.backend() == "jax":
        import jax

        def stateless(values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loss_fn()

        value, grads = jax.jit(jax.value_and_grad(stateless))([v.value for v in variables])
        return float(value), [np.asarray(g) for g in grads]
    import tensorflow as tf

    with tf.GradientTape() as tape:
        value = loss_fn()
    return float(value), [np.asarray(tf.convert_to_tensor(g)) for g in tape.gradient(value, variables)]

