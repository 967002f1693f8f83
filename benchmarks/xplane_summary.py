"""Where a compiled step's GPU time goes: a JAX profiler trace (XPlane, from ``gpu_training.py --profile``) summed
per step by XLA op, and, given XLA's optimized HLO of the same program, by the layer path in the op's name.

    python benchmarks/xplane_summary.py gpt-ours.xplane.pb --steps 3
    H=DUMP/module_0042.jit_train_step.sm_9.0a_gpu_after_optimizations.txt
    python benchmarks/xplane_summary.py gpt-ours.xplane.pb --steps 3 --hlo "$H"

The HLO comes from the machine that ran the trace
(``XLA_FLAGS="--xla_dump_to=DUMP --xla_dump_hlo_module_re=.*train_step.*"``; same program, same op names). With
XLA's command buffers on (its default on a GPU) a kernel's own XLA op is only known for fusions (the kernel carries
the fusion's name); cuBLAS calls read as "GEMM (cuBLAS)". Add ``--xla_gpu_enable_command_buffer=`` to name them all.

Reading the trace needs the XPlane protocol buffer, which TensorFlow ships (the machine that runs the tests has it).
"""

from __future__ import annotations

import argparse
import collections
import re

_OP_NAME = re.compile(r'^\s*%([\w.\-]+) = .*?op_name="([^"]*)"')


def load_events(path):
    """Every GPU kernel / copy of the trace: ``[(name, milliseconds, {stat: value})]``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    events = []
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        names = {key: value.name for key, value in plane.stat_metadata.items()}

        def value(stat, plane=plane):
            if stat.ref_value:
                return plane.stat_metadata[stat.ref_value].name
            return stat.str_value or stat.int64_value or stat.uint64_value or stat.double_value

        for line in plane.lines:
            for event in line.events:
                metadata = plane.event_metadata[event.metadata_id]
                stats = {names[s.metadata_id]: value(s) for s in list(metadata.stats) + list(event.stats)}
                events.append((metadata.name, event.duration_ps / 1e9, stats))
    return events


def hlo_op_names(path):
    """``{instruction name: op_name}`` of an optimized HLO dump (the JAX name stack: jit / layer / ... / op)."""
    found = {}
    with open(path) as f:
        for line in f:
            match = _OP_NAME.match(line)
            if match:
                found[match.group(1)] = match.group(2)
    return found


def instruction(kernel, stats):
    """The XLA instruction that ran a kernel: its ``hlo_op``, or under a command buffer the fusion the kernel is
    named after ("fusion_3271" -> "fusion.3271"); None for a library call inside a command buffer."""
    op = str(stats.get("hlo_op", ""))
    if op and not op.startswith("command_buffer"):
        return op
    if "fusion" in kernel or kernel.startswith(("wrapped_", "input_", "loop_")):
        return re.sub(r"_(\d+)$", r".\1", kernel)
    return None


def layer_kind(op_name):
    """The op's layer path with layer numbers and the jit / transpose wrappers dropped, e.g.
    "decoder/transformerdecoderblock/self_attention/dropout (backward)"."""
    backward = "transpose(" in op_name
    parts = [p for p in op_name.split("/") if not p.startswith("jit(")]
    parts = [re.sub(r"^(transpose\()?(jvp\()?([^()]*)\)*$", r"\3", p) for p in parts]
    parts = [re.sub(r"_\d+$", "", p) for p in parts[:-1]]  # the last part is the primitive
    return "/".join(parts[:4]) + (" (backward)" if backward else "")


def summarize(events, steps, op_names=None, top=25, module=None):
    modules = collections.Counter()
    for _, ms, stats in events:
        modules[str(stats.get("hlo_module", "?"))] += ms
    module = module or modules.most_common(1)[0][0]
    print("device time per step by XLA module: "
          + ", ".join(f"{name} {ms / steps:.2f} ms" for name, ms in modules.most_common(4)))
    by_op = collections.defaultdict(lambda: [0.0, 0, ""])
    by_kind = collections.Counter()
    for kernel, ms, stats in events:
        if str(stats.get("hlo_module")) != module:
            continue
        op = instruction(kernel, stats)
        gemm = any(word in kernel for word in ("gemm", "nvjet", "xmma", "cutlass"))
        key = op or ("GEMM (cuBLAS): " + kernel[:48] if gemm else kernel[:60])
        entry = by_op[key]
        entry[0] += ms
        entry[1] += 1
        entry[2] = kernel
        if op_names is not None:
            by_kind[layer_kind(op_names.get(op, "")) if op in op_names else
                     ("GEMM (cuBLAS, unnamed)" if gemm else "unnamed")] += ms
    total = sum(v[0] for v in by_op.values())
    print(f"\n{module}: {total / steps:.2f} ms of device time per step, "
          f"{sum(v[1] for v in by_op.values()) / steps:.0f} kernels per step\n")
    print(f"{'ms/step':>8} {'calls':>6}  op / kernel" + ("  [layer path]" if op_names else ""))
    for key, (ms, calls, kernel) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        where = f"  [{op_names[key]}]" if op_names and key in op_names else ""
        print(f"{ms / steps:8.3f} {calls / steps:6.0f}  {key[:60]}{where[:140]}")
    if op_names is not None:
        print(f"\n{'ms/step':>8}  by layer path")
        for kind, ms in by_kind.most_common(top):
            print(f"{ms / steps:8.3f}  {kind}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="a .xplane.pb file")
    parser.add_argument("--steps", type=float, default=3, help="calls the trace holds (default 3)")
    parser.add_argument("--hlo", default=None, help="XLA's optimized HLO of the same program (a dump's text file)")
    parser.add_argument("--module", default=None, help="the XLA module to sum (default: the one with most time)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    summarize(load_events(args.trace), args.steps, hlo_op_names(args.hlo) if args.hlo else None, args.top,
              args.module)


if __name__ == "__main__":
    main()
