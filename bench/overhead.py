"""`trilemma bench overhead`: what the router adds over going straight to a pool's engine.

Two paths to the same engine replica, measured in one run:
- direct: Ray Serve LLM's stock OpenAI ingress bound to the pool's deployment, the
  shortest HTTP path to that engine Serve offers (the `trilemma-direct` app at /direct);
- router: our router, which also counts prompt tokens, applies the scenario and routes.
Rounds alternate direct/router/router/direct (ABBA), so drift in the machine's speed
falls on both arms alike. Both arms of a pair send the same prompts, and the pool's prefix
cache is turned off so that the second arm does not find the first one's prompts cached.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import replace
from typing import Any
from urllib.parse import urljoin

from ray import serve
from ray.serve.deployment import Application
from ray.serve.handle import DeploymentHandle

from bench.arrivals import LoadShape
from bench.datasets import Prompt, random_dataset
from bench.load_generator import run_load
from bench.metrics import RequestRecord, summarize
from bench.sweep import Knob
from core.config import TrilemmaConfig
from core.model_store import resolve_model_source
from core.upstream import OpenAiIngress, make_fastapi_ingress, to_model_metadata
from core.wire import deployment_name
from pool.deployment import llm_config_for_pool
from serve_app.launcher import deployed

DIRECT_APP = "trilemma-direct"
DIRECT_PREFIX = "/direct"
ARMS = ("direct", "router")


def build_direct_ingress(config: TrilemmaConfig, pool: str, model_source: str) -> Application:
    """Ray's OpenAiIngress over the pool deployment the running app already has."""
    model = config.pool_model(pool)
    llm_config = llm_config_for_pool(pool, config.pools[pool], model, model_source)
    card = to_model_metadata(model.name, llm_config)
    ingress = serve.deployment(
        make_fastapi_ingress(OpenAiIngress),
        name="direct-ingress",
        max_ongoing_requests=config.router.max_ongoing_requests,
        ray_actor_options={"num_cpus": config.router.num_cpus},
    )
    pool_handle = DeploymentHandle(deployment_name(pool), app_name=config.app_name)
    return ingress.bind(llm_deployments={card.id: pool_handle}, model_cards={card.id: card})


def overhead_prompts(count: int, *, seed: int, max_tokens: int) -> list[Prompt]:
    """Prompts every pool takes (at most ~256 words), each generating exactly `max_tokens`."""
    prompts = random_dataset(count, min_words=32, max_words=256, max_tokens=max_tokens, seed=seed)
    return [replace(p, extra={"ignore_eos": True}) for p in prompts]


def compare(arm_records: dict[str, list[RequestRecord]], arm_seconds: dict[str, float],
            round_throughput: dict[str, list[float]]) -> dict[str, Any]:
    """The figures the issue asks for, and whether they meet its targets."""
    summaries = {arm: summarize(arm_records[arm], arm_seconds[arm]) for arm in ARMS}
    direct, router = summaries["direct"], summaries["router"]
    added_p50 = router["ttft_ms"]["p50"] - direct["ttft_ms"]["p50"]
    added_p99 = router["ttft_ms"]["p99"] - direct["ttft_ms"]["p99"]
    allowed_p50 = max(5.0, 0.03 * direct["ttft_ms"]["p50"])
    ratio = router["output_token_throughput_tps"] / direct["output_token_throughput_tps"]
    per_round = [r / d for d, r in zip(round_throughput["direct"], round_throughput["router"])]
    return {
        "summaries": summaries,
        "added_ttft_p50_ms": added_p50,
        "added_ttft_p99_ms": added_p99,
        "added_ttft_p50_allowed_ms": allowed_p50,
        "added_tpot_p50_ms": router["tpot_ms"]["p50"] - direct["tpot_ms"]["p50"],
        "throughput_ratio": ratio,
        "throughput_ratio_round_median": statistics.median(per_round),
        "meets_targets": added_p50 <= allowed_p50 and ratio >= 0.95,
    }


