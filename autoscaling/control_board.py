"""Where the autoscaler leaves what others must see: its state (to survive a controller
restart), its recent decisions (for `trilemma autoscale explain`), the cost profile and the
traffic split's routing threshold (for the routers) and each pool's engine concurrency (for the
pool replicas); and what the pools leave for the routers: how long their replicas take to start.

Ray's internal KV store lives in the GCS, not in the Serve controller, so it outlives a
controller restart and every process of the cluster can read it. Values are JSON.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

KV_NAMESPACE = "trilemma"


def state_key(app: str, pool: str) -> str:
    return f"autoscale/{app}/{pool}/state"


def decisions_key(app: str, pool: str) -> str:
    return f"autoscale/{app}/{pool}/decisions"


def concurrency_key(app: str, pool: str) -> str:
    return f"autoscale/{app}/{pool}/max_in_engine"


def cost_profile_key(app: str) -> str:
    return f"autoscale/{app}/cost_profile"


def split_key(app: str) -> str:
    """The traffic split: the routing threshold in force, why, and the split's state."""
    return f"autoscale/{app}/split"


def replica_start_key(app: str, pool: str) -> str:
    """How long the pool's last replica took from construction to serving."""
    return f"pools/{app}/{pool}/replica_start"


class ControlBoard(Protocol):
    def get(self, key: str) -> Any | None: ...

    def put(self, key: str, value: Any) -> None: ...


class RayControlBoard:
    """The board in Ray's internal KV store; needs a connected Ray (any worker is)."""

    def get(self, key: str) -> Any | None:
        from ray.experimental.internal_kv import _internal_kv_get

        raw = _internal_kv_get(key.encode(), namespace=KV_NAMESPACE)
        return json.loads(raw) if raw else None

    def put(self, key: str, value: Any) -> None:
        from ray.experimental.internal_kv import _internal_kv_put

        _internal_kv_put(key.encode(), json.dumps(value), overwrite=True, namespace=KV_NAMESPACE)


class MemoryControlBoard:
    """The board in a dict: for tests and the simulator, which run the policy without Ray."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str) -> Any | None:
        raw = self.values.get(key)
        return json.loads(raw) if raw is not None else None

    def put(self, key: str, value: Any) -> None:
        self.values[key] = json.dumps(value)  # stored as text, as Ray's would be: no shared objects
