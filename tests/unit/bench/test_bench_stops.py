"""The stops benchmark's own parts: a command in a terminal of its own, and what it starts."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from bench.stops.cli import BENCH_TRACE, launch_argv, markdown
from bench.stops.measure import StopResult
from bench.stops.session import TerminalSession

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


@pytest.fixture
def sigint_ignored():
    """As under `nohup` or `cmd &` in a script: what the benchmark is often started from."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, previous)


def wait_printed(session: TerminalSession, log: Path, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (log.exists() and text in log.read_text()):
        assert session.alive() and time.monotonic() < deadline, f"{text!r} not printed"
        time.sleep(0.05)


def test_ctrl_c_reaches_the_command_even_when_its_caller_ignores_sigint(sigint_ignored, tmp_path):
    session = TerminalSession(SLEEPER, tmp_path / "log")
    try:
        wait_printed(session, tmp_path / "log", "up")
        session.ctrl_c()
        assert session.wait(10.0) == -signal.SIGINT  # Python's KeyboardInterrupt, uncaught, ends by SIGINT
        assert session.wait_until_empty(5.0) == []
    finally:
        session.close()


def test_a_group_signal_reaches_every_process_of_the_session(tmp_path):
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
            "print('up', flush=True); time.sleep(60)"
    session = TerminalSession([sys.executable, "-c", child], tmp_path / "log")
    try:
        wait_printed(session, tmp_path / "log", "up")
        assert len(session.processes()) == 2
        session.signal_group(signal.SIGTERM)
        assert session.wait(10.0) == -signal.SIGTERM
        assert session.wait_until_empty(5.0) == []
    finally:
        session.close()


def test_launchers():
    config = Path("serve_app/configs/local-cpu.yaml")
    assert launch_argv("make", config, [])[-2:] == ["serve", f"CONFIG={config.resolve()}"]
    with pytest.raises(ValueError, match="config's path only"):
        launch_argv("make", config, ["http.port=8001"])
    serve = launch_argv("serve", config, ["http.port=8001"])
    assert serve[1:4] == ["-m", "serve_app.cli", "serve"] and serve[-2:] == ["--set", "http.port=8001"]
    bench = launch_argv("bench", config, [])
    assert bench[1:4] == ["-m", "bench", "replay"] and str(BENCH_TRACE) in bench and BENCH_TRACE.exists()


def test_a_stop_is_clean_only_when_nothing_is_left_and_the_next_start_served():
    done = StopResult(stop="ctrl-c", launcher="serve", what="", exit_s=3.0, exit_code=0,
                      in_flight={"answered": 4, "refused": 0, "closed": 0, "hung": 0}, gone_s=5.0, port_free=True,
                      next_ready_s=60.0)
    assert done.clean()
    assert not StopResult(**{**done.__dict__, "left": ["VLLM::EngineCore (12)"]}).clean()
    assert not StopResult(**{**done.__dict__, "port_free": False}).clean()
    assert not StopResult(**{**done.__dict__, "in_flight": {**done.in_flight, "hung": 1}}).clean()
    assert not StopResult(**{**done.__dict__, "next_ready_s": None}).clean()
    assert not StopResult(**{**done.__dict__, "exit_s": None}).clean()
    table = markdown({"machine": "m", "command": "c", "streams": 4, "max_tokens": 256,
                      "stops": [{**done.__dict__, "left": ["haproxy (7)"], "error": None}]})
    assert "| serve | ctrl-c | 3.0 | 0 | 4 / 0 / 0 / 0 | haproxy (7) | 5.0 | True | 60.0 |" in table
