"""One stop measured: the app started as a user starts it, streams in flight, the stop, then
how long the command took to exit, how each stream ended, what of its session was left, and
whether the port is free for the next start (whose ready time is the stop's last figure)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.app_processes import label_of
from bench.app_ready import wait_until_serving
from bench.stops.in_flight import StreamsInFlight
from bench.stops.kinds import Stop
from bench.stops.session import TerminalSession

# Beyond the command's exit. Ray's subreaper kills a dead worker's children within 10 s; after
# a SIGKILL that left no one to stop Ray, its dashboard and runtime-env agents see their raylet
# gone within 2 s and then try to flush their logs to the dead GCS for up to a minute.
SETTLE_S = 120.0
FIRST_TOKEN_WITHIN_S = 120.0


@dataclass
class StopResult:
    stop: str
    launcher: str
    what: str
    ready_s: float | None = None           # this start, until every pool served
    exit_s: float | None = None            # from the stop until the command ended (None: it did not)
    exit_code: int | None = None
    in_flight: dict[str, int] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)   # processes of the session alive SETTLE_S later
    gone_s: float | None = None            # from the stop until the session's last process ended
    port_free: bool | None = None
    next_ready_s: float | None = None      # the next start, on the machine this stop left
    error: str | None = None

    def clean(self) -> bool:
        """Nothing left, the port free, no stream hung, and the next start served."""
        return (self.error is None and self.exit_s is not None and not self.left and bool(self.port_free)
                and self.in_flight.get("hung", 0) == 0 and self.next_ready_s is not None)


@dataclass(frozen=True)
class Setup:
    """How the app is started and loaded for every stop."""

    url: str
    host: str
    port: int
    model: str
    ready_timeout_s: float
    exit_bound_s: float     # the app's own bound on a stop, and a margin
    streams: int = 4
    max_tokens: int = 96


def measure(stop: Stop, launcher: str, argv: list[str], setup: Setup, log: Path) -> StopResult:
    result = StopResult(stop=stop.name, launcher=launcher, what=stop.what)
    session = TerminalSession(argv, log)
    try:
        try:
            wait_until_serving(setup.url, setup.ready_timeout_s, say=lambda _: None, poll_s=1.0, alive=session.alive)
        except ValueError as error:
            result.error = f"did not serve: {error}"
            return result
        result.ready_s = time.monotonic() - session.started
        streams = StreamsInFlight(setup.url, setup.model, setup.streams, setup.max_tokens)
        if not streams.wait_started(FIRST_TOKEN_WITHIN_S):
            result.error = f"the streams had no first token within {FIRST_TOKEN_WITHIN_S:g} s"
        stopped = time.monotonic()
        stop.act(session)
        result.exit_code = session.wait(setup.exit_bound_s)
        if result.exit_code is not None:
            result.exit_s = round(time.monotonic() - stopped, 1)
        result.in_flight = streams.wait_ended(max(5.0, setup.exit_bound_s - (time.monotonic() - stopped)))
        left = session.wait_until_empty(SETTLE_S)
        result.left = sorted(_label(process) for process in left)
        if not left:
            result.gone_s = round(time.monotonic() - stopped, 1)
        result.port_free = port_is_free(setup.host, setup.port)
        return result
    finally:
        session.close()


def port_is_free(host: str, port: int) -> bool:
    """Whether a new server could listen on the port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _label(process: psutil.Process) -> str:
    try:
        return f"{label_of(process)} ({process.pid})"
    except psutil.Error:
        return f"ended ({process.pid})"
