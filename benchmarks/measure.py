"""What the benchmark scripts measure with: the machine and its accelerator, timing (one call waited for; a first
call, then the median of repeats; ABBA interleaving of several sides; paired ratios), peak memory (TensorFlow's
allocators, the process' resident set, XLA's memory plan of a compiled function) and the tables (aligned text and
markdown, bytes as MiB / GiB).

Importing this module selects no backend and imports no framework: each function imports what it reads.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import sys
import time

import numpy as np

# ---- the machine -------------------------------------------------------------------------------------------------


def processor():
    """The CPU's name as the platform reports it (its architecture where it reports none)."""
    return platform.processor() or platform.machine()


def cores():
    """The cores this process may use (fewer than the machine's when pinned with taskset)."""
    return len(os.sched_getaffinity(0))


def machine():
    """"<processor>, <N> cpus": stored beside each result so that rows from different machines are not compared."""
    return f"{processor()}, {os.cpu_count()} cpus"


def meminfo_bytes(field="MemTotal"):
    """A field of /proc/meminfo in bytes: MemTotal (the machine's RAM), MemAvailable (what it can still give)."""
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields[field].split()[0]) * 1024


def device_info(backend):
    """{"kind": "gpu" | "cpu" | ..., "name", "count"} of the first accelerator ``backend`` (keras' name) uses."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return {"kind": device.platform, "name": getattr(device, "device_kind", str(device)),
                "count": jax.device_count()}
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            return {"kind": "gpu", "name": details.get("device_name", gpus[0].name), "count": len(gpus)}
        return {"kind": "cpu", "name": processor(), "count": 1}
    return {"kind": "unknown", "name": backend, "count": 1}


def environment():
    """The versions a result depends on: Python, the platform, the CPU count, and keras, keras_hub, TensorFlow and
    JAX where this process has imported them."""
    env = {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count()}
    for name in ("keras", "keras_hub", "tensorflow", "jax"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "__version__"):
            env[name] = module.__version__
    return env


# ---- timing ------------------------------------------------------------------------------------------------------


def wait(output):
    """Waits for ``output`` (the first element of a tuple) to be computed; returns it as NumPy."""
    return np.asarray(output[0] if isinstance(output, tuple) else output)


def timed(call, *args):
    """(seconds, output) of one ``call(*args)``, waiting for its result."""
    start = time.perf_counter()
    output = call(*args)
    wait(output)
    return time.perf_counter() - start, output


@dataclasses.dataclass
class Timing:
    """A first call (which traces and compiles) and the later calls' samples, in seconds."""

    first: float
    samples: list
    output: object = None

    @property
    def median(self):
        return statistics.median(self.samples) if self.samples else self.first


def time_calls(call, repeats, *args):
    """Times ``call(*args)``: the first call, then ``repeats`` more (their median is ``Timing.median``)."""
    first, output = timed(call, *args)
    samples = []
    for _ in range(repeats):
        seconds, output = timed(call, *args)
        samples.append(seconds)
    return Timing(first, samples, output)


def abba(names, repeats):
    """The order in which ``repeats`` rounds run the sides ``names``: as given, reversed every other round (ABBA), so
    that drift on a shared, noisy machine hits every side alike."""
    names = list(names)
    for r in range(repeats):
        yield from (names if r % 2 == 0 else names[::-1])


