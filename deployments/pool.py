"""Engine pools: one Ray Serve LLM deployment per configured pool, warmed up before ready."""

from __future__ import annotations

import time
from typing import Any, AsyncGenerator

from ray import serve

from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
)
from ray.llm._internal.serve.observability.logging import get_logger
from ray.serve.deployment import Application
from ray.serve.llm import LLMConfig, LLMServer, build_llm_deployment

from deployments.engine_activity import EngineActivity
from serve_app.config import ModelSpec, PoolConfig

# Ray's LLM logger: its lines reach the replica logs that Serve collects.
logger = get_logger(__name__)


class PoolServer(LLMServer):
    """Ray's LLMServer, which reports ready only after one streamed chat and one completion,
    and which clocks how busy its engine is.

    The first requests of a fresh engine pay for kernel selection and compilation (27 s to a
    first token was seen on CPU); paying it here keeps it away from users.
    """

    async def start(self) -> None:
        await super().start()
        await self._warm_up()
        # Started after the warm-up: a replica's wall time counts from when it can serve.
        self._activity = EngineActivity()

    async def _run_request(self, request: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        stream = await super()._run_request(request, **kwargs)
        return self._activity.track(stream)

    async def engine_activity(self) -> dict[str, Any]:
        """This replica's busy clock; the router gathers it from every replica by broadcast."""
        return {
            "replica": serve.get_replica_context().replica_id.unique_id,
            **self._activity.snapshot().to_dict(),
        }

    async def _warm_up(self) -> None:
        started = time.monotonic()
        model = self._llm_config.model_id
        chat = ChatCompletionRequest(
            model=model, messages=[{"role": "user", "content": "Hello!"}], max_tokens=4, stream=True
        )
        completion = CompletionRequest(model=model, prompt="Hello", max_tokens=4)
        async for _ in self.engine.chat(chat, None):
            pass
        async for _ in self.engine.completions(completion, None):
            pass
        logger.info("pool warm-up took %.1f s", time.monotonic() - started)


def deployment_name(pool_name: str) -> str:
    return f"pool-{pool_name}"


def llm_config_for_pool(pool_name: str, pool: PoolConfig, model: ModelSpec, model_source: str) -> LLMConfig:
    engine_kwargs: dict[str, Any] = {
        "max_model_len": pool.max_model_len,
        "max_num_seqs": pool.max_num_seqs,
        **pool.engine_kwargs,
    }
    if pool.quantization:
        engine_kwargs["quantization"] = pool.quantization
    placement: dict[str, Any]
    if pool.is_cpu:
        placement = {
            "accelerator_config": {"kind": "cpu"},
            "placement_group_config": {"bundles": [dict(pool.resources)]},
        }
    else:
        placement = {"accelerator_type": pool.accelerator}
    return LLMConfig(
        model_loading_config={"model_id": model.name, "model_source": model_source},
        engine_kwargs=engine_kwargs,
        runtime_env={"env_vars": dict(pool.env)} if pool.env else None,
        deployment_config={
            "num_replicas": pool.replicas,
            "max_ongoing_requests": pool.max_ongoing_requests,
            # The engine's bundle holds the pool's CPUs; the replica actor itself only waits.
            "ray_actor_options": {"num_cpus": 0},
        },
        **placement,
    )


def build_pool_deployment(
    pool_name: str, llm_config: LLMConfig, engine_cls: type | None = None
) -> Application:
    """`engine_cls` swaps the vLLM engine for another LLMEngine (tests use a fake one)."""
    return build_llm_deployment(
        llm_config,
        bind_kwargs={"engine_cls": engine_cls} if engine_cls is not None else None,
        override_serve_options={"name": deployment_name(pool_name)},
        deployment_cls=PoolServer,
    )
