"""`trilemma bench isolation`: do short requests keep their latency when long documents arrive?

One run, two deployments of the same hardware:
- split: the config as given: short and long pools, priority scheduling and admission;
  it serves the short requests alone, then the mixed load, then an overload of short chat
  and short batch requests that must shed batch work and no real-time work;
- shared: one pool holding the sum of the pools' CPUs (or GPUs), first come first served,
  serving the same mixed load.
The mixed load is one Poisson schedule of short chat prompts and long documents; the
short-only phase replays its short requests at the same send times, so the two differ only
by the long documents.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, replace
from typing import Any

from bench.arrivals import LoadShape, poisson_arrival_times
from bench.datasets import Prompt, docs_dataset
from bench.load_generator import run_load
from bench.metrics import RequestRecord, distribution_ms, summarize
from core.config import TrilemmaConfig
from core.prometheus_text import phase_latency, settled_scrape
from serve_app.launcher import deployed

SHARED_POOL = "shared"
ARMS = ("split", "shared")

# Targets of the isolation issue.
MIXED_OVER_ALONE_MAX = 1.5
SHARED_OVER_SPLIT_MIN = 3.0
THROUGHPUT_RATIO_MIN = 0.9


def shared_pool_config(config: TrilemmaConfig) -> TrilemmaConfig:
    """The baseline: every pool merged into one that holds all their CPUs or GPU shares, KV
    cache and batch slots, with first-come-first-served engines and admission."""
    raw = config.model_dump()
    pools = list(raw["pools"].values())
    if len({pool["accelerator"] for pool in pools}) > 1:
        raise ValueError("the shared-pool baseline needs pools of one accelerator type")
    env = dict(pools[0]["env"])
    kv_space = [pool["env"].get("VLLM_CPU_KVCACHE_SPACE") for pool in pools]
    if all(kv_space):
        env["VLLM_CPU_KVCACHE_SPACE"] = str(sum(int(space) for space in kv_space))
    binds = [pool["env"].get("VLLM_CPU_OMP_THREADS_BIND") for pool in pools]
    if all(binds):
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(binds)
    env.pop("VLLM_RAY_PER_WORKER_GPUS", None)  # follows the merged gpu_fraction
    resources: dict[str, float] = {}
    for pool in pools:
        for name, amount in pool["resources"].items():
            resources[name] = resources.get(name, 0.0) + amount
    engine_kwargs = {key: value for pool in pools for key, value in pool["engine_kwargs"].items()}
    engine_kwargs.pop("scheduling_policy", None)  # vLLM's default: first come, first served
    memory = [pool["engine_kwargs"].get("gpu_memory_utilization") for pool in pools]
    if all(memory):
        engine_kwargs["gpu_memory_utilization"] = round(sum(memory), 4)
    fractions = [pool["gpu_fraction"] for pool in pools]
    kv_caches = [pool.get("kv_cache_gib") for pool in pools]
    shared = {
        **pools[0],
        "role": "long",
        "max_model_len": max(pool["max_model_len"] for pool in pools),
        "max_num_seqs": sum(pool["max_num_seqs"] for pool in pools),
        "replicas": 1,
        "max_ongoing_requests": None,
        "resources": resources,
        "gpu_fraction": min(1.0, sum(fractions)) if all(fractions) else None,
        # The KV caches of both pools, as the GPU memory of both is the shared pool's.
        "kv_cache_gib": sum(kv_caches) if all(kv_caches) else None,
        "env": env,
        "engine_kwargs": engine_kwargs,
        "admission": {**pools[0]["admission"], "policy": "fifo", "max_in_engine": None,
                      "max_queued": sum(pool["admission"]["max_queued"] for pool in pools)},
    }
    raw["pools"] = {SHARED_POOL: shared}
    # Bounds and a split that name the merged pools go with them; the shared pool keeps one replica.
    raw["autoscaling"]["pools"], raw["autoscaling"]["shrink_order"] = {}, []
    raw["autoscaling"]["split"]["enabled"] = False
    for scenario in raw["scenarios"].values():
        if scenario["pools"] is not None:
            scenario["pools"] = [SHARED_POOL] if scenario["pools"] else []
    return TrilemmaConfig.from_dict(raw, source="shared-pool baseline")


@dataclass(frozen=True)
class MixedLoad:
    """Prompts in send order with their send times (s from start)."""

    prompts: list[Prompt]
    arrivals: list[float]

    def only(self, scenario: str) -> MixedLoad:
        kept = [(p, t) for p, t in zip(self.prompts, self.arrivals) if p.scenario == scenario]
        return MixedLoad([p for p, _ in kept], [t for _, t in kept])


def mixed_load(
    count: int, *, rate_rps: float, long_fraction: float, long_words: int, short_scenario: str,
    long_scenario: str, short_max_tokens: int = 64, long_max_tokens: int = 128, seed: int = 0,
    ignore_eos: bool = False,
) -> MixedLoad:
    """A Poisson stream at `rate_rps` in which each arrival is a long document with
    probability `long_fraction` (so each kind is itself a Poisson stream)."""
    rng = random.Random(seed)
    kinds = ["long" if rng.random() < long_fraction else "short" for _ in range(count)]
    shorts = iter(docs_dataset(kinds.count("short"), long_fraction=0.0, short_max_tokens=short_max_tokens,
                               seed=seed))
    longs = iter(docs_dataset(kinds.count("long"), long_fraction=1.0, long_words=long_words,
                              long_max_tokens=long_max_tokens, seed=seed + 1))
    extra = {"ignore_eos": True} if ignore_eos else {}
    prompts = [
        replace(next(longs), scenario=long_scenario, extra=extra) if kind == "long"
        else replace(next(shorts), scenario=short_scenario, extra=extra)
        for kind in kinds
    ]
    return MixedLoad(prompts, poisson_arrival_times(rate_rps, count, seed))


def warmup_load(load: MixedLoad, seconds: float) -> MixedLoad:
    """The schedule's first `seconds`, with one long document first so that every kind of
    request is among them."""
    kept = [(p, t) for p, t in zip(load.prompts, load.arrivals) if t <= seconds]
    long_first = next((p for p in load.prompts if p.kind == "long"), None)
    prompts = ([long_first] if long_first else []) + [p for p, _ in kept]
    arrivals = ([0.0] if long_first else []) + [t for _, t in kept]
    return MixedLoad(prompts, arrivals)


def overload(count: int, *, rate_rps: float, scenarios: tuple[str, str], seed: int = 0,
             ignore_eos: bool = False) -> MixedLoad:
    """Short prompts only, alternating between two scenarios, far above what one pool serves."""
    prompts = docs_dataset(count, long_fraction=0.0, seed=seed + 2)
    extra = {"ignore_eos": True} if ignore_eos else {}
    tagged = [replace(p, scenario=scenarios[i % 2], extra=extra) for i, p in enumerate(prompts)]
    return MixedLoad(tagged, poisson_arrival_times(rate_rps, count, seed + 2))


def phase_summary(records: list[RequestRecord], duration_s: float, short_scenario: str) -> dict[str, Any]:
    short = [r for r in records if r.scenario == short_scenario and r.ok]
    shed: dict[str, int] = {}
    for record in records:
        if record.error and record.error.startswith("http 429"):
            shed[record.scenario] = shed.get(record.scenario, 0) + 1
    by_scenario = {}
    for scenario in sorted({r.scenario for r in records}):
        mine = [r for r in records if r.scenario == scenario]
        by_scenario[scenario] = {"sent": len(mine), "ok": sum(r.ok for r in mine), "shed": shed.get(scenario, 0),
                                 "prompt_tokens": sum(r.prompt_tokens for r in mine if r.ok),
                                 "pools": sorted({r.pool for r in mine if r.pool})}
    return {
        "all": summarize(records, duration_s),
        "short_ttft_ms": distribution_ms([r.ttft_s for r in short if r.ttft_s is not None]),
        "short_tpot_ms": distribution_ms([r.tpot_s for r in short if r.tpot_s is not None]),
        "shed": shed,
        "scenarios": by_scenario,
    }


def _run(url: str, load: MixedLoad, *, model: str, label: str, progress: bool,
         api_key: str | None) -> tuple[list[RequestRecord], float]:
    return asyncio.run(run_load(url, load.prompts, LoadShape(concurrency=1), model=model, label=label,
                                progress=progress, api_key=api_key, arrivals=load.arrivals))


def _warm(url: str, load: MixedLoad, warmup: MixedLoad | None, *, model: str, api_key: str | None) -> None:
    """A few requests of each kind at once, then `warmup` as scheduled, none of them counted:
    a fresh engine meets each new batch shape once, slowly, and that belongs to no phase."""
    kinds = {p.scenario: p for p in load.prompts}
    prompts = [p for p in kinds.values() for _ in range(2)]
    asyncio.run(run_load(url, prompts, LoadShape(concurrency=len(prompts)), model=model,
                         progress=False, api_key=api_key))
    if warmup is not None and warmup.prompts:
        asyncio.run(run_load(url, warmup.prompts, LoadShape(concurrency=1), model=model, progress=False,
                             api_key=api_key, arrivals=warmup.arrivals))


def measure_isolation(
    config: TrilemmaConfig, load: MixedLoad, *, short_scenario: str, overload_load: MixedLoad | None,
    progress: bool = True, api_key: str | None = None, engine_cls: type | None = None,
    model_source: str | None = None, route_prefix: str = "/", metrics_url: str | None = None,
    warmup: MixedLoad | None = None, arms: tuple[str, ...] = ARMS, earlier: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Deploys the split app, then the shared one, and runs every phase; returns all figures.
    With `metrics_url` (Ray's metrics endpoint) each phase also gets the router's own TTFT
    and TPOT histograms by scenario and priority. `warmup` is served, uncounted, by each
    deployment before its first phase. `arms` runs only some deployments (a host that limits
    how long one command may run takes them in turns); `earlier`, the result of a run of the
    other arm, supplies its phases."""
    model = config.default_model
    phases: dict[str, dict[str, Any]] = dict((earlier or {}).get("phases", {}))
    records: dict[str, list[dict[str, Any]]] = dict((earlier or {}).get("records", {}))

    scraped: list[str | None] = [None]

    def run_phase(name: str, url: str, phase_load: MixedLoad) -> None:
        batch, duration = _run(url, phase_load, model=model, label=name, progress=progress, api_key=api_key)
        phases[name] = phase_summary(batch, duration, short_scenario)
        records[name] = [r.to_dict() for r in batch]
        after = settled_scrape(metrics_url)
        phases[name]["server"] = phase_latency(scraped[0], after)
        scraped[0] = after

    configs = {"split": config, "shared": shared_pool_config(config)}
    for arm in arms:
        arm_config = configs[arm]
        with deployed(arm_config, engine_cls=engine_cls, model_source=model_source, route_prefix=route_prefix) as url:
            _warm(url, load, warmup, model=model, api_key=api_key)
            scraped[0] = settled_scrape(metrics_url)  # the warm-up's requests are not the phase's
            if arm == "split":
                run_phase("split_short_only", url, load.only(short_scenario))
            run_phase(f"{arm}_mixed", url, load)
            if arm == "split" and overload_load is not None:
                run_phase("split_overload", url, overload_load)
    return {**compare(phases, short_scenario), "phases": phases, "records": records}


