"""An engine is found under the replica that started it, and counts as orphaned once a
subreaper (here a stand-in for Ray's raylet) has adopted it; so does HAProxy, the ingress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from engine.processes import engine_cores_under, orphaned_engines, orphaned_haproxies

# A raylet in small: a subreaper (PR_SET_CHILD_SUBREAPER) named as Ray names its daemon. It
# starts a "replica", which starts an "engine" named as vLLM names its core. Each prints its pid.
RAYLET = textwrap.dedent("""
    import ctypes, subprocess, sys, time
    import setproctitle
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
    setproctitle.setproctitle("raylet")
    engine = ("import setproctitle, time; setproctitle.setproctitle('%s'); time.sleep(120)")
    replica = (REPLICA % engine)
    print(subprocess.Popen([sys.executable, "-c", replica]).pid, flush=True)
    time.sleep(120)
""")
# The replica starts its engine as a child of its own, or (engine.preload) forked from a
# forkserver of its own.
CHILD = ("import subprocess, sys, time; print(subprocess.Popen([sys.executable, '-c', %r]).pid, "
         "flush=True); time.sleep(120)")
FORKSERVER = ("import multiprocessing, time; engine = multiprocessing.get_context('forkserver').Process("
              "target=exec, args=(%r,)); engine.start(); print(engine.pid, flush=True); time.sleep(120)")


@pytest.fixture
def raylet_replica_engine(request):
    title, replica = getattr(request, "param", ("VLLM::EngineCore", CHILD))
    script = RAYLET.replace("'%s'", repr(title)).replace("REPLICA", repr(replica))
    raylet = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    replica_pid, engine_pid = int(raylet.stdout.readline()), int(raylet.stdout.readline())
    yield raylet, psutil.Process(replica_pid), engine_pid
    for pid in (engine_pid, replica_pid, raylet.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raylet.wait()


def _until(condition, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def test_an_engine_is_found_under_its_replica_and_is_not_orphaned(raylet_replica_engine):
    _, replica, engine_pid = raylet_replica_engine
    assert _until(lambda: [p.pid for p in engine_cores_under(replica)] == [engine_pid])
    assert engine_pid not in {p.pid for p in orphaned_engines()}


def test_an_engine_adopted_after_its_replica_died_is_orphaned(raylet_replica_engine):
    raylet, replica, engine_pid = raylet_replica_engine
    assert _until(lambda: engine_cores_under(replica))
    replica.kill()
    assert _until(lambda: psutil.Process(engine_pid).ppid() == raylet.pid)
    assert engine_pid in {p.pid for p in orphaned_engines()}


@pytest.mark.parametrize("raylet_replica_engine", [("VLLM::EngineCore", FORKSERVER)], indirect=True)
def test_an_engine_forked_by_its_replicas_forkserver_is_orphaned_once_the_replica_died(raylet_replica_engine):
    raylet, replica, engine_pid = raylet_replica_engine
    assert _until(lambda: [p.pid for p in engine_cores_under(replica)] == [engine_pid])
    assert engine_pid not in {p.pid for p in orphaned_engines()}
    forkserver = psutil.Process(engine_pid).parent()
    assert forkserver.pid != replica.pid
    replica.kill()
    # The forkserver lives on while the engine does (it holds the server's lifeline), adopted.
    assert _until(lambda: forkserver.ppid() == raylet.pid)
    assert engine_pid in {p.pid for p in orphaned_engines()}


@pytest.mark.parametrize("raylet_replica_engine", [("haproxy", CHILD)], indirect=True)
def test_haproxy_adopted_after_its_actor_died_is_orphaned(raylet_replica_engine):
    raylet, manager, haproxy_pid = raylet_replica_engine
    assert _until(lambda: psutil.Process(haproxy_pid).name() == "haproxy")
    assert haproxy_pid not in {p.pid for p in orphaned_haproxies()}
    manager.kill()
    assert _until(lambda: psutil.Process(haproxy_pid).ppid() == raylet.pid)
    assert haproxy_pid in {p.pid for p in orphaned_haproxies()}
    assert haproxy_pid not in {p.pid for p in orphaned_engines()}
