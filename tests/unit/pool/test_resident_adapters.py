"""A replica's adapters (pool/resident_adapters.py) on the committed adapter files and a recording
engine: a good adapter is loaded and timed, a broken or over-rank one is refused before the engine
sees it, and an eviction unloads the adapter on the replica's loop."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest

from contract.pool_faults import AdapterUnusable
from core.adapter_config import AdapterConfig
from pool.resident_adapters import ResidentAdapters, base_model_config

ADAPTERS = Path(__file__).resolve().parents[2] / "data" / "adapters"
BASE = "SmolLM2-135M-Instruct"


class RecordingEngine:
    def __init__(self, fails: str | None = None) -> None:
        self.loaded: list[tuple[str, str]] = []
        self.unloaded: list[str] = []
        self.fails = fails

    async def load(self, name: str, folder: str) -> None:
        if name == self.fails:
            raise RuntimeError("Failed to load LoRA")
        self.loaded.append((name, folder))

    async def unload(self, name: str) -> None:
        self.unloaded.append(name)


def resident(engine: RecordingEngine, embedded_model_dir: Path, tmp_path: Path, **folders: str) -> ResidentAdapters:
    adapters = {name: AdapterConfig(base=BASE, source=str(ADAPTERS / folder)) for name, folder in folders.items()}
    return ResidentAdapters("short", adapters, lambda: base_model_config(str(embedded_model_dir)), max_lora_rank=16,
                            cache_dir=tmp_path, load=engine.load, unload=engine.unload)


async def test_a_good_adapter_is_loaded_from_its_folder_and_its_load_paid_once(embedded_model_dir, tmp_path):
    engine = RecordingEngine()
    adapters = resident(engine, embedded_model_dir, tmp_path, tagged="tagged")
    adapter = await adapters.load("tagged")
    assert engine.loaded == [("tagged", str(ADAPTERS / "tagged"))]
    assert adapter.load_s > 0 and adapter.take_load_s() == adapter.load_s and adapter.take_load_s() == 0


@pytest.mark.parametrize("folder, over_rank, reason", [
    ("bad/rank-64", True, "rank 64 is over the pool's lora.max_lora_rank 16"),
    ("bad/truncated", False, "not a safetensors file"),
    ("bad/wrong-base-larger", False, "another base model"),
    ("bad/wrong-base-smaller", False, "another base model"),
    ("no-such-folder", False, "its folder is missing"),
])
async def test_a_broken_adapter_is_refused_before_the_engine_sees_it(embedded_model_dir, tmp_path, folder,
                                                                     over_rank, reason):
    engine = RecordingEngine()
    with pytest.raises(AdapterUnusable) as refused:
        await resident(engine, embedded_model_dir, tmp_path, broken=folder).load("broken")
    assert refused.value.over_rank is over_rank and reason in refused.value.reason
    assert refused.value.status == (400 if over_rank else 422) and not engine.loaded


async def test_an_adapter_the_engine_refuses_is_unusable_with_the_engines_reason(embedded_model_dir, tmp_path):
    engine = RecordingEngine(fails="tagged")
    with pytest.raises(AdapterUnusable, match="the engine did not load it: Failed to load LoRA"):
        await resident(engine, embedded_model_dir, tmp_path, tagged="tagged").load("tagged")


async def test_an_adapter_the_pool_does_not_serve_is_unusable_naming_those_it_serves(embedded_model_dir, tmp_path):
    with pytest.raises(AdapterUnusable, match=r"it serves \['tagged'\]"):
        await resident(RecordingEngine(), embedded_model_dir, tmp_path, tagged="tagged").load("jsonish")


async def test_an_evicted_adapter_is_unloaded_on_the_replicas_loop_once(embedded_model_dir, tmp_path):
    engine = RecordingEngine()
    adapter = await resident(engine, embedded_model_dir, tmp_path, tagged="tagged").load("tagged")
    # Ray Serve's multiplexing calls __del__ from a worker thread when it evicts the adapter.
    await asyncio.get_running_loop().run_in_executor(None, adapter.__del__)
    del adapter
    gc.collect()  # the object's own end does not unload it again
    for _ in range(3):
        await asyncio.sleep(0)
    assert engine.unloaded == ["tagged"]


def test_the_base_config_comes_from_the_models_folder(embedded_model_dir):
    assert base_model_config(str(embedded_model_dir)) == json.loads((embedded_model_dir / "config.json").read_text())
