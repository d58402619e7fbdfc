"""A torch.distributed port range of its own for each pool's engines.

vLLM's Ray executor (RayExecutorV2, the GPU build's default under Ray Serve LLM) looks for its
TCPStore port from VLLM_DP_MASTER_PORT + 100 (+ 32 per local data-parallel rank) upward. An
engine without data parallelism reads both from the environment, where they default to 0:
every engine on a node starts its search at port 100, finds it free, and the second of two
engines that start together fails with EADDRINUSE once the first has bound it (vLLM issue
#53666; Ray Serve restarted the failed replica about 60 s later, on every start of the app on
an H200).

The variable must be in the pool's runtime environment, set when the app is built: in that
layout (`engine_process: ray_worker`) Ray Serve LLM creates the engine's config (where vLLM reads
it) in a Ray task of its own, which gets the pool's runtime environment and nothing of the
replica's process.

An engine under its replica (every CPU pool and by default a GPU pool) takes its torch.distributed
port from vLLM's `get_open_port`: a port the kernel picks, or, where the pool's env sets
VLLM_PORT, the first free one from there up. Pools that set it need ranges apart (as
gpu-h200.yaml's do); replicas of one such pool that start together on one node scan the same
range.
"""

from __future__ import annotations

DP_MASTER_PORT_ENV = "VLLM_DP_MASTER_PORT"
# Where vLLM's Ray executor starts its TCPStore search, past VLLM_DP_MASTER_PORT.
TCPSTORE_PORT_OFFSET = 100
# Away from vLLM's own defaults (29500 and up) and the kernel's ephemeral ports (32768 and up).
FIRST_POOL_MASTER_PORT = 30000
# Each pool's slice: room for its replicas on one node to probe past each other's ports.
PORTS_PER_POOL = 200


def dp_master_port(pool_slot: int) -> int:
    """VLLM_DP_MASTER_PORT for the engines of the `pool_slot`-th pool of the app."""
    return FIRST_POOL_MASTER_PORT + pool_slot * PORTS_PER_POOL
