"""The chunked cross-entropy (``attnlayers.chunked_cross_entropy``) against the plain loss of float32 logits: the
memory XLA plans for one loss + gradient step and its time, side by side, under JAX.

    python benchmarks/chunked_loss.py                       # GPT-2's output layer: V 50,257 padded to 50,304, d 768
    python benchmarks/chunked_loss.py --tokens 2048 4096 --chunks 512 2048 --repeats 3

Each side is ``jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))`` over (hidden (N, d), output matrix (V_pad, d)),
N = B T tokens with a padding mask (one token in eight ignored):

- plain: logits = h W^T (float32 (N, V_pad)), cut to the V real columns, Keras' sparse categorical cross-entropy from
  logits, the mean over the real tokens (what ``runs.causal_lm_loss()`` computes from GPT's logits);
- chunked: :func:`attnlayers.chunked_cross_entropy.chunked_cross_entropy_mean` with ``chunk_size`` rows a chunk.

Memory: XLA's compiled memory analysis of each step (``.lower(...).compile().memory_analysis()``): temp bytes (the
step's own buffers, what the loss adds to a training step's peak) and the total with arguments and outputs. Time:
the median of ``--repeats`` calls after a first (compiling) one, the sides interleaved ABBA; the ratio is chunked /
plain (below 1: the chunked side is faster). ``--time-tokens`` limits the timed sizes (a CPU step at N 4096 is several
seconds); the memory of every size is planned without running it. Writes results/chunked_loss/<device>-<dtype>.json.

``--gpt-step``: also a whole GPT training step (``train_on_batch``; the training run's defaults: GPT "tiny", V 4,096,
B 16 x T 128, ``runs.compile_for_training``, jit_compile) with each toggle: plain, ``vocabulary_padding=128``,
``loss_chunk_size=1024`` and both; the median of 6 ABBA rounds of 5 steps; results/chunked_loss/<device>-gpt-step.json.
``--tokens`` with no sizes skips the loss alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

os.environ["KERAS_BACKEND"] = "jax"

import measure
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "chunked_loss"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocabulary", type=int, default=50257, help="V, the real vocabulary (GPT-2's 50,257)")
    parser.add_argument("--padding", type=int, default=128, help="V_pad = V rounded up to a multiple (default 128)")
    parser.add_argument("--hidden", type=int, default=768, help="d (GPT-2 small's 768)")
    parser.add_argument("--tokens", type=int, nargs="*", default=[2048, 4096, 8192], help="N = B T")
    parser.add_argument("--chunks", type=int, nargs="+", default=[512, 1024, 2048], help="chunk sizes (rows)")
    parser.add_argument("--time-tokens", type=int, nargs="*", default=[2048], help="the sizes also timed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", help="the GEMMs' dtype (hidden and matrix); the softmax is "
                        "float32 either way")
    parser.add_argument("--gpt-step", action="store_true", help="also time a GPT training step with each toggle")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS)
    return parser.parse_args(argv)


def sides(args):
    """{name: loss(hidden, table, labels, weights)}: the plain loss and a chunked one per chunk size."""
    import keras
    from keras import ops

    from attnlayers.chunked_cross_entropy import chunked_cross_entropy_mean

    vocabulary = args.vocabulary

    def plain(hidden, table, labels, weights):
        logits = ops.cast(ops.matmul(hidden, ops.transpose(table)), "float32")[:, :vocabulary]
        nll = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return ops.sum(nll * weights) / ops.sum(weights)

    def chunked(chunk_size):
        def loss(hidden, table, labels, weights):
            return chunked_cross_entropy_mean(hidden, table, labels, weights, vocabulary_size=vocabulary,
                                              chunk_size=chunk_size)
        return loss

    return {"plain": plain, **{f"chunked_{c}": chunked(c) for c in args.chunks}}


def gpt_steps(rounds=6, steps=5):
    """{toggles: seconds per train_on_batch step} of GPT "tiny" (V 4,096, B 16 x T 128), ABBA over the toggles."""
    import keras
    from attnlayers.applications.gpt import GPT, GPTConfig, runs

    vocabulary, batch, length = 4096, 16, 128
    windows = np.random.default_rng(0).integers(0, vocabulary, (batch, length + 1)).astype("int32")
    x, y, weights = windows[:, :-1], windows[:, 1:], np.ones((batch, length), "float32")
    models = {}
    for name, padding, chunk in (("plain", 1, None), ("pad128", 128, None), ("chunk1024", 1, 1024),
                                 ("pad128+chunk1024", 128, 1024)):
        keras.utils.set_random_seed(0)
        model = GPT(GPTConfig.preset("tiny", vocabulary_size=vocabulary, max_sequence_length=length, dropout=0.0,
                                     vocabulary_padding=padding))
        runs.compile_for_training(model, runs.TrainingSettings(vocabulary_size=vocabulary, loss_chunk_size=chunk))
        model.train_on_batch(x, y, sample_weight=weights)  # compiles
        models[name] = model
    samples = {name: [] for name in models}
    for name in measure.abba(list(models), rounds):
        model = models[name]
        seconds, _ = measure.timed(lambda: [model.train_on_batch(x, y, sample_weight=weights)  # noqa: B023
                                            for _ in range(steps)][-1])
        samples[name].append(seconds / steps)
    return {name: float(np.median(s)) for name, s in samples.items()}


def main(argv=None):
    import jax

    from attnlayers.embedding import padded_size

    args = parse_args(argv)
    table_size = padded_size(args.vocabulary, args.padding)
    device = measure.device_info("jax")
    rng = np.random.default_rng(0)
    table = jax.numpy.asarray(rng.normal(0, 0.02, (table_size, args.hidden)), args.dtype)
    losses = sides(args)
    rows = []
    for tokens in args.tokens:
        hidden = jax.numpy.asarray(rng.normal(size=(tokens, args.hidden)), args.dtype)
        labels = jax.numpy.asarray(rng.integers(0, args.vocabulary, tokens), "int32")
        weights = jax.numpy.asarray(np.arange(tokens) % 8 != 7, "float32")  # ignored positions
        inputs = (hidden, table, labels, weights)
        steps = {name: jax.jit(jax.value_and_grad(loss, argnums=(0, 1))) for name, loss in losses.items()}
        memory = {}
        for name, step in steps.items():
            stats = step.lower(*inputs).compile().memory_analysis()
            memory[name] = {"temp_bytes": int(stats.temp_size_in_bytes),
                            "total_bytes": measure.compiled_bytes(step, *inputs)}
        seconds, values = {}, {}
        if tokens in args.time_tokens:
            samples = {name: [] for name in steps}
            for name, step in steps.items():
                _, output = measure.timed(step, *inputs)  # compiles
                values[name] = float(output[0])
            for name in measure.abba(list(steps), args.repeats):
                samples[name].append(measure.timed(steps[name], *inputs)[0])
            seconds = {name: float(np.median(s)) for name, s in samples.items()}
        for name in steps:
            row = {"tokens": tokens, "side": name, **memory[name],
                   "temp_ratio": memory[name]["temp_bytes"] / memory["plain"]["temp_bytes"]}
            if seconds:
                row.update(seconds=seconds[name], time_ratio=seconds[name] / seconds["plain"], loss=values[name])
            rows.append(row)
            print(f"N {tokens:>6}  {name:<14} temp {measure.format_bytes(row['temp_bytes']):>11} "
                  f"(x{row['temp_ratio']:.3f})  total {measure.format_bytes(row['total_bytes']):>11}"
                  + (f"  {row['seconds']:.3f} s/step (x{row['time_ratio']:.3f})  loss {row['loss']:.6f}"
                     if seconds else ""), flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    if rows:
        result = {"vocabulary": args.vocabulary, "padded_vocabulary": table_size, "hidden": args.hidden,
                  "dtype": args.dtype, "repeats": args.repeats, "device": device, "machine": measure.machine(),
                  "jax": jax.__version__, "rows": rows}
        path = args.results / f"{device['kind']}-{args.dtype}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {path}")
    if args.gpt_step:
        seconds = gpt_steps()
        for name, value in seconds.items():
            print(f"GPT tiny step {name:<18} {value * 1e3:8.1f} ms (x{value / seconds['plain']:.3f})", flush=True)
        path = args.results / f"{device['kind']}-gpt-step.json"
        path.write_text(json.dumps({"seconds": seconds, "ratio": {k: v / seconds["plain"] for k, v in seconds.items()},
                                    "device": device, "machine": measure.machine(), "jax": jax.__version__},
                                   indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
