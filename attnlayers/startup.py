"""The lines TensorFlow's native code writes to stderr while it starts, filtered when a program asks.

TensorFlow writes a few lines of its own to file descriptor 2 as it loads and first looks for devices, past
``TF_CPP_MIN_LOG_LEVEL`` (they come from absl before its logging is initialised): that oneDNN's custom operations
are on, that no CUDA driver was found and ``failed call to cuInit`` on a machine without a GPU, the absl prelude
"All log messages before absl::InitializeLog() ...", and, when the first graph holding an int32 transpose is
optimised, that "oneDNN supports DT_INT32 (or DT_INT64) only on platforms with AVX-512". They are not the user's concern. A program that sets the
environment variable ``ATTNLAYERS_QUIET_STARTUP=1`` before it imports attnlayers (the example scripts do) gets them
dropped: stderr is held in a temporary file while keras and TensorFlow load and list the devices, and every other
line written meanwhile (a warning, a traceback) is written back unchanged afterwards. Without the variable nothing
is filtered. This module imports nothing heavy, so it runs before keras loads; :func:`run_first_graph` takes the
oneDNN line out of the way later, once a program has made its ``tf.distribute`` strategy.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

__all__ = ["ENVIRONMENT_VARIABLE", "NOISE", "filtered_stderr", "is_noise", "load_backend", "quiet_requested",
           "run_first_graph"]

ENVIRONMENT_VARIABLE = "ATTNLAYERS_QUIET_STARTUP"

#: The start-up lines dropped: each pattern is searched in one line.
NOISE = tuple(re.compile(p) for p in (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"port\.cc:\d+\] oneDNN custom operations are on",
    r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
    r"cuda_(platform|executor|diagnostics)\.cc:\d+\].*(cuInit|kernel driver|CUDA driver|UNKNOWN ERROR \(303\))",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"computation placer already registered",
    r"TF-TRT Warning: Could not find TensorRT",
    r"This TensorFlow binary is optimized to use available CPU instructions",
    r"To enable the following instructions: .* in other operations, rebuild TensorFlow",
    r"util\.cc:\d+\] oneDNN supports DT_INT(32|64) only on platforms with AVX-512",
))


def is_noise(line):
    """Whether ``line`` is one of TensorFlow's start-up lines in :data:`NOISE`."""
    return any(p.search(line) for p in NOISE)


@contextlib.contextmanager
def filtered_stderr(keep=lambda line: not is_noise(line)):
    """Holds everything written to file descriptor 2 (Python's and native code's) while the block runs, then writes
    back the lines ``keep`` accepts, also when the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        text = held.read().decode("utf-8", errors="replace")
        held.close()
        kept = "".join(line for line in text.splitlines(keepends=True) if keep(line))
        if kept:
            os.write(2, kept.encode("utf-8"))


def quiet_requested():
    """Whether ``ATTNLAYERS_QUIET_STARTUP`` asks for the filter ("1", "true" or "yes")."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def load_backend():
    """Imports keras; when :func:`quiet_requested`, inside :func:`filtered_stderr`, and then under the TensorFlow
    backend also lists TensorFlow's physical devices there (where the CUDA lines come from; listing does not
    initialise the runtime, so a ``MultiWorkerMirroredStrategy`` can still be made)."""
    quiet = quiet_requested()
    with filtered_stderr() if quiet else contextlib.nullcontext():
        import keras

        if quiet and keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices()


def run_first_graph():
    """When :func:`quiet_requested` under the TensorFlow backend: runs one ``tf.function`` holding an int32 and an
    int64 transpose inside :func:`filtered_stderr`, so that oneDNN's once-per-process DT_INT32 / DT_INT64 lines are
    written (and dropped) there rather than in the middle of training or generation. Call it after the strategy is made: running a graph initialises
    TensorFlow's runtime, after which a ``MultiWorkerMirroredStrategy`` can no longer be created."""
    if not quiet_requested():
        return
    import keras

    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    with filtered_stderr():
        tf.function(lambda x, y: (tf.transpose(x), tf.transpose(y)))(tf.zeros((1, 2), tf.int32),
                                                                       tf.zeros((1, 2), tf.int64))
