"""A torch.distributed port of its own for each engine a replica starts.

vLLM's Ray executor (RayExecutorV2, the GPU build's default under Ray Serve LLM) looks for its
TCPStore port from VLLM_DP_MASTER_PORT + 100 (+ 32 per local data-parallel rank) upward. An
engine without data parallelism reads both from the environment, where they default to 0:
every engine on a node starts its search at port 100, finds it free, and the second of two
engines that start together fails with EADDRINUSE once the first has bound it (vLLM issue
#53666; Ray Serve restarted the failed replica about 60 s later, on every start of the app on
an H200). Starting each engine's search at a port the kernel just handed out keeps engines
that start together apart.
"""

from __future__ import annotations

import os
import socket

DP_MASTER_PORT_ENV = "VLLM_DP_MASTER_PORT"
# Where vLLM's Ray executor starts its TCPStore search, past VLLM_DP_MASTER_PORT.
TCPSTORE_PORT_OFFSET = 100


def give_engine_its_own_port() -> int | None:
    """Points this process's engines at a free port of their own (through VLLM_DP_MASTER_PORT,
    which they inherit) and returns it; None when the operator set VLLM_DP_MASTER_PORT."""
    if DP_MASTER_PORT_ENV in os.environ:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # An ephemeral port (32768 and up on Linux), so VLLM_DP_MASTER_PORT stays above 0.
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    os.environ[DP_MASTER_PORT_ENV] = str(port - TCPSTORE_PORT_OFFSET)
    return port
