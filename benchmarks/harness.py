"""Side-by-side benchmark harness: a peer (keras / keras-hub) against the attnlayers equivalent.

Both sides run in ONE process on the TensorFlow backend, compiled the same way: ``tf.function``, and
optionally ``tf.function(jit_compile=True)`` as a second mode. A step is a forward and a backward
pass: a ``tf.GradientTape`` takes the gradient of ``sum(outputs)`` with respect to every float input
and every trainable weight. After a warm-up (which also traces / compiles), the repetitions are
interleaved in ABBA order (peer, ours, ours, peer, ...) so that drift on a shared, noisy machine
hits both sides alike. The table reports the median time of each side and the ratio ours / peer
(below 1 means attnlayers is faster), and "paired", the median of the per-repetition ratios (each
taken from two adjacent samples, so it is the least sensitive to drift).

Peak memory is the peak of TensorFlow's CPU allocator during one step, above what was live before
it (``tf.config.experimental.get_memory_info``), as the median of a few steps. Where the allocator
keeps no statistics, the peak resident set size of the process is used instead (Linux
``/proc/self/clear_refs``).

Adding an entry takes a few lines::

    Entry(
        "scaled_dot",
        inputs=lambda s: {"query": normal(s["batch"], s["length"], s["dim"]), ...},
        peer=Side("keras.layers.Attention", make=lambda s: keras.layers.Attention(),
                  call=lambda layer, x: layer([x["query"], x["value"]])),
        ours=Side("attnlayers.Attention", make=lambda s: attnlayers.Attention(),
                  call=lambda layer, x: layer(x["query"], x["value"])),
        same_math=True,   # forward outputs must agree; the max abs difference is reported
    )

and ``harness.main(ENTRIES, name="attention", sizes={...})`` runs a list of them with a CLI
(``--help``). Results go to ``benchmarks/results/<name>.json`` (gitignored) and are printed as a
table.
"""

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if "keras" in sys.modules and sys.modules["keras"].backend.backend() != "tensorflow":
    raise RuntimeError("benchmarks/harness.py runs on the TensorFlow backend; import it first.")
os.environ["KERAS_BACKEND"] = "tensorflow"

import keras  # noqa: E402
import measure  # benchmarks/, the script's folder
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODES = {"graph": False, "xla": True}  # mode name -> tf.function(jit_compile=...)


@dataclasses.dataclass
class Side:
    """One side of a comparison.

    Args:
        label: what is measured, as a user would write it (shown under the table).
        make: ``make(sizes) -> layer`` (or any object ``call`` understands). Called once per
            mode.
        call: ``call(layer, inputs) -> output or tuple of outputs``, where inputs is the entry's
            dict of tensors. Defaults to ``layer(**inputs)``.
        setup: optional ``setup(layer, sizes)``, run after the first call has built the layer, e.g.
            to set a weight so that both sides compute the same function.
    """

    label: str
    make: Callable
    call: Callable | None = None
    setup: Callable | None = None

    def build(self, sizes, inputs):
        layer = self.make(sizes)
        call = self.call or (lambda layer, x: layer(**x))
        outputs = call(layer, inputs)  # eager call builds the weights
        if self.setup is not None:
            self.setup(layer, sizes)
            outputs = call(layer, inputs)
        variables = list(getattr(layer, "trainable_variables", []))
        return layer, (lambda x: call(layer, x)), variables, outputs


@dataclasses.dataclass
class Entry:
    """A peer-vs-attnlayers comparison.

    Args:
        name: short id (``--only`` selects by it).
        inputs: ``inputs(sizes) -> dict of tensors``; every float tensor gets a gradient.
        peer, ours: the two :class:`Side` objects.
        same_math: both sides compute the same function: forward outputs are compared.
        sizes: per-entry overrides of the benchmark's sizes.
        note: one line printed under the table.
        backward: time forward + backward (default); False times the forward pass alone (e.g. one
            decoding step, which never runs a backward pass).
    """

    name: str
    inputs: Callable
    peer: Side
    ours: Side
    same_math: bool = False
    sizes: dict = dataclasses.field(default_factory=dict)
    note: str = ""
    backward: bool = True


