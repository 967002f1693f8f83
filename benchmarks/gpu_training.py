"""GPU training against keras-hub: attnlayers' GPT and BERT against keras-hub's GPT2CausalLM and BertMaskedLM of the
same sizes, trained side by side in one process, and cached greedy generation against GPT2CausalLM.generate.

    KERAS_BACKEND=jax python benchmarks/gpu_training.py --size full --parts gpt --isolate --json gpt.json --markdown
    python benchmarks/gpu_training.py --size tiny --steps 2          # a smoke run on CPU (TensorFlow or JAX)

Made for the JAX backend on a GPU (the machine has no TensorFlow); it runs under TensorFlow too. Parts (--parts):

- gpt: GPT-2 small training (--size full: 12 layers, d 768, 12 heads, d_ff 3072, V 50,257, B 16 x T 1024, dropout
  0.1). ours = ``attnlayers.applications.gpt.GPT(GPTConfig(...))``; peer = ``keras_hub.models.GPT2CausalLM`` on a
  ``GPT2Backbone`` built from the same arguments (no preset, no preprocessor). Both compiled by the GPT recipe
  (``gpt.recipes.compile_for_training``: the causal LM loss, the token-weighted perplexity metric, AdamW with
  GPT-3's betas, weight decay on matrices only, global norm clipping 1.0; a constant learning rate here).
- bert: BERT-base masked-LM training (12 layers, d 768, 12 heads, V 30,522, B 32 x T 512, 15% of the positions
  masked: P = 77 predictions per sequence). ours = ``bert.BertPretrainer(bert.BertBackbone(BertConfig(...)))``
  compiled by its ``compile_for_pretraining`` (BERT's AdamW; loss = masked LM + next sentence prediction: ours also
  runs the NSP head, a d x 2 layer on the pooled output, which keras-hub's model lacks); peer =
  ``keras_hub.models.BertMaskedLM`` on a ``BertBackbone`` built from the same arguments, compiled with the same
  optimizer (``bert.bert_optimizer``), the masked LM loss averaged over real predictions and the weighted accuracy.
- generate: cached greedy generation, batch 1 and 8, a 16-token prompt + 256 new tokens, no stop token, float32
  (and ``jax_default_matmul_precision = highest`` under JAX), on the GPT-2 small sizes. The peer is
  ``GPT2CausalLM.generate({"token_ids", "padding_mask"}, stop_token_ids=None)`` with ``sampler="greedy"`` (random
  weights); ours = ``gpt.from_keras_hub(backbone)`` (the same weights) through ``GPT.generate(prompt, max_length,
  "greedy", stop_token_ids=None)``, compiled as keras-hub compiles its own (``jax.jit`` over the variables' values
  in a ``keras.StatelessScope``; ``tf.function(jit_compile=True)`` under TensorFlow). The tokens are comparable:
  the row says how many generated tokens agree.

Training is measured two ways, on random tokens, with ``jit_compile=True`` and the dtype policy of --precision
(default mixed_bfloat16 on a GPU, float32 on a CPU):
- fit: ``keras.Model.fit`` over 2 epochs of --steps steps (a Python generator cycling over a few fixed batches);
  the step time is the second epoch's time / --steps (the first holds the compilation). keras-hub's own ``fit``
  (``PipelineModel.fit``) is bypassed: it only turns arrays into a tf.data or grain dataset and maps the
  preprocessor (None here) before calling ``keras.Model.fit``, refuses generators, and needs tensorflow or grain.
- train_on_batch: each model's own (keras-hub's converts the inputs to tensors, then calls keras').
  The median of --steps calls after one warm-up call (each call returns its logs: one sync a step).

The sides run one after the other (keras-hub first); the first is freed before the second is built. With
--isolate each side of a training part runs in a fresh process of this script instead: on an H100 the model compiled
second in one process got float32 (TF32) cuBLAS GEMMs for its projections and ran 1.6-1.8x slower than in a process
of its own (docs/results/training.md), so GPU comparisons use --isolate. Each row
reports, per side: the step time (ms; for generation, a whole generate call); tokens/s (B x T / step time; for
generation, the B x new generated tokens / call time); MFU = (6 N + 12 L d T) x tokens/s / peak FLOP/s, N being
ours' weight count on both sides (so the MFU ratio is the throughput ratio), the peak 989e12 (H100 / H200, bf16
dense) under mixed_bfloat16 on those GPUs, or --peak-tflops (n/a on a CPU, under float32 unless given, and for
generation); the peak memory; and the ratio ours / peer of the step times (below 1: attnlayers is faster).

--size tiny sets XLA_FLAGS=--xla_backend_optimization_level=0 unless XLA_FLAGS is set: its time is mostly compiling.

Generation: the median of --repeats calls after the first (which compiles); tokens/s counts the new tokens only.

Notes the run prints (and keeps in the JSON): ``import attnlayers.applications.bert`` needs TensorFlow (its export,
tokenizer and data modules import it), so on a machine without TensorFlow the script loads the package's config,
backbone and pretrainer modules on their own and says so; a model with layers that are never marked built gets a
note, because keras then traces the whole model again at every ``train_on_batch`` call under JAX (it shows in that
row's time).

Peak memory: under JAX, XLA's memory plan of the side's compiled step (arguments + outputs - donated aliases +
temporaries: weights, optimizer state, the batch and the activations of one step; for generation, one generate
call), read from ``jitted.lower(...).compile().memory_analysis()`` of the function keras (or keras-hub, or this
script for ours' generate) compiled: with the same arguments, a cache hit, not a second compilation. The process's
``peak_bytes_in_use`` (``device.memory_stats()``: a high-water mark that cannot be reset, so it only grows across
sides) is in the JSON as ``process_peak_bytes``. Under TensorFlow on a GPU: the peak of TensorFlow's GPU allocator
during the side (``reset_memory_stats`` at its start); on a CPU: n/a.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# A tiny run is a smoke run whose time is mostly XLA compiling a dozen small programs: without XLA's backend
# optimizations they compile several times faster (set before TensorFlow or JAX starts; not when XLA_FLAGS is set).
TINY_XLA_FLAGS = "--xla_backend_optimization_level=0"
if any(a == "--size=tiny" or (a == "tiny" and b == "--size") for b, a in zip(sys.argv, sys.argv[1:])):
    os.environ.setdefault("XLA_FLAGS", TINY_XLA_FLAGS)

import keras  # noqa: E402
import measure  # benchmarks/, the script's folder
import numpy as np  # noqa: E402
from epoch_timer import EpochTimer  # noqa: E402

BACKEND = keras.backend.backend()

SIZES = {
    "full": {
        "gpt": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12, "intermediate_dim": 3072,
                "vocabulary_size": 50257, "max_sequence_length": 1024, "batch": 16, "length": 1024},
        "bert": {"num_layers": 12, "hidden_dim": 768, "num_heads": 12, "intermediate_dim": 3072,
                 "vocabulary_size": 30522, "max_sequence_length": 512, "batch": 32, "length": 512},
        "generate": {"prompt": 16, "new_tokens": 256, "batches": (1, 8)},
    },
    "tiny": {
        "gpt": {"num_layers": 2, "hidden_dim": 64, "num_heads": 2, "intermediate_dim": 256, "vocabulary_size": 1000,
                "max_sequence_length": 32, "batch": 2, "length": 32},
        "bert": {"num_layers": 2, "hidden_dim": 64, "num_heads": 2, "intermediate_dim": 256, "vocabulary_size": 1000,
                 "max_sequence_length": 32, "batch": 2, "length": 32},
        "generate": {"prompt": 8, "new_tokens": 24, "batches": (1, 8)},
    },
}
PARTS = ("gpt", "bert", "generate")
MASKED_SHARE = 0.15
DROPOUT = 0.1  # GPT-2's and BERT's: embeddings, residual branches and attention weights (--dropout)
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12}  # dense bf16 tensor-core peak (SXM)
DISTINCT_BATCHES = 4  # fit cycles over this many fixed random batches


# ---- the machine ------------------------------------------------------------------------------------------------


def peak_flops(args, device, precision):
    if args.peak_tflops is not None:
        return args.peak_tflops * 1e12
    if device["kind"] != "gpu" or "bfloat16" not in precision:
        return None
    for name, flops in PEAK_BF16_FLOPS.items():
        if name in device["name"]:
            return flops
    return None


# ---- memory -------------------------------------------------------------------------------------------------------


class Profiler:
    """--profile DIR (JAX): a profiler trace of a few steps of each side, kept as ``DIR/NAME.xplane.pb`` (XPlane:
    every GPU kernel with its XLA op and the op's name scope; ``benchmarks/xplane_summary.py`` sums it)."""

    def __init__(self, directory):
        self.directory = directory if BACKEND == "jax" else None

    def capture(self, name, call, times, log):
        if self.directory is None:
            return None
        import glob
        import shutil
        import tempfile

        import jax

        scratch = tempfile.mkdtemp()
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # the device's kernels and XLA's ops; no Python frames
        options.enable_hlo_proto = False
        with jax.profiler.trace(scratch, profiler_options=options):
            for _ in range(times):
                jax.block_until_ready(call())
        found = glob.glob(os.path.join(scratch, "**", "*.xplane.pb"), recursive=True)
        if not found:
            log(f"    (profile {name}: the trace wrote no .xplane.pb)")
            return None
        os.makedirs(self.directory, exist_ok=True)
        target = os.path.join(self.directory, f"{name}.xplane.pb")
        shutil.move(found[0], target)
        shutil.rmtree(scratch, ignore_errors=True)
        log(f"    profile of {times} calls: {target}")
        return target


def train_step_bytes(model, batch):
    """XLA's plan for keras' compiled JAX train step of ``model`` on ``batch`` = (x, y, sample_weight)."""
    jitted = measure.jitted_in(model.train_function)
    if jitted is None:
        raise ValueError("keras' train function holds no jax.jit function")
    state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
             [v.value for v in model.optimizer.variables], [v.value for v in model.metrics_variables])
    return measure.compiled_bytes(jitted, state, batch)


