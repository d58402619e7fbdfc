"""The ways a serving app is stopped in the field, each as the thing that does it would.

A stop acts on the session of the command a user started (`trilemma serve`, or `make serve`
around it): the terminal, the process group, the serving process alone, or Ray's own CLI.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from bench.stops.session import TerminalSession, signal_process

LAUNCHERS = ("serve", "make", "bench")
RAY_STOP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Stop:
    name: str
    what: str  # who stops a server this way, for the table
    act: Callable[[TerminalSession], None]


def serving_process(session: TerminalSession) -> psutil.Process:
    """The command that serves: `trilemma serve` (the session's first process, or the child
    `make serve` runs), or a `trilemma bench` command that started the app itself."""
    leader = psutil.Process(session.process.pid)
    for process in [leader, *leader.children(recursive=True)]:
        command = " ".join(process.cmdline())
        if " serve" in command and ("trilemma" in command or "serve_app.cli" in command):
            return process
        if " bench " in command or "-m bench" in command:
            return process
    raise LookupError(f"no `trilemma serve` or `trilemma bench` under pid {leader.pid}")


def _ray_stop(*flags: str) -> Callable[[TerminalSession], None]:
    def act(session: TerminalSession) -> None:
        ray_cli = Path(sys.executable).parent / "ray"
        subprocess.run([str(ray_cli), "stop", *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=RAY_STOP_TIMEOUT_S, check=False)
    return act


STOPS = {stop.name: stop for stop in (
    Stop("ctrl-c", "Ctrl-C in its terminal: SIGINT to the foreground process group", lambda s: s.ctrl_c()),
    Stop("sigterm-group", "SIGTERM to the process group (systemd's default KillMode, `timeout`, supervisors)",
         lambda s: s.signal_group(signal.SIGTERM)),
    Stop("sigterm-serve", "SIGTERM to `trilemma serve` alone (`docker stop`, Kubernetes, `kill PID`)",
         lambda s: signal_process(serving_process(s).pid, signal.SIGTERM)),
    Stop("sigkill-serve", "SIGKILL of `trilemma serve` alone (the OOM killer, `kill -9 PID`)",
         lambda s: signal_process(serving_process(s).pid, signal.SIGKILL)),
    Stop("ray-stop", "`ray stop` while it serves", _ray_stop()),
    Stop("ray-stop-force", "`ray stop --force` while it serves", _ray_stop("--force")),
)}
