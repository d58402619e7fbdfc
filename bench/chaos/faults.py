"""The faults the chaos benchmark injects into a running app, one small class each.

Processes are found on this machine (bench/app_processes.py): run the benchmark on the node
that hosts them (a one-node app: any).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from typing import Callable, ClassVar

import aiohttp
import psutil

from bench.app_processes import label_of, ray_processes, replica_processes, serving_processes, title_of
from core import wire
from core.config import TrilemmaConfig
from core.pool_config import PoolConfig
from engine.processes import engine_cores_under


@dataclass(frozen=True)
class Target:
    """What a run is aimed at: the app and its URL, the pool whose parts die, the serving
    process (for SIGTERM) and the config it runs (for a redeploy or a scale-down)."""

    app: str
    url: str
    model: str
    pool: str
    serve_pid: int | None = None
    config: TrilemmaConfig | None = None
    clients_leaving: int = 1000


class Fault:
    """One fault. `inject` returns what it did, in words for the report."""

    name: ClassVar[str]
    # The pool is expected to serve again afterwards (not so once the app itself was stopped).
    pool_comes_back: ClassVar[bool] = True
    registry: ClassVar[dict[str, type[Fault]]] = {}

    def __init_subclass__(cls, *, name: str, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name
        Fault.registry[name] = cls

    async def inject(self, target: Target) -> str:
        raise NotImplementedError


class KillEngine(Fault, name="kill-engine"):
    """SIGKILL of the pool's vLLM engine process (an illegal memory access, the OOM killer)."""

    async def inject(self, target: Target) -> str:
        replica = _one(replica_processes(target.app, f"pool-{target.pool}"), f"replica of pool {target.pool}")
        engine = _one(engine_cores_under(replica), f"engine under replica {replica.pid}")
        engine.send_signal(signal.SIGKILL)
        return f"SIGKILL to engine {engine.pid} of replica {replica.pid} (pool {target.pool})"


class KillReplica(Fault, name="kill-replica"):
    """SIGKILL of the pool's replica actor (its process; a node lost, in small)."""

    async def inject(self, target: Target) -> str:
        replica = _one(replica_processes(target.app, f"pool-{target.pool}"), f"replica of pool {target.pool}")
        replica.send_signal(signal.SIGKILL)
        return f"SIGKILL to replica {replica.pid} of pool {target.pool}"


class KillRouter(Fault, name="kill-router"):
    """SIGKILL of one router replica."""

    async def inject(self, target: Target) -> str:
        router = _one(replica_processes(target.app, "router"), "router replica")
        router.send_signal(signal.SIGKILL)
        return f"SIGKILL to router replica {router.pid}"


class KillController(Fault, name="kill-controller"):
    """SIGKILL of the Serve controller."""

    async def inject(self, target: Target) -> str:
        controller = _one([p for p in ray_processes() if "ServeController" in title_of(p)], "Serve controller")
        controller.send_signal(signal.SIGKILL)
        return f"SIGKILL to the Serve controller {controller.pid}"


class Terminate(Fault, name="sigterm"):
    """SIGTERM to `trilemma serve`, as `docker stop`, Kubernetes and systemd send it. The load
    stops at the signal: what counts is that every request in flight then is answered, that
    the process ends, and that nothing of it is left."""

    pool_comes_back = False

    async def inject(self, target: Target) -> str:
        if target.serve_pid is None:
            raise FaultNotPossible("the sigterm fault needs --serve-pid (the `trilemma serve` process)")
        sent_at = time.monotonic()
        os.kill(target.serve_pid, signal.SIGTERM)
        while _running(target.serve_pid) and time.monotonic() - sent_at < EXIT_WAIT_S:
            await asyncio.sleep(0.5)
        if _running(target.serve_pid):
            return f"SIGTERM to trilemma serve ({target.serve_pid}): still running after {EXIT_WAIT_S:.0f} s"
        ended_s = time.monotonic() - sent_at
        # Ray's workers and vLLM's engine workers end on their own once their parent is gone.
        while serving_processes() and time.monotonic() - sent_at < ended_s + LEFT_WAIT_S:
            await asyncio.sleep(1.0)
        left = [f"{label_of(p)} {p.pid}" for p in serving_processes()]
        return (f"SIGTERM to trilemma serve ({target.serve_pid}): it ended {ended_s:.0f} s later; serving "
                f"processes left {LEFT_WAIT_S:.0f} s after: {', '.join(left) or 'none'}")


# Beyond the longest drain (`drain_timeout_s`, 120 s) and Ray's shutdown.
EXIT_WAIT_S = 300.0
# How long the app's processes get to end after `trilemma serve` has.
LEFT_WAIT_S = 30.0


