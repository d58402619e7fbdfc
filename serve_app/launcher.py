"""Starts Ray (when none is running) and the Serve application, and says where it listens."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

import psutil
import ray
from ray import serve
from ray.serve.exceptions import RayServeException

from core.config import TrilemmaConfig
from engine.processes import orphaned_engines, orphaned_haproxies
from serve_app.haproxy_lifetime import bind_haproxy_to_its_proxy
from serve_app.leftovers import check_port_free, end_leftovers
from serve_app.ray_driver import RAY_SUBREAPER_ENV, init_ray, local_cluster_ended
from serve_app.transport import apply_transport_env, check_ingress

logger = logging.getLogger(__name__)
# Beyond the longest drain: Serve's own stop of the emptied replicas.
DRAIN_MARGIN_S = 15.0
# Ending the Ray session after the drain takes seconds; a stop still running this long after
# the drain's bound has hung, and the process ends without it.
SHUTDOWN_BOUND_S = 60.0
# How often a serving process looks whether the Ray it started is still there.
CLUSTER_WATCH_S = 1.0
# A signal to the process group reaches Ray's daemons and this process together: a cluster
# that ended this long before the signal arrived still ended by a stop that was asked for.
SIGNAL_GRACE_S = 1.0


def ensure_ray(config: TrilemmaConfig) -> None:
    """Joins the cluster named by RAY_ADDRESS, or starts a local one sized by `local_ray` with
    the `transport` the config asks for (a joined cluster has its own: serve_app.transport)."""
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        init_ray()
    else:
        prepare_local_ray(config)
        init_ray(num_cpus=config.local_ray.num_cpus,
                 _metrics_export_port=config.local_ray.metrics_export_port)


def prepare_local_ray(config: TrilemmaConfig) -> None:
    """What a Ray started on this machine for the app needs in this process's environment before
    it starts, and on the machine: no leftovers of an earlier session, a free port (PortInUse
    names its holder), the transport, and an HAProxy that ends with its proxy (docs/faults.md,
    "Stops")."""
    end_leftovers()
    check_port_free(config.http.host, config.http.port)
    os.environ.setdefault(RAY_SUBREAPER_ENV, "true")
    check_ingress(config.transport)
    logger.info("Ray Serve transport: %s", apply_transport_env(config.transport))
    if config.transport.ingress == "haproxy":
        bind_haproxy_to_its_proxy()


def import_app_code() -> Future[ModuleType]:
    """The app's code (serve_app.app, and with it Ray Serve LLM and vLLM), imported in a thread
    of its own, so that the import (8.8 s of a 2-core CPU) runs while Ray and Serve start."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-app-code")
    importing = pool.submit(importlib.import_module, "serve_app.app")
    pool.shutdown(wait=False)  # the thread ends with the import
    return importing


def deploy(
    config: TrilemmaConfig, *, engine_cls: type | None = None, model_source: str | None = None,
    route_prefix: str = "/", app_code: Future[ModuleType] | None = None,
) -> str:
    """Deploys the app and returns its base URL once every replica is ready (warmed up).

    Another `route_prefix` lets a second app share the cluster's HTTP port (tests do).
    `app_code` is the import of the app's code when the caller began it already.
    """
    app_code = app_code or import_app_code()
    started = time.monotonic()
    ensure_ray(config)
    serve.start(http_options={"host": config.http.host, "port": config.http.port})
    serve_started = time.monotonic()
    app = app_code.result().build_app(config, engine_cls=engine_cls, model_source=model_source)
    built = time.monotonic()
    serve.run(app, name=config.app_name, route_prefix=route_prefix)
    # The app's part of a start, phase by phase; each replica logs its own (pool.replica).
    logger.info(
        "%s ready %.1f s after the deploy began: Ray and Serve %.1f s, the app's code imported and "
        "built by %.1f s, replicas created, started and warmed up %.1f s", config.app_name,
        time.monotonic() - started, serve_started - started, built - started, time.monotonic() - built,
    )
    host = "127.0.0.1" if config.http.host in ("0.0.0.0", "::") else config.http.host
    return f"http://{host}:{config.http.port}{route_prefix.rstrip('/')}"


def deploy_unless_stopped(
    config: TrilemmaConfig, *, stop: threading.Event | None = None, engine_cls: type | None = None,
    model_source: str | None = None, route_prefix: str = "/",
) -> str | None:
    """`deploy`, for a serving process: SIGTERM or Ctrl-C while the app starts removes what was
    deployed, leaves the Ray session and returns None instead of the URL.

    Ray's core ends the process on SIGTERM (its handler, set when Ray starts, drains the node and
    exits with status 1), which would leave the replicas and engines that were starting behind.
    From Ray's start on, SIGTERM is this process's: it stops the start as Ctrl-C does, and once the
    app serves it sets `stop`, which serve_until_stopped waits for. A SIGTERM that comes as the
    app becomes ready, before the caller waits for it, is then the stop asked for and not Ray's.
    """
    stop = stop or threading.Event()
    starting = True

    def on_sigterm(signum, frame):
        stop.set()
        if starting:
            raise KeyboardInterrupt

    try:
        app_code = import_app_code()
        ensure_ray(config)
        signal.signal(signal.SIGTERM, on_sigterm)
        return deploy(config, engine_cls=engine_cls, model_source=model_source, route_prefix=route_prefix,
                      app_code=app_code)
    except KeyboardInterrupt:
        starting = False  # a second signal must not cut the removal short
        logger.warning("stopped while %s was starting: removing it", config.app_name)
        if ray.is_initialized():
            with ends_within(stop_bound_s(config), "removing the app that was starting"):
                drain(config)
                shutdown_local_ray()
        return None
    finally:
        starting = False


