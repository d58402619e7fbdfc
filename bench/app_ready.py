"""Waiting for a running app to serve before a long benchmark loads it.

The router answers `/v1/models` as soon as it is up, while the pools' engines may still be
starting for minutes; a load sent then is answered 503 and counted as errors. The benchmarks
that load an app started elsewhere (`soak`, `chaos`) wait until every pool has a replica.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import httpx

from core import wire

POLL_S = 5.0


def pools_not_serving(pools: dict[str, Any]) -> list[str]:
    """The pools with no replica that answers (one still starting is not listed)."""
    return sorted(name for name, pool in pools.items() if not pool["replicas"])


def wait_until_serving(
    url: str, timeout_s: float, say: Callable[[str], None] = print, *, poll_s: float | None = None,
    alive: Callable[[], bool] = lambda: True,
) -> str:
    """The app's model, once it answers and every pool serves (an app just started is waited
    for too); a ValueError that names what is missing when nothing answers or a pool has no
    replica within `timeout_s`, or once `alive` (the process serving it) says it ended."""
    base = url.rstrip("/")
    deadline = time.monotonic() + timeout_s
    said: str | None = None
    while True:
        model, missing = _model_and_missing(base)
        if model is not None and not missing:
            return model
        if time.monotonic() >= deadline:
            raise ValueError(f"{missing} within the ready timeout of {timeout_s:g} s at {url}")
        if not alive():
            raise ValueError(f"the app ended before it served: {missing}")
        if missing != said:
            say(f"waiting: {missing} (up to {timeout_s:g} s) ...")
            said = missing
        time.sleep(POLL_S if poll_s is None else poll_s)


def _model_and_missing(base: str) -> tuple[str | None, str | None]:
    """The app's model and what it still lacks (None once it serves). An endpoint without the
    pools path (plain vLLM) serves once it answers; an app whose pools path fails is starting:
    the router answers before its pools do."""
    try:
        model = httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as error:
        return None, f"no app answers /v1/models: {error}"
    try:
        response = httpx.get(f"{base}{wire.POOLS_PATH}", timeout=30)
    except httpx.HTTPError as error:
        return model, f"the pools do not answer {wire.POOLS_PATH}: {error!r}"
    if response.status_code == 404:
        return model, None
    if response.status_code != 200:
        return model, f"the pools do not answer {wire.POOLS_PATH} (HTTP {response.status_code})"
    missing = pools_not_serving(response.json()["pools"])
    return model, f"pools {missing} have no replica serving" if missing else None
