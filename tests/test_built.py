"""Every layer is built after its first call, so Keras never re-traces a model before a batch.

Keras' ``train_on_batch`` / ``test_on_batch`` / ``predict_on_batch`` (and ``fit`` under a strategy) run
``Model._symbolic_build``, a symbolic trace of the whole model, whenever any layer in ``model._flatten_layers()`` has
``built == False``: one unbuilt sublayer (a weightless score, a Dropout, a hook) made it trace before every batch. Here
every public layer and every application model at a tiny size is called once and must leave no layer unbuilt, and the
four applications' training models, compiled as their recipes compile them, trace at most once in 3
``train_on_batch`` calls. Layers and the untrained models are called on ``keras.Input``s, as ``_symbolic_build``
calls a model (the same ``build``; an eager call under JAX would compile every op: seconds per layer).
"""

import contextlib

import keras
import numpy as np
import pytest

import attnlayers as al

B, T, S, D, N, H = 2, 3, 5, 8, 2, 4
RNG = np.random.default_rng(0)
Q = RNG.normal(size=(B, T, D)).astype("float32")
V = RNG.normal(size=(B, S, D)).astype("float32")
HEADS_Q = RNG.normal(size=(B, T, N, H)).astype("float32")
HEADS_K = RNG.normal(size=(B, S, N, H)).astype("float32")
TOKENS = np.array([[3, 5, 7, 0, 0], [1, 2, 3, 4, 6]], "int32")
QV = {"query": Q, "value": V}
SELF = {"query": V, "value": V}


def _reinforce_model():
    query, value = keras.Input((T, D)), keras.Input((S, D))
    context = al.HardAttention(score="general", estimator="reinforce", seed=1)(query, value)
    return al.ReinforceModel([query, value], keras.layers.Dense(3)(context))


