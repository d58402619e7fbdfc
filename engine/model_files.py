"""Ray Serve LLM's per-node model download, run only where a model has files to fetch.

Before a replica starts its engine, Ray Serve LLM runs a task on every node of the replica's
placement group to download the model's files. Without a cloud mirror and with a model source
that is not a bucket path (what this app's configs name: the embedded model's folder, a local
folder or a Hugging Face id, which vLLM fetches itself), that task returns the source unchanged.
It still costs a Ray worker process on the start's critical path, which imports torch and Ray's
LLM library before it returns. The callback below skips the task in exactly that case and keeps
the one thing it does besides, on the replica's node (the torch kernels folder, which torch
cannot create itself when its parent is missing). bench/results/start-cpu-download-ab has what it saves.
"""

from __future__ import annotations

import os

from core import upstream


class DownloadOnlyRemoteModels(upstream.LLMCallbackBase):
    """Ray Serve LLM's node initialization, skipped when it would download nothing."""

    async def on_before_node_init(self) -> None:
        self.ctx.run_init_node = needs_node_download(self.llm_config.get_engine_config())
        if not self.ctx.run_init_node:
            make_torch_kernels_folder()


def needs_node_download(engine_config) -> bool:
    """Whether Ray Serve LLM's download task would fetch anything: a cloud mirror is configured,
    or the model source is a bucket path."""
    return engine_config.mirror_config is not None or upstream.is_remote_model_path(
        engine_config.actual_hf_model_id)


def make_torch_kernels_folder() -> None:
    import torch

    os.makedirs(os.path.join(torch.hub._get_torch_home(), "kernels"), exist_ok=True)
