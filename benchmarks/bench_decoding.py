"""Generation speed: attnlayers.decoding.generate with a KV cache, against recomputing the whole prefix at every
step and against keras_hub.models.GPT2CausalLM.generate, in one process (TensorFlow backend, CPU). Each side is
compiled two ways (``--modes``): graph = ``tf.function`` without XLA, xla = ``tf.function(jit_compile=True)``
(keras-hub compiles its generate with ``tf.function(jit_compile=model.jit_compile)``, set through ``compile``).
The no-cache baseline runs in one mode (xla when it is among the modes).

The model: a GPT-2-architecture decoder at small sizes (defaults: 4 layers, d_model 256, 4 heads of 64 as in
GPT-2, d_ff 1024, vocabulary 8192), random weights, greedy decoding of ``new_tokens`` = 256 tokens for a batch
of 8 prompts of 16 tokens, no stop token (every call generates exactly batch * new_tokens tokens).

- ours: ``attnlayers.applications.gpt.GPT`` (``TokenAndPositionEmbedding`` with learned positions +
  ``TransformerDecoder(normalize_first=True)``: pre-LN, GELU with the tanh approximation, LayerNorm eps 1e-5,
  final LayerNorm + tied output projection): GPT-2's architecture, built by ``from_keras_hub`` with the
  keras-hub model's weights, so both sides compute the same function; the table reports whether the
  generated tokens agree. Its ``initial_cache`` prefills the prompt and ``next`` is the cached step.
- recompute: the same model and loop, but ``next`` runs the whole (B, L) buffer through the model at every step
  (fixed shapes, as XLA needs: the causal mask hides what is not generated yet) and takes the logits at
  ``index - 1``: no cache.
- keras-hub: ``GPT2CausalLM(GPT2Backbone(...), preprocessor=None)`` compiled with ``sampler="greedy"``,
  ``generate({"token_ids", "padding_mask"}, stop_token_ids=None)``.

What differs between ours and keras-hub (same architecture and weights, the same greedy tokens):
- prefill: keras-hub's ``_build_cache`` runs the whole (B, L) buffer (prompt + room for the new tokens)
  through the model once before the loop; ours prefills the prompt only (B, P).
- the cached step (attnlayers' ``TransformerDecoder`` with one new position, ``MultiHeadAttention.single_step``):
  each layer attends only a prefix of its cache holding the positions written so far (the shortest of 8 static
  lengths, chosen by a switch: about half the cache on average here), with elementwise products reduced over
  the head size and the positions instead of batched matmuls (no transpose of the cache); the new keys and
  values are written by scattering one position. Under XLA (writes in place) each layer writes its position
  before reading it; in graph mode (where every write copies the cache) the new keys are attended beside the
  cache and every layer's position is written in one scatter at the end. keras-hub slices each layer's cache
  out of the stacked (B, layers, 2, L, heads, head_dim) cache, writes the position with ``slice_update``,
  attends over the whole cache (masked beyond the position) with keras' ``ops.dot_product_attention``, and
  stacks the layers' caches again: several copies of the whole cache per step.
- ours computes the log-softmax of every step's logits for ``scores``; keras-hub computes a softmax (and
  returns no scores).

First call (trace + XLA compile + one generation) and later calls (median of ``--repeats``, interleaved
ours / keras-hub / ours ...) are reported separately. Tokens per second = batch * new_tokens / seconds.

Run:  .venv/bin/python benchmarks/bench_decoding.py                  (about 3 minutes on 2 CPU cores, most of it
                                                                      compiling and the no-cache baseline)
      .venv/bin/python benchmarks/bench_decoding.py --skip-recompute --repeats 5
Writes benchmarks/results/decoding.json.
"""

import argparse
import datetime
import json
import os
import statistics
import sys

import harness  # first: it selects the TensorFlow backend
import keras
import keras_hub
import measure
import numpy as np
import tensorflow as tf
from keras import ops

from attnlayers.applications.gpt import from_keras_hub
from attnlayers.decoding import generate

SIZES = {
    "batch": 8,
    "prompt_length": 16,
    "new_tokens": 256,
    "num_layers": 4,
    "hidden_dim": 256,
    "num_heads": 4,
    "intermediate_dim": 1024,
    "vocabulary_size": 8192,
}