# id -> (factory of the layer, inputs: one array (the first argument) or a dict of named arguments, call kwargs)
LAYERS = {
    # scores
    "dot_score": (lambda: al.DotScore(), {"query": Q, "key": V}, {}),
    "scaled_dot_score": (lambda: al.ScaledDotScore(), {"query": Q, "key": V}, {}),
    "general_score": (lambda: al.GeneralScore(scaled=True), {"query": Q, "key": V}, {}),
    "additive_score": (lambda: al.AdditiveScore(units=8), {"query": Q, "key": V}, {}),
    "mlp_score": (lambda: al.MLPScore(units=8, depth=2), {"query": Q, "key": V}, {}),
    "location_score": (lambda: al.LocationScore(max_length=S), {"query": Q, "key": V}, {}),
    "cosine_score": (lambda: al.CosineScore(trainable_temperature=True), {"query": Q, "key": V}, {}),
    # single-head attention
    "attention_dot_dropout": (lambda: al.Attention(score="dot", dropout=0.1, seed=1), QV, {}),
    "attention_general": (lambda: al.Attention(score="general"), QV, {"return_attention_scores": True}),
    "attention_pooling": (lambda: al.AttentionPooling(dropout=0.1), V, {}),
    "local_p": (lambda: al.LocalAttention(window=2, score="general", dropout=0.1), QV, {}),
    "local_m": (lambda: al.LocalAttention(window=2, mode="local-m", score="dot"), QV, {}),
    "hard_gumbel": (lambda: al.HardAttention(score="scaled_dot", estimator="gumbel"), QV, {}),
    "hard_reinforce": (lambda: al.HardAttention(score="dot", estimator="reinforce", seed=3), QV, {}),
    "reinforce_model": (_reinforce_model, {"__list__": [Q, V]}, {}),
    # multi-head attention
    "mha_default": (lambda: al.MultiHeadAttention(N, H), QV, {}),
    "mha_dot_dropout": (lambda: al.MultiHeadAttention(N, H, score="dot", dropout=0.1), QV, {}),
    "mha_general_hooks": (
        lambda: al.MultiHeadAttention(N, H, value_dim=3, score="general", dropout=0.1, use_gate=True, output_shape=6,
                                      position_bias=al.RelativePositionBias(N, num_buckets=8, max_distance=16)),
        QV, {"return_attention_scores": True}),
    "mha_gqa_rotary_alibi_cache": (
        lambda: al.MultiHeadAttention(4, H, num_key_value_heads=2, rotary=al.RotaryEmbedding(),
                                      position_bias=al.ALiBi(4)),
        {"query": V, "value": V, "cache": np.zeros((B, 2, S, 2, H), "float32")},
        {"cache_update_index": 0, "use_causal_mask": True}),
    "mha_chunked": (
        lambda: al.MultiHeadAttention(N, H, sliding_window=2, implementation="chunked", dropout=0.1), SELF,
        {"use_causal_mask": True}),
    "two_stream": (
        lambda: al.TwoStreamAttention(N, H, dropout=0.1, position_bias=al.TransformerXLRelativeBias(N)),
        {"content": V, "query_stream": V, "content_attention_mask": np.tril(np.ones((B, S, S), bool)),
         "query_attention_mask": np.tril(np.ones((B, S, S), bool), -1)}, {}),
    "linformer": (lambda: al.LinformerAttention(N, H, projected_length=2, max_length=S, dropout=0.1), SELF, {}),
    "bigbird": (
        lambda: al.BigBirdAttention(N, H, block_size=2, num_global_blocks=1, num_random_blocks=1, dropout=0.1),
        {"query": RNG.normal(size=(B, 8, D)).astype("float32"), "value": RNG.normal(size=(B, 8, D)).astype("float32")},
        {}),
    # positions and embeddings
    "sinusoidal": (lambda: al.SinusoidalPositionEncoding(), Q, {}),
    "position_embedding": (lambda: al.PositionEmbedding(sequence_length=8), Q, {}),
    "rotary": (lambda: al.RotaryEmbedding(), HEADS_Q, {}),
    "relative_bias": (lambda: al.RelativePositionBias(N, num_buckets=8, max_distance=16),
                      {"query": HEADS_Q, "key": HEADS_K}, {}),
    "alibi": (lambda: al.ALiBi(N), {"query": HEADS_Q, "key": HEADS_K}, {}),
    "token_position_embedding": (
        lambda: al.TokenAndPositionEmbedding(20, 8, D, num_segments=2, mask_zero=True),
        {"inputs": TOKENS, "segment_ids": np.zeros_like(TOKENS)}, {}),
    "rms_norm": (lambda: al.RMSNorm(), Q, {}),
    # recurrent decoders
    "bahdanau": (lambda: al.BahdanauDecoder(units=6, attention=al.Attention(score="additive", dropout=0.1)),
                 {"target_embeddings": Q, "memory": V}, {}),
    "luong": (lambda: al.LuongDecoder(units=D, attention=al.LocalAttention(window=1, score="dot")),
              {"target_embeddings": Q, "memory": V}, {}),
    "scheduled_sampler": (lambda: al.ScheduledSampler("linear:1,0.25", seed=1), TOKENS, {}),
    # Transformer
    "feedforward": (lambda: al.FeedForward(16, dropout=0.1), Q, {}),
    "feedforward_gated": (lambda: al.FeedForward(16, activation="swiglu"), Q, {}),
    "encoder_block": (lambda: al.TransformerEncoderBlock(N, 16, dropout=0.1), V, {}),
    "decoder_block": (lambda: al.TransformerDecoderBlock(N, 16, dropout=0.1),
                      {"decoder_sequence": Q, "encoder_sequence": V}, {}),
    "decoder_only_block": (lambda: al.TransformerDecoderBlock(N, 16, normalize_first=True),
                           {"decoder_sequence": Q}, {}),
    "decoder_block_transformer_xl_memory": (
        lambda: al.TransformerDecoderBlock(N, 16, attention_kwargs={"position_bias": al.TransformerXLRelativeBias(N)}),
        {"decoder_sequence": Q, "memory": V}, {}),
    "encoder_stack": (lambda: al.TransformerEncoder(2, N, 16, dropout=0.1), V, {}),
    "decoder_stack": (lambda: al.TransformerDecoder(2, N, 16, dropout=0.1, normalize_first=True),
                      {"decoder_sequence": Q, "encoder_sequence": V}, {}),
    # images
    "patch_embedding": (lambda: al.PatchEmbedding(2, D), RNG.normal(size=(B, 4, 6, 3)).astype("float32"), {}),
    "class_token": (lambda: al.ClassToken(), V, {}),
    "sagan": (lambda: al.SelfAttention2D(reduction=2, value_dim=4), RNG.normal(size=(B, 3, 4, D)).astype("float32"),
              {"return_attention_scores": True}),
}