# ---- training -----------------------------------------------------------------------------------------------------


def gpt_batches(sizes, count, seed):
    """``count`` (x, y, sample_weight) batches of random tokens: x = {"token_ids", "padding_mask"} (B, T)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        windows = rng.integers(0, sizes["vocabulary_size"], (sizes["batch"], sizes["length"] + 1), dtype=np.int32)
        x = {"token_ids": windows[:, :-1], "padding_mask": np.ones((sizes["batch"], sizes["length"]), bool)}
        out.append((x, windows[:, 1:], np.ones((sizes["batch"], sizes["length"]), np.float32)))
    return out


def masked_positions(sizes):
    return max(1, round(MASKED_SHARE * sizes["length"]))


def bert_batches(sizes, count, seed):
    """``count`` masked-LM batches: ``(x, mask_ids, mask_weights, nsp_labels)``, x = {"token_ids", "segment_ids",
    "padding_mask", "mask_positions"}; 15% of the positions (never [CLS] at 0) masked with id 103 % V."""
    rng = np.random.default_rng(seed)
    batch, length, vocabulary = sizes["batch"], sizes["length"], sizes["vocabulary_size"]
    predictions = masked_positions(sizes)
    out = []
    for _ in range(count):
        tokens = rng.integers(1, vocabulary, (batch, length), dtype=np.int32)
        positions = np.sort(np.stack([rng.choice(np.arange(1, length), predictions, replace=False)
                                      for _ in range(batch)]), axis=1).astype(np.int32)
        labels = np.take_along_axis(tokens, positions, axis=1)
        masked = tokens.copy()
        np.put_along_axis(masked, positions, 103 % vocabulary, axis=1)
        segments = np.zeros((batch, length), np.int32)
        segments[:, length // 2:] = 1
        x = {"token_ids": masked, "segment_ids": segments, "padding_mask": np.ones((batch, length), bool),
             "mask_positions": positions}
        out.append((x, labels, np.ones((batch, predictions), np.float32),
                    rng.integers(0, 2, (batch,), dtype=np.int32)))
    return out


def build_gpt(role, sizes):
    import keras_hub
    from attnlayers.applications.gpt import GPT, GPTConfig
    from attnlayers.applications.gpt.runs import TrainingSettings, compile_for_training

    model_sizes = {k: sizes[k] for k in ("num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                                         "vocabulary_size", "max_sequence_length")}
    keras.utils.set_random_seed(0)
    options = {"loss_chunk_size": None}  # the peer's: its loss reads its logits
    if role == "ours":
        model = GPT(GPTConfig(dropout=sizes.get("dropout", DROPOUT), vocabulary_padding=sizes.get("vocabulary_padding", 1),
                              attention_implementation=sizes.get("attention_implementation", "auto"), **model_sizes))
        label = "attnlayers.applications.gpt.GPT(GPTConfig(...)), gpt.recipes.compile_for_training"
        options["loss_chunk_size"] = sizes.get("loss_chunk_size")
    else:
        backbone = keras_hub.models.GPT2Backbone(dropout=sizes.get("dropout", DROPOUT), **model_sizes)
        model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        label = "keras_hub.models.GPT2CausalLM(GPT2Backbone(...), preprocessor=None), the same compile"
    compile_for_training(model, TrainingSettings(jit_compile=True, **options))  # its learning-rate callback unused
    return model, label


def import_bert():
    """``(BertBackbone, BertConfig, BertPretrainer, bert_optimizer)``: BERT's model modules, which import without
    TensorFlow (the GPU machine has none)."""
    from attnlayers.applications import bert

    return bert.BertBackbone, bert.BertConfig, bert.BertPretrainer, bert.bert_optimizer


def build_bert(role, sizes):
    import keras_hub

    BertBackbone, BertConfig, BertPretrainer, bert_optimizer = import_bert()
    model_sizes = {k: sizes[k] for k in ("num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                                         "vocabulary_size", "max_sequence_length")}
    learning_rate, warmup, total = 1e-4, 10, 10_000
    keras.utils.set_random_seed(0)
    if role == "ours":
        model = BertPretrainer(BertBackbone(BertConfig(
            dropout=sizes.get("dropout", DROPOUT), attention_implementation=sizes.get("attention_implementation", "auto"),
            **model_sizes)))
        model.compile_for_pretraining(learning_rate, warmup_steps=warmup, total_steps=total, jit_compile=True)
        return model, ("attnlayers.applications.bert.BertPretrainer(BertBackbone(BertConfig(...))), "
                       "compile_for_pretraining")
    backbone = keras_hub.models.BertBackbone(dropout=sizes.get("dropout", DROPOUT), **model_sizes)
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    model.compile(optimizer=bert_optimizer(learning_rate, warmup, total),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  reduction="mean_with_sample_weight"),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")], jit_compile=True)
    return model, "keras_hub.models.BertMaskedLM(BertBackbone(...), preprocessor=None), BERT's AdamW"


def side_batches(part, role, batches):
    """The batches in the structure the side's model trains on."""
    if part == "gpt":
        return batches
    if role == "ours":
        return [(x, {"mlm": ids, "nsp": nsp}, {"mlm": weights}) for x, ids, weights, nsp in batches]
    return [(x, ids, weights) for x, ids, weights, _ in batches]


