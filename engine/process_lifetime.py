"""Child processes that end with the process that started them, however that one ends.

A Serve replica's vLLM engine core, and the HAProxy a Serve proxy runs, are children of a Ray
worker. When the worker ends cleanly it stops them; when it is killed (Ray's daemons got the
same SIGTERM as everything else in a process group, `ray stop --force`, the OOM killer) nothing
does: vLLM's engine core does not watch its parent, and both lived on holding the engine's
memory and the app's port (docs/faults.md, "Stops"). The kernel's parent-death signal ends
them with their parent whatever the parent's end, with no thread to run in the child.

The signal is tied to the thread that started the child: a child started from a short-lived
thread would be killed when that thread ends. Both callers start their child from their
process's event loop thread, which lives as long as the process.
"""

from __future__ import annotations

import ctypes
import multiprocessing.context
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int | None) -> None:
    """In a child: SIGKILL when its parent ends; at once if `parent_pid` ended before this ran
    (the child was then adopted by a subreaper or init). No-op off Linux."""
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


class _BoundToParent:
    """Mixed into a multiprocessing Process: the child dies with the process that started it."""

    def start(self) -> None:
        self._bound_parent_pid = os.getpid()
        super().start()

    def run(self) -> None:
        die_with_parent(self._bound_parent_pid)
        super().run()


class BoundSpawnProcess(_BoundToParent, multiprocessing.context.SpawnProcess):
    pass


class BoundForkProcess(_BoundToParent, multiprocessing.context.ForkProcess):
    pass


class BoundSpawnContext(multiprocessing.context.SpawnContext):
    Process = BoundSpawnProcess


class BoundForkContext(multiprocessing.context.ForkContext):
    Process = BoundForkProcess


_BOUND = {"spawn": BoundSpawnContext, "fork": BoundForkContext}


def bound_to_parent(context: multiprocessing.context.BaseContext) -> multiprocessing.context.BaseContext:
    """The same start method as `context`, with children that die with their parent. A
    forkserver's children are the server's: that context is returned as it is."""
    bound = _BOUND.get(context.get_start_method())
    return bound() if bound else context