def symbolic(x):
    """``keras.Input``s of the shapes and dtypes of the arrays in ``x`` (any structure)."""
    return keras.tree.map_structure(lambda a: keras.Input(batch_shape=a.shape, dtype=str(a.dtype)), x)


def call_once(layer, inputs, call_kwargs):
    if isinstance(inputs, dict) and "__list__" in inputs:
        return layer(inputs["__list__"], **call_kwargs)
    if isinstance(inputs, dict):
        return layer(**inputs, **call_kwargs)
    return layer(inputs, **call_kwargs)


def _walk(layer, path, seen):
    """(path, layer) for ``layer`` and every layer under it, as ``_flatten_layers`` visits them."""
    if id(layer) in seen:
        return
    seen.add(id(layer))
    yield path, layer
    for sub in layer._flatten_layers(include_self=False, recursive=False):
        yield from _walk(sub, f"{path}/{sub.name}", seen)


def unbuilt(layer):
    """The paths of the layers of ``layer`` (itself included) that are not built: exactly the layers of
    ``layer._flatten_layers()`` that make Keras trace the model again."""
    found = [f"{path} ({type(sub).__name__})" for path, sub in _walk(layer, layer.name, set()) if not sub.built]
    assert len(found) == sum(not sub.built for sub in layer._flatten_layers(include_self=True))
    return found


def trace_reasons(model):
    """Why ``Model._symbolic_build`` would trace ``model`` now (empty: it returns at once)."""
    reasons = unbuilt(model)
    if model._compile_metrics is not None and not model._compile_metrics.built:
        reasons.append("compiled metrics")
    if model._compile_loss is not None and not model._compile_loss.built:
        reasons.append("compiled loss")
    return reasons


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_is_fully_built_after_one_call(name):
    factory, inputs, call_kwargs = LAYERS[name]
    layer = factory()
    call_once(layer, symbolic(inputs), call_kwargs)  # as Model._symbolic_build calls a model
    assert not unbuilt(layer), f"{name}: unbuilt after one call: {unbuilt(layer)}"


# ---- applications ----------------------------------------------------------------------------------------------


def _ids(seed, vocabulary, lengths, length=8):
    """(len(lengths), length) int32 token ids in [3, vocabulary), padded with 0 after each row's length."""
    ids = np.random.default_rng(seed).integers(3, vocabulary, (len(lengths), length)).astype("int32")
    ids[np.arange(length)[None] >= np.asarray(lengths)[:, None]] = 0
    return ids


def _nmt(name):
    from attnlayers.applications.nmt.variants import build_recipe

    sizes = (dict(num_layers=1, d_model=16, num_heads=2, intermediate_dim=32, max_length=8)
             if name == "transformer" else dict(embedding_dim=8, units=8))
    return build_recipe(name, 30, 30, "tiny", **sizes)[0]  # compiled by the recipe, dropout 0.1


def _captioner(name, **encoder):
    from attnlayers.applications.captioning.builders import build_captioner

    sizes = (dict(num_layers=1, d_model=16, num_heads=2, intermediate_dim=32, max_length=8)
             if name == "transformer" else dict(embedding_dim=8, units=8))
    return build_captioner(name, 20, image_size=16, filters=(4, 8), dropout=0.1, seed=1, **sizes, **encoder)


def _bert_config():
    from attnlayers.applications.bert.config import BertConfig

    return BertConfig(vocabulary_size=30, max_sequence_length=8, num_layers=1, num_heads=2, hidden_dim=16,
                      intermediate_dim=32, dropout=0.1)