def repeat_batches(data):
    """The batches over and over, for ``fit`` (a Python generator)."""
    while True:
        yield from data


def train_side(part, role, sizes, batches, steps, memory, profiler, log):
    """Builds one side, times fit then train_on_batch; returns {"fit": {...}, "train_on_batch": {...}, ...}."""
    build = build_gpt if part == "gpt" else build_bert
    memory.start()
    model, label = build(role, sizes)
    data = side_batches(part, role, batches)

    timer = EpochTimer()
    # keras.Model.fit on both sides: keras-hub's (PipelineModel.fit) only turns arrays into a tf.data or grain
    # dataset and maps the preprocessor (None here) over it before calling it; it refuses a Python generator, and
    # arrays need tensorflow or grain, which the GPU machine lacks.
    keras.Model.fit(model, repeat_batches(data), epochs=2, steps_per_epoch=steps, shuffle=False, verbose=0,
                    callbacks=[timer])
    fit_ms = timer.seconds[1] / steps * 1e3
    # A layer left unbuilt makes keras run its symbolic build (a whole trace of the model) again at every
    # train_on_batch / test_on_batch call under JAX (keras Trainer._symbolic_build): say so, it shows in the row.
    unbuilt = sorted({type(layer).__name__ for layer in model._flatten_layers() if not layer.built})
    if unbuilt:
        log(f"  [{part}] {role:9s} note: layers never marked built after fit: {', '.join(unbuilt)} (under JAX, keras "
            "traces the whole model again at every train_on_batch call)")
    routes = attention_routes(model)
    if routes:
        log(f"  [{part}] {role:9s} attention routes taken: {', '.join(routes)}")
    log(f"  [{part}] {role:9s} fit: {fit_ms:9.2f} ms/step ({steps} steps; first epoch, compilation included, "
        f"{timer.seconds[0]:.1f} s)")
    x, y, weights = data[0]
    warmup_s, _ = measure.timed(model.train_on_batch, x, y, weights)  # TensorFlow compiles the step again here
    samples = []
    for step in range(steps):
        x, y, weights = data[step % len(data)]
        samples.append(measure.timed(model.train_on_batch, x, y, weights)[0] * 1e3)  # returns floats: waits
    tob_ms = statistics.median(samples)
    log(f"  [{part}] {role:9s} train_on_batch: {tob_ms:9.2f} ms/step (median of {steps}; warm-up call "
        f"{warmup_s:.1f} s)")
    begin = time.perf_counter()
    peak, source = memory.side_peak(lambda: train_step_bytes(model, data[0]))
    log(f"  [{part}] {role:9s} memory plan read in {time.perf_counter() - begin:.1f} s")
    profile = profiler.capture(f"{part}-{role}", lambda: model.train_on_batch(x, y, sample_weight=weights), 3, log)
    result = {
        "label": label, "parameters": int(model.count_params()), "peak_bytes": peak, "memory_source": source,
        "process": os.getpid(),
        "unbuilt_layers": unbuilt, "profile": profile, "attention_routes": routes,
        "process_peak_bytes": memory.process_peak(),
        "fit": {"step_ms": fit_ms, "first_epoch_s": timer.seconds[0], "epoch_s": timer.seconds},
        "train_on_batch": {"step_ms": tob_ms, "samples_ms": samples, "warmup_s": warmup_s},
    }
    return result


