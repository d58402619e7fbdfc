"""An adapter kept on S3 (moto's S3-compatible server here): the replica fetches its two files into
its node's cache once, checks them there and loads them from there; a missing object is refused
with the URI and the replica untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.pool_faults import AdapterUnusable
from core.adapter_config import AdapterConfig
from core.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from pool.resident_adapters import ResidentAdapters, base_model_config
from tests.support import aws_client

pytestmark = pytest.mark.integration

TAGGED = Path(__file__).resolve().parents[1] / "data" / "adapters" / "tagged"


class RecordingEngine:
    def __init__(self) -> None:
        self.loaded: list[tuple[str, str]] = []

    async def load(self, name: str, folder: str) -> None:
        self.loaded.append((name, folder))

    async def unload(self, name: str) -> None:
        pass


def adapters_on(endpoint: str, cache: Path, engine: RecordingEngine, embedded_model_dir: Path) -> ResidentAdapters:
    sources = {name: AdapterConfig(base="SmolLM2-135M-Instruct", source=f"s3://adapters/{key}", endpoint_url=endpoint)
               for name, key in (("tagged", "tenants/acme/tagged"), ("gone", "tenants/acme/gone"))}
    return ResidentAdapters("short", sources, lambda: base_model_config(str(embedded_model_dir)), max_lora_rank=16,
                            cache_dir=cache, load=engine.load, unload=engine.unload)


async def test_an_s3_adapter_is_fetched_once_into_the_cache_and_loaded_from_there(
        moto_endpoint, fake_aws_credentials, embedded_model_dir, tmp_path):
    s3 = aws_client("s3", endpoint=moto_endpoint)
    s3.create_bucket(Bucket="adapters")
    for file in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        s3.put_object(Bucket="adapters", Key=f"tenants/acme/tagged/{file}", Body=(TAGGED / file).read_bytes())
    engine = RecordingEngine()
    await adapters_on(moto_endpoint, tmp_path, engine, embedded_model_dir).load("tagged")
    (name, folder), = engine.loaded
    assert Path(folder) == tmp_path / "short" / "tagged"
    assert (Path(folder) / ADAPTER_WEIGHTS).read_bytes() == (TAGGED / ADAPTER_WEIGHTS).read_bytes()
    # Another load on this node (after an eviction, say) reads the cache, not S3.
    s3.delete_object(Bucket="adapters", Key=f"tenants/acme/tagged/{ADAPTER_WEIGHTS}")
    await adapters_on(moto_endpoint, tmp_path, engine, embedded_model_dir).load("tagged")
    assert len(engine.loaded) == 2

    with pytest.raises(AdapterUnusable) as refused:
        await adapters_on(moto_endpoint, tmp_path, engine, embedded_model_dir).load("gone")
    assert "could not be fetched" in refused.value.reason and "s3://adapters/tenants/acme/gone" in refused.value.reason
    assert len(engine.loaded) == 2
