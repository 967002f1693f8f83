"""attnlayers.startup: TensorFlow's start-up lines are dropped where a program sets ATTNLAYERS_QUIET_STARTUP=1 (the
example scripts do), every other line written meanwhile is kept, and nothing is filtered without the variable."""

import os
import subprocess
import sys

from attnlayers import startup

NOISE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         "I0000 00:00:1795673450.574549   16077 port.cc:153] oneDNN custom operations are on. You may see ...\n"
         "I0000 00:00:1795673450.574925   16077 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
         "will not be used.\n"
         "E0000 00:00:1795673453.850864   16077 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
         "Failed call to cuInit: UNKNOWN ERROR (303)\n")


def test_the_filter_drops_the_start_up_lines_and_keeps_the_rest(capfd):
    capfd.readouterr()
    with startup.filtered_stderr():
        os.write(2, ("a warning of the user's\n" + NOISE + "Traceback (most recent call last):\n").encode())
    assert capfd.readouterr().err == "a warning of the user's\nTraceback (most recent call last):\n"


def test_the_filter_writes_back_what_came_before_an_error(capfd):
    capfd.readouterr()
    try:
        with startup.filtered_stderr():
            os.write(2, ("kept\n" + NOISE).encode())
            raise KeyError("x")
    except KeyError:
        pass
    assert capfd.readouterr().err == "kept\n"


def _import_attnlayers(**env):
    code = "import attnlayers, sys; print('imported', file=sys.stderr)"
    environment = {k: v for k, v in os.environ.items() if k not in ("ATTNLAYERS_QUIET_STARTUP", "TF_CPP_MIN_LOG_LEVEL")}
    return subprocess.run([sys.executable, "-c", code], env={**environment, **env}, capture_output=True, text=True,
                          timeout=300).stderr


def test_importing_attnlayers_under_the_variable_prints_no_start_up_line():
    quiet = _import_attnlayers(ATTNLAYERS_QUIET_STARTUP="1", TF_CPP_MIN_LOG_LEVEL="2")
    assert quiet.splitlines()[-1] == "imported"
    assert not [line for line in quiet.splitlines() if startup.is_noise(line)], quiet
    loud = _import_attnlayers(TF_CPP_MIN_LOG_LEVEL="2")
    assert loud.splitlines()[-1] == "imported"
    if "tensorflow" in sys.modules:  # this machine's TensorFlow writes them when not filtered
        assert any(startup.is_noise(line) for line in loud.splitlines()), loud
