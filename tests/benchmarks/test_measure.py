"""benchmarks/measure.py, the benchmarks' shared measuring module: the ABBA order, paired ratios, timing with a first
call and repeats, the tables (the layout the scripts printed before it existed), byte sizes; importing it loads no
framework."""

import importlib.util
import pathlib
import statistics
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "measure.py"
_spec = importlib.util.spec_from_file_location("benchmarks_measure", SCRIPT)
measure = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = measure  # dataclasses look their module up
_spec.loader.exec_module(measure)


def test_abba_order_and_paired_ratio():
    assert list(measure.abba(("peer", "ours"), 3)) == ["peer", "ours", "ours", "peer", "peer", "ours"]
    assert measure.paired_ratio([2.0, 3.0, 8.0], [1.0, 1.0, 2.0]) == 3.0  # median of 2, 3, 4


def test_time_calls_counts_the_first_call_apart():
    calls = []
    timing = measure.time_calls(lambda x: calls.append(x) or (x, "state"), 4, 7)
    assert calls == [7] * 5 and len(timing.samples) == 4 and timing.output == (7, "state")
    assert timing.median == statistics.median(timing.samples)
    assert measure.Timing(first=2.0, samples=[]).median == 2.0  # no repeats: the first call


def test_tables_and_sizes():
    aligned = measure.aligned_table(["entry", "ms"], [["dot", "1.5"], ["general", "12.0"]], left=1)
    assert aligned.splitlines() == ["| entry   |   ms |", "|---------|------|", "| dot     |  1.5 |",
                                    "| general | 12.0 |"]
    markdown = measure.markdown_table(["a", "b"], [["1", "2"], "| x | failed |"])
    assert markdown.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| x | failed |"]
    assert [measure.format_bytes(v) for v in (None, 3 * 2**20, 2**31)] == ["n/a", "3.0 MiB", "2.00 GiB"]
    assert measure.machine().endswith(" cpus") and measure.cores() >= 1


def test_importing_it_loads_no_framework():
    code = (f"import runpy, sys; runpy.run_path({str(SCRIPT)!r}); "
            "print(sorted({'keras', 'tensorflow', 'jax'} & set(sys.modules)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
