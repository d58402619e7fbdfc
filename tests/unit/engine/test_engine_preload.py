"""A pool replica's forkserver imports what its engine core needs before the engine starts, and
the engine core forked from it runs as a child of the replica's starting thread would: with its
environment and nice value, and not beyond the server's life."""

from __future__ import annotations

import importlib.util
import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from engine import preload
from engine.processes import ENGINE_CORE_NAME, is_forkserver


def report(results: multiprocessing.Queue) -> None:
    """An engine core's stand-in: what it sees of its process."""
    import setproctitle  # vLLM titles its engine core so

    setproctitle.setproctitle("VLLM::EngineCore")
    results.put({"late": os.environ.get("TRILEMMA_TEST_LATE"), "gone": os.environ.get("TRILEMMA_TEST_GONE"),
                 "parent": os.getppid(), "niceness": os.getpriority(os.PRIO_PROCESS, 0),
                 "preloaded": "tabnanny" in sys.modules, "title": psutil.Process().name()})


@pytest.fixture
def replica(monkeypatch):
    """This process as a pool replica whose forkserver preloads a module nothing else imports."""
    monkeypatch.setattr(preload, "_context", None)
    monkeypatch.setattr(preload, "PRELOADED_MODULES", ("tabnanny",))
    monkeypatch.setenv(preload.PRELOAD_ENV, "1")
    monkeypatch.setenv("TRILEMMA_TEST_GONE", "unset after the server started")
    assert "tabnanny" not in sys.modules
    preload.begin_if_pool_replica()
    yield preload.preloaded_context()
    multiprocessing.forkserver._forkserver._stop()  # the next test's server preloads afresh


def _start_from_a_nicer_thread(context, target, args) -> multiprocessing.Process:
    """Starts the process from a thread at a higher nice value (Linux keeps it per thread), as a
    CPU pool's replica starts its engine after `apply_cpu_niceness`; this thread's stays."""
    process = context.Process(target=target, args=args)

    def start() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 3)
        process.start()

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    return process


def test_the_engine_core_is_forked_from_the_preloaded_server_as_the_replicas_child_would_run(replica, monkeypatch):
    assert replica is not None
    monkeypatch.setenv("TRILEMMA_TEST_LATE", "set after the server started")
    monkeypatch.delenv("TRILEMMA_TEST_GONE")
    results = replica.Queue()
    engine_core = _start_from_a_nicer_thread(replica, report, (results,))
    seen = results.get(timeout=60)
    engine_core.join(30)
    assert engine_core.exitcode == 0
    assert seen["late"] == "set after the server started" and seen["gone"] is None
    assert seen["title"].startswith(ENGINE_CORE_NAME)  # found as an engine (engine.processes)
    assert seen["niceness"] == os.getpriority(os.PRIO_PROCESS, 0) + 3
    assert seen["preloaded"]  # imported by the server before the fork, not by the child
    assert seen["parent"] != os.getpid()
    assert is_forkserver(psutil.Process(seen["parent"]))


def test_the_engine_core_ends_with_its_forkserver(replica):
    engine_core = replica.Process(target=time.sleep, args=(120,))
    engine_core.start()
    server = psutil.Process(preload._server_pid)
    assert _until(lambda: engine_core.pid in {c.pid for c in server.children()})
    server.kill()
    # Gone, as Ray ends a replica's children with it: the server is the replica's child.
    assert _until(lambda: not psutil.pid_exists(engine_core.pid)
                  or psutil.Process(engine_core.pid).status() == psutil.STATUS_ZOMBIE)
    # And the next engine core of this replica is spawned, not sent to a server that is gone.
    assert preload.preloaded_context() is None


def test_outside_a_pool_replica_no_server_starts(monkeypatch):
    monkeypatch.setattr(preload, "_context", None)
    monkeypatch.delenv(preload.PRELOAD_ENV, raising=False)
    preload.begin_if_pool_replica()
    assert preload.preloaded_context() is None


def test_a_pool_replica_starts_its_forkserver_before_it_imports_vllm():
    # Else the server's import would follow the replica's instead of running beside it.
    code = ("import sys; from engine import preload; seen = []; "
            "preload.begin_if_pool_replica = lambda: seen.append('vllm' in sys.modules); "
            "import pool.replica; print(seen)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[False]"


def test_the_preloaded_modules_exist_in_this_vllm():
    # A vLLM that moved one would quietly leave its import to the engine core again.
    assert all(importlib.util.find_spec(name) for name in preload.PRELOADED_MODULES)


def _until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()
