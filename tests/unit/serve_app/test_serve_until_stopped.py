"""How a serving process ends: a stop asked for drains first; a Ray that ended beneath it (`ray
stop`) is not waited for; a signal to the whole group, which ends Ray's daemons with it, still
counts as asked for; a drain gives up as soon as the cluster is gone."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from serve_app import launcher
from tests.support import config_for_tests


@pytest.fixture
def stopping(monkeypatch):
    """The launcher with Ray's part recorded: the calls made, and a switch for the cluster's end."""
    calls: list[str] = []
    ended = threading.Event()
    monkeypatch.setattr(launcher, "CLUSTER_WATCH_S", 0.05)
    monkeypatch.setattr(launcher, "SIGNAL_GRACE_S", 0.2)
    monkeypatch.setattr(launcher, "local_cluster_ended", ended.is_set)
    monkeypatch.setattr(launcher, "drain", lambda config: calls.append("drain"))
    monkeypatch.setattr(launcher, "shutdown_local_ray", lambda: calls.append("shutdown"))
    return calls, ended


def test_a_stop_asked_for_drains_then_ends_the_ray_session(stopping):
    calls, _ = stopping
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert launcher.serve_until_stopped(config_for_tests(), stop) is True
    assert calls == ["drain", "shutdown"]


def test_a_ray_that_ended_beneath_it_is_not_drained(stopping):
    calls, ended = stopping
    threading.Timer(0.2, ended.set).start()
    assert launcher.serve_until_stopped(config_for_tests(), threading.Event()) is False
    assert calls == ["shutdown"]


def test_a_signal_that_ended_ray_too_is_a_stop_asked_for(stopping):
    calls, ended = stopping
    stop = threading.Event()
    ended.set()
    threading.Timer(0.1, stop.set).start()  # the process's own signal handler, a moment later
    assert launcher.serve_until_stopped(config_for_tests(), stop) is True
    assert calls == ["shutdown"]


def test_a_drain_gives_up_when_the_cluster_ends(monkeypatch):
    monkeypatch.setattr(launcher, "CLUSTER_WATCH_S", 0.05)
    ended = threading.Event()
    monkeypatch.setattr(launcher, "local_cluster_ended", ended.is_set)
    monkeypatch.setattr(launcher.serve, "delete", lambda name, _blocking: time.sleep(30))
    threading.Timer(0.3, ended.set).start()
    started = time.monotonic()
    assert launcher.drain(config_for_tests()) is False
    assert time.monotonic() - started < 5


def test_a_deploy_refused_before_ray_started_is_what_the_caller_sees(monkeypatch):
    # Not a "no Serve instance" error from the cleanup, and no Ray started just to look.
    from core.config import ConfigError

    def refuse(config):
        raise ConfigError("transport.ingress is haproxy, but this machine has no HAProxy binary")

    monkeypatch.setattr(launcher, "ensure_ray", refuse)
    monkeypatch.setattr(launcher.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(launcher.serve, "delete", lambda *a, **k: pytest.fail("serve.delete would start a Ray"))
    with pytest.raises(ConfigError, match="no HAProxy binary"):
        with launcher.deployed(config_for_tests()):
            pass


def test_deleting_an_app_stops_waiting_when_its_ray_ends(monkeypatch):
    # serve.delete would wait a minute for the GCS that ended with the rest (a benchmark's app
    # after a SIGTERM to its process group waited so).
    ended = threading.Event()
    gone = threading.Event()
    monkeypatch.setattr(launcher.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(launcher, "CLUSTER_WATCH_S", 0.01)
    monkeypatch.setattr(launcher, "local_cluster_ended", ended.is_set)
    monkeypatch.setattr(launcher.serve, "delete", lambda *a, **k: gone.wait(30))
    reaped = []
    monkeypatch.setattr(launcher, "reap_orphaned_engines", lambda: reaped.append(True) or [])
    threading.Timer(0.2, ended.set).start()
    started = time.monotonic()
    launcher.undeploy(config_for_tests())
    assert time.monotonic() - started < 5 and reaped
    gone.set()


@pytest.fixture
def ray_sigterm_handler():
    """Ray's SIGTERM handler as Ray's start sets it (it drains the node and exits with status 1),
    recorded instead; the process's own handler is back after the test."""
    called = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    yield called
    signal.signal(signal.SIGTERM, previous)


def _deploy_without_ray(monkeypatch, deploy):
    monkeypatch.setattr(launcher, "import_app_code", lambda: None)
    monkeypatch.setattr(launcher, "ensure_ray", lambda config: None)
    monkeypatch.setattr(launcher, "deploy", deploy)


def test_a_sigterm_as_the_app_becomes_ready_is_the_stop_asked_for(monkeypatch, ray_sigterm_handler):
    # The signal comes before the caller waits for it (a supervisor that stops the app as soon as
    # it answers): it is the stop serve_until_stopped then sees, never Ray's exit with status 1.
    _deploy_without_ray(monkeypatch, lambda config, **kwargs: "http://127.0.0.1:8000")
    stop = threading.Event()
    assert launcher.deploy_unless_stopped(config_for_tests(), stop=stop) == "http://127.0.0.1:8000"
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.wait(5) and ray_sigterm_handler == []


def test_a_sigterm_while_the_app_starts_removes_it(monkeypatch, ray_sigterm_handler):
    def deploy(config, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal's handler interrupts the start
        pytest.fail("the start went on after SIGTERM")

    _deploy_without_ray(monkeypatch, deploy)
    monkeypatch.setattr(launcher.ray, "is_initialized", lambda: True)
    calls = []
    monkeypatch.setattr(launcher, "drain", lambda config: calls.append("drain"))
    monkeypatch.setattr(launcher, "shutdown_local_ray", lambda: calls.append("shutdown"))
    assert launcher.deploy_unless_stopped(config_for_tests()) is None
    assert calls == ["drain", "shutdown"] and ray_sigterm_handler == []


def test_a_second_sigterm_while_it_drains_does_not_end_the_drain(monkeypatch, stopping, ray_sigterm_handler):
    calls, _ = stopping

    def drain(config):
        calls.append("drain")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # where the signal's handler runs

    monkeypatch.setattr(launcher, "drain", drain)
    stop = threading.Event()
    stop.set()
    assert launcher.serve_until_stopped(config_for_tests(), stop) is True
    assert calls == ["drain", "shutdown"] and ray_sigterm_handler == []
