"""`trilemma bench hops`: where the first token's time goes on its way through the running app,
and how the tokens after it arrive.

Every request asks the app for its timeline (`x-trilemma-timing: 1`); with the client's own
send time and the first token's arrival, the time to first token splits into named hops
(contract.request_timeline.HOPS): the proxy, the router, the call to the pool replica, its
admission queue, the engine, the replica's stream batching, the way back. The hops of one
request add up to its time to first token, so nothing is left unnamed. Beside them: the
gaps between the events the client receives (those with text, and all), between the items the
router got from the replica and between the engine's outputs as the replica got them (what of a
long gap the engine made, what the way to the router added, and what came after); each item's
own way out (replica to router, router to client); and how many tokens arrive in one burst.

The engine hop, from the replica's admission to the first output of vLLM's serving layer, is
split further by vLLM's own account of the same requests (bench.engine_stats, from the app's
metrics): the serving layer's work before vLLM stamps the request's arrival and after its first
token (the output's formatting), vLLM's front end (in vLLM 0.29 the chat template and
tokenization too, input processing, the way to the engine core and back), the engine core's
queue and the prefill. Those are means, as the counters give them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from bench import machine
from bench.app_ready import wait_until_serving
from bench.arrivals import LoadShape
from bench.cli_common import add_api_key_arg, add_output_args, command_line, fail, shown_path
from bench.datasets import random_dataset
from bench.engine_stats import EngineStats, app_totals
from bench.load_generator import run_load
from bench.metrics import RequestRecord, percentile
from bench.result_files import write_json
from contract.request_timeline import HOPS
from core.config import LocalRayConfig

# Events that reach the client closer together than this came in one burst: held and sent
# together somewhere on the way (each event still carries one token).
BURST_GAP_S = 0.001


def hop_summary(records: list[RequestRecord]) -> dict[str, Any]:
    """Per hop, and for the whole time to first token: p50, p99 and mean in ms, over the
    requests that brought back every stamp; and the client's view of the stream after it."""
    timed = [r for r in records if r.ok and r.hops_ms and len(r.hops_ms) == len(HOPS)]
    hops = {}
    for hop, _, _ in HOPS:
        values = [r.hops_ms[hop] for r in timed]
        hops[hop] = _stats(values)
    ttft = [r.ttft_s * 1000 for r in timed if r.ttft_s is not None]
    gaps = _gaps_ms(records, "itl_s")
    bursts = [(1 + sum(gap > BURST_GAP_S for gap in r.itl_s), r.completion_tokens)
              for r in records if r.ok and r.ttft_s is not None]
    return {
        "requests": len(records),
        "timed": len(timed),
        "hops_ms": hops,
        "ttft_ms": _stats(ttft),
        "sum_of_hop_medians_ms": sum(stats["p50"] for stats in hops.values()) if timed else None,
        "chunk_gap_ms": _stats(gaps),
        "event_gap_ms": _stats(_gaps_ms(records, "event_gaps_s")),
        "router_item_gap_ms": _stats(_gaps_ms(records, "router_gaps_s")),
        "engine_output_gap_ms": _stats(_gaps_ms(records, "engine_gaps_s")),
        "replica_to_router_item_ms": _stats(_gaps_ms(records, "replica_to_router_s")),
        "router_to_client_item_ms": _stats(_gaps_ms(records, "router_to_client_s")),
        "tokens_per_burst": statistics.fmean(tokens / count for count, tokens in bursts) if bursts else None,
    }


def _gaps_ms(records: list[RequestRecord], series: str) -> list[float]:
    """One series of a record's gaps or delays (`itl_s`, `event_gaps_s`, `router_gaps_s`, `engine_gaps_s`,
    `replica_to_router_s`, `router_to_client_s`) over every answered request, in ms."""
    return [gap * 1000 for r in records if r.ok for gap in getattr(r, series)]


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "mean": None}
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "mean": statistics.fmean(values)}


