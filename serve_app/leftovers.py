"""What an earlier session of the app left on this machine, looked at before a start binds the
app's port: its engines and HAProxy are ended when they are provably ours, and a port held by
anything else is named in the error, with the process that holds it.

Provably ours: a vLLM engine process or an HAProxy started under a Ray worker (it carries the
worker's RAY_RAYLET_PID) whose raylet has ended. Nothing of a Ray that runs is touched, nor a
`vllm serve` of someone else's.
"""

from __future__ import annotations

import logging
import os
import socket

import psutil

from core.config import ConfigError
from engine.processes import ENGINE_PREFIX, HAPROXY_NAME

logger = logging.getLogger(__name__)
RAYLET_PID_ENV = "RAY_RAYLET_PID"


class PortInUse(ConfigError):
    """The config's port is held by a process that is not a leftover of this app."""


def left_by_ended_rays() -> list[psutil.Process]:
    """vLLM engine processes and HAProxy of this user whose Ray's raylet has ended."""
    found = []
    for process in psutil.process_iter(["name", "status", "uids"]):
        try:
            name = process.info["name"] or ""
            if not (name.startswith(ENGINE_PREFIX) or name == HAPROXY_NAME):
                continue
            if process.info["status"] == psutil.STATUS_ZOMBIE or process.info["uids"].real != os.getuid():
                continue
            raylet = process.environ().get(RAYLET_PID_ENV)
            if raylet and raylet.isdigit() and not _running(int(raylet)):
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def end_leftovers() -> list[str]:
    """Kills what `left_by_ended_rays` finds; each one as `name (pid)`, also logged."""
    ended = []
    for process in left_by_ended_rays():
        try:
            label = f"{process.name()} ({process.pid})"
            process.kill()
            ended.append(label)
        except psutil.Error:
            continue
    if ended:
        logger.warning("ended %d processes an earlier session of the app left running (its Ray had ended): %s",
                       len(ended), ", ".join(ended))
    return ended


def check_port_free(host: str, port: int) -> None:
    """Raises PortInUse, naming the process that holds the port where it can be seen."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            return
        except OSError:
            pass
    raise PortInUse(f"port {port} (http.port) is held by {holder_of(port)}: stop it, or serve on another port "
                    "(--port, or --set http.port=N)")


def holder_of(port: int) -> str:
    """The process listening on `port`, as `pid N (command line)`, or why it cannot be named."""
    try:
        listeners = [c for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    except psutil.AccessDenied:
        return "a process this user cannot see"
    for listener in listeners:
        if listener.pid is None:
            continue
        try:
            return f"pid {listener.pid} ({' '.join(psutil.Process(listener.pid).cmdline())[:200]})"
        except psutil.Error:
            continue
    return "a process this user cannot see" if listeners else "a socket that is closing"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