def _bert_pretrainer():
    """As the BERT scale-out job builds and compiles it (``build_model`` of ``benchmarks/jobs/bert.py``), with
    one layer."""
    from attnlayers.applications.bert.backbone import BertBackbone
    from attnlayers.applications.bert.pretrainer import BertPretrainer

    model = BertPretrainer(BertBackbone(_bert_config()))
    model.compile_for_pretraining(1e-3, warmup_steps=1, total_steps=4)
    return model


def _bert_head(cls, *args):
    from attnlayers.applications.bert.backbone import BertBackbone

    model = cls(BertBackbone(_bert_config()), *args)
    model.compile_for_finetuning(1e-3)
    return model


def _gpt(**config):
    """As the GPT scale-out job builds and compiles it (``benchmarks/jobs/gpt.py``: ``build_model``, the recipe's
    ``compile_for_training``), with one layer."""
    from attnlayers.applications.gpt.model import GPT, GPTConfig
    from attnlayers.applications.gpt.runs import TrainingSettings, compile_for_training

    model = GPT(GPTConfig(vocabulary_size=30, max_sequence_length=8, num_layers=1, num_heads=2, hidden_dim=16,
                          intermediate_dim=32, dropout=0.1, **config))
    compile_for_training(model, TrainingSettings(vocabulary_size=30, sequence_length=8, batch_size=4))
    return model


def _vit(**overrides):
    """As examples/train_vit.py builds and compiles it (``vision.runs``), with one layer (or the CNN)."""
    from attnlayers.applications.vision.runs import TrainingSettings, build_model, compile_for_training

    settings = TrainingSettings(num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32, dropout=0.1, **overrides)
    model = build_model(settings, (8, 8, 1), 10)
    compile_for_training(model, settings)
    return model


def _batches():
    """name -> a (x, y[, sample_weight]) batch of 4 for each kind of application model."""
    source, target = _ids(1, 30, [8, 5, 3, 6]), _ids(2, 30, [7, 4, 8, 2])
    images = np.random.default_rng(3).integers(0, 255, (4, 16, 16, 3)).astype("uint8")
    caption = _ids(4, 20, [8, 5, 3, 6])
    ids = _ids(5, 30, [8, 5, 3, 6])
    features = {"token_ids": ids, "segment_ids": (np.arange(8)[None] > 3).astype("int32") * (ids != 0),
                "padding_mask": ids != 0}
    return {
        "nmt": ((source, target), np.roll(target, -1, axis=1)),
        "captioning": ((images, caption), np.roll(caption, -1, axis=1)),
        "bert_pretrainer": ({**features, "mask_positions": np.array([[1, 2]] * 4, "int32")},
                            {"mlm": ids[:, 1:3], "nsp": np.array([0, 1, 0, 1], "int32")},
                            {"mlm": np.ones((4, 2), "float32")}),
        "bert_classifier": (features, np.array([0, 2, 1, 2], "int32")),
        "bert_token_classifier": (features, ids % 4),
        "bert_span_qa": (features, {"start": np.array([1, 2, 0, 1], "int32"), "end": np.array([2, 2, 0, 3], "int32")}),
        "gpt": ({"token_ids": ids, "padding_mask": ids != 0}, np.roll(ids, -1, axis=1), ids != 0),
        "vit": (np.random.default_rng(6).uniform(size=(4, 8, 8, 1)).astype("float32"), np.array([0, 3, 9, 1])),
    }


def _heads():
    from attnlayers.applications.bert.heads import BertClassifier, BertSpanQA, BertTokenClassifier

    return {"bert_classifier": lambda: _bert_head(BertClassifier, 3),
            "bert_token_classifier": lambda: _bert_head(BertTokenClassifier, 4),
            "bert_span_qa": lambda: _bert_head(BertSpanQA)}


