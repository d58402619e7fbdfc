"""The processes of an app on this machine, found by the titles Ray gives them
(`ray::ServeReplica:<app>:<deployment>`, `ray::ServeController`), Ray's own daemons by name,
vLLM's engines by theirs and a replica's forkserver by its command (engine/processes.py).
The chaos benchmark kills them; the soak watches their memory."""

from __future__ import annotations

import psutil

from engine.processes import ENGINE_PREFIX, RAY_DAEMONS, is_forkserver


def replica_processes(app: str, deployment: str) -> list[psutil.Process]:
    title = f"ServeReplica:{app}:{deployment}"
    return [p for p in ray_processes() if title in title_of(p)]


def ray_processes() -> list[psutil.Process]:
    """Ray's workers and actors (`ray::...`)."""
    return [p for p in psutil.process_iter(["name", "cmdline"]) if "ray::" in title_of(p)]


def serving_processes() -> list[psutil.Process]:
    """Everything that serves: Ray's daemons, workers and actors, the engines and the replicas'
    forkservers (engine/preload.py)."""
    return [p for p in psutil.process_iter(["name", "cmdline"])
            if name_of(p) in RAY_DAEMONS or name_of(p).startswith(ENGINE_PREFIX) or "ray::" in title_of(p)
            or is_forkserver(p)]


def label_of(process: psutil.Process) -> str:
    """What a process is, in a few words: `ServeReplica:trilemma:pool-short`, `raylet`, ..."""
    title = title_of(process)
    if "ray::" in title:
        return title.split("ray::", 1)[1].split()[0]
    if is_forkserver(process):
        return "forkserver"
    return name_of(process)


def title_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.info.get("cmdline") or process.cmdline() or ())
    except (psutil.Error, AttributeError):
        return ""


def name_of(process: psutil.Process) -> str:
    try:
        return (getattr(process, "info", None) or {}).get("name") or process.name()
    except psutil.Error:
        return ""
