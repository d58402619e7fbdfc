"""Ray's own autoscaler on one machine: a head and the launcher's worker node types, launched
by Ray's fake multi-node provider as extra raylets that advertise fake GPUs.

Ray ships `ray.cluster_utils.AutoscalingCluster` for this, but it starts and stops with
`ray stop --force` (every Ray on the machine, other people's included) and reads a template
the wheel lacks; this one writes its own config, uses its own ports and temp dir, and stops
only the processes it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from core.config import TransportConfig
from core.upstream import node_ip_address
from serve_app.transport import transport_env

# The fake provider starts each worker with these resources; CPUs are kept small so a 2-core
# machine can hold a few nodes, and the object store at Ray's minimum.
FAKE_NODE_CPUS = 1
FAKE_OBJECT_STORE_BYTES = 80 * 1024 * 1024
# Ray's autoscaler loop period in seconds; the default (5 s) would blur the timeline.
AUTOSCALER_UPDATE_INTERVAL_S = 1
# A local test cluster needs no tokens; the driver must say the same or GCS refuses it
# (Ray turns token auth on for a `ray start` that finds a token in ~/.ray).
CLIENT_ENV = {"RAY_AUTH_MODE": "disabled"}


def fake_worker_types(worker_types: dict[str, dict[str, Any]], cpus: int = FAKE_NODE_CPUS) -> dict[str, dict[str, Any]]:
    """The launcher's worker node types for the fake provider: the same names, GPUs, accelerator
    labels and min/max workers, with few CPUs and a small object store (no cloud node_config)."""
    fake = {}
    for name, entry in worker_types.items():
        resources = {key: value for key, value in entry.get("resources", {}).items() if key not in ("CPU", "memory")}
        fake[name] = {
            "resources": {"CPU": cpus, **resources, "object_store_memory": FAKE_OBJECT_STORE_BYTES},
            "node_config": {},
            "min_workers": entry.get("min_workers", 0),
            "max_workers": entry.get("max_workers", 0),
        }
    return fake


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FakeCluster:
    """A fake autoscaling cluster; `start()` returns the address to `ray.init`, `stop()` ends
    every process whose command line names this cluster's temp dir, and their children."""

    def __init__(self, worker_types: dict[str, dict[str, Any]], *, idle_timeout_minutes: float,
                 head_cpus: int = 2, upscaling_speed: float = 1.0) -> None:
        self._worker_types = worker_types
        self._idle_timeout_minutes = idle_timeout_minutes
        self._head_cpus = head_cpus
        self._upscaling_speed = upscaling_speed
        self.temp_dir: str | None = None
        self.address: str | None = None

    def config(self, gcs_address: str) -> dict[str, Any]:
        """The autoscaler config (Ray's cluster-config schema) the head is started with."""
        return {
            "cluster_name": "trilemma-fake",
            "max_workers": sum(entry["max_workers"] for entry in self._worker_types.values()),
            "provider": {
                "type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                "disable_launch_config_check": True, "gcs_address": gcs_address,
            },
            "available_node_types": {
                "ray.head.default": {"resources": {"CPU": self._head_cpus}, "node_config": {}, "max_workers": 0},
                **self._worker_types,
            },
            "head_node_type": "ray.head.default",
            "auth": {}, "docker": {}, "upscaling_speed": self._upscaling_speed,
            "idle_timeout_minutes": self._idle_timeout_minutes,
            "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
            "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
            "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
        }

    def start(self, extra_env: dict[str, str] | None = None) -> str:
        # Short: Ray's socket paths live under it and Unix sockets allow ~100 characters.
        self.temp_dir = tempfile.mkdtemp(prefix="trl-fake-", dir="/tmp")
        port = free_port()
        ip = node_ip_address()
        self.address = f"{ip}:{port}"
        config_path = Path(self.temp_dir) / "autoscaling.json"
        config_path.write_text(json.dumps(self.config(self.address)))
        ray_cli = str(Path(sys.executable).with_name("ray"))
        command = [
            ray_cli, "start", "--head", f"--port={port}", f"--temp-dir={self.temp_dir}",
            f"--autoscaling-config={config_path}", f"--num-cpus={self._head_cpus}", "--num-gpus=0",
            "--include-dashboard=false", "--disable-usage-stats",
            # Every fixed default port may be held by another Ray on this machine.
            f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}",
        ]
        # All fake nodes are this one machine: Serve's own proxy on the head, not an HAProxy per
        # node on ports that are fixed (stats, metrics) and the app's own Ray may hold already.
        env = {**os.environ, **CLIENT_ENV, **transport_env(TransportConfig(ingress="serve_proxy")), "RAY_FAKE_CLUSTER": "1",
               "AUTOSCALER_UPDATE_INTERVAL_S": str(AUTOSCALER_UPDATE_INTERVAL_S), **(extra_env or {})}
        env.pop("RAY_ADDRESS", None)  # a cluster the caller joins elsewhere is not this one
        try:
            subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=180)
        except subprocess.CalledProcessError as error:
            self.stop()
            raise RuntimeError(f"ray start failed: {error.stderr[-2000:]}") from None
        except BaseException:
            self.stop()
            raise
        return self.address

    def own_processes(self) -> list[Any]:
        """This cluster's processes: those whose command line names its temp dir (GCS, raylets,
        the autoscaler, agents) and everything they started (workers rename themselves)."""
        import psutil

        if not self.temp_dir:
            return []
        roots = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            try:
                if any(self.temp_dir in part for part in process.info["cmdline"] or ()):
                    roots.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        found = {process.pid: process for process in roots}
        for root in roots:
            try:
                found.update({child.pid: child for child in root.children(recursive=True)})
            except psutil.NoSuchProcess:
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(self, grace_s: float = 5.0) -> None:
        import psutil

        processes = self.own_processes()
        for process in processes:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                continue
        _, alive = psutil.wait_procs(processes, timeout=grace_s)
        for process in alive:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(alive, timeout=grace_s)
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.temp_dir = None


def wait_until(predicate, timeout_s: float, interval_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


class ReplicaStandIn:
    """Holds a pool replica's placement group on the fake cluster and does nothing else: the
    autoscaler sees the same demand as from the real replica, without an engine."""

    def __call__(self) -> str:
        return "ok"