async def measure(
    url: str, model: str, concurrency: int, num_prompts: int, max_tokens: int, *, warmup: int,
    seed: int, api_key: str | None, progress: bool,
    after_warmup: Callable[[list[RequestRecord]], None] = lambda records: None,
) -> list[RequestRecord]:
    """`num_prompts` random prompts (at least two waves of `concurrency`) at `concurrency` in
    flight, each generating `max_tokens`; `after_warmup` gets the warm-up's records before the load."""
    num_prompts = max(num_prompts, 2 * concurrency)
    # Greedy: a sampled answer draws more tokens without text (a skipped special token), whose
    # events come with empty text, so the gap between the text chunks around them spans several
    # steps. Greedy with ignore_eos still draws some past the end-of-turn token.
    prompts = [replace(p, extra={"ignore_eos": True, "temperature": 0.0})
               for p in random_dataset(warmup + num_prompts, min_words=32, max_words=256,
                                       max_tokens=max_tokens, seed=seed + concurrency)]
    warmed: list[RequestRecord] = []
    if warmup:
        warmed, _ = await run_load(url, prompts[:warmup], LoadShape(concurrency=warmup), model=model,
                                   progress=False, api_key=api_key)
    after_warmup(warmed)
    records, _ = await run_load(url, prompts[warmup:], LoadShape(concurrency=concurrency), model=model,
                                progress=progress, label=f"{concurrency} in flight", api_key=api_key, timing=True)
    return records


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# {result['name']}", "", f"Command: `{result['command']}`", "",
             f"{result['url']} ({result['machine']}), {result['max_tokens']} tokens per answer. "
             "Milliseconds, p50 / p99.", ""]
    points = result["points"]
    header = "| hop | " + " | ".join(f"{p['concurrency']} in flight" for p in points) + " |"
    lines += [header, "| --- |" + " --- |" * len(points)]

    def cell(stats: dict[str, float | None]) -> str:
        return "-" if stats["p50"] is None else f"{stats['p50']:.1f} / {stats['p99']:.1f}"

    for hop, _, _ in HOPS:
        lines.append(f"| {hop} | " + " | ".join(cell(p["summary"]["hops_ms"][hop]) for p in points) + " |")
    lines.append("| **time to first token** | "
                 + " | ".join(f"**{cell(p['summary']['ttft_ms'])}**" for p in points) + " |")
    lines.append("| gap between chunks with text | " + " | ".join(cell(p["summary"]["chunk_gap_ms"]) for p in points) + " |")
    lines.append("| gap between events, with or without text | " + " | ".join(
        cell(p["summary"]["event_gap_ms"]) for p in points) + " |")
    lines.append("| gap between items at the router | " + " | ".join(
        cell(p["summary"]["router_item_gap_ms"]) for p in points) + " |")
    lines.append("| gap between engine outputs at the replica | " + " | ".join(
        cell(p["summary"]["engine_output_gap_ms"]) for p in points) + " |")
    lines.append("| replica to router, every engine output | " + " | ".join(
        cell(p["summary"]["replica_to_router_item_ms"]) for p in points) + " |")
    lines.append("| router to client, every router item | " + " | ".join(
        cell(p["summary"]["router_to_client_item_ms"]) for p in points) + " |")
    lines.append("| tokens per burst (mean) | " + " | ".join(
        "-" if p["summary"]["tokens_per_burst"] is None else f"{p['summary']['tokens_per_burst']:.2f}"
        for p in points) + " |")
    lines += ["", "Requests timed / sent: " + ", ".join(
        f"{p['summary']['timed']}/{p['summary']['requests']} at {p['concurrency']}" for p in points) + "."]
    return "\n".join(lines + _engine_split(points)) + "\n"


# The engine hop's parts, in order: (key, row, what it is of the engine hop's and vLLM's means).
ENGINE_PARTS = (
    ("serving_layer", "the replica's serving layer around vLLM's stamps: request checks, the output's formatting",
     lambda hop, engine: hop - engine["engine_ttft_ms"]),
    ("front_end", "vLLM's front end: template and tokenization (vLLM 0.29), input processing, the wait for "
                  "the engine core to end its step and take the request in, the first token's way back",
     lambda hop, engine: engine["engine_ttft_ms"] - engine["queue_ms"] - engine["prefill_ms"]),
    ("queued", "queued in the engine core's scheduler", lambda hop, engine: engine["queue_ms"]),
    ("prefill", "prefill (scheduled to first token)", lambda hop, engine: engine["prefill_ms"]),
)


