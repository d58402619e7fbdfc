"""The CPU time a start spends until it serves, by what each process does.

On a machine with few cores a start is bound by the CPU time all of its processes need, not by
the longest chain of them: where every core is busy, the ready time is at least the CPU time
over the cores. `trilemma bench start` meters each start this way, plain `vllm serve` and the
app alike, so that the difference between them has names: the engines' own work, Ray's and
Serve's processes, the router, the replicas' imports.

A meter samples every process below the one it runs in (what `trilemma bench start` started:
plain vLLM's processes, or `trilemma serve` with the Ray cluster it starts and every worker of
it, which it keeps below itself as their subreaper), every `interval_s`; a process's
figure is its own user and system time at its last sample, so a process that ends between two
samples (a compiler that inductor ran) loses at most one interval of its time, and its role is
read from its command line as it was then.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import psutil

# What a process does, by a part of its command line (Ray titles its workers `ray::<actor>`,
# vLLM its engine processes `VLLM::<part>`); the first that matches names it.
ROLES = (
    ("VLLM::Worker", "engine workers"),
    ("VLLM::EngineCore", "engine cores"),
    ("multiprocessing.forkserver", "engine cores"),  # a pool's forkserver (serving.engine_preload)
    (":pool-", "pool replicas"),
    (":router", "router"),
    ("ServeController", "Serve controller and proxy"),
    ("ProxyActor", "Serve controller and proxy"),
    ("haproxy", "Serve controller and proxy"),
    ("ray::DashboardAgent", "Ray daemons"),
    ("ray::RuntimeEnvAgent", "Ray daemons"),
    ("ray::", "other Ray workers"),
    ("default_worker.py", "other Ray workers"),
    ("gcs_server", "Ray daemons"),
    ("raylet", "Ray daemons"),
    ("/ray/", "Ray daemons"),  # the dashboard, its agents, the log monitor: scripts of Ray's package
    ("serve_app.cli", "trilemma serve"),
    ("bin/trilemma", "trilemma serve"),
    ("vllm_cli serve", "vllm serve front end"),
    ("cc1plus", "C++ compiler (inductor)"),
)
OTHER = "other"


def role_of(command_line: str) -> str:
    return next((role for part, role in ROLES if part in command_line), OTHER)


class CpuMeter:
    """CPU seconds of this process's descendants, sampled in a thread of its own until `stop`."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self._root = psutil.Process()
        self._interval_s = interval_s
        self._seconds: dict[int, float] = {}
        self._roles: dict[int, str] = {}
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
            try:
                times = process.cpu_times()
                # Read every time: a process takes its title after it starts (a Ray worker becomes
                # `ray::<actor>`, a spawned engine process `VLLM::<part>`), and its last one names it.
                command_line = " ".join(process.cmdline())
            except psutil.Error:
                continue  # ended meanwhile: its last sample stands
            self._seconds[process.pid] = times.user + times.system
            if command_line:  # a zombie's is empty
                self._roles[process.pid] = role_of(command_line)

    def by_role(self) -> dict[str, float]:
        """CPU seconds by role, the largest first."""
        totals: dict[str, float] = defaultdict(float)
        for pid, seconds in self._seconds.items():
            totals[self._roles.get(pid, OTHER)] += seconds
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.sample()
