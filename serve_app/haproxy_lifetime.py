"""HAProxy that ends with the Serve proxy that started it.

Ray Serve's proxy actor starts HAProxy (the app's ingress, serve_app.transport) as a plain
child process. When the actor is killed (its Ray's daemons signalled with the rest of a process
group, `ray stop --force`) HAProxy lived on, listening on the app's port, and the next start of
the app could not bind it. Ray Serve runs whatever RAY_SERVE_HAPROXY_BINARY_PATH names: a
local Ray is pointed at a small launcher that asks the kernel for a parent-death signal
(engine.process_lifetime) and then becomes HAProxy itself, with the same pid and name.

A cluster started by `ray start` (cluster/) keeps its own setting: its nodes are containers or
machines whose end ends their processes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from core import upstream

BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
# The HAProxy the launcher runs: kept, since BINARY_ENV names the launcher once it is set.
HAPROXY_ENV = "TRILEMMA_HAPROXY_BINARY"

LAUNCHER = '''#!{python} -I
"""HAProxy for Ray Serve, ended by the kernel when the Serve proxy that started it ends
(written by Trilemma's serve_app/haproxy_lifetime.py)."""
import ctypes, os, signal, sys
parent = os.getppid()
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != parent:
    sys.exit("haproxy: the Serve proxy that started it has ended")
os.execv({haproxy!r}, [{haproxy!r}, *sys.argv[1:]])
'''


def bind_haproxy_to_its_proxy(directory: Path | None = None) -> Path | None:
    """Writes the launcher for this machine's HAProxy (Ray Serve's own choice of binary) and
    names it in this process's environment, for the Ray about to start here; its path. None
    where a shebang line cannot name this Python (a blank in its path): HAProxy then runs as
    Ray starts it, and a start reaps what an earlier one left (serve_app.leftovers)."""
    if " " in sys.executable:
        return None
    haproxy = os.environ.get(HAPROXY_ENV) or upstream.haproxy_binary()
    launcher = (directory or _private_dir()) / "haproxy"
    _write_if_changed(launcher, LAUNCHER.format(python=sys.executable, haproxy=haproxy))
    os.environ[HAPROXY_ENV] = haproxy
    os.environ[BINARY_ENV] = str(launcher)
    return launcher


def _private_dir() -> Path:
    directory = Path(tempfile.gettempdir()) / f"trilemma-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def _write_if_changed(path: Path, text: str) -> None:
    """Written whole or not at all: another start on this machine may run the launcher meanwhile."""
    if path.exists() and path.read_text() == text:
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.chmod(0o755)
    partial.replace(path)
