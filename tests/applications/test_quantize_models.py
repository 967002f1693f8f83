"""Keras' own ``model.quantize("int8" | "int4")`` on every application model but GPT (tests/applications/gpt/
test_quantize.py): logits within 2% of float32's range in int8 (max |q - f| / max |f|) on random inputs, int4 within a
looser bound, and what must keep working quantized: BERT's tied masked-LM decoder (it read the int8 table without its
scale: ~4,000x off), the translators' and captioners' cached decoding steps (equal to the teacher-forced logits of
the quantized model). One test per family, tiny models; int4 on BERT and ViT (and GPT's test)."""

import warnings

import keras
import numpy as np
import pytest
from attnlayers.applications.bert import (
    BertBackbone,
    BertConfig,
    BertMaskedLMHead,
    BertPretrainer,
    save_hf_checkpoint,
)
from attnlayers.applications.captioning import ShowAttendTell, TransformerCaptioner
from attnlayers.applications.nmt.model import build_model
from attnlayers.applications.vision import ViT, ViTConfig
from keras import ops

from attnlayers.quantization import float_rows, quantized_layers

# The bar for int8; int4 (4-bit weights, 15 levels) measured 0.06-0.20 at these sizes.
BOUNDS = {"int8": 0.02, "int4": 0.35}


def _np(x):
    return keras.tree.map_structure(lambda t: np.asarray(ops.convert_to_numpy(t)), x)


def _relative_error(outputs, reference):
    return max(float(np.abs(q - f).max() / np.abs(f).max())
               for q, f in zip(keras.tree.flatten(outputs), keras.tree.flatten(reference)))


def _quantized_copies(make, inputs, modes=("int8",)):
    """({weight path: float value}, the float outputs, {mode: a quantized model}) of ``make()`` on ``inputs``: int8
    is the model itself, quantized in place after its float outputs; another mode, a float copy quantized."""
    keras.utils.set_random_seed(0)
    model = make()
    reference = _np(model(inputs))
    weights = {weight.path: _np(weight) for weight in model.weights}
    copies = {}
    for mode in sorted(modes, key=lambda mode: mode == "int8"):  # the copies first, from the float weights
        copy = model
        if mode != "int8":
            copy = model.__class__.from_config(model.get_config())
            copy(inputs)
            copy.set_weights(model.get_weights())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # keras names the layers it leaves float (norms, dropout...)
            copy.quantize(mode)
        copies[mode] = copy
    return weights, reference, copies


def _assert_near(copies, inputs, reference, what):
    for mode, copy in copies.items():
        assert quantized_layers(copy), (what, mode)  # it was quantized at all
        error = _relative_error(_np(copy(inputs)), reference)
        assert error < BOUNDS[mode], (what, mode, error)


def test_bert_backbone_heads_and_tied_masked_lm_quantize(tmp_path):
    config = BertConfig(vocabulary_size=100, max_sequence_length=16, num_layers=1, num_heads=2, hidden_dim=32,
                        intermediate_dim=64, dropout=0.0)
    ids = np.random.default_rng(0).integers(5, 100, (2, 8)).astype("int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": ids > 10,
              "mask_positions": np.array([[1, 2], [3, 7]], "int32")}
    # The pretrainer: backbone, pooler, NSP head (a Dense on the pooled output, as BertClassifier's) and the masked-LM
    # decoder tied to the (quantized) token table.
    weights, reference, copies = _quantized_copies(lambda: BertPretrainer(BertBackbone(config)), inputs, tuple(BOUNDS))
    _assert_near(copies, inputs, reference, "BertPretrainer")
    backbone = copies["int8"].backbone
    assert backbone.token_embedding.quantization_mode == "int8"
    table = float_rows(backbone.token_embedding)  # dequantized: within int8 rounding of the float table
    np.testing.assert_allclose(_np(table), weights[backbone.token_embedding.path + "/embeddings"], atol=2e-3)
    hidden = np.zeros((1, 4, 32), "float32")
    with pytest.raises(ValueError, match=r"`embeddings` must be the float token embedding matrix.*int8.*float_rows"):
        BertMaskedLMHead(100)(hidden, np.zeros((1, 1), "int32"), backbone.token_embedding.embeddings)
    with pytest.raises(ValueError, match=r"save_hf_checkpoint needs float weights.*quantized.*'int8'"):
        save_hf_checkpoint(backbone, str(tmp_path))  # it wrote the integer codes without their scales


def test_vit_quantizes():
    config = ViTConfig(image_shape=(8, 8, 1), patch_size=4, num_classes=5, num_layers=1, num_heads=2, hidden_dim=32,
                       mlp_dim=64)
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 1)).astype("float32")
    _, reference, copies = _quantized_copies(lambda: ViT(config), images, tuple(BOUNDS))
    _assert_near(copies, images, reference, "ViT")


def _cached_steps_equal_teacher_forcing(model, source, target_in, steps):
    """The quantized model's cached next() logits equal its own teacher-forced ones (the cache paths read the same
    quantized layers)."""
    logits = _np(model((source, target_in)))
    cache = model.initial_cache(source)
    for index in range(1, steps + 1):
        step, cache = model.next(target_in, cache, index)
        np.testing.assert_allclose(_np(step), logits[:, index - 1], rtol=1e-4, atol=1e-4)


def test_translators_quantize_and_decode_from_their_caches():
    rng = np.random.default_rng(2)
    source = rng.integers(4, 30, (2, 6)).astype("int32")
    target_in = np.concatenate([np.ones((2, 1), "int32"), rng.integers(4, 30, (2, 4)).astype("int32")], axis=1)
    inputs = (source, target_in)
    transformer = {"num_layers": 1, "d_model": 32, "num_heads": 2, "intermediate_dim": 64, "dropout": 0.0,
                   "max_length": 8, "shared_embeddings": True}  # the tied output projection too
    rnn = {"embedding_dim": 16, "units": 16, "dropout": 0.0}
    for name, kwargs in (("transformer", transformer), ("bahdanau", rnn)):
        _, reference, copies = _quantized_copies(lambda n=name, k=kwargs: build_model(n, 30, 30, **k), inputs)
        _assert_near(copies, inputs, reference, name)
        _cached_steps_equal_teacher_forcing(copies["int8"], source, target_in, 4)


def test_captioners_quantize_and_decode_from_their_caches():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    caption_in = np.concatenate([np.ones((2, 1), "int32"), rng.integers(4, 12, (2, 4)).astype("int32")], axis=1)
    inputs = (images, caption_in)
    small = {"image_size": 16, "filters": (4, 8)}
    for make in (lambda: ShowAttendTell(12, units=16, embedding_dim=8, dropout=0.0, **small),
                 lambda: TransformerCaptioner(12, num_layers=1, d_model=16, num_heads=2, intermediate_dim=32, **small)):
        _, reference, copies = _quantized_copies(make, inputs)
        _assert_near(copies, inputs, reference, type(copies["int8"]).__name__)
        _cached_steps_equal_teacher_forcing(copies["int8"], images, caption_in, 4)
