"""Long sequences: time and peak memory of exact multi-head self-attention, forward + backward, at
T = 1k ... 32k, and of LocalAttention computed on its windows against the masked version.

One process, TensorFlow backend on CPU, float32, B = 1, 8 heads of size 64 (d_model 512):

- ``keras``: ``keras.layers.MultiHeadAttention(8, 64)`` (the (B, N, T, S) logits, softmax and weights);
- ``plain``: ``attnlayers.MultiHeadAttention(8, 64, memory_efficient=False)``, the same dense computation;
- ``chunked``: ``attnlayers.MultiHeadAttention(8, 64, memory_efficient=True)``: queries and keys in blocks
  with the online softmax and a backward pass that recomputes each block (``attnlayers.chunked``);
- ``auto``: the default (``memory_efficient=None``), at the short lengths where it must pick the plain path.

A step is ``d sum(layer(x, x)) / d (x, weights)`` under ``tf.function`` (benchmarks/harness.py). Time is the
median of the repetitions; peak memory is the peak above what was live before the step (TensorFlow's CPU
allocator statistics where it keeps them, else the process' peak resident set). Each dense run is given a
soft address-space limit of the memory this machine has available (``resource.RLIMIT_AS``), so a length it
cannot hold fails with TensorFlow's ResourceExhaustedError ("OOM" in the table) instead of swapping or
being killed, and the process goes on.

The local part compares ``LocalAttention(window=8, implementation="masked")`` (scores for every (t, s), then
the window as a mask) with the default ``implementation="windowed"`` (the 2D + 1 keys of each window
gathered) at T = S = 4096, B = 1, 256 features, a training step (forward + backward).

    python benchmarks/bench_long.py                         # the whole table and the picture
    python benchmarks/bench_long.py --lengths 1024 2048 --impl plain chunked
    python benchmarks/bench_long.py --short                 # the automatic choice at T <= 512 only

Results: ``benchmarks/results/long.json`` (``long-short.json`` with ``--short``) and ``benchmarks/results/long.png``
(all gitignored).
"""

import argparse
import gc
import json
import pathlib
import resource
import statistics
import time

import harness  # first: it selects the TensorFlow backend
import keras
import measure
import tensorflow as tf

import attnlayers

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
HEADS, HEAD_SIZE = 8, 64
D_MODEL = HEADS * HEAD_SIZE
LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
SHORT_LENGTHS = (128, 256, 512)
IMPLEMENTATIONS = ("keras", "plain", "chunked")


def make_layer(impl):
    if impl == "keras":
        return keras.layers.MultiHeadAttention(HEADS, HEAD_SIZE)
    choice = {"plain": False, "chunked": True, "auto": None}[impl]
    return attnlayers.MultiHeadAttention(HEADS, HEAD_SIZE, memory_efficient=choice)


