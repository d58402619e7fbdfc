"""The CPU time a start spends until it serves, by what each process does.

On a machine with few cores a start is bound by the CPU time all of its processes need, not by
the longest chain of them: where every core is busy, the ready time is at least the CPU time
over the cores. `trilemma bench start` meters each start this way, plain `vllm serve` and the
app alike, so that the difference between them has names: the engines' own work, Ray's and
Serve's processes, the router, the replicas' imports.

A meter samples every process that appears below the one it runs in after it began (what
`trilemma bench start` started: plain vLLM's processes, or `trilemma serve` with the Ray cluster
it starts and every worker of it, which it keeps below itself as their subreaper), every
`interval_s`. A process's figure is its own user and system time at its last sample, under the
title it had then. So a process that ends between two samples (a compiler that inductor ran)
loses what it spent after its last one, one that lives less than an interval is not seen, and
the time of children a process reaped is not counted.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import psutil

from engine.processes import FORKSERVER_MAIN

# What a process does, by a part of its command line (Ray titles its workers `ray::<actor>` and
# the dashboard's modules `ray-dashboard-<module>`, vLLM its engine processes `VLLM::<part>`); the
# first that matches names it. Python's forkserver takes its parent's role (role_of_process).
ROLES = (
    ("ray-dashboard-", "Ray daemons"),
    ("VLLM::Worker", "engine workers"),
    ("VLLM::EngineCore", "engine cores"),
    (":pool-", "pool replicas"),
    (":router", "router"),
    ("ServeController", "Serve controller and proxy"),
    ("ProxyActor", "Serve controller and proxy"),
    ("haproxy", "Serve controller and proxy"),
    ("ray::DashboardAgent", "Ray daemons"),
    ("ray::RuntimeEnvAgent", "Ray daemons"),
    ("ray::", "other Ray workers"),
    ("default_worker.py", "other Ray workers"),
    ("serve_app.cli serve", "trilemma serve"),
    ("bin/trilemma serve", "trilemma serve"),
    ("vllm_cli serve", "vllm serve front end"),
    ("cc1plus", "C++ compiler (inductor)"),
    ("gcs_server", "Ray daemons"),
    ("raylet", "Ray daemons"),
    ("site-packages/ray/", "Ray daemons"),  # the dashboard, the log monitor: scripts of Ray's package
)
OTHER = "other"


def role_of(command_line: str) -> str:
    return next((role for part, role in ROLES if part in command_line), OTHER)


def role_of_process(process: psutil.Process) -> str | None:
    """What the process does; None where there is no command line to read (an ended process's).
    A forkserver is its parent's: a pool replica's starts its engine core (engine.preload),
    so it counts among the engine cores; Ray's dashboard has one too."""
    command_line = " ".join(process.cmdline())
    if not command_line:
        return None
    if FORKSERVER_MAIN not in command_line or command_line.startswith("ray-dashboard-"):
        return role_of(command_line)
    parent = process.parent()
    role = (role_of_process(parent) if parent is not None else None) or OTHER
    return "engine cores" if role == "pool replicas" else role


class CpuMeter:
    """CPU seconds of the processes that appear below this one after the meter was made, sampled
    in a thread of its own until `stop`."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self._root = psutil.Process()
        # What ran before (a Ray cluster of this process, say) is not the start being metered. A
        # process is known by its pid and its start time: the kernel reuses pids.
        self._before = {_key(process) for process in self._root.children(recursive=True) if _key(process)}
        self._interval_s = interval_s
        self._seconds: dict[tuple[int, float], float] = {}
        self._roles: dict[tuple[int, float], str] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)

    def __enter__(self) -> CpuMeter:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop()

    def stop(self) -> None:
        """Samples once more and ends the thread; the figures stay as they were then."""
        if not self._stopped.is_set():
            self._stopped.set()
            self._thread.join()
            self.sample()

    def sample(self) -> None:
        for process in self._root.children(recursive=True):
            key = _key(process)
            if key is None or key in self._before:
                continue
            try:
                times = process.cpu_times()
                # Read every time: a process takes its title after it starts (a Ray worker becomes
                # `ray::<actor>`, a spawned engine process `VLLM::<part>`), and its last one names it.
                role = role_of_process(process)
            except psutil.Error:
                continue  # ended meanwhile: its last sample stands
            self._seconds[key] = times.user + times.system
            if role is not None or key not in self._roles:
                self._roles[key] = role or OTHER

    def by_role(self) -> dict[str, float]:
        """CPU seconds by role, the largest first."""
        totals: dict[str, float] = defaultdict(float)
        for key, seconds in self._seconds.items():
            totals[self._roles[key]] += seconds
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.sample()


def _key(process: psutil.Process) -> tuple[int, float] | None:
    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return None
