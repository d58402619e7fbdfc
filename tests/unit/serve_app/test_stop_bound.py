"""A stop that hangs still ends `trilemma serve`: past its bound the process prints every
thread's stack and exits with 1; a stop within its bound leaves the process alone."""

from __future__ import annotations

import subprocess
import sys
import time

from serve_app.launcher import DRAIN_MARGIN_S, drain_bound_s, stop_bound_s
from tests.support import config_for_tests

HANGING = """
import time
from serve_app.launcher import ends_within
with ends_within({bound}, "stopping"):
    time.sleep({sleep})
time.sleep({after})   # past the bound: a bound left running would end the process here
print("stopped", flush=True)
"""


def _run(bound: float, sleep: float, after: float = 0) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    # A session of its own: the bound's reaper kills orphaned engines of its session only.
    done = subprocess.run([sys.executable, "-c", HANGING.format(bound=bound, sleep=sleep, after=after)], capture_output=True,
                          text=True, timeout=60, start_new_session=True)
    return done, time.monotonic() - started


def test_a_hanging_stop_ends_the_process_with_1_and_says_where_it_waited():
    done, took_s = _run(bound=1, sleep=30)
    assert done.returncode == 1 and took_s < 25, (done.returncode, took_s)
    assert "stopping took over 1 s: ending the process" in done.stderr
    assert 'File "<string>", line 5' in done.stderr   # the main thread's stack, at its sleep
    assert "stopped" not in done.stdout.splitlines()


def test_a_stop_within_its_bound_goes_on_after_it():
    done, _ = _run(bound=1, sleep=0.2, after=2)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "stopped", done.stderr


def test_the_bound_waits_out_the_drain():
    """A drain that uses all its time is no hang."""
    config = config_for_tests()
    assert stop_bound_s(config) > drain_bound_s(config) + DRAIN_MARGIN_S