class _MemoryLimit:
    """A soft RLIMIT_AS of the current address space plus what the machine has available (less a margin):
    an allocation beyond it fails (ResourceExhaustedError) instead of pushing the machine into swap."""

    def __init__(self, margin=1 << 30):
        self.margin = margin

    def __enter__(self):
        self.saved = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        limit = size + max(measure.meminfo_bytes("MemAvailable") - self.margin, 0)
        resource.setrlimit(resource.RLIMIT_AS, (limit, self.saved[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_AS, self.saved)
        return False


def measure_layer(make, call, inputs, repeats, memory_backend):
    """Builds a layer, then measures forward + backward steps: one warm-up (which traces), the peak memory of one
    step and the median time of ``repeats`` more. With ``repeats=0`` (the longest sequences, minutes a step) a
    single step gives both, its time including the tracing. Returns a dict (``error`` set when a step ran out
    of memory)."""
    layer = make()
    try:
        with _MemoryLimit():
            call(layer, inputs)  # builds the weights
            step = harness.make_step(lambda x: call(layer, x), inputs, layer.trainable_variables, jit_compile=False)
            start = time.perf_counter()
            if repeats == 0:
                peak = measure.peak_memory_mib(step, inputs, memory_backend)
                return {"seconds": time.perf_counter() - start, "peak_mib": round(peak, 1), "repeats": 1,
                        "includes_tracing": True}
            loss, _ = step(inputs)
            float(loss)
            first = time.perf_counter() - start
            peak = measure.peak_memory_mib(step, inputs, memory_backend)
            times = [harness._run(step, inputs, 1) for _ in range(repeats)]
    except (tf.errors.ResourceExhaustedError, MemoryError) as error:
        return {"error": "OOM", "detail": str(error).splitlines()[0][:200]}
    return {"seconds": statistics.median(times), "first_seconds": round(first, 2), "peak_mib": round(peak, 1),
            "repeats": repeats}


def mha_row(impl, length, repeats, memory_backend):
    x = {"x": harness.normal(1, length, D_MODEL, seed=length)}
    return measure_layer(lambda: make_layer(impl), lambda layer, inputs: layer(inputs["x"], inputs["x"]), x,
                         repeats, memory_backend)


def local_row(implementation, length, repeats, memory_backend, batch=1, dim=256, window=8):
    inputs = {"query": harness.normal(batch, length, dim, seed=1), "value": harness.normal(batch, length, dim, seed=2)}
    return measure_layer(
        lambda: attnlayers.LocalAttention(window, mode="local-p", score="general", implementation=implementation),
        lambda layer, x: layer(x["query"], x["value"]), inputs, repeats, memory_backend,
    )


def repeats_for(length):
    return 5 if length <= 2048 else 3 if length <= 4096 else 2 if length <= 8192 else 0


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"keras": ("tab:gray", "s", 0.94), "plain": ("tab:blue", "o", 1.06), "chunked": ("tab:red", "^", 1.0)}
    labels = {"keras": "keras MultiHeadAttention", "plain": "attnlayers, plain",
              "chunked": "attnlayers, memory-efficient"}
    ram = results.get("ram_gib")
    for impl, (color, marker, shift) in styles.items():
        rows = [r for r in results["mha"] if r["impl"] == impl]
        ok = [r for r in rows if "error" not in r]
        failed = [r["length"] for r in rows if "error" in r]
        axes[0].plot([r["length"] for r in ok], [r["seconds"] for r in ok], marker=marker, color=color,
                     label=labels[impl])
        axes[1].plot([r["length"] for r in ok], [r["peak_mib"] / 1024 for r in ok], marker=marker, color=color,
                     label=labels[impl])
        if failed and ram:  # out of memory: drawn on the machine's RAM line (shifted apart so both show)
            axes[1].scatter([t * shift for t in failed], [ram] * len(failed), marker="x", s=70, color=color,
                            label=f"{labels[impl]}: out of memory")
    if ram:
        axes[1].axhline(ram, color="black", linestyle="--", linewidth=0.8)
        axes[1].text(1024, ram * 1.08, f"this machine's RAM ({ram:.0f} GiB)", fontsize=8)
    for ax, title in ((axes[0], "time per step (s), forward + backward"), (axes[1], "peak memory (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (B = 1, 8 heads x 64)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle("Exact self-attention on CPU (TensorFlow, float32)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--impl", nargs="+", default=IMPLEMENTATIONS, choices=IMPLEMENTATIONS)
    parser.add_argument("--short", action="store_true", help="only the automatic choice at T <= 512")
    parser.add_argument("--short-rounds", type=int, default=6, help="rounds of the T <= 512 comparison")
    parser.add_argument("--no-local", action="store_true", help="skip the LocalAttention comparison")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    parser.add_argument("--plot-only", action="store_true", help="table and picture of the saved long.json")
    args = parser.parse_args(argv)
    memory_backend = measure.cpu_memory_backend()
    if args.plot_only:
        results = json.loads((args.out / "long.json").read_text())
        print_tables(results)
        print("picture:", plot(results, args.out / "long.png"))
        return 0
    results = {"environment": harness.environment(), "memory": memory_backend,
               "ram_gib": measure.meminfo_bytes() / 2**30, "mha": [], "short": [], "local": []}

    def log(row):
        print(json.dumps(row), flush=True)

    # The automatic choice at short lengths: plain and auto interleaved (ABBA, a fresh layer each time), the
    # median of each side's per-round medians.
    for length in SHORT_LENGTHS:
        samples = {"plain": [], "auto": []}
        for impl in measure.abba(("plain", "auto"), args.short_rounds):
            samples[impl].append(mha_row(impl, length, 7, memory_backend)["seconds"])
        row = {"length": length, **{k: statistics.median(v) for k, v in samples.items()}}
        row["auto_over_plain"] = round(row["auto"] / row["plain"], 3)
        results["short"].append(row)
        log(row)
    if not args.short:
        for length in args.lengths:
            for impl in args.impl:
                row = {"impl": impl, "length": length, **mha_row(impl, length, repeats_for(length), memory_backend)}
                results["mha"].append(row)
                log(row)
                keras.backend.clear_session()
                gc.collect()
        if not args.no_local:
            for implementation in ("masked", "windowed"):
                row = {"implementation": implementation, "length": 4096, "window": 8,
                       **local_row(implementation, 4096, 5, memory_backend)}
                results["local"].append(row)
                log(row)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / ("long-short.json" if args.short else "long.json")).write_text(json.dumps(results, indent=1))
    print_tables(results)
    if results["mha"]:
        print("picture:", plot(results, args.out / "long.png"))
    return 0


def print_tables(results):
    if results["short"]:
        print("\n| T | plain (ms) | automatic (ms) | automatic / plain |\n|---|---|---|---|")
        for r in results["short"]:
            print(f"| {r['length']} | {r['plain'] * 1e3:.1f} | {r['auto'] * 1e3:.1f} | {r['auto_over_plain']:.3f} |")
    if results["mha"]:
        lengths = sorted({r["length"] for r in results["mha"]})
        by = {(r["impl"], r["length"]): r for r in results["mha"]}

        def cell(impl, length, key, fmt):
            r = by.get((impl, length))
            return "-" if r is None else r.get("error") or fmt(r[key])

        print("\n| T | keras s | plain s | chunked s | keras GiB | plain GiB | chunked GiB | chunked / keras memory |")
        print("|---|---|---|---|---|---|---|---|")
        for length in lengths:
            times = [cell(i, length, "seconds", lambda v: f"{v:.2f}") for i in IMPLEMENTATIONS]
            mems = [cell(i, length, "peak_mib", lambda v: f"{v / 1024:.2f}") for i in IMPLEMENTATIONS]
            k, c = by.get(("keras", length)), by.get(("chunked", length))
            ratio = (f"{c['peak_mib'] / k['peak_mib']:.3f}" if k and c and "error" not in k and "error" not in c
                     else "-")
            print(f"| {length} | " + " | ".join(times + mems) + f" | {ratio} |")
    if results["local"]:
        print("\n| LocalAttention (T = 4096, D = 8) | s / step | peak MiB |\n|---|---|---|")
        for r in results["local"]:
            print(f"| {r['implementation']} | " + (r.get("error") or f"{r['seconds']:.3f} | {r['peak_mib']:.0f}") + " |")


if __name__ == "__main__":
    raise SystemExit(main())
