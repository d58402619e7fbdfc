"""The vLLM engine processes on this node, and which of them lost the process that started them.

A Serve replica (or a `vllm serve`) starts its engine as a child process. vLLM's engine core
runs in a process group of its own and does not watch its parent, so when the replica dies the
engine lives on, holding its memory and KV cache, adopted by the nearest subreaper: Ray's
raylet (its workers' subreaper), the driver that started Ray (one too), or init. An engine whose
parent is one of those, or a forkserver whose parent is, has lost its replica.
"""

from __future__ import annotations

import psutil

ENGINE_PREFIX = "VLLM::"
# vLLM's front process of an engine (its workers are `VLLM::Worker`); the kernel keeps 15
# characters of a process name.
ENGINE_CORE_NAME = "VLLM::EngineCore"[:15]
RAY_DAEMONS = ("raylet", "gcs_server")
HAPROXY_NAME = "haproxy"
# What Python's forkserver runs (its command line).
FORKSERVER_MAIN = "from multiprocessing.forkserver import main"


def engine_processes() -> list[psutil.Process]:
    """Every live vLLM engine process on this node. An ended one its parent has yet to reap
    holds nothing but its process id, and is left out."""
    return [p for p in psutil.process_iter(["name", "status"])
            if (p.info["name"] or "").startswith(ENGINE_PREFIX) and p.info["status"] != psutil.STATUS_ZOMBIE]


def engine_cores_under(process: psutil.Process) -> list[psutil.Process]:
    """The engines a replica started: one core each, which owns the engine's workers."""
    try:
        children = process.children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if _name(p).startswith(ENGINE_CORE_NAME)]


def orphaned_engines() -> list[psutil.Process]:
    """Engine processes adopted after their replica died (their workers stay under the core)."""
    return [p for p in engine_processes() if _adopted(p)]


def orphaned_haproxies() -> list[psutil.Process]:
    """HAProxy processes (the ingress, serve_app.transport) whose Ray actor died: a Ray killed
    outright leaves them listening on the app's port, and the next start could not bind it."""
    return [p for p in psutil.process_iter(["name", "status"])
            if p.info["name"] == HAPROXY_NAME and p.info["status"] != psutil.STATUS_ZOMBIE and _adopted(p)]


def _adopted(engine: psutil.Process) -> bool:
    try:
        parent = engine.parent()
        if parent is not None and is_forkserver(parent):
            # A replica's engine core is the child of its forkserver (engine.preload),
            # which lives on with it when the replica dies.
            return _adopted(parent)
        if parent is None or parent.pid == 1:
            return True
        return _name(parent) in RAY_DAEMONS or any(_name(c) in RAY_DAEMONS for c in parent.children())
    except psutil.Error:
        return False  # gone meanwhile: it holds nothing


def is_forkserver(process: psutil.Process) -> bool:
    """Whether the process is Python's forkserver (a pool replica's, engine.preload)."""
    try:
        return FORKSERVER_MAIN in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""