def attention_routes(model):
    """The routes attnlayers' attention layers of ``model`` took in their last call (``last_attention``, e.g.
    "flash (triton)"), sorted; [] for keras-hub's."""
    from attnlayers.layer_walk import nested_layers

    return sorted({str(layer.last_attention) for layer in nested_layers(model)
                   if getattr(layer, "last_attention", None) is not None})


def training_batches(part, sizes, steps):
    return (gpt_batches if part == "gpt" else bert_batches)(sizes, min(steps, DISTINCT_BATCHES), seed=1)


def isolated_side(part, role, forward):
    """``--isolate``: one side trained in a fresh process of this script; returns its :func:`train_side` dict."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "side.json")
        command = [sys.executable, os.path.abspath(__file__), *forward, "--parts", part, "--side", role,
                   "--side-json", path]
        returncode = subprocess.run(command, check=False).returncode
        if returncode != 0:
            raise RuntimeError(f"the {role} side of {part} failed in its own process (exit status {returncode})")
        with open(path) as f:
            return json.load(f)


def measure_training(part, sizes, steps, flops_rate, memory, profiler, log, isolate=None):
    """Both sides of a training part, one after the other in this process, or each in a fresh process when
    ``isolate`` holds the arguments to forward to it."""
    batches = training_batches(part, sizes, steps)
    sides = {}
    for role in ("peer", "ours"):
        if isolate is not None:
            sides[role] = isolated_side(part, role, isolate)
            continue
        sides[role] = train_side(part, role, sizes, batches, steps, memory, profiler, log)
        free()
    parameters = sides["ours"]["parameters"]
    tokens = sizes["batch"] * sizes["length"]
    flops_per_token = 6 * parameters + 12 * sizes["num_layers"] * sizes["hidden_dim"] * sizes["length"]
    rows = []
    for method in ("fit", "train_on_batch"):
        row = {"part": part, "method": method, "batch": sizes["batch"], "length": sizes["length"],
               "sizes": sizes, "flops_per_token": flops_per_token, "mfu_parameters": parameters}
        if part == "bert":
            row["masked_positions"] = masked_positions(sizes)
        for role, side in sides.items():
            step_ms = side[method]["step_ms"]
            tokens_per_s = tokens / (step_ms / 1e3)
            row[role] = {
                "label": side["label"], "parameters": side["parameters"], "step_ms": step_ms,
                "tokens_per_s": tokens_per_s,
                "mfu": None if flops_rate is None else flops_per_token * tokens_per_s / flops_rate,
                "peak_bytes": side["peak_bytes"], "memory_source": side["memory_source"],
                "process_peak_bytes": side["process_peak_bytes"], "unbuilt_layers": side["unbuilt_layers"],
                "process": side["process"], "profile": side["profile"],
                **{k: v for k, v in side[method].items() if k != "step_ms"},
            }
        row["ratio"] = row["ours"]["step_ms"] / row["peer"]["step_ms"]
        rows.append(row)
    return rows


# ---- generation ---------------------------------------------------------------------------------------------------


def compiled_generate(model, max_length):
    """``prompt -> tokens`` through ``model.generate`` (greedy, no stop token), compiled as keras-hub compiles its
    own generate: ``jax.jit`` with the variables' values as arguments in a ``keras.StatelessScope`` (not baked into
    the program as constants), or ``tf.function(jit_compile=True)``. Also returns ``bytes_of(prompt)``, XLA's
    memory plan of a call (JAX)."""

    def run(prompt):
        return model.generate(prompt, max_length, "greedy", stop_token_ids=None).tokens

    if BACKEND == "jax":
        import jax

        variables = list(model.variables)

        @jax.jit
        def jitted(values, prompt):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return run(prompt)

        def call(prompt):
            return jitted([v.value for v in variables], prompt)

        return call, lambda prompt: measure.compiled_bytes(jitted, [v.value for v in variables], prompt)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(run, jit_compile=True), None
    return run, None


def hub_generate_bytes(hub, inputs):
    """XLA's memory plan of keras-hub's compiled generate function on ``inputs`` (JAX)."""
    from keras import ops

    jitted = measure.jitted_in(hub.generate_function)
    if jitted is None:
        raise ValueError("keras-hub's generate function holds no jax.jit function")
    state = ([v.value for v in hub.sampler.variables], [v.value for v in hub.trainable_variables],
             [v.value for v in hub.non_trainable_variables])
    inputs = {k: ops.convert_to_tensor(v) for k, v in inputs.items()}
    return measure.compiled_bytes(jitted, inputs, None, state)


def measure_generation(sizes, generation, repeats, memory, profiler, log):
    import keras_hub
    from attnlayers.applications.gpt import from_keras_hub

    previous_precision = None
    if BACKEND == "jax":
        import jax

        previous_precision = jax.config.jax_default_matmul_precision
        jax.config.update("jax_default_matmul_precision", "highest")
    policy = keras.config.dtype_policy().name
    keras.config.set_dtype_policy("float32")
    try:
        model_sizes = {k: sizes[k] for k in ("num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                                             "vocabulary_size", "max_sequence_length")}
        keras.utils.set_random_seed(0)
        backbone = keras_hub.models.GPT2Backbone(dropout=0.0, **model_sizes)
        hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        hub.compile(sampler="greedy", jit_compile=True)
        ours = from_keras_hub(backbone)
        prompt_length, new = generation["prompt"], generation["new_tokens"]
        max_length = prompt_length + new
        if max_length > sizes["max_sequence_length"]:
            raise ValueError(f"prompt {prompt_length} + {new} new tokens exceed max_sequence_length "
                             f"{sizes['max_sequence_length']}")
        ours_call, ours_bytes = compiled_generate(ours, max_length)
        rng = np.random.default_rng(2)
        rows = []
        for batch in generation["batches"]:
            prompt = rng.integers(0, sizes["vocabulary_size"] - 1, (batch, prompt_length), dtype=np.int32)
            hub_inputs = {"token_ids": np.concatenate([prompt, np.zeros((batch, new), np.int32)], axis=1),
                          "padding_mask": np.arange(max_length)[None, :].repeat(batch, 0) < prompt_length}
            calls = {
                "peer": (lambda inputs=hub_inputs: hub.generate(dict(inputs), stop_token_ids=None)["token_ids"],
                         lambda inputs=hub_inputs: hub_generate_bytes(hub, inputs),
                         "keras_hub GPT2CausalLM.generate(token ids, stop_token_ids=None), sampler='greedy'"),
                "ours": (lambda prompt=prompt: ours_call(prompt),
                         (lambda prompt=prompt: ours_bytes(prompt)) if ours_bytes else None,
                         "attnlayers GPT.generate(prompt, max_length, 'greedy', stop_token_ids=None), compiled"),
            }
            row = {"part": "generate", "method": f"generate, batch {batch}", "batch": batch, "length": max_length,
                   "prompt": prompt_length, "new_tokens": new, "sizes": sizes, "precision": "float32",
                   "weights": "random, the same on both sides (gpt.from_keras_hub)"}
            tokens = {}
            for role, (call, bytes_of, label) in calls.items():
                memory.start()
                timing = measure.time_calls(call, repeats)
                first, median, samples = timing.first, timing.median, timing.samples
                tokens[role] = measure.wait(timing.output)
                peak, source = memory.side_peak(bytes_of) if bytes_of else (None, None)
                profile = profiler.capture(f"generate-b{batch}-{role}", call, 1, log) \
                    if batch == max(generation["batches"]) else None
                row[role] = {"label": label, "step_ms": median * 1e3, "tokens_per_s": batch * new / median,
                             "mfu": None, "first_call_s": first, "samples_ms": [s * 1e3 for s in samples],
                             "peak_bytes": peak, "memory_source": source, "profile": profile,
                             "process_peak_bytes": memory.process_peak()}
                log(f"  [generate] batch {batch} {role:9s}: {median * 1e3:9.2f} ms per call ({new} new tokens, "
                    f"{batch * new / median:,.0f} tokens/s; first call {first:.1f} s)")
            row["ratio"] = row["ours"]["step_ms"] / row["peer"]["step_ms"]
            generated = [tokens[role][:, prompt_length:max_length] for role in ("peer", "ours")]
            same = generated[0] == generated[1]
            row["tokens_agree"] = int(same.sum())
            row["tokens_compared"] = int(same.size)
            row["prompt_kept"] = bool(np.array_equal(tokens["ours"][:, :prompt_length], prompt)
                                      and np.array_equal(tokens["peer"][:, :prompt_length], prompt))
            differ = np.nonzero(~same.all(axis=0))[0]
            row["first_disagreement"] = None if differ.size == 0 else int(differ[0])
            log(f"  [generate] batch {batch}: {row['tokens_agree']}/{row['tokens_compared']} generated tokens agree")
            rows.append(row)
        return rows
    finally:
        keras.config.set_dtype_policy(policy)
        if BACKEND == "jax":
            import jax

            jax.config.update("jax_default_matmul_precision", previous_precision)


# ---- output -------------------------------------------------------------------------------------------------------


def free():
    keras.backend.clear_session()
    gc.collect()


def _mfu(value):
    return "n/a" if value is None else f"{100 * value:.1f}%"


HEADER = ["part", "measured by", "keras-hub ms", "attnlayers ms", "ours/peer", "keras-hub tokens/s",
          "attnlayers tokens/s", "keras-hub MFU", "attnlayers MFU", "keras-hub peak memory",
          "attnlayers peak memory"]


def table(rows):
    lines, notes = [], []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['part']} | failed: {r['error'].splitlines()[-1][:120]} |" + " |" * (len(HEADER) - 2))
            continue
        name = {"gpt": "GPT-2 training", "bert": "BERT MLM training"}.get(r["part"], "GPT-2 greedy generation")
        if r["part"] in ("gpt", "bert"):
            name += f" (B {r['batch']} x T {r['length']})"
        else:
            name += f" ({r['prompt']} + {r['new_tokens']} tokens)"
            notes.append(f"{r['method']}: {r['tokens_agree']}/{r['tokens_compared']} generated tokens agree")
        p, o = r["peer"], r["ours"]
        lines.append([
            name, r["method"], f"{p['step_ms']:.2f}", f"{o['step_ms']:.2f}", f"{r['ratio']:.3f}",
            f"{p['tokens_per_s']:,.0f}", f"{o['tokens_per_s']:,.0f}", _mfu(p["mfu"]), _mfu(o["mfu"]),
            measure.format_bytes(p["peak_bytes"]), measure.format_bytes(o["peak_bytes"]),
        ])
    return "\n".join([measure.markdown_table(HEADER, lines), ""] + notes)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="full", help="full (GPT-2 small, BERT-base) or tiny")
    parser.add_argument("--precision", default="auto",
                        help="dtype policy of the training parts: mixed_bfloat16, float32, ... (auto: mixed_bfloat16 "
                             "on a GPU, float32 on a CPU); generation always runs in float32")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per training measurement: fit's steps per epoch, train_on_batch calls "
                             "(default 10 at full size, 3 at tiny)")
    parser.add_argument("--repeats", type=int, default=3, help="timed generate calls after the first (default 3)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak TFLOP/s for MFU (default: 989 for H100 / H200 under mixed_bfloat16)")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="JAX: keep a profiler trace of 3 train_on_batch steps of each training side and of one "
                             "generate call per side at the largest batch, as DIR/NAME.xplane.pb")
    parser.add_argument("--isolate", action="store_true",
                        help="train each side of a training part in a fresh process of this script (XLA's choices "
                             "for a model can depend on what the process compiled and freed before it)")
    parser.add_argument("--side", choices=("peer", "ours"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--side-json", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--vocabulary-padding", type=int, default=1, metavar="M",
                        help="gpt, ours: GPTConfig(vocabulary_padding=M), the output layer's vocabulary rounded up to "
                             "a multiple of M (128: 50,257 -> 50,304); default 1, none")
    parser.add_argument("--dropout", type=float, default=DROPOUT, metavar="RATE",
                        help="gpt and bert, both sides: the dropout rate of the embeddings, residual branches and "
                             f"attention weights (default {DROPOUT}, GPT-2's and BERT's)")
    parser.add_argument("--attention-implementation", default="auto", metavar="ROUTE",
                        help="gpt and bert, ours: GPTConfig / BertConfig(attention_implementation=ROUTE): auto "
                             "(default), exact, chunked, fused or flash (the Pallas kernel that keeps the attention "
                             "dropout)")
    parser.add_argument("--loss-chunk-size", type=int, default=None, metavar="C",
                        help="gpt, ours: the chunked loss from the hidden states, C tokens a chunk "
                             "(runs.causal_lm_loss(C)); default: the loss from the logits")
    parser.add_argument("--json", default=None, metavar="PATH", help="write every row (and the settings) here")
    parser.add_argument("--markdown", action="store_true",
                        help="print the table for docs/results/training.md with a line saying what ran")
    args = parser.parse_args(argv)
    if not 0 <= args.dropout < 1:
        parser.error(f"--dropout must be in [0, 1); received {args.dropout}")
    if args.attention_implementation not in ("auto", "exact", "chunked", "fused", "flash"):
        parser.error(f"--attention-implementation: unknown {args.attention_implementation!r}; choose from auto, "
                     "exact, chunked, fused, flash")
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        parser.error(f"--parts: unknown {unknown}; choose from {list(PARTS)}")
    args.parts = parts
    if args.side is not None and (len(parts) != 1 or parts[0] == "generate" or not args.side_json):
        parser.error("--side takes one training part and --side-json")
    if args.steps is None:
        args.steps = 10 if args.size == "full" else 3
    for name in ("steps", "repeats", "vocabulary_padding") + (("loss_chunk_size",) if args.loss_chunk_size else ()):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1; received {getattr(args, name)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    device = measure.device_info(BACKEND)
    precision = args.precision
    if precision == "auto":
        precision = "mixed_bfloat16" if device["kind"] == "gpu" else "float32"
    flops_rate = peak_flops(args, device, precision)
    sizes = {**SIZES[args.size]}
    # The toggles of ours' GPT (recorded with the sizes in each row).
    sizes["bert"] = {**sizes["bert"], "dropout": args.dropout, "attention_implementation": args.attention_implementation}
    sizes["gpt"] = {**sizes["gpt"], "vocabulary_padding": args.vocabulary_padding, "dropout": args.dropout,
                    "attention_implementation": args.attention_implementation,
                    "loss_chunk_size": args.loss_chunk_size}
    memory = measure.DeviceMemory(BACKEND, device)
    profiler = Profiler(args.profile)

    def log(message):
        print(message, flush=True)

    log(f"gpu_training: backend {BACKEND}, device {device['kind']} ({device['name']}), size {args.size}, precision "
        f"{precision}, steps {args.steps}, generate repeats {args.repeats}, parts {','.join(args.parts)}, peak "
        f"{'n/a' if flops_rate is None else f'{flops_rate / 1e12:g} TFLOP/s'}, XLA_FLAGS "
        f"{os.environ.get('XLA_FLAGS', '(unset)')!r}")
    if args.side is not None:  # one side of one training part, for --isolate
        keras.config.set_dtype_policy(precision)
        part = args.parts[0]
        side = train_side(part, args.side, sizes[part], training_batches(part, sizes[part], args.steps), args.steps,
                          memory, profiler, log)
        with open(args.side_json, "w") as f:
            json.dump(side, f, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))
        return 0
    forward = ["--size", args.size, "--precision", precision, "--steps", str(args.steps),
               "--vocabulary-padding", str(args.vocabulary_padding), "--dropout", str(args.dropout),
               "--attention-implementation", args.attention_implementation] + (
        ["--profile", args.profile] if args.profile else []) + (
        ["--loss-chunk-size", str(args.loss_chunk_size)] if args.loss_chunk_size else [])
    rows, notes = [], []
    for part in args.parts:
        try:
            if part == "generate":
                rows += measure_generation(sizes["gpt"], sizes["generate"], args.repeats, memory, profiler, log)
            else:
                keras.config.set_dtype_policy(precision)
                try:
                    rows += measure_training(part, sizes[part], args.steps, flops_rate, memory, profiler, log,
                                             isolate=forward if args.isolate else None)
                finally:
                    keras.config.set_dtype_policy("float32")
        except Exception:  # noqa: BLE001  -- a part that fails is reported and the others still run
            error = traceback.format_exc()
            log(f"  [{part}] FAILED:\n{error}")
            rows.append({"part": part, "error": error})
        free()

    seconds = time.perf_counter() - start
    log("")
    if args.markdown:  # README-ready: what ran, then the table
        log(f"{args.size} size, KERAS_BACKEND={BACKEND}, {device['name']} ({device['kind']}), {precision}, "
            f"jit_compile=True, {args.steps} steps, {args.repeats} generate repeats, "
            f"{datetime.date.today().isoformat()}:\n")
    log(table(rows))
    for note in notes:
        log(f"note: {note}")
    log(f"\n{len(rows)} rows in {seconds:.1f} s")
    if args.json:
        record = {
            "benchmark": "gpu_training",
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)),
            "settings": {"size": args.size, "precision": precision, "steps": args.steps, "repeats": args.repeats,
                         "parts": args.parts,
                         "sizes": {p: sizes[p] if p != "generate" else sizes["generate"] for p in args.parts},
                         "peak_flops": flops_rate, "dropout": args.dropout, "jit_compile": True,
                         "ratio": "ours / peer step time (below 1: attnlayers is faster)"},
            "environment": {"backend": BACKEND, **measure.environment(), "device": device,
                            "xla_flags": os.environ.get("XLA_FLAGS")},
            "notes": notes,
            "seconds": seconds,
            "rows": rows,
        }
        directory = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(directory, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))
        log(f"wrote {args.json}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
