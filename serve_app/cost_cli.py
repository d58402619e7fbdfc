"""`trilemma cost ...`: what the live app has cost so far, and what a workload would cost."""

from __future__ import annotations

import argparse
import sys

import httpx

from core import wire
from core.config import ConfigError
from core.price_catalog import DEFAULT_CATALOG_PATH, PriceCatalog, replica_rate
from core.prometheus_text import samples, total_by

DEFAULT_METRICS_URL = "http://127.0.0.1:8080/metrics"


def add_commands(commands: argparse._SubParsersAction) -> None:
    cost = commands.add_parser("cost", help="what requests cost: the live app, or an estimate")
    sub = cost.add_subparsers(dest="cost_command", required=True)
    report = sub.add_parser("report", help="$/1M tokens and $/request per pool, scenario and tenant")
    report.add_argument("--metrics-url", default=DEFAULT_METRICS_URL,
                        help="the app's metrics (Ray's metrics port, or a Prometheus federate URL)")
    report.set_defaults(func=cost_report)
    estimate = sub.add_parser("estimate", help="what a workload would cost on a given accelerator")
    estimate.add_argument("--gpu", required=True, help="accelerator in the catalog: cpu, l4, a10g, h100, ...")
    estimate.add_argument("--gpus", type=float, default=1, help="units per replica (GPUs, or vCPUs)")
    estimate.add_argument("--purchase", choices=["on_demand", "spot"], default="on_demand")
    estimate.add_argument("--tokens-in", type=int, required=True, help="prompt tokens per request")
    estimate.add_argument("--tokens-out", type=int, required=True, help="completion tokens per request")
    estimate.add_argument("--throughput", type=float, required=True,
                          help="requests per second one replica sustains (measure it: trilemma bench)")
    estimate.add_argument("--utilization", type=float, default=1.0,
                          help="busy share of the replica's time; idle time is paid for too (0-1]")
    estimate.add_argument("--catalog", default=str(DEFAULT_CATALOG_PATH), help="price catalog YAML")
    estimate.set_defaults(func=cost_estimate)


def _metric(text: str, name: str):
    """Ray's endpoint prefixes the app's metrics with `ray_`; Prometheus (relabeled) does not."""
    return samples(text, f"ray_{name}") or samples(text, name)


def report_rows(text: str) -> list[tuple[str, str, float, float, float]]:
    """(dimension, value, requests, tokens, dollars) for every pool, scenario and tenant."""
    tokens = _metric(text, wire.TOKENS_TOTAL)
    dollars = _metric(text, wire.REQUEST_COST_USD_TOTAL)
    requests = _metric(text, wire.REQUESTS_TOTAL)
    rows = []
    for dimension in ("pool", "scenario", "tenant"):
        by_tokens = total_by(tokens, dimension)
        by_dollars = total_by(dollars, dimension)
        by_requests = total_by(requests, dimension, where={"status": "200"})
        for (value,) in sorted(set(by_tokens) | set(by_requests)):
            rows.append((dimension, value, by_requests.get((value,), 0.0), by_tokens.get((value,), 0.0),
                         by_dollars.get((value,), 0.0)))
    return rows


def cost_report(args: argparse.Namespace) -> int:
    try:
        text = httpx.get(args.metrics_url, timeout=10).text
    except httpx.HTTPError as error:
        print(f"trilemma cost: cannot read metrics at {args.metrics_url}: {error!r}", file=sys.stderr)
        return 2
    rows = report_rows(text)
    if not rows:
        print(f"no trilemma requests counted at {args.metrics_url} yet")
        return 0
    print(f"{'by':<9}{'name':<16}{'requests':>10}{'tokens':>12}{'$ total':>14}{'$/1M tokens':>14}{'$/request':>14}")
    for dimension, value, count, token_count, usd in rows:
        per_million = usd / token_count * 1e6 if token_count else float("nan")
        per_request = usd / count if count else float("nan")
        print(f"{dimension:<9}{value:<16}{count:>10.0f}{token_count:>12.0f}{usd:>14.8f}"
              f"{per_million:>14.6f}{per_request:>14.10f}")
    busy = total_by(_metric(text, wire.POOL_BUSY_USD_TOTAL), "pool")
    idle = total_by(_metric(text, wire.POOL_IDLE_USD_TOTAL), "pool")
    for (pool,) in sorted(set(busy) | set(idle)):
        b, i = busy.get((pool,), 0.0), idle.get((pool,), 0.0)
        share = b / (b + i) if b + i else 0.0
        print(f"pool {pool}: ${b:.8f} busy, ${i:.8f} idle ({share:.0%} of its replica time busy)")
    return 0


def estimate(catalog: PriceCatalog, *, gpu: str, gpus: float, purchase: str, tokens_in: int,
             tokens_out: int, throughput: float, utilization: float) -> dict[str, float]:
    """A request holds `1 / (throughput x utilization)` replica-seconds: a replica busy only a
    fraction of the time still bills every second, and its requests carry that idle time."""
    if throughput <= 0 or not 0 < utilization <= 1 or tokens_in < 0 or tokens_out < 0 or tokens_in + tokens_out == 0:
        raise ValueError("--throughput must be > 0, --utilization in (0, 1], and a request must have tokens")
    rate = replica_rate(catalog, gpu, gpus, purchase)
    bill = rate.breakdown(1 / (throughput * utilization))
    per_request = bill.pop("total")
    return {
        "usd_per_hour": rate.usd_per_hour,
        "usd_per_request": per_request,
        "usd_per_1m_tokens": per_request / (tokens_in + tokens_out) * 1e6,
        "usd_per_1m_output_tokens": per_request / tokens_out * 1e6 if tokens_out else float("nan"),
        **{f"{term}_usd_per_request": usd for term, usd in bill.items()},
    }


def cost_estimate(args: argparse.Namespace) -> int:
    try:
        figures = estimate(
            PriceCatalog.from_yaml(args.catalog), gpu=args.gpu, gpus=args.gpus, purchase=args.purchase,
            tokens_in=args.tokens_in, tokens_out=args.tokens_out, throughput=args.throughput,
            utilization=args.utilization,
        )
    except (ConfigError, ValueError) as error:
        print(f"trilemma cost: {error}", file=sys.stderr)
        return 2
    print(f"{args.gpus:g} x {args.gpu} ({args.purchase}) at ${figures['usd_per_hour']:.4f}/hour per replica, "
          f"{args.throughput:g} req/s at {args.utilization:.0%} busy, {args.tokens_in}+{args.tokens_out} tokens:")
    for key, value in figures.items():
        print(f"  {key:<30}{value:.10g}")
    return 0
