"""A callback that times ``fit``'s epochs, shared by the benchmark scripts (it imports nothing but keras, so it
selects no backend)."""

import time

import keras


class EpochTimer(keras.callbacks.Callback):
    """Seconds of each epoch, ``on_epoch_begin`` to ``on_epoch_end``, in ``seconds``. No batch hooks: fit keeps
    dispatching its steps asynchronously, as without this callback; the epoch's logs are read at its end, which
    waits for its last step."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        for value in (logs or {}).values():
            float(value)  # waits for the epoch's last step
        self.seconds.append(time.perf_counter() - self._start)