def measure_overhead(
    config: TrilemmaConfig, *, pool: str, num_prompts: int, rounds: int, concurrency: int,
    warmup: int, max_tokens: int = 64, seed: int = 0, progress: bool = True,
    engine_cls: type | None = None, model_source: str | None = None, route_prefix: str = "/",
    api_key: str | None = None,
) -> dict[str, Any]:
    """Deploys the app and the direct ingress, runs the ABBA rounds, tears both down."""
    config = Knob(f"pools.{pool}.engine_kwargs.enable_prefix_caching").apply(config, False)
    # The pool's own model: the direct ingress serves it, and both arms are asked for it.
    model = config.pool_model(pool).name
    source = model_source or resolve_model_source(config.pool_model(pool).source)
    shape = LoadShape(concurrency=concurrency)
    records: dict[str, list[RequestRecord]] = {arm: [] for arm in ARMS}
    seconds = {arm: 0.0 for arm in ARMS}
    round_throughput: dict[str, list[float]] = {arm: [] for arm in ARMS}
    misrouted = 0
    with deployed(config, engine_cls=engine_cls, model_source=model_source, route_prefix=route_prefix) as url:
        serve.run(build_direct_ingress(config, pool, source), name=DIRECT_APP, route_prefix=DIRECT_PREFIX)
        try:
            urls = {"direct": urljoin(url + "/", DIRECT_PREFIX), "router": url}
            for arm in ARMS:
                asyncio.run(run_load(urls[arm], overhead_prompts(warmup, seed=seed - 1, max_tokens=max_tokens),
                                     LoadShape(concurrency=warmup), model=model, progress=False,
                                     api_key=api_key))
            for index in range(rounds):
                prompts = overhead_prompts(num_prompts, seed=seed + index, max_tokens=max_tokens)
                order = ARMS if index % 2 == 0 else tuple(reversed(ARMS))
                for arm in order:
                    batch, duration = asyncio.run(run_load(
                        urls[arm], prompts, shape, model=model, progress=progress,
                        label=f"round {index + 1} {arm}", api_key=api_key,
                    ))
                    records[arm] += batch
                    seconds[arm] += duration
                    round_throughput[arm].append(sum(r.completion_tokens for r in batch if r.ok) / duration)
                    if arm == "router":
                        misrouted += sum(r.pool not in (None, pool) for r in batch)
        finally:
            serve.delete(DIRECT_APP, _blocking=True)
    comparison = compare(records, seconds, round_throughput)
    return {
        **comparison,
        "misrouted": misrouted,
        "records": {arm: [r.to_dict() for r in records[arm]] for arm in ARMS},
    }


def markdown(result: dict[str, Any]) -> str:
    d, r = result["summaries"]["direct"], result["summaries"]["router"]
    rows = [
        ("TTFT p50 (ms)", d["ttft_ms"]["p50"], r["ttft_ms"]["p50"]),
        ("TTFT p99 (ms)", d["ttft_ms"]["p99"], r["ttft_ms"]["p99"]),
        ("TPOT p50 (ms)", d["tpot_ms"]["p50"], r["tpot_ms"]["p50"]),
        ("TPOT p99 (ms)", d["tpot_ms"]["p99"], r["tpot_ms"]["p99"]),
        ("E2E p50 (ms)", d["e2e_ms"]["p50"], r["e2e_ms"]["p50"]),
        ("output tokens/s", d["output_token_throughput_tps"], r["output_token_throughput_tps"]),
        ("requests ok/sent", f"{d['succeeded']}/{d['requests']}", f"{r['succeeded']}/{r['requests']}"),
    ]
    table = "| | direct to pool | through router |\n| --- | --- | --- |\n" + "\n".join(
        f"| {name} | {a:.1f} | {b:.1f} |" if isinstance(a, float) else f"| {name} | {a} | {b} |"
        for name, a, b in rows
    )
    verdict = "meets" if result["meets_targets"] else "misses"
    return (
        f"{table}\n\n"
        f"- Added TTFT p50: {result['added_ttft_p50_ms']:+.1f} ms "
        f"(allowed {result['added_ttft_p50_allowed_ms']:.1f} ms = max(5 ms, 3% of direct)); "
        f"added TTFT p99: {result['added_ttft_p99_ms']:+.1f} ms.\n"
        f"- Throughput ratio router/direct: {result['throughput_ratio']:.3f} pooled, "
        f"{result['throughput_ratio_round_median']:.3f} median of rounds (target >= 0.95).\n"
        f"- Requests the router sent to another pool: {result['misrouted']}.\n"
        f"- Verdict: {verdict} the targets.\n"
    )