def paired_ratio(numerators, denominators):
    """The median of the per-round ratios of two sides' samples (each from two adjacent samples: the statistic
    least sensitive to drift)."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


# ---- memory ------------------------------------------------------------------------------------------------------


def rss_kib(field="VmRSS"):
    """A field of /proc/self/status in KiB: VmRSS (resident now), VmHWM (the peak since the last reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_rss_peak():
    """Resets VmHWM to the current resident set (Linux ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def cpu_memory_backend():
    """How a TensorFlow step's peak host memory can be read here: "tf_allocator" (TensorFlow's CPU allocator keeps
    statistics), "rss" (the process' peak resident set) or None."""
    import tensorflow as tf

    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        probe = tf.ones((256, 1024))  # 1 MiB
        info = tf.config.experimental.get_memory_info("CPU:0")
        del probe
        if info["peak"] > 0:
            return "tf_allocator"
    except (ValueError, RuntimeError):
        pass
    try:
        reset_rss_peak()
        return "rss"
    except OSError:
        return None


def peak_memory_mib(step, inputs, backend):
    """Peak host memory of one ``step(inputs)`` above what was live before it, in MiB (None if not measurable);
    ``backend`` from :func:`cpu_memory_backend`."""
    if backend == "tf_allocator":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        result = step(inputs)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        del result
        return (peak - before) / 2**20
    if backend == "rss":
        reset_rss_peak()
        before = rss_kib("VmRSS")
        result = step(inputs)
        del result
        return (rss_kib("VmHWM") - before) / 1024
    return None


def jitted_in(function, depth=3):
    """The ``jax.jit`` function held in ``function``'s closure (keras' train function, keras-hub's generate
    function), or None."""
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if hasattr(value, "lower") and callable(value):
            return value
        if depth > 1 and callable(value):
            found = jitted_in(value, depth - 1)
            if found is not None:
                return found
    return None


def compiled_bytes(jitted, *args):
    """XLA's plan for one call of ``jitted`` on ``args``: arguments + outputs - donated aliases + temporaries (a
    cache hit when the function ran on these arguments: no second compilation)."""
    stats = jitted.lower(*args).compile().memory_analysis()
    if stats is None:
        return None
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
               + stats.temp_size_in_bytes)


class DeviceMemory:
    """Peak accelerator memory of one side of a comparison: under JAX, XLA's memory plan of the side's compiled
    function; under TensorFlow on a GPU, the peak of TensorFlow's GPU allocator since :meth:`start`; else none."""

    def __init__(self, backend, device):
        self.backend, self.device = backend, device

    def _tf_gpu(self):
        return self.backend == "tensorflow" and self.device["kind"] == "gpu"

    def start(self):
        if self._tf_gpu():
            import tensorflow as tf

            tf.config.experimental.reset_memory_stats("GPU:0")

    def process_peak(self):
        """The backend's high-water mark of device memory (JAX: peak_bytes_in_use, which cannot be reset), or
        None."""
        if self.backend == "jax":
            import jax

            stats = jax.devices()[0].memory_stats() or {}
            return stats.get("peak_bytes_in_use")
        if self._tf_gpu():
            import tensorflow as tf

            return tf.config.experimental.get_memory_info("GPU:0")["peak"]
        return None

    def side_peak(self, jitted_call):
        """(bytes or None, source). ``jitted_call() -> bytes`` reads XLA's plan under JAX."""
        if self.backend == "jax":
            try:
                return jitted_call(), "xla_memory_analysis"
            except Exception as error:  # noqa: BLE001  -- reported; the timing stands
                print(f"    (no XLA memory analysis: {type(error).__name__}: {error})", flush=True)
                return None, None
        if self._tf_gpu():
            return self.process_peak(), "tf_gpu_allocator_peak"
        return None, None


# ---- tables ------------------------------------------------------------------------------------------------------


def format_bytes(value):
    """``n/a``, ``12.3 MiB`` or ``1.23 GiB``."""
    if value is None:
        return "n/a"
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.1f} MiB"


def aligned_table(header, rows, left=None):
    """A markdown table padded to its columns' widths: the first ``left`` columns (default all) left-aligned, the
    others (numbers) right-aligned."""
    left = len(header) if left is None else left
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        padded = [str(c).ljust(w) if i < left else str(c).rjust(w)
                  for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "| " + " | ".join(padded) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def markdown_table(header, rows):
    """A compact markdown table (``|---|`` rules); a row given as a string is written as it is."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [row if isinstance(row, str) else "| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