def compare(phases: dict[str, dict[str, Any]], short_scenario: str) -> dict[str, Any]:
    missing = [name for name in ("split_short_only", "split_mixed", "shared_mixed") if name not in phases]
    if missing:
        return {"ratios": {}, "targets": {}, "meets_targets": None,
                "incomplete": f"no {', '.join(missing)} yet: run the other arm with --with this file"}
    alone, split, shared = (phases[name]["short_ttft_ms"]["p99"]
                            for name in ("split_short_only", "split_mixed", "shared_mixed"))
    split_tps = phases["split_mixed"]["all"]["total_token_throughput_tps"]
    shared_tps = phases["shared_mixed"]["all"]["total_token_throughput_tps"]
    mixed = phases["split_mixed"]["scenarios"]
    prompt_tokens = sum(figures["prompt_tokens"] for figures in mixed.values())
    ratios = {
        "long_prompt_token_share": 1 - mixed.get(short_scenario, {}).get("prompt_tokens", 0) / max(prompt_tokens, 1),
        "mixed_over_alone_p99": split / alone,
        "shared_over_split_p99": shared / split,
        "throughput_split_over_shared": split_tps / shared_tps,
        "output_throughput_split_over_shared": (phases["split_mixed"]["all"]["output_token_throughput_tps"]
                                                / phases["shared_mixed"]["all"]["output_token_throughput_tps"]),
    }
    targets = {
        "mixed_within_1.5x_of_alone": ratios["mixed_over_alone_p99"] <= MIXED_OVER_ALONE_MAX,
        "3x_better_than_shared": ratios["shared_over_split_p99"] >= SHARED_OVER_SPLIT_MIN,
        "throughput_at_least_0.9x": ratios["throughput_split_over_shared"] >= THROUGHPUT_RATIO_MIN,
    }
    overload_phase = phases.get("split_overload")
    if overload_phase is not None:
        shed = overload_phase["shed"]
        others = sum(count for scenario, count in shed.items() if scenario != short_scenario)
        targets["no_real_time_shed_while_batch_shed"] = others > 0 and shed.get(short_scenario, 0) == 0
    return {"ratios": ratios, "targets": targets, "meets_targets": all(targets.values())}


