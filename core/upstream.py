"""Everything taken from Ray's and vLLM's private modules, and every version shim, in one place:
a Ray or vLLM upgrade touches this file. The code must run on Ray 2.60 with vLLM 0.29 (the CPU
default) and on Ray 2.58 with vLLM 0.26 (what Ray 2.58's LLM extra pins, on GPU hosts).

What only one command needs (the autoscaler's config check, a node's address, the
autoscaler's status) is imported inside the function that uses it, so that importing this
module stays the cost of Ray Serve LLM alone.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from typing import Any

from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
    OpenAIHTTPException,
    to_model_metadata,
)
from ray.llm._internal.serve.core.engine.protocol import LLMEngine
from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress, make_fastapi_ingress, router_request_timeout
from ray.llm._internal.serve.core.ingress.ingress import init as new_ingress_app
from ray.llm._internal.serve.core.ingress.utils import NON_STREAMING_RESPONSE_TYPES
from ray.llm._internal.serve.core.ingress.utils import _openai_json_wrapper as openai_json_lines
from ray.llm._internal.serve.core.ingress.utils import _peek_at_generator as peek_at_generator
from ray.llm._internal.serve.core.ingress.utils import (
    _sanitize_chat_completion_request as sanitize_chat_completion_request,
)
from ray.llm._internal.serve.core.protocol import RawRequestInfo
from ray.llm._internal.serve.observability.logging import get_logger

try:  # vLLM >= 0.29
    from vllm.entrypoints.generate.base.protocol import StreamOptions
    from vllm.entrypoints.serve.engine.protocol import UsageInfo
except ImportError:  # vLLM 0.26
    from vllm.entrypoints.openai.engine.protocol import StreamOptions, UsageInfo

__all__ = [
    "NON_STREAMING_RESPONSE_TYPES", "ChatCompletionRequest", "ChatCompletionResponse", "ChatCompletionStreamResponse",
    "CompletionRequest", "CompletionResponse", "CompletionStreamResponse", "ErrorResponse", "LLMEngine", "ModelCard",
    "ModelList", "OpenAIHTTPException", "OpenAiIngress", "RawRequestInfo", "StreamOptions", "UsageInfo",
    "autoscaler_report", "get_logger", "make_fastapi_ingress", "new_ingress_app", "node_ip_address",
    "one_actor_running_batches_at_once", "openai_json_lines", "peek_at_generator", "router_request_timeout",
    "sanitize_chat_completion_request", "serve_controller", "to_model_metadata", "validate_launcher_config",
]


def validate_launcher_config(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does before it launches anything: the provider's defaults filled in, then
    Ray's cluster-config schema checked; raises what Ray raises."""
    from ray.autoscaler._private import util

    # Ray logs each default it fills in; a plan's output is no place for them.
    ray_logger = logging.getLogger(util.__name__)
    level = ray_logger.level
    ray_logger.setLevel(logging.WARNING)
    try:
        prepared = util.prepare_config(copy.deepcopy(config))
        util.validate_config(prepared)
    finally:
        ray_logger.setLevel(level)
    return prepared


def serve_controller():
    """The Serve controller's actor handle."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    return ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)


def node_ip_address() -> str:
    """The address Ray would give this machine's node."""
    import ray._private.services as services

    return services.get_node_ip_address()


def autoscaler_report() -> dict[str, Any]:
    """The autoscaler's last status report (active, pending and failed nodes by type), as
    `ray status` reads it from the cluster's KV store; empty before the first."""
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    raw = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
    return (json.loads(raw) if raw else {}).get("autoscaler_report") or {}


def one_actor_running_batches_at_once(batches: int) -> dict[str, Any]:
    """Ray Data map options for one actor running `batches` calls at once: Ray 2.60 names them
    in its ActorPoolStrategy, Ray 2.58 only through the actor's own `max_concurrency`."""
    import ray.data

    if "max_concurrent_calls_per_actor" in inspect.signature(ray.data.ActorPoolStrategy).parameters:
        return {"compute": ray.data.ActorPoolStrategy(
            size=1, max_tasks_in_flight_per_actor=batches, max_concurrent_calls_per_actor=batches)}
    return {"compute": ray.data.ActorPoolStrategy(size=1, max_tasks_in_flight_per_actor=batches),
            "max_concurrency": batches}
