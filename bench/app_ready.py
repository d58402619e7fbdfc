"""Waiting for a running app to serve before a long benchmark loads it.

The router answers `/v1/models` as soon as it is up, while the pools' engines may still be
starting for minutes; a load sent then is answered 503 and counted as errors. The benchmarks
that load an app started elsewhere (`soak`, `chaos`) wait until every pool has a replica.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx

from bench.pool_activity import read_pool_activity

POLL_S = 5.0


def pools_not_serving(pools: dict[str, Any]) -> list[str]:
    """The pools with no replica that answers (one still starting is not listed)."""
    return sorted(name for name, pool in pools.items() if not pool["replicas"])


def wait_until_serving(url: str, timeout_s: float, say: Callable[[str], None] = print) -> str:
    """The app's model, once it answers and every pool serves (an app just started is waited
    for too); a ValueError that names what is missing when nothing answers or a pool has no
    replica within `timeout_s`."""
    base = url.rstrip("/")
    deadline = time.monotonic() + timeout_s
    waiting: list[str] | None = None
    while True:
        try:
            model = httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as error:
            if time.monotonic() >= deadline:
                raise ValueError(f"no app answers /v1/models at {url} within the ready timeout of "
                                 f"{timeout_s:g} s: {error}") from error
            if waiting != ["the app"]:
                say(f"waiting for the app at {url} to answer (up to {timeout_s:g} s) ...")
                waiting = ["the app"]
            time.sleep(POLL_S)
            continue
        pools = read_pool_activity(base)
        if pools is None:  # an endpoint without pools (plain vLLM): it serves once it answers
            return model
        missing = pools_not_serving(pools)
        if not missing:
            return model
        if time.monotonic() >= deadline:
            raise ValueError(f"pools {missing} had no replica serving within the ready timeout of "
                             f"{timeout_s:g} s")
        if missing != waiting:
            say(f"waiting for pools {missing} to serve (up to {timeout_s:g} s) ...")
            waiting = missing
        time.sleep(POLL_S)
