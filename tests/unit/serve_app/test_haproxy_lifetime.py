"""The HAProxy launcher becomes the HAProxy Ray Serve asked for (same pid, same arguments), and
that HAProxy ends when the process that started it is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from serve_app import haproxy_lifetime

# What the launcher runs instead of HAProxy: says its pid and arguments, then waits.
FAKE_HAPROXY = "#!/bin/sh\necho $$ \"$@\"\nexec sleep 60\n"
# A Serve proxy's stand-in: starts the launcher, says its pid, waits.
PROXY = """
import subprocess, sys, time
child = subprocess.Popen([sys.argv[1], "-db", "-f", "haproxy.cfg"], stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


@pytest.fixture
def launcher(tmp_path, monkeypatch):
    fake = tmp_path / "haproxy-binary"
    fake.write_text(FAKE_HAPROXY)
    fake.chmod(0o755)
    monkeypatch.setenv(haproxy_lifetime.HAPROXY_ENV, str(fake))
    monkeypatch.setenv(haproxy_lifetime.BINARY_ENV, "")
    return haproxy_lifetime.bind_haproxy_to_its_proxy(tmp_path)


def test_the_launcher_becomes_haproxy_with_its_arguments(launcher):
    assert haproxy_lifetime.os.environ[haproxy_lifetime.BINARY_ENV] == str(launcher)
    run = subprocess.Popen([str(launcher), "-db", "-f", "haproxy.cfg"], stdout=subprocess.PIPE, text=True)
    try:
        pid, *args = run.stdout.readline().split()
        assert int(pid) == run.pid and args == ["-db", "-f", "haproxy.cfg"]
    finally:
        run.kill()
        run.wait()
        run.stdout.close()


def test_binding_again_keeps_the_real_haproxy(launcher, tmp_path):
    assert haproxy_lifetime.bind_haproxy_to_its_proxy(tmp_path) == launcher
    assert "haproxy-binary" in launcher.read_text()


def test_haproxy_ends_when_its_proxy_is_killed(launcher):
    proxy = subprocess.Popen([sys.executable, "-c", PROXY, str(launcher)], stdout=subprocess.PIPE, text=True)
    try:
        haproxy = int(proxy.stdout.readline().split()[0])
        proxy.send_signal(signal.SIGKILL)
        proxy.wait(10)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(haproxy) and psutil.Process(haproxy).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "HAProxy outlived the proxy that started it"
            time.sleep(0.1)
    finally:
        proxy.kill()
        proxy.stdout.close()
