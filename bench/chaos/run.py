"""Runs faults under steady chat load on a running app and counts what clients saw.

Per fault: requests sent after it, answered, failed (and with what), hung (no answer within
the hang limit), seconds from the fault until the pool serves again, the vLLM engine
processes before and after (orphans: engines whose replica is gone), and the requests the
pools still hold once the load is over (leaked slots).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from bench.chaos.faults import Fault, FaultNotPossible, Target
from bench.datasets import Prompt
from bench.load_generator import send_one
from bench.metrics import RequestRecord, percentile
from bench.pool_activity import held_once_released
from bench.result_files import fmt
from core import wire
from engine.processes import engine_processes, orphaned_engines

CHAT = Prompt(messages=[{"role": "user", "content": "Name three colours of the rainbow."}],
              max_tokens=24, kind="short", scenario="chat")
PROBE_INTERVAL_S = 2.0


@dataclass
class FaultResult:
    fault: str
    action: str
    sent_after: int = 0
    answered_after: int = 0
    failed_after: dict[str, int] = field(default_factory=dict)  # first words of the error -> count
    # Of those, the requests sent after the fault (none in flight when it struck).
    sent_later: int = 0
    answered_later: int = 0
    hung: int = 0
    seconds_to_serving: float | None = None  # from the fault to the pool's first answer after it
    # How long the pool's replica serving now took to start, as it published it: the target for
    # seconds_to_serving is this + 10 s when the fault replaced it.
    replica_start_s: float | None = None
    e2e_p50_s_before: float | None = None
    e2e_p99_s_after: float | None = None
    engines_before: int = 0
    engines_after: int = 0
    orphaned_engines_after: int = 0
    # Per pool: requests still held once the load is over (None: the app no longer answers).
    held_after: dict[str, int] | None = None
    error_samples: list[str] = field(default_factory=list)


class SteadyLoad:
    """Chat requests at a fixed rate until stopped, each recorded as the client saw it."""

    def __init__(self, target: Target, rate_rps: float, hang_s: float) -> None:
        self._target = target
        self._interval_s = 1.0 / rate_rps
        self._hang_s = hang_s
        self.started_at = time.perf_counter()
        self._tasks: list[asyncio.Task] = []
        self._sending: asyncio.Task | None = None

    async def __aenter__(self) -> SteadyLoad:
        timeout = aiohttp.ClientTimeout(total=self._hang_s)
        self._session = aiohttp.ClientSession(self._target.url.rstrip("/") + "/",
                                              connector=aiohttp.TCPConnector(limit=0), timeout=timeout)
        self._sending = asyncio.create_task(self._send())
        return self

    async def _send(self) -> None:
        while True:
            self._tasks.append(asyncio.create_task(
                send_one(self._session, CHAT, self._target.model, self.started_at)))
            await asyncio.sleep(self._interval_s)

    def stop_sending(self) -> None:
        if self._sending is not None:
            self._sending.cancel()

    async def __aexit__(self, *exc: object) -> None:
        if self._sending is not None:
            self._sending.cancel()
        await self._session.close()

    async def finish(self) -> list[RequestRecord]:
        """Stops sending and waits for every request in flight (each ends by the hang limit)."""
        self._sending.cancel()
        return list(await asyncio.gather(*self._tasks))


async def pool_serves(target: Target) -> bool:
    body = {"model": target.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async with session.post(f"{target.url.rstrip('/')}/v1/chat/completions", json=body,
                                    headers={wire.POOL_HEADER: target.pool}) as response:
                return response.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return False


async def run_fault(
    fault: Fault, target: Target, *, rate_rps: float, before_s: float, settle_s: float,
    recover_timeout_s: float, hang_s: float,
) -> FaultResult:
    # Each fault starts from a pool that serves: not an app still starting (`/v1/models` answers
    # before its engines do), nor the previous fault's replacement.
    deadline = time.perf_counter() + recover_timeout_s
    while not await pool_serves(target):
        if time.perf_counter() > deadline:
            return FaultResult(fault.name, f"not run: pool {target.pool} did not serve within {recover_timeout_s:.0f} s")
        await asyncio.sleep(PROBE_INTERVAL_S)
    engines_before = len(engine_processes())
    async with SteadyLoad(target, rate_rps, hang_s) as load:
        await asyncio.sleep(before_s)
        fault_at = time.perf_counter() - load.started_at
        if not fault.pool_comes_back:  # the app is going away: what counts is what it held
            load.stop_sending()
        try:
            action = await fault.inject(target)
        except FaultNotPossible as error:
            return FaultResult(fault.name, f"not run: {error}")
        back_s = None
        if fault.pool_comes_back:
            deadline = time.perf_counter() + recover_timeout_s
            while time.perf_counter() < deadline:
                if await pool_serves(target):
                    back_s = time.perf_counter() - load.started_at - fault_at
                    break
                await asyncio.sleep(PROBE_INTERVAL_S)
        await asyncio.sleep(settle_s)
        records = await load.finish()
    result = summarize(fault.name, action, records, fault_at, back_s, hang_s, engines_before)
    result.held_after = await held_once_released(target.url)
    if fault.pool_comes_back:
        result.replica_start_s = await asyncio.to_thread(replica_start_s, target)
    return result


def replica_start_s(target: Target) -> float | None:
    """The start time the pool's serving replica published on the control board (None when
    Ray cannot be reached from here)."""
    from autoscaling.control_board import RayControlBoard, replica_start_key
    from serve_app.ray_driver import init_ray

    try:
        init_ray(address="auto", ignore_reinit_error=True, log_to_driver=False)
        return (RayControlBoard().get(replica_start_key(target.app, target.pool)) or {}).get("start_s")
    except Exception:  # noqa: BLE001 - the report says "-" rather than fail the run
        return None



def summarize(
    fault: str, action: str, records: list[RequestRecord], fault_at: float, back_s: float | None,
    hang_s: float, engines_before: int,
) -> FaultResult:
    before = [r for r in records if r.started_s < fault_at]
    after = [r for r in records if r.started_s >= fault_at or r.started_s + r.e2e_s >= fault_at]
    result = FaultResult(
        fault, action, sent_after=len(after), answered_after=sum(r.ok for r in after),
        sent_later=sum(r.started_s >= fault_at for r in after),
        answered_later=sum(r.ok and r.started_s >= fault_at for r in after),
        hung=sum(r.e2e_s >= hang_s * 0.99 for r in after), seconds_to_serving=back_s,
        engines_before=engines_before, engines_after=len(engine_processes()),
        orphaned_engines_after=len(orphaned_engines()),
    )
    ok_before = [r.e2e_s for r in before if r.ok]
    ok_after = [r.e2e_s for r in after if r.ok]
    result.e2e_p50_s_before = percentile(ok_before, 50) if ok_before else None
    result.e2e_p99_s_after = percentile(ok_after, 99) if ok_after else None
    for record in after:
        if record.error:
            kind = " ".join(record.error.split()[:4])
            result.failed_after[kind] = result.failed_after.get(kind, 0) + 1
            if len(result.error_samples) < 5:
                result.error_samples.append(record.error[:300])
    return result


def markdown(results: list[FaultResult], meta: dict[str, Any]) -> str:
    lines = [
        f"# {meta['name']}\n",
        f"Command: `{meta['command']}`\n",
        f"Steady chat load at {meta['rate_rps']} req/s on {meta['url']} (pool under fault: "
        f"{meta['pool']}); a request with no answer within {meta['hang_s']:.0f} s counts as hung.\n",
        "| fault | sent after | answered | failed | hung | s to serving | replica start (s) "
        "| E2E p50 before / p99 after (s) | engines before/after | orphans | held after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        failed = ", ".join(f"{count} {kind}" for kind, count in r.failed_after.items()) or "0"
        held = "app gone" if r.held_after is None else sum(r.held_after.values())
        lines.append(
            f"| {r.fault} | {r.sent_after} | {r.answered_after} | {failed} | {r.hung} "
            f"| {fmt(r.seconds_to_serving, 0)} | {fmt(r.replica_start_s, 0)} "
            f"| {fmt(r.e2e_p50_s_before)} / {fmt(r.e2e_p99_s_after)} "
            f"| {r.engines_before}/{r.engines_after} | {r.orphaned_engines_after} | {held} |"
        )
    lines.append("\nWhat each fault did:\n")
    lines += [f"- **{r.fault}**: {r.action}" for r in results]
    samples = [(r.fault, sample) for r in results for sample in r.error_samples]
    if samples:
        lines.append("\nErrors clients saw (samples):\n")
        lines += [f"- {fault}: `{sample}`" for fault, sample in samples]
    return "\n".join(lines) + "\n"


def to_json(results: list[FaultResult], meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta, "faults": [asdict(r) for r in results]}