def engine_split(summary: dict[str, Any], engine: dict[str, Any] | None) -> dict[str, float] | None:
    """The engine hop's mean, in parts, where vLLM's account of the run could be read."""
    hop = summary["hops_ms"]["engine"]["mean"]
    if hop is None or engine is None or any(engine[f"{figure}_ms"] is None for figure in ("engine_ttft", "queue", "prefill")):
        return None
    return {"engine_hop": hop, **{key: share(hop, engine) for key, _, share in ENGINE_PARTS}}


def _engine_split(points: list[dict[str, Any]]) -> list[str]:
    split = [p.get("engine_split") for p in points]
    if not any(split):
        return []
    lines = ["", "The engine hop split by vLLM's own account of the same requests (the app's "
             "`trilemma_engine_stage_*` counters), means in ms:", "",
             "| part | " + " | ".join(f"{p['concurrency']} in flight" for p in points) + " |",
             "| --- |" + " --- |" * len(points)]
    for key, row in (("engine_hop", "engine hop"), *((key, row) for key, row, _ in ENGINE_PARTS)):
        lines.append(f"| {row} | " + " | ".join("-" if s is None else f"{s[key]:.1f}" for s in split) + " |")
    return lines


def add_hops_command(sub: argparse._SubParsersAction) -> None:
    hops = sub.add_parser("hops", help="the first token's time through the running app, hop by hop, "
                                       "and the chunks after it", allow_abbrev=False)
    hops.add_argument("--url", default="http://127.0.0.1:8000", help="the running app (without /v1)")
    hops.add_argument("--metrics-url", help="where the app's node serves its metrics, for vLLM's own account "
                                            "of the engine hop (default: the app's host, at "
                                            "local_ray.metrics_export_port's default)")
    add_api_key_arg(hops)
    hops.add_argument("--concurrency", default="1,4", help="requests in flight, comma-separated load points")
    hops.add_argument("--num-prompts", type=int, default=24,
                      help="requests per load point (at least twice the requests in flight)")
    hops.add_argument("--max-tokens", type=int, default=64, help="tokens every answer generates")
    hops.add_argument("--warmup", type=int, default=2)
    hops.add_argument("--seed", type=int, default=0)
    hops.add_argument("--ready-timeout-s", type=float, default=900.0,
                      help="how long to wait for every pool to have a replica serving")
    add_output_args(hops, "hops")
    hops.set_defaults(func=bench_hops)


def bench_hops(args: argparse.Namespace) -> int:
    try:
        levels = [int(value) for value in args.concurrency.split(",")]
        model = wait_until_serving(args.url, args.ready_timeout_s)
    except ValueError as error:
        return fail(error)
    points = []
    port = LocalRayConfig.model_fields["metrics_export_port"].default
    stats = EngineStats(args.metrics_url or f"http://{urlparse(args.url).hostname}:{port}/metrics", app_totals,
                        settle_s=30.0)
    for concurrency in levels:
        before = [stats.read()]

        def warmed(records: list[RequestRecord]) -> None:
            # Once the warm-up's requests are in the figures, so that the load's hold none of them.
            stats.since(before[0], sum(r.ok for r in records))
            before[0] = stats.read()

        records = asyncio.run(measure(args.url, model, concurrency, args.num_prompts, args.max_tokens,
                                      warmup=args.warmup, seed=args.seed, api_key=args.api_key,
                                      progress=not args.no_progress, after_warmup=warmed))
        summary = hop_summary(records)
        engine = stats.since(before[0], sum(r.ok for r in records))
        # Each request's hops and TTFT; its series of gaps and delays only in the summary (they are many).
        points.append({"concurrency": concurrency, "summary": summary, "engine": engine,
                       "engine_split": engine_split(summary, engine),
                       "records": [{key: value for key, value in r.to_dict().items() if not isinstance(value, list)}
                                   for r in records]})
    name = args.name or "hops"
    result = {"name": name, "command": command_line(args), "url": args.url, "machine": machine.describe(),
              "max_tokens": args.max_tokens, "points": points}
    json_path = write_json(result, Path(args.out), name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    untimed = [p["concurrency"] for p in points if p["summary"]["timed"] < p["summary"]["requests"]]
    return 1 if untimed else 0
