"""A pool replica forks its engine core from a forkserver that imported vLLM early, and the
engine core gets the environment the replica has when it starts it."""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys

import psutil
import pytest

from serving import engine_preload


def report(results: multiprocessing.Queue) -> None:
    """An engine core's stand-in: what it sees of its process."""
    results.put({"late": os.environ.get("TRILEMMA_TEST_LATE"), "parent": os.getppid(),
                 "preloaded": "tabnanny" in sys.modules})


@pytest.fixture
def replica(monkeypatch):
    """This process as a pool replica whose forkserver preloads a module nothing else imports."""
    monkeypatch.setattr(engine_preload, "_context", None)
    monkeypatch.setattr(engine_preload, "PRELOADED_MODULES", ("tabnanny",))
    monkeypatch.setenv(engine_preload.PRELOAD_ENV, "1")
    assert "tabnanny" not in sys.modules
    engine_preload.begin_if_pool_replica()
    yield


def test_the_engine_core_is_forked_from_the_preloaded_server_with_the_replicas_environment(replica, monkeypatch):
    from vllm.v1.engine import utils as engine_utils

    spawn_context = engine_utils.get_mp_context
    monkeypatch.setenv("TRILEMMA_TEST_LATE", "set after the server started")
    with engine_preload.forked_engine_core():
        context = engine_utils.get_mp_context()
        results = context.Queue()
        engine_core = context.Process(target=report, args=(results,))
        engine_core.start()
        seen = results.get(timeout=60)
        engine_core.join(30)
    assert engine_utils.get_mp_context is spawn_context  # vLLM's own again after the start
    assert engine_core.exitcode == 0
    assert seen["late"] == "set after the server started"
    assert seen["preloaded"]  # imported by the server before the fork, not by the child
    assert seen["parent"] != os.getpid()
    assert "multiprocessing.forkserver" in " ".join(psutil.Process(seen["parent"]).cmdline())


def test_outside_a_pool_replica_nothing_starts_and_vllm_spawns_as_before(monkeypatch):
    from vllm.v1.engine import utils as engine_utils

    monkeypatch.setattr(engine_preload, "_context", None)
    monkeypatch.delenv(engine_preload.PRELOAD_ENV, raising=False)
    engine_preload.begin_if_pool_replica()
    spawn_context = engine_utils.get_mp_context
    with engine_preload.forked_engine_core():
        assert engine_utils.get_mp_context is spawn_context


def test_the_preloaded_modules_exist_in_this_vllm():
    # A vLLM that moved one would quietly leave its import to the engine core again.
    assert all(importlib.util.find_spec(name) for name in engine_preload.PRELOADED_MODULES)
