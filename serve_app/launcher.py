"""Starts Ray (when none is running) and the Serve application, and says where it listens."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

import psutil
import ray
from ray import serve

from core.config import TrilemmaConfig
from serve_app.app import build_app

logger = logging.getLogger(__name__)


def ensure_ray(config: TrilemmaConfig) -> None:
    """Joins the cluster named by RAY_ADDRESS, or starts a local one sized by `local_ray`."""
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
    else:
        ray.init(num_cpus=config.local_ray.num_cpus,
                 _metrics_export_port=config.local_ray.metrics_export_port)


def deploy(
    config: TrilemmaConfig, *, engine_cls: type | None = None, model_source: str | None = None,
    route_prefix: str = "/",
) -> str:
    """Deploys the app and returns its base URL once every replica is ready (warmed up).

    Another `route_prefix` lets a second app share the cluster's HTTP port (tests do).
    """
    ensure_ray(config)
    serve.start(http_options={"host": config.http.host, "port": config.http.port})
    serve.run(
        build_app(config, engine_cls=engine_cls, model_source=model_source),
        name=config.app_name,
        route_prefix=route_prefix,
    )
    host = "127.0.0.1" if config.http.host in ("0.0.0.0", "::") else config.http.host
    return f"http://{host}:{config.http.port}{route_prefix.rstrip('/')}"


def undeploy(config: TrilemmaConfig) -> None:
    """Deletes the app and waits for its replicas to stop; engines that outlive them are killed."""
    serve.delete(config.app_name, _blocking=True)
    reap_orphaned_engines()


@contextmanager
def deployed(
    config: TrilemmaConfig, *, engine_cls: type | None = None, model_source: str | None = None,
    route_prefix: str = "/",
) -> Iterator[str]:
    """The app's base URL while the block runs; the app is deleted after it, even on errors."""
    try:
        yield deploy(config, engine_cls=engine_cls, model_source=model_source, route_prefix=route_prefix)
    finally:
        undeploy(config)


def shutdown_local_ray() -> None:
    """Ends (or leaves) the Ray session and kills the engines its replicas leave behind.

    A graceful serve.shutdown() did not return within 60 s on a 2-core machine; ending the
    Ray session stops the replicas at once, and the reaper then ends their engines.
    """
    ray.shutdown()
    reap_orphaned_engines()


def reap_orphaned_engines() -> list[int]:
    """Kills vLLM engine processes of this session that lost their replica.

    vLLM's engine core runs in a process group of its own and does not watch its parent, so
    when Ray kills a replica (Ctrl-C, `ray stop`) the engine lives on, holding its memory and
    KV cache. Only orphans (re-parented to init) of our own session are touched.
    """
    session = os.getsid(0)
    reaped = []
    for process in psutil.process_iter(["name", "ppid"]):
        try:
            orphaned_engine = process.info["ppid"] == 1 and (process.info["name"] or "").startswith("VLLM::")
            if orphaned_engine and os.getsid(process.pid) == session:
                process.kill()
                reaped.append(process.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    if reaped:
        logger.warning("killed %d orphaned vLLM engine processes: %s", len(reaped), reaped)
    return reaped
