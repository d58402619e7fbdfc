"""Requests to the running app, as the lowest-priority scenario, paced by the request gate.

A 429 from an overloaded pool (or from Serve's own backpressure) is the app asking the job to
give way: the gate shrinks and pauses, and the request waits its turn again, however often.
Server errors and lost connections are retried a few times; anything else is the document's
failure, with the app's message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from core import wire
from jobs.summarize.concurrency import Load
from jobs.summarize.latency_signal import LatencyWatch
from jobs.summarize.mapreduce import Completion
from jobs.summarize.pool_load import SEVERITY, job_load, parse_pools
from jobs.summarize.prompts import Messages
from jobs.summarize.request_gate import RequestGate

logger = logging.getLogger(__name__)

RETRY_BACKOFF_S = 1.0
DEFAULT_RETRY_AFTER_S = 1.0


class AppUnavailable(Exception):
    """No app answers at the URL, or it serves another model: nothing can be sent."""


def check_app(url: str, model: str, api_key: str | None, timeout_s: float = 10.0) -> None:
    """Asks the app for its models once, before the job starts Ray Data."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{url.rstrip('/')}/v1/models", headers=headers, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise AppUnavailable(
            f"no app answers at {url} ({type(error).__name__}: {error}); start one (`make serve`), "
            "point --url at it, or run with --mode engine"
        ) from None
    if response.status_code != 200:
        raise AppUnavailable(f"{url}/v1/models answered HTTP {response.status_code}: {response.text[:200]}")
    served = [card.get("id") for card in response.json().get("data", [])]
    if model not in served:
        raise AppUnavailable(f"the app at {url} serves {served}, not model.name {model!r}")


class RequestFailed(Exception):
    """A request that will not succeed by repeating it now; the message says why."""


@dataclass(frozen=True)
class ServeSettings:
    url: str
    model: str
    scenario: str = "batch"
    pool: str | None = None
    api_key: str | None = None
    max_tokens: int = 128
    temperature: float = 0.0
    timeout_s: float = 600.0
    max_attempts: int = 4


class ServeClient:
    def __init__(self, settings: ServeSettings, gate: RequestGate, http: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self.gate = gate
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        if settings.pool:
            headers[wire.POOL_HEADER] = settings.pool
        self._http = http or httpx.AsyncClient(
            base_url=settings.url.rstrip("/"), headers=headers, timeout=settings.timeout_s,
            # The gate decides how many requests are in flight; the pool must never be the limit.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.pools_used: set[str] = {settings.pool} if settings.pool else set()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(self, messages: Messages, document_id: str) -> Completion:
        body = {
            "model": self.settings.model, "messages": messages, "stream": False,
            "max_tokens": self.settings.max_tokens, "temperature": self.settings.temperature,
        }
        path = f"/api/{self.settings.scenario}/chat/completions"
        headers = {wire.BATCH_DOCUMENT_HEADER: quote(document_id, safe="")}
        failures = 0
        while True:
            async with self.gate.slot() as ticket:
                try:
                    response = await self._http.post(path, json=body, headers=headers)
                except httpx.HTTPError as error:
                    problem = f"request failed: {type(error).__name__}: {error}"
                else:
                    if response.status_code == 200:
                        await self.gate.succeeded(ticket)
                        return self._completion(response)
                    if response.status_code == 429 and _is_overload(response):
                        await self.gate.overloaded(ticket, _retry_after(response))
                        continue  # waited out in the gate; never counted against the document
                    problem = _describe(response)
                    if not _retryable(response):
                        raise RequestFailed(problem)
            failures += 1
            if failures >= self.settings.max_attempts:
                raise RequestFailed(f"{problem} (after {failures} attempts)")
            logger.warning("retrying a request of %s: %s", document_id, problem)
            await asyncio.sleep(RETRY_BACKOFF_S * 2 ** (failures - 1))

    def _completion(self, response: httpx.Response) -> Completion:
        content = response.json()
        usage = content.get("usage") or {}
        pool = response.headers.get(wire.POOL_HEADER)
        if pool:
            self.pools_used.add(pool)
        choice = (content.get("choices") or [{}])[0]
        return Completion(
            text=(choice.get("message") or {}).get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cost_usd=usage.get("cost_usd"),
            pool=pool,
        )

    async def watch_service(self, interval_s: float, latency: LatencyWatch | None = None) -> None:
        """Every `interval_s`, reads the pools' queues (and the online latency, when watched)
        and tells the gate the worst of what they show; runs until cancelled. A source that
        cannot give a reading (an app without queue figures) is not asked again."""
        pools_readable = True
        while pools_readable or latency is not None:
            readings: list[tuple[Load, str]] = []
            if pools_readable:
                pools = await self._get_json(wire.POOLS_PATH)
                parsed = parse_pools(pools) if pools is not None else None
                if pools is not None and parsed is None:
                    logger.info("the app reports no pool queues; pacing by 429s%s", " and latency" if latency else "")
                    pools_readable = False
                elif parsed is not None:
                    readings.append(job_load(parsed, self.pools_used))
            if latency is not None:
                text = await self._get_text(latency.metrics_url)
                reading = latency.reading(text) if text is not None else None
                if reading is not None:
                    readings.append(reading)
            if readings:
                worst = max(readings, key=lambda item: SEVERITY[item[0]])
                await self.gate.observed(worst[0], "; ".join(detail for _, detail in readings if detail))
            await asyncio.sleep(interval_s)

    async def _get_json(self, path: str) -> Any | None:
        """A JSON answer, or None for a missed reading (the next may do)."""
        try:
            response = await self._http.get(path, timeout=10)
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    async def _get_text(self, url: str) -> str | None:
        try:
            response = await self._http.get(url, timeout=10)
            return response.text if response.status_code == 200 else None
        except httpx.HTTPError:
            return None

def _error(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _is_overload(response: httpx.Response) -> bool:
    """A pool's queue (code pool_overloaded) or Serve's proxy backpressure (no OpenAI body);
    a tenant over its daily budget is not worth waiting for within a run."""
    code = _error(response).get("code")
    return code in (None, "pool_overloaded")


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", DEFAULT_RETRY_AFTER_S)))
    except ValueError:  # an HTTP date: not worth parsing for a pause this short
        return DEFAULT_RETRY_AFTER_S


def _retryable(response: httpx.Response) -> bool:
    if response.status_code in (502, 504):
        return True
    return response.status_code == 503 and _error(response).get("code") != "no_provider"


def _describe(response: httpx.Response) -> str:
    message = _error(response).get("message") or response.text[:300]
    return f"HTTP {response.status_code}: {' '.join(str(message).split())}"