def undeploy(config: TrilemmaConfig) -> None:
    """Deletes the app and waits for its replicas to stop; engines that outlive them are killed.
    After a deploy refused before Ray or Serve started there is nothing to delete, and the
    refusal is what the caller sees (serve.delete would start a Ray of its own to look); after
    the local Ray ended beneath the caller (a signal to its process group, `ray stop`) the app
    ended with it, and serve.delete would wait a minute for a GCS that is gone."""
    if not ray.is_initialized():
        return
    delete_app(config, bound_s=None)
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


def serve_until_stopped(config: TrilemmaConfig, stop: threading.Event | None = None) -> bool:
    """Serves until SIGTERM (what `docker stop`, Kubernetes and systemd send), Ctrl-C or `stop`,
    then drains the app and ends the Ray session; or until the Ray this process started ends
    beneath it (`ray stop`), then ends what is left of the session. True when the stop was asked
    for, False when the cluster ended.

    Ray's core would end the process on SIGTERM; the handler set here, after Ray started,
    replaces its handler for this process (pass deploy_unless_stopped's `stop`, so that a SIGTERM
    between the two is not lost). A signal to the whole process group reaches Ray's
    daemons too: their replicas end with them, and there is nothing left to drain.
    """
    stop = stop or threading.Event()
    # Kept until the stop is done: with Ray's own handler back, a second SIGTERM during the drain
    # would end the process with status 1 (the stop is bounded by ends_within anyway).
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    try:
        asked = _wait_for_stop(stop)
        if not asked:
            logger.error("the Ray cluster that %s ran on has ended (`ray stop`, or its daemons were signalled): "
                         "ending what is left of it", config.app_name)
        with ends_within(stop_bound_s(config), "stopping"):
            if not local_cluster_ended():
                drain(config)
            shutdown_local_ray()
        return asked
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_for_stop(stop: threading.Event) -> bool:
    """Until `stop` is set (True) or the local Ray ends beneath the process (False)."""
    try:
        while not stop.wait(CLUSTER_WATCH_S):
            if local_cluster_ended():
                # A signal to the whole process group ends Ray's daemons as it reaches this
                # process: a stop asked for, whichever of the two is seen first.
                return stop.wait(SIGNAL_GRACE_S)
    except KeyboardInterrupt:
        pass
    return True


def drain_bound_s(config: TrilemmaConfig) -> float:
    """The longest drain timeout of the app's deployments."""
    return max([config.router.drain_timeout_s, *(p.drain_timeout_s for p in config.pools.values())])


def stop_bound_s(config: TrilemmaConfig) -> float:
    """How long a stop may take, drain and the Ray session's end together."""
    return drain_bound_s(config) + DRAIN_MARGIN_S + SHUTDOWN_BOUND_S


@contextmanager
def ends_within(seconds: float, what: str) -> Iterator[None]:
    """Past `seconds` in the block, the process ends: every thread's stack goes to stderr (what
    the stop waited for), this session's engines are killed, and the exit status is 1.

    A stop must end the process: `docker stop` and Kubernetes would kill it later anyway, but
    `trilemma serve` under a shell or a benchmark would hang, holding the port and the engines'
    memory. One stop in five on a 2-core machine once did not end within 180 s of SIGTERM.
    """
    def give_up() -> None:
        logger.error("%s took over %.0f s: ending the process; every thread's stack follows", what, seconds)
        faulthandler.dump_traceback(all_threads=True)
        reap_orphaned_engines()
        os._exit(1)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def drain(config: TrilemmaConfig) -> bool:
    """Stops taking requests and lets those in flight finish: Serve removes the app's routes at
    once, and each replica stops when its requests are done or its drain timeout has passed.
    True when the app was gone within the longest drain timeout (plus a margin)."""
    bound = drain_bound_s(config)
    logger.info("draining %s: requests in flight may take up to %.0f s", config.app_name, bound)
    outcome = delete_app(config, bound + DRAIN_MARGIN_S)
    if outcome == "cluster ended":
        logger.warning("the Ray cluster ended while %s drained: requests in flight there have ended with it",
                       config.app_name)
    elif outcome == "timed out":
        logger.warning("%s did not drain within %.0f s; stopping it anyway", config.app_name, bound + DRAIN_MARGIN_S)
    else:
        logger.info("%s drained", config.app_name)
    return outcome == "deleted"


def delete_app(config: TrilemmaConfig, bound_s: float | None) -> str:
    """serve.delete of the app, waited for until it is done ("deleted"), `bound_s` has passed
    ("timed out"), or the local Ray ends beneath it ("cluster ended": serve.delete would then
    wait a minute for the GCS that ended with the rest)."""
    def delete() -> None:
        try:
            serve.delete(config.app_name, _blocking=True)
        except RayServeException:  # no Serve instance on this cluster: nothing was deployed
            pass

    deleting = threading.Thread(target=delete, name="delete-app", daemon=True)
    deleting.start()
    deadline = None if bound_s is None else time.monotonic() + bound_s
    while deleting.is_alive() and (deadline is None or time.monotonic() < deadline):
        deleting.join(CLUSTER_WATCH_S)
        if local_cluster_ended():
            return "cluster ended"
    return "timed out" if deleting.is_alive() else "deleted"


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
    KV cache. HAProxy (the ingress) outlives a Ray killed outright the same way, holding the
    app's port. Only orphans of our own session are touched.
    """
    session = os.getsid(0)
    reaped = []
    for engine in [*orphaned_engines(), *orphaned_haproxies()]:
        try:
            if os.getsid(engine.pid) == session:
                engine.kill()
                reaped.append(engine.pid)
        except (psutil.Error, ProcessLookupError):
            continue
    if reaped:
        logger.warning("killed %d orphaned vLLM engine or HAProxy processes: %s", len(reaped), reaped)
    return reaped
