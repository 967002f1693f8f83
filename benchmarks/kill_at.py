"""Fault injection for the example scripts: runs SCRIPT with ARGS as ``python SCRIPT ARGS`` would, and SIGKILLs the
process at a chosen point of training; also writes the weights each ``fit`` ends with.

    python tests/kill_at.py KILL WEIGHTS SCRIPT [ARGS...]

KILL: ``none``, ``step:N`` (right after the N-th batch this process trains), ``backup:N`` (right after the N-th
backup is committed), ``writing:N`` (during the N-th backup's write: its weights and state files are on disk, its
pointer is not) or ``validation:N`` (at the N-th validation batch). The points are found through
``core.BackupAndRestore``, which every example trains with. WEIGHTS: a folder; after each ``fit`` (once every other
callback's ``on_train_end`` ran, e.g. the best weights restored) the model's weights go to ``fit-{k}.npz`` there.
TensorFlow's ops are made deterministic (the condition of a bit-exact resume, docs/guides/training-at-scale.md). With
``KILL_AT_PRELUDE=FILE`` in the environment, FILE is run first (e.g. to stand a small corpus in for one that is not
installed).
"""

import os
import runpy
import signal
import sys


def _kill():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv):
    kill, weights_dir, script, args = argv[0], argv[1], argv[2], argv[3:]
    where, _, count = kill.partition(":")
    if where not in ("none", "step", "backup", "writing", "validation"):
        raise SystemExit(f"kill_at.py: unknown kill point {kill!r}")
    at = int(count) if count else 0
    import keras
    import numpy as np

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    from attnlayers.applications.core.training.backup import BackupAndRestore

    seen = {"step": 0, "backup": 0, "writing": 0, "validation": 0, "fits": 0}

    def counted(name):
        seen[name] += 1
        return where == name and seen[name] == at

    on_batch_end, write_pointer, on_train_end = (BackupAndRestore.on_train_batch_end, BackupAndRestore._write_pointer,
                                                 BackupAndRestore.on_train_end)

    def on_train_batch_end(self, batch, logs=None):
        on_batch_end(self, batch, logs)
        if batch >= self._skip_until and counted("step"):
            _kill()

    def _write_pointer(self, pointer):
        if counted("writing"):
            _kill()
        write_pointer(self, pointer)
        if counted("backup"):
            _kill()

    def on_test_batch_end(self, batch, logs=None):
        if counted("validation"):
            _kill()

    def train_end(self, logs=None):
        on_train_end(self, logs)
        os.makedirs(weights_dir, exist_ok=True)
        np.savez(os.path.join(weights_dir, f"fit-{seen['fits']}.npz"), *self.model.get_weights())
        seen["fits"] += 1

    prelude = os.environ.get("KILL_AT_PRELUDE")
    if prelude:
        runpy.run_path(prelude, run_name="kill_at_prelude")
    BackupAndRestore.on_train_batch_end = on_train_batch_end
    BackupAndRestore._write_pointer = _write_pointer
    BackupAndRestore.on_test_batch_end = on_test_batch_end
    BackupAndRestore.on_train_end = train_end
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