class ClientsLeave(Fault, name="clients-leave"):
    """Many clients that open a stream and leave after its first chunk, at most `LEAVING_AT_ONCE`
    at a time: each gets a stream to leave rather than a 429 from a full queue."""

    async def inject(self, target: Target) -> str:
        body = {"model": target.model, "messages": [{"role": "user", "content": "Tell me a story."}],
                "max_tokens": 64, "stream": True}
        headers = {wire.POOL_HEADER: target.pool}
        at_once = asyncio.Semaphore(LEAVING_AT_ONCE)

        async def leave(session: aiohttp.ClientSession) -> int:
            async with at_once, session.post("v1/chat/completions", json=body, headers=headers) as response:
                if response.status == 200:
                    await response.content.readline()  # the first event, then the connection closes
                return response.status

        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(target.url.rstrip("/") + "/", connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=300)) as session:
            statuses = await asyncio.gather(*(leave(session) for _ in range(target.clients_leaving)),
                                            return_exceptions=True)
        counts: dict[str, int] = {}
        for status in statuses:
            key = str(status) if isinstance(status, int) else type(status).__name__
            counts[key] = counts.get(key, 0) + 1
        return (f"{target.clients_leaving} clients left mid-stream on pool {target.pool}, "
                f"{LEAVING_AT_ONCE} at a time: {counts}")


# Clients streaming at once in the clients-leave fault: about what a CPU pool admits (its engine's
# 16 plus its queue), so that most get a stream to leave; the steady load shares the pool.
LEAVING_AT_ONCE = 24


class Redeploy(Fault, name="redeploy"):
    """`serve deploy` of the running config with one pool setting changed: every replica of
    the pool is replaced, the old ones draining."""

    async def inject(self, target: Target) -> str:
        def change(pool: dict) -> str:
            pool["admission"]["max_queued"] += 1  # a bind argument: Serve replaces the pool's replicas
            return f"admission.max_queued {pool['admission']['max_queued']}"

        return await asyncio.to_thread(_deploy_changed, target, change, "redeploy")


class ScaleDown(Fault, name="scale-down"):
    """One replica fewer while the pool streams, as the autoscaler removes an idle one: the
    pool is first given a second replica (not counted as the fault), then goes back to one."""

    async def inject(self, target: Target) -> str:
        replicas: list[int] = []

        def add(pool: dict) -> str:
            _check_room(target.config.pools[target.pool])
            replicas.append(pool["replicas"])
            pool["replicas"] += 1
            return f"replicas {pool['replicas']}"

        added = await asyncio.to_thread(_deploy_changed, target, add, "scale-down")
        await asyncio.sleep(SCALE_DOWN_AFTER_S)  # both replicas take requests
        removed = await asyncio.to_thread(_deploy_changed, target, lambda pool: f"replicas {replicas[0]}", "scale-down")
        return f"{added}, then {removed} while it streamed"


# After the second replica serves, how long both take requests before one is removed.
SCALE_DOWN_AFTER_S = 10.0
# How long changed replicas get to serve (a CPU engine under load took up to 230 s to start).
DEPLOY_WAIT_S = 600.0


def _check_room(pool: PoolConfig) -> None:
    """A replica more must fit in what Ray has free, or Serve waits for it for ever."""
    import ray

    free = ray.available_resources()
    needs = dict(pool.resources) if pool.is_cpu else {"GPU": pool.units}
    short = {name: amount for name, amount in needs.items() if amount > free.get(name, 0)}
    if short:
        raise FaultNotPossible(f"no room for another replica: it needs {needs}, Ray has "
                               f"{ {name: free.get(name, 0) for name in needs} } free")


def _deploy_changed(target: Target, change: Callable[[dict], str], fault: str) -> str:
    """Deploys the config the app runs with `change` applied to the target pool's section;
    returns once the new replicas serve (the old ones may still drain). When they do not within
    DEPLOY_WAIT_S, the running config is deployed back and the fault was not possible."""
    from ray import serve

    from serve_app.app import build_app
    from serve_app.ray_driver import init_ray

    if target.config is None:
        raise FaultNotPossible(f"the {fault} fault needs --config (the config the app runs, with its --set)")
    init_ray(address="auto", ignore_reinit_error=True, log_to_driver=False)
    raw = target.config.model_dump(mode="json")
    changed = change(raw["pools"][target.pool])
    serve._run(build_app(TrilemmaConfig.from_dict(raw)), name=target.app, _blocking=False)
    deadline = time.monotonic() + DEPLOY_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(2.0)  # first: the status read at once may be the one before the deploy
        app = serve.status().applications.get(target.app)
        if app is not None and app.status == "RUNNING":
            return f"deployed {target.app} with pool {target.pool}'s {changed}"
    serve._run(build_app(target.config), name=target.app, _blocking=False)
    raise FaultNotPossible(f"pool {target.pool} with {changed} did not serve within {DEPLOY_WAIT_S:.0f} s; "
                           "the running config was deployed back")


class FaultNotPossible(Exception):
    """The fault cannot be injected here (its process is not on this machine, or not given)."""


def _running(pid: int) -> bool:
    """Alive, and not a zombie its parent has yet to reap."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _one(processes: list[psutil.Process], what: str) -> psutil.Process:
    if not processes:
        raise FaultNotPossible(f"found no {what} on this machine")
    return processes[0]
