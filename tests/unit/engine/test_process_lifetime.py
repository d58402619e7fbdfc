"""A child started from a bound context ends when the process that started it is killed; one
started from the plain context lives on (what an engine core did before)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from engine.process_lifetime import BoundForkContext, BoundSpawnContext, bound_to_parent

# A parent that starts a sleeping child from the context named, says its pid, and waits.
PARENT = """
import multiprocessing, sys, time
from engine.process_lifetime import bound_to_parent
context = multiprocessing.get_context(sys.argv[1])
if sys.argv[2] == "bound":
    context = bound_to_parent(context)
child = context.Process(target=time.sleep, args=(120,))
child.start()
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _child_after_its_parent_is_killed(method: str, binding: str) -> tuple[int, bool]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, method, binding], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        return child, _alive(child)
    finally:
        parent.kill()
        parent.stdout.close()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_bound_child_ends_when_its_parent_is_killed(method):
    _, alive = _child_after_its_parent_is_killed(method, "bound")
    assert not alive


def test_a_plain_child_outlives_its_killed_parent():
    child, alive = _child_after_its_parent_is_killed("fork", "plain")
    try:
        assert alive
    finally:
        if alive:
            os.kill(child, signal.SIGKILL)


def test_the_bound_context_keeps_the_start_method():
    assert isinstance(bound_to_parent(multiprocessing.get_context("spawn")), BoundSpawnContext)
    assert isinstance(bound_to_parent(multiprocessing.get_context("fork")), BoundForkContext)
    forkserver = multiprocessing.get_context("forkserver")
    assert bound_to_parent(forkserver) is forkserver  # its children are the server's
