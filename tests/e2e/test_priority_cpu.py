"""The real engine schedules by the scenario's priority (vLLM's `scheduling_policy="priority"`).

Eight batch requests fill the short pool's eight running slots, finishing one after another;
four more batch requests and then one chat request wait inside the engine (the replica hands
its engine up to 16). The first freed slot goes to the chat request although it came last:
with first-come-first-served scheduling it would start fifth.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"


async def _first_token_at(client: httpx.AsyncClient, scenario: str, max_tokens: int, *, after_s: float) -> float:
    await asyncio.sleep(after_s)
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Count to {max_tokens}."}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    first = None
    async with client.stream("POST", f"/api/{scenario}", json=body) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["x-trilemma-pool"] == "short"
        async for line in response.aiter_lines():  # to the end: the request holds its slot till then
            if first is None and line.startswith("data: {") and _has_text(json.loads(line[6:])):
                first = time.monotonic()
    assert first is not None, f"{scenario} request streamed no text"
    return first


def _has_text(event: dict) -> bool:
    return any((choice.get("delta") or {}).get("content") for choice in event.get("choices", []))


async def test_a_late_chat_request_starts_before_waiting_batch_requests(base_url, api_key):
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=300) as client:
        # At about 15 tokens/s each, the shortest runs for 10 s or more, long after the chat arrives.
        running = [_first_token_at(client, "batch", 160 + 20 * i, after_s=0) for i in range(8)]
        waiting = [_first_token_at(client, "batch", 8, after_s=2.0) for _ in range(4)]
        chat = _first_token_at(client, "chat", 8, after_s=3.0)
        first_tokens = await asyncio.gather(*running, *waiting, chat)
    batch_waiting, chat_first = first_tokens[8:12], first_tokens[12]
    # The chat request arrived a second after the waiting batch requests, and starts first.
    assert chat_first < min(batch_waiting), [round(t - chat_first, 2) for t in batch_waiting]
