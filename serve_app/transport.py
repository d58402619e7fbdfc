"""How requests and tokens travel between Ray Serve's processes (`transport` in the config).

Ray Serve reads these settings from the environment of every process of the cluster (the
controller, the proxies, the replicas), once, when each one starts. A Ray the app starts
itself inherits them from `apply_transport_env`; a cluster started with `ray start` needs
them in its own environment (cluster/aws.yaml and cluster/kuberay/Dockerfile carry the
default ones, `transport_env` is what they must match).

Why the defaults: on the stock path a first token crosses Serve's Python proxy, the object
store twice and a thread hop in each replica. Measured on one request in flight
(bench/results/transport-ab-cpu.md), HAProxy with gRPC between deployments took about 17 ms
of the app's own time off every first token on this 2-core machine, and more under load.
"""

from __future__ import annotations

import os

from core.config import TransportConfig


def transport_env(transport: TransportConfig) -> dict[str, str]:
    """The Ray Serve environment variables that give the transport `transport` asks for."""
    env = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1" if transport.throughput_optimized else "0"}
    if transport.throughput_optimized:
        # The fast path would send replica logs to files only: keep them on the console, where
        # `trilemma serve` shows how each engine starts and why a request failed.
        env["RAY_SERVE_LOG_TO_STDERR"] = "1"
    if transport.ingress == "haproxy":
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
        env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] = f"{transport.ingress_drain_s:g}"
    else:
        # The fast path turns direct ingress on by itself; Serve's proxy then still sits in front.
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
        env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "0"
    return env


def apply_transport_env(transport: TransportConfig) -> dict[str, str]:
    """Puts `transport_env` into this process's environment, for the Ray it is about to start
    and every process that Ray starts. A variable the operator set already is left as it is.
    Returns what is in force."""
    for name, value in transport_env(transport).items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in transport_env(transport)}