def make_inputs(s):
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, s["vocabulary_size"], size=(s["batch"], s["prompt_length"])).astype("int32")
    return prompt


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for key, value in SIZES.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=value)
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per side after the first")
    parser.add_argument("--recompute-repeats", type=int, default=1, help="timed calls of the no-cache baseline")
    parser.add_argument("--skip-recompute", action="store_true", help="skip the (slow) no-cache baseline")
    parser.add_argument("--modes", default="graph,xla", help="graph = tf.function, xla = tf.function(jit_compile=True)")
    parser.add_argument("--out", default=harness.RESULTS_DIR)
    args = parser.parse_args(argv)
    s = {key: getattr(args, key) for key in SIZES}
    max_length = s["prompt_length"] + s["new_tokens"]
    n_tokens = s["batch"] * s["new_tokens"]
    print(f"decoding: sizes {s}, max_length {max_length}, repeats {args.repeats}", flush=True)

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=s["vocabulary_size"], num_layers=s["num_layers"], num_heads=s["num_heads"],
        hidden_dim=s["hidden_dim"], intermediate_dim=s["intermediate_dim"], dropout=0.0,
        max_sequence_length=max_length,
    )
    ours = from_keras_hub(backbone)  # the GPT application's model, with the backbone's weights

    prompt = make_inputs(s)
    buffer = np.zeros((s["batch"], max_length), "int32")
    buffer[:, : s["prompt_length"]] = prompt
    hub_inputs = {"token_ids": tf.constant(buffer), "padding_mask": tf.constant(buffer != 0)}
    prompt = tf.constant(prompt)

    def ours_generate(prompt):
        result = generate(ours.next, prompt, max_length, "greedy", cache=ours.initial_cache(prompt, None, max_length))
        return result.tokens

    def next_recompute(tokens, cache, index):  # no cache: the whole (B, L) buffer at every step
        return ops.take(ours(tokens), index - 1, axis=1), cache

    def recompute_generate(prompt):
        return generate(next_recompute, prompt, max_length, "greedy").tokens

    def hub_side(jit_compile):
        # keras-hub compiles generate in tf.function(jit_compile=model.jit_compile); after
        # compile(sampler=...) without jit_compile that resolves to False on CPU (its default).
        hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        hub.compile(sampler="greedy", jit_compile=jit_compile)
        assert bool(hub.jit_compile) == jit_compile
        return lambda inputs: hub.generate(inputs, stop_token_ids=None)["token_ids"]

    modes = args.modes.split(",")
    sides = {}
    for mode in modes:
        jit = mode == "xla"
        sides[f"ours [{mode}]"] = (tf.function(ours_generate, jit_compile=jit), prompt)
        sides[f"keras_hub [{mode}]"] = (hub_side(jit), hub_inputs)
    results = {}
    for name, (fn, x) in sides.items():
        first, out = measure.timed(fn, x)
        results[name] = {"first_call_s": first, "samples_s": [], "tokens": np.asarray(out)}
        print(f"  {name}: first call {first:.2f} s", flush=True)
    for name in measure.abba(sides, args.repeats):  # interleaved, order reversed every other round
        fn, x = sides[name]
        results[name]["samples_s"].append(measure.timed(fn, x)[0])
    if not args.skip_recompute:
        mode = "xla" if "xla" in modes else modes[0]
        name = f"recompute [{mode}]"
        fn = tf.function(recompute_generate, jit_compile=mode == "xla")
        timing = measure.time_calls(fn, args.recompute_repeats, prompt)
        results[name] = {"first_call_s": timing.first, "samples_s": timing.samples,
                         "tokens": np.asarray(timing.output)}
        print(f"  {name}: first call {timing.first:.2f} s", flush=True)

    reference = results[f"ours [{modes[-1]}]"]["tokens"]
    for name, r in results.items():
        r["median_s"] = statistics.median(r["samples_s"]) if r["samples_s"] else r["first_call_s"]
        r["tokens_per_s"] = n_tokens / r["median_s"]
        r["same_tokens_as_ours"] = bool(np.array_equal(r.pop("tokens"), reference))
    rows = []
    for name, r in results.items():
        mode = name.split("[")[1].rstrip("]")
        ours = results[f"ours [{mode}]"]
        # paired: the median over rounds of (peer time / ours time) from adjacent samples, the least sensitive
        # to drift on a shared machine (as in harness.py); only where both sides have the same rounds.
        paired = "-"
        if len(r["samples_s"]) == len(ours["samples_s"]) and r is not ours:
            paired = f"{measure.paired_ratio(r['samples_s'], ours['samples_s']):.2f}x"
            r["paired_speedup_of_ours"] = float(paired[:-1])
        r["speedup_of_ours"] = ours["tokens_per_s"] / r["tokens_per_s"]
        rows.append([name, f"{r['first_call_s']:.2f}", f"{r['median_s']:.3f}", f"{r['tokens_per_s']:.0f}",
                     f"{r['speedup_of_ours']:.2f}x", paired, str(r["same_tokens_as_ours"])])
    header = ["side [mode]", "first call s", "later calls s (median)", "tokens/s", "ours speedup (same mode)",
              "paired", "same tokens"]
    print()
    print(measure.aligned_table(header, rows))
    print(f"  {n_tokens} new tokens per call (batch {s['batch']} x {s['new_tokens']}), prompt {s['prompt_length']}; "
          f"graph = tf.function, xla = tf.function(jit_compile=True)")

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "decoding.json")
    record = {
        "benchmark": "decoding",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)),
        "sizes": s,
        "environment": harness.environment(),
        "results": results,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"\nwrote {path}")
    return results


if __name__ == "__main__":
    main()