def markdown(result: dict[str, Any]) -> str:
    phases = result["phases"]
    names = [name for name in ("split_short_only", "split_mixed", "shared_mixed", "split_overload") if name in phases]
    titles = {"split_short_only": "split, short alone", "split_mixed": "split + priority, mixed",
              "shared_mixed": "one shared pool (FCFS), mixed", "split_overload": "split, overload"}

    def cells(phase: dict[str, Any]) -> list[str]:
        ttft, tpot, every = phase["short_ttft_ms"], phase["short_tpot_ms"], phase["all"]
        shed = ", ".join(f"{k} {v}" for k, v in sorted(phase["shed"].items())) or "none"
        return [f"{ttft['p50']:.0f}", f"{ttft['p99']:.0f}", f"{tpot['p50']:.1f}", f"{tpot['p99']:.1f}",
                f"{every['total_token_throughput_tps']:.0f}", f"{every['output_token_throughput_tps']:.1f}",
                f"{every['succeeded']}/{every['requests']}", shed]

    header = ("| phase | short TTFT p50 (ms) | short TTFT p99 (ms) | short TPOT p50 (ms) | short TPOT p99 (ms) "
              "| total tok/s | output tok/s | ok/sent | shed (429) by scenario |")
    rows = [header, "|" + " --- |" * 9] + [
        "| " + " | ".join([titles[name], *cells(phases[name])]) + " |" for name in names
    ]
    server_rows = [
        f"| {titles[name]} | {key} | {figures.get('ttft_p50_ms', math.nan):.0f} | "
        f"{figures.get('ttft_p99_ms', math.nan):.0f} | {figures.get('tpot_p50_ms', math.nan):.1f} | "
        f"{figures.get('tpot_p99_ms', math.nan):.1f} | {figures.get('ttft_count', 0):.0f} |"
        for name in names for key, figures in sorted((phases[name].get("server") or {}).items())
    ]
    if server_rows:
        rows += ["", "The router's own histograms (`trilemma_ttft_seconds`, `trilemma_tpot_seconds`), "
                     "interpolated within buckets:", "",
                 "| phase | scenario/priority | TTFT p50 (ms) | TTFT p99 (ms) | TPOT p50 (ms) | TPOT p99 (ms) | requests |",
                 "|" + " --- |" * 7, *server_rows]
    if result.get("incomplete"):
        return "\n".join(rows) + f"\n\n- Ratios: {result['incomplete']}.\n"
    ratios, targets = result["ratios"], result["targets"]

    def verdict(key: str) -> str:
        return "met" if targets[key] else "missed"

    lines = [
        "\n".join(rows), "",
        f"- Short p99 TTFT, mixed / alone: {ratios['mixed_over_alone_p99']:.2f} "
        f"(target <= {MIXED_OVER_ALONE_MAX}): {verdict('mixed_within_1.5x_of_alone')}.",
        f"- Short p99 TTFT, shared pool / split: {ratios['shared_over_split_p99']:.2f} "
        f"(target >= {SHARED_OVER_SPLIT_MIN}): {verdict('3x_better_than_shared')}.",
        f"- Total tokens/s, split / shared: {ratios['throughput_split_over_shared']:.3f} "
        f"(target >= {THROUGHPUT_RATIO_MIN}; output tokens/s: {ratios['output_throughput_split_over_shared']:.3f}): "
        f"{verdict('throughput_at_least_0.9x')}.",
    ]
    if "no_real_time_shed_while_batch_shed" in targets:
        lines.append(f"- Overload: no real-time request shed while batch requests were: "
                     f"{verdict('no_real_time_shed_while_batch_shed')}.")
    lines.append(f"- Long documents' share of the mixed load's prompt tokens: {ratios['long_prompt_token_share']:.0%}.")
    return "\n".join(lines) + "\n"
