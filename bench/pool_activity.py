"""Pool utilization and provisioned cost over a run, from the engines' own busy clocks.

The app answers `GET /trilemma/pools` with every replica's cumulative busy and wall time;
two readings, one before and one after a run, give each pool's busy fraction and what its
replicas cost over the window, busy and idle. Other endpoints (a plain `vllm serve`) have
no such clock, and their utilization is reported as unknown rather than guessed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from core import wire

# Once a load is over, how long the pools get to let go of every request (an abort reaches the
# engine within a step or two).
RELEASE_S = 15.0


def read_pool_activity(base_url: str) -> dict[str, Any] | None:
    """One reading, or None when the endpoint has no busy clocks."""
    try:
        response = httpx.get(f"{base_url}{wire.POOLS_PATH}", timeout=30)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return response.json()["pools"]


def requests_held(pools: dict[str, Any]) -> dict[str, int]:
    """Per pool: requests its replicas still hold (admitted, waiting, and, for vLLM engines,
    unfinished in the engine). After the load is over, anything but 0 is a leak."""
    return {
        name: sum(replica.get(key) or 0 for replica in pool["replicas"]
                  for key in ("in_engine", "waiting", "engine_unfinished"))
        for name, pool in pools.items()
    }


async def held_once_released(base_url: str) -> dict[str, int] | None:
    """`requests_held` after a load, read until nothing is held or RELEASE_S passed; None when
    the app no longer answers."""
    deadline = time.perf_counter() + RELEASE_S
    while True:
        pools = await asyncio.to_thread(read_pool_activity, base_url.rstrip("/"))
        held = requests_held(pools) if pools is not None else None
        if held is None or not any(held.values()) or time.perf_counter() > deadline:
            return held
        await asyncio.sleep(1.0)


def utilization(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per pool: busy fraction, replica-seconds, and $ busy and idle between two readings.

    Only replicas present in both readings count: one that started or stopped in between
    has no window to diff (the sweep restarts the app between readings, never inside one).
    """
    if before is None or after is None:
        return None
    pools = {}
    for name, late in after.items():
        early = {r["replica"]: r for r in before.get(name, {}).get("replicas", [])}
        busy_s = wall_s = 0.0
        replicas = 0
        for replica in late["replicas"]:
            start = early.get(replica["replica"])
            if start is None:
                continue
            busy_s += replica["busy_s"] - start["busy_s"]
            wall_s += replica["wall_s"] - start["wall_s"]
            replicas += 1
        usd_per_s = late["price_usd_per_hour"] / 3600
        pools[name] = {
            "replicas": replicas,
            "busy_fraction": busy_s / wall_s if wall_s > 0 else None,
            "busy_replica_s": busy_s,
            "replica_s": wall_s,
            "busy_usd": busy_s * usd_per_s,
            "idle_usd": (wall_s - busy_s) * usd_per_s,
        }
    return pools


def capacity_cost(summary: dict[str, Any], pools: dict[str, Any] | None) -> dict[str, Any]:
    """What the pools cost over the run, whoever's requests used them, and what it bought:
    $ per 1M tokens and SLO-meeting requests per $ (the sweep's figure of merit)."""
    if not pools:
        return {"provisioned_usd": None, "provisioned_usd_per_1m_tokens": None, "good_requests_per_usd": None}
    usd = sum(pool["busy_usd"] + pool["idle_usd"] for pool in pools.values())
    tokens = summary["prompt_tokens"] + summary["completion_tokens"]
    good_requests = summary["goodput_rps"] * summary["duration_s"]
    return {
        "provisioned_usd": usd,
        "provisioned_usd_per_1m_tokens": usd / tokens * 1e6 if usd and tokens else None,
        "good_requests_per_usd": good_requests / usd if usd else None,
    }
