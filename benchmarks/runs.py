"""What the training-run benchmarks share (bert_pretraining.py, bert_finetune.py, gpt_training.py): the machine
record written beside each result, reading a folder of result files back, and a ``main`` that either runs one
configuration or prints the table of every result so far (``--table``).

Pure Python: importing this module selects no backend and imports no framework.
"""

from __future__ import annotations

import json
import pathlib

import measure


def machine_record():
    """{"machine": processor and CPU count, "cores": the cores this process may use (fewer than the machine's
    when pinned with taskset)}: stored in each result so that rows from different machines are not compared."""
    return {"machine": measure.machine(), "cores": measure.cores()}


def load_rows(results_dir, pattern, keep, key):
    """The JSON objects of the files matching ``pattern`` under ``results_dir`` for which ``keep(row)`` holds,
    sorted by ``key(row)``."""
    rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(results_dir).glob(pattern))]
    return sorted((r for r in rows if isinstance(r, dict) and keep(r)), key=key)


def run_or_table(args, run, load_results, print_table):
    """``print_table(load_results(args.results))`` when ``args.table``, else ``run(args)``; returns 0."""
    if args.table:
        print_table(load_results(args.results))
    else:
        run(args)
    return 0
