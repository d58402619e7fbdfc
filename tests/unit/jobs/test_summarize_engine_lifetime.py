"""The batch job's engine workers start vLLM engine cores that die with them."""

from __future__ import annotations

import threading

import pytest

from engine.process_lifetime import BoundForkContext, BoundSpawnContext
from jobs.summarize.engine_lifetime import SETUP_HOOK, bind_engine_cores_to_this_worker


@pytest.fixture
def vllm_engine_utils(monkeypatch):
    from vllm.v1.engine import utils

    monkeypatch.setattr(utils, "get_mp_context", utils.get_mp_context)  # restored after the test
    return utils


def test_the_hook_binds_engine_cores_started_on_the_main_thread(vllm_engine_utils):
    bind_engine_cores_to_this_worker()
    assert isinstance(vllm_engine_utils.get_mp_context(), (BoundSpawnContext, BoundForkContext))


def test_an_engine_core_started_from_another_thread_is_left_as_vllm_starts_it(vllm_engine_utils):
    # The parent-death signal would fire when that thread ends, killing a healthy engine.
    bind_engine_cores_to_this_worker()
    seen = []
    thread = threading.Thread(target=lambda: seen.append(vllm_engine_utils.get_mp_context()))
    thread.start()
    thread.join()
    assert not isinstance(seen[0], (BoundSpawnContext, BoundForkContext))
    assert seen[0].get_start_method() in ("spawn", "fork")


def test_the_hook_is_named_where_ray_finds_it():
    module, _, function = SETUP_HOOK.rpartition(".")
    assert getattr(__import__(module, fromlist=[function]), function) is bind_engine_cores_to_this_worker