def normal(*shape, seed=0, dtype="float32"):
    """A fixed-seed standard normal tensor (inputs are identical for both sides)."""
    return tf.constant(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _flat(outputs):
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def make_step(fn, inputs, variables, jit_compile, backward=True):
    """A compiled forward + backward step: d sum(outputs) / d (float inputs, trainable weights).
    With ``backward=False``, the forward pass alone."""
    names = [k for k, v in inputs.items() if v.dtype.is_floating]
    tf_vars = [v.value if hasattr(v, "value") else v for v in variables]

    if not backward:

        @tf.function(jit_compile=jit_compile)
        def forward(x):
            outputs = _flat(fn(x))
            return tf.add_n([tf.reduce_sum(tf.cast(o, "float32")) for o in outputs]), outputs

        return forward

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch([x[k] for k in names])
            outputs = _flat(fn(x))
            loss = tf.add_n([tf.reduce_sum(tf.cast(o, "float32")) for o in outputs])
        grads = tape.gradient(loss, [x[k] for k in names] + tf_vars)
        missing = [n for n, g in zip(names + [v.name for v in tf_vars], grads, strict=True) if g is None]
        if missing:
            raise ValueError(f"no gradient reaches {missing}")
        return loss, grads

    return step


def _run(step, inputs, number):
    start = time.perf_counter()
    for _ in range(number):
        loss, _ = step(inputs)
    float(loss)  # make sure the step has finished
    return (time.perf_counter() - start) / number


def _max_abs_diff(a, b):
    a, b = _flat(a), _flat(b)
    if len(a) != len(b):
        return None
    diffs = []
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
        if x.shape != y.shape:
            return None
        diffs.append(float(np.max(np.abs(x - y))) if x.size else 0.0)
    return max(diffs)


def run_entry(entry, sizes, mode, repeats, warmup, number, memory, memory_runs=3, log=print):
    """Benchmarks one entry in one compilation mode; returns a result dict."""
    sizes = {**sizes, **entry.sizes}
    keras.utils.set_random_seed(0)
    inputs = entry.inputs(sizes)
    sides = {}
    for role in ("peer", "ours"):
        side = getattr(entry, role)
        layer, fn, variables, outputs = side.build(sizes, inputs)
        step = make_step(fn, inputs, variables, MODES[mode], entry.backward)
        start = time.perf_counter()
        float(step(inputs)[0])  # trace + compile
        first = time.perf_counter() - start
        for _ in range(max(warmup - 1, 0)):
            _run(step, inputs, 1)
        sides[role] = {
            "side": side,
            "variables": variables,
            "step": step,
            "outputs": outputs,
            "first_call_s": first,
            "samples": [],
        }
        log(f"  {entry.name} [{mode}] {role}: first call {first:.2f} s")

    for role in measure.abba(("peer", "ours"), repeats):  # peer, ours, ours, peer, ...
        sides[role]["samples"].append(_run(sides[role]["step"], inputs, number))

    result = {"entry": entry.name, "mode": mode, "sizes": sizes, "note": entry.note}
    for role, s in sides.items():
        samples_ms = [t * 1e3 for t in s["samples"]]
        result[role] = {
            "label": s["side"].label,
            "median_ms": statistics.median(samples_ms),
            "min_ms": min(samples_ms),
            "samples_ms": samples_ms,
            "first_call_s": s["first_call_s"],
            "num_trainable_weights": len(s["variables"]),
            "peak_mib": None,
        }
    result["ratio"] = result["ours"]["median_ms"] / result["peer"]["median_ms"]
    result["paired_ratio_median"] = measure.paired_ratio(sides["ours"]["samples"], sides["peer"]["samples"])
    result["max_abs_diff"] = (
        _max_abs_diff(sides["peer"]["outputs"], sides["ours"]["outputs"])
        if entry.same_math
        else None
    )
    if memory:
        # The peak depends on how the executor happens to schedule ops (it moves by a tensor or so
        # from run to run), so it is the median of a few runs; all runs are kept in the JSON.
        for role in ("peer", "ours"):
            runs = [
                measure.peak_memory_mib(sides[role]["step"], inputs, memory) for _ in range(memory_runs)
            ]
            result[role]["peak_mib_runs"] = runs
            result[role]["peak_mib"] = statistics.median(runs)
    return result


def format_table(results):
    header = ["entry", "mode", "peer ms", "ours ms", "ours/peer", "paired", "peer MiB", "ours MiB"]
    header.append("max|diff|")

    def mem(v):
        return "-" if v is None else (f"{v:.1f}" if v < 10 else f"{v:.0f}")

    rows = []
    for r in results:
        rows.append([
            r["entry"],
            r["mode"],
            f"{r['peer']['median_ms']:.1f}",
            f"{r['ours']['median_ms']:.1f}",
            f"{r['ratio']:.3f}",
            f"{r['paired_ratio_median']:.3f}",
            mem(r["peer"]["peak_mib"]),
            mem(r["ours"]["peak_mib"]),
            "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}",
        ])
    out = [measure.aligned_table(header, rows, left=2)]  # entry and mode left-aligned, numbers right-aligned
    seen = set()
    for r in results:
        if r["entry"] in seen:
            continue
        seen.add(r["entry"])
        out.append(f"  {r['entry']}: peer = {r['peer']['label']}")
        out.append(f"  {' ' * len(r['entry'])}  ours = {r['ours']['label']}")
        if r["note"]:
            out.append(f"  {' ' * len(r['entry'])}  note: {r['note']}")
    return "\n".join(out)


def environment():
    return {
        **measure.environment(),
        "processor": measure.processor(),
        "devices": [d.name for d in tf.config.list_physical_devices()],
        "tf_cpu_allocator_use_bfc": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "unset"),
        "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    }


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def main(entries, name, sizes, description=None, argv=None):
    """CLI entry point of a benchmark file: runs ``entries`` and writes ``results/<name>.json``."""
    parser = argparse.ArgumentParser(
        description=description or f"attnlayers vs peers: {name}",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="timed samples per side (interleaved ABBA)"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed calls per side (the first compiles)"
    )
    parser.add_argument("--number", type=int, default=1, help="steps per timed sample")
    parser.add_argument(
        "--modes",
        default="graph,xla",
        help="comma-separated: graph = tf.function, xla = tf.function(jit_compile=True)",
    )
    parser.add_argument("--only", default=None, help="comma-separated entry names to run")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    parser.add_argument(
        "--memory-runs", type=int, default=3, help="steps whose peak memory is measured"
    )
    parser.add_argument("--out", default=RESULTS_DIR, help="directory for <name>.json")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    for key, value in sizes.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}",
            type=type(value),
            default=value,
            help=f"size '{key}' (entries may override it)",
        )
    args = parser.parse_args(argv)

    if args.list:
        for e in entries:
            print(f"{e.name}: {e.peer.label}  vs  {e.ours.label}")
        return []
    chosen = entries
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {e.name for e in entries}
        if unknown:
            parser.error(
                f"unknown entries {sorted(unknown)}; choose from {[e.name for e in entries]}"
            )
        chosen = [e for e in entries if e.name in names]
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            parser.error(f"unknown mode {m!r}; choose from {list(MODES)}")
    sizes = {key: getattr(args, key) for key in sizes}
    memory = None if args.no_memory else measure.cpu_memory_backend()

    print(
        f"{name}: sizes {sizes}, modes {modes}, repeats {args.repeats}, warmup {args.warmup}, "
        f"memory {memory or 'off'}",
        flush=True,
    )
    results = []
    for entry in chosen:
        for mode in modes:
            results.append(
                run_entry(
                    entry,
                    sizes,
                    mode,
                    args.repeats,
                    args.warmup,
                    args.number,
                    memory,
                    args.memory_runs,
                    log=lambda m: print(m, flush=True),
                )
            )
    table = format_table(results)
    print()
    print(table)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{name}.json")
    record = {
        "benchmark": name,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            [os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)
        ),
        "settings": {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "number": args.number,
            "modes": modes,
            "memory": memory,
            "memory_runs": args.memory_runs,
            "order": "ABBA interleaved",
            "statistic": "median",
            "step": "forward + backward (grad of sum(outputs) w.r.t. float inputs and weights)",
        },
        "environment": environment(),
        "results": results,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"\nwrote {path}")
    return results