# name -> (build: a compiled model, batch name)
APPLICATIONS = {
    **{f"nmt_{name}": (lambda name=name: _nmt(name), "nmt")
       for name in ("seq2seq", "bahdanau", "luong", "local", "transformer")},
    **{f"captioning_{name}": (lambda name=name: _captioner(name), "captioning")
       for name in ("soft", "hard", "none", "transformer")},
    "captioning_soft_sagan": (lambda: _captioner("soft", self_attention=True), "captioning"),
    "captioning_hard_reinforce": (lambda: _captioner("hard", estimator="reinforce", query="previous"), "captioning"),
    "captioning_soft_vit": (lambda: _captioner("soft", backbone="vit", vit={"patch_size": 4, "hidden_dim": 8,
                                                                             "num_heads": 2, "mlp_dim": 16}),
                            "captioning"),
    "captioning_soft_hybrid_fading": (lambda: _captioner("soft", backbone="hybrid", doubly_stochastic_steps=5,
                                                         vit={"hidden_dim": 8, "num_heads": 2, "mlp_dim": 16}),
                                      "captioning"),
    "bert_pretrainer": (_bert_pretrainer, "bert_pretrainer"),
    **{name: (lambda name=name: _heads()[name](), name)
       for name in ("bert_classifier", "bert_token_classifier", "bert_span_qa")},
    "gpt": (_gpt, "gpt"),
    "gpt_llama": (lambda: _gpt(architecture="llama", num_key_value_heads=1), "gpt"),
    "vit": (_vit, "vit"),
    "vit_cnn_baseline": (lambda: _vit(model="cnn", filters=(4, 8, 8)), "vit"),
}
# One training model per application, compiled as its recipe compiles it, whose train_on_batch is counted (the
# others are only called: a train step compiles for seconds). The attention-RNN models never had an unbuilt layer;
# these are the ones built on MultiHeadAttention, whose dot / scaled dot score was left unbuilt.
TRAINED = ("nmt_transformer", "captioning_transformer", "bert_pretrainer", "gpt", "vit")


@pytest.fixture(scope="module")
def batches():
    return _batches()


class SymbolicBuildCounter:
    """Wraps ``keras.Model._symbolic_build``: counts its calls, and records those that trace the model (some layer
    unbuilt, or the compiled loss / metrics unbuilt) with what made them trace. JAX's trainer calls it before every
    ``*_on_batch`` (it returns at once when nothing is unbuilt); TensorFlow's only for a model made under a
    distribution strategy (``_maybe_symbolic_build``), so there the model is made and trained under one."""

    def __init__(self, monkeypatch):
        self.calls = 0
        self.traces = []
        original = keras.Model._symbolic_build

        def _symbolic_build(model, *args, **kwargs):
            self.calls += 1
            reasons = trace_reasons(model)
            if reasons:
                self.traces.append(reasons)
            return original(model, *args, **kwargs)

        monkeypatch.setattr(keras.Model, "_symbolic_build", _symbolic_build)


def _strategy_scope():
    """Under TensorFlow, a one-device ``tf.distribute`` strategy: the only case where its trainer runs
    ``_symbolic_build`` before a batch (and so the case where an unbuilt layer costs a trace). JAX's always does."""
    if keras.backend.backend() != "tensorflow":
        return contextlib.nullcontext()
    import tensorflow as tf

    return tf.distribute.OneDeviceStrategy("/cpu:0").scope()


@pytest.mark.parametrize("name", [n for n in APPLICATIONS if n not in TRAINED])
def test_application_model_is_fully_built_after_one_call(name, batches):
    build, batch = APPLICATIONS[name]
    model = build()
    model(symbolic(batches[batch][0]))
    assert not unbuilt(model), f"{name}: unbuilt after one call: {unbuilt(model)}"


@pytest.mark.parametrize("name", TRAINED)
def test_train_on_batch_traces_the_model_at_most_once(name, batches, monkeypatch):
    build, batch = APPLICATIONS[name]
    with _strategy_scope():
        model = build()
        counter = SymbolicBuildCounter(monkeypatch)
        for _ in range(3):
            model.train_on_batch(*batches[batch])
    assert counter.calls == 3, f"{name}: Keras called _symbolic_build {counter.calls} times in 3 train_on_batch calls"
    assert len(counter.traces) <= 1, f"{name}: _symbolic_build traced {len(counter.traces)} times: {counter.traces}"
    assert not trace_reasons(model), f"{name}: would trace again: {trace_reasons(model)}"
