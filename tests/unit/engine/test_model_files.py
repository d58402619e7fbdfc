"""Ray Serve LLM's per-node download task runs only for a model it would fetch: a local folder or
a Hugging Face id skips it (vLLM loads or fetches those itself), a bucket path keeps it."""

from __future__ import annotations

import asyncio

import pytest

from core.config import CONFIG_DIR, TrilemmaConfig
from engine.model_files import DownloadOnlyRemoteModels
from pool.deployment import llm_config_for_pool


def node_init_runs(model_source: str, tmp_path, monkeypatch) -> bool:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    llm_config = llm_config_for_pool("short", config.pools["short"], config.model, model_source)
    assert llm_config.callback_config.callback_class is DownloadOnlyRemoteModels
    # What get_or_create_callback builds in the replica, without the placement group it reserves.
    callback = DownloadOnlyRemoteModels(llm_config=llm_config, ctx_kwargs={})
    asyncio.run(callback.run_callback("on_before_node_init"))
    return callback.ctx.run_init_node


@pytest.mark.parametrize("source", ["/models/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"])
def test_a_local_folder_or_a_hub_id_starts_its_engine_without_the_download_task(source, tmp_path, monkeypatch):
    assert node_init_runs(source, tmp_path, monkeypatch) is False
    # The one thing the task does besides returning the source unchanged.
    assert (tmp_path / "torch" / "kernels").is_dir()


@pytest.mark.parametrize("source", ["s3://models/smollm2", "gs://models/smollm2"])
def test_a_bucket_path_keeps_the_download_task(source, tmp_path, monkeypatch):
    assert node_init_runs(source, tmp_path, monkeypatch) is True
