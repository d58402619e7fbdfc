"""Everything imported from Ray's and vLLM's private modules, and every version shim, in one
place. The code runs on Ray 2.60 with vLLM 0.29 (the CPU default) and on Ray 2.58 with vLLM 0.26
(what Ray 2.58's LLM extra pins, on GPU hosts).

Classes and functions are loaded on first use (PEP 562 `__getattr__`), so importing this module
costs nothing: the `trilemma` CLI, the cluster planner and the batch job's driver never pay for
Ray Serve LLM's and vLLM's imports unless they use them. What one command needs from Ray's
internals is imported inside the function below that uses it.

Beyond imports, two places lean on Ray Serve LLM's private behaviour and are the other things
to check on an upgrade: pool/replica.py overrides `LLMServer._run_request`,
`_batch_output_stream` and `_start_engine` (`report_llm_usage` below is the rest of Ray's),
engine/pool_engine.py overrides `VLLMEngine._prepare_engine_config` and
`_start_async_llm_engine` and, while the latter runs, swaps vLLM's
`vllm.v1.engine.utils.get_mp_context` (tests/unit/engine/test_pool_engine.py checks those names), and
engine/stat_loggers.py reads the engine's stat loggers.
autoscaling/control_board.py uses Ray core's `internal_kv` (the pure logic may not import this
module, which would bring Ray Serve in with it).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import logging
from typing import Any

_RAY_LLM = "ray.llm._internal.serve"
_OPENAI_MODELS = f"{_RAY_LLM}.core.configs.openai_api_models"
# Name -> where it lives: (module, attribute), or several modules, tried in order, where vLLM
# moved it (the first is vLLM >= 0.29's, the last vLLM 0.26's).
_PRIVATE: dict[str, tuple[str | tuple[str, ...], str]] = {
    **{name: (_OPENAI_MODELS, name) for name in (
        "ChatCompletionRequest", "ChatCompletionResponse", "ChatCompletionStreamResponse", "CompletionRequest",
        "CompletionResponse", "CompletionStreamResponse", "DetokenizeRequest", "DetokenizeResponse",
        "EmbeddingCompletionRequest", "EmbeddingRequest", "ErrorResponse", "ModelCard", "ModelList",
        "OpenAIHTTPException", "TokenizeRequest", "TokenizeResponse", "to_model_metadata")},
    "LLMEngine": (f"{_RAY_LLM}.core.engine.protocol", "LLMEngine"),
    "VLLMEngine": (f"{_RAY_LLM}.engines.vllm.vllm_engine", "VLLMEngine"),
    "OpenAiIngress": (f"{_RAY_LLM}.core.ingress.ingress", "OpenAiIngress"),
    "make_fastapi_ingress": (f"{_RAY_LLM}.core.ingress.ingress", "make_fastapi_ingress"),
    "new_ingress_app": (f"{_RAY_LLM}.core.ingress.ingress", "init"),
    "router_request_timeout": (f"{_RAY_LLM}.core.ingress.ingress", "router_request_timeout"),
    "NON_STREAMING_RESPONSE_TYPES": (f"{_RAY_LLM}.core.ingress.utils", "NON_STREAMING_RESPONSE_TYPES"),
    "openai_json_lines": (f"{_RAY_LLM}.core.ingress.utils", "_openai_json_wrapper"),
    "peek_at_generator": (f"{_RAY_LLM}.core.ingress.utils", "_peek_at_generator"),
    "sanitize_chat_completion_request": (f"{_RAY_LLM}.core.ingress.utils", "_sanitize_chat_completion_request"),
    "RawRequestInfo": (f"{_RAY_LLM}.core.protocol", "RawRequestInfo"),
    "haproxy_binary": ("ray.serve._private.haproxy", "get_haproxy_binary"),
    "LLMCallbackBase": ("ray.llm._internal.common.callbacks.base", "CallbackBase"),
    "is_remote_model_path": ("ray.llm._internal.common.utils.cloud_utils", "is_remote_path"),
    "response_for_error": (f"{_RAY_LLM}.utils.server_utils", "get_response_for_error"),
    "get_logger": (f"{_RAY_LLM}.observability.logging", "get_logger"),
    "StreamOptions": (("vllm.entrypoints.generate.base.protocol", "vllm.entrypoints.openai.engine.protocol"),
                      "StreamOptions"),
    "UsageInfo": (("vllm.entrypoints.serve.engine.protocol", "vllm.entrypoints.openai.engine.protocol"), "UsageInfo"),
    **{name: ("vllm.entrypoints.openai.chat_completion.protocol", name) for name in (
        "ChatCompletionResponseChoice", "ChatCompletionResponseStreamChoice", "ChatMessage", "DeltaMessage")},
    **{name: ("vllm.entrypoints.openai.completion.protocol", name) for name in (
        "CompletionResponseChoice", "CompletionResponseStreamChoice")},
}


def __getattr__(name: str) -> Any:
    try:
        modules, attribute = _PRIVATE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    candidates = (modules,) if isinstance(modules, str) else modules
    for module in candidates:
        try:
            value = getattr(importlib.import_module(module), attribute)
            break
        except ImportError:
            if module == candidates[-1]:
                raise
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PRIVATE])


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


def serve_replica_states(app_name: str) -> dict[str, list[str]]:
    """Each deployment of the app and the states of its replicas (`RUNNING`, `STARTING`, ...),
    from the controller's details as the plain dict it sends (empty while the app is not there).
    `serve.status()` gives the same counts after validating the whole instance into pydantic
    models, one of which pickles each request router class again: 12 ms of the caller's GIL
    on an idle machine, and 6 to 9% of a router's time under load when read every second."""
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()
    deployments = ((details.get("applications") or {}).get(app_name) or {}).get("deployments") or {}
    return {
        name: [str(getattr(replica["state"], "value", replica["state"])) for replica in deployment.get("replicas") or ()]
        for name, deployment in deployments.items()
    }


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


def report_llm_usage(llm_config: Any) -> None:
    """What Ray Serve LLM's replica reports to Ray's usage telemetry once its engine started:
    the model's shape through a detached agent actor (which this call creates, when none
    runs yet, and waits on), and whether direct streaming is on. Ray's push logs its own
    failures; an import that a Ray upgrade broke raises."""
    from ray._common.usage.usage_lib import TagKey, record_extra_usage_tag
    from ray.llm._internal.serve.constants import RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING
    from ray.llm._internal.serve.observability.usage_telemetry.usage import push_telemetry_report_for_all_models

    push_telemetry_report_for_all_models(all_models=[llm_config])
    if RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING:
        record_extra_usage_tag(TagKey.LLM_SERVE_DIRECT_STREAMING_ENABLED, "1")


def one_actor_running_batches_at_once(batches: int) -> dict[str, Any]:
    """Ray Data map options for one actor running `batches` calls at once: Ray 2.60 names them
    in its ActorPoolStrategy, Ray 2.58 only through the actor's own `max_concurrency`."""
    import ray.data

    if "max_concurrent_calls_per_actor" in inspect.signature(ray.data.ActorPoolStrategy).parameters:
        return {"compute": ray.data.ActorPoolStrategy(
            size=1, max_tasks_in_flight_per_actor=batches, max_concurrent_calls_per_actor=batches)}
    return {"compute": ray.data.ActorPoolStrategy(size=1, max_tasks_in_flight_per_actor=batches),
            "max_concurrency": batches}
