"""The board: every panel's PromQL, written once from a config. The Grafana dashboard, the PNG
rendering and `trilemma top` all draw these.

Grafana's variables appear as `$pool`, `$scenario` and `$app`, and `$__rate_interval` as the
rate window; `concrete` turns an expression into one Prometheus itself evaluates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core import wire
from core.config import TrilemmaConfig
from observability import promql
from observability.rules import LATENCIES, Names, names_for, slo_scenarios

RATE = "$__rate_interval"
POOL = 'pool=~"$pool"'
SCENARIO = 'scenario=~"$scenario"'
BOTH = f"{POOL}, {SCENARIO}"
# The pool of a Serve deployment (`pool-short` -> `short`) and of a vLLM engine (by its replica).
SERVE_REPLICAS = 'ray_serve_deployment_replica_healthy{application="$app"}'
ENGINE_POOL = (f'on (ReplicaId) group_left (pool) label_replace(label_replace(max by (replica, deployment) '
               f'({SERVE_REPLICAS}), "ReplicaId", "$1", "replica", "(.*)"), "pool", "$1", "deployment", "pool-(.*)")')


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    row: str
    title: str
    unit: str  # Grafana's unit id: s, reqps, percentunit, currencyUSD, short
    targets: tuple[Target, ...]
    description: str = ""
    # Constant lines drawn across the panel (an SLO, a budget): legend -> value.
    thresholds: dict[str, float] = field(default_factory=dict)


def board(config: TrilemmaConfig) -> list[Panel]:
    names = names_for(config)
    return [*_latency(config), *_throughput(), *_utilization(config), *_queues(), *_cost(names), *_scaling(),
            *_batch()]


def _latency(config: TrilemmaConfig) -> list[Panel]:
    panels = []
    for kind, histogram, words in LATENCIES:
        slos = {f"{scenario} SLO": slo for scenario, slo in slo_scenarios(config, kind).items()}
        panels.append(Panel(
            "Latency", f"{kind.upper()} p50 / p99 by pool and scenario", "s",
            tuple(Target(promql.quantile(q / 100, histogram, RATE, promql.BY_POOL_SCENARIO, f"{{{BOTH}}}"),
                         f"p{q} {{{{pool}}}} {{{{scenario}}}}") for q in (50, 99)),
            f"{words.capitalize()} at the router, of streamed requests; dotted: each scenario's SLO.", slos,
        ))
    per_stage = "sum by (pool, stage) (rate({}{{%s}}[%s]))" % (POOL, RATE)
    panels.append(Panel(
        "Latency", "Inside the engine: mean time per stage by pool", "s", (
            Target(f"{per_stage.format(wire.ENGINE_STAGE_SECONDS_TOTAL)} / "
                   f"{per_stage.format(wire.ENGINE_STAGE_REQUESTS_TOTAL)}", "{{pool}} {{stage}}"),
        ), "vLLM's own timing of each request: first_token from the arrival vLLM stamps on it (before "
           "its chat template and tokenization) to the first token, queued and prefill in the engine "
           "core. The TTFT at the router less first_token is the app's own share of the first token."))
    return panels


def _throughput() -> list[Panel]:
    return [
        Panel("Throughput", "Requests/s by pool, scenario and status", "reqps", (
            Target(f"sum by (pool, scenario, status) (rate({wire.REQUESTS_TOTAL}{{{BOTH}}}[{RATE}]))",
                   "{{pool}} {{scenario}} {{status}}"),
        ), "Every answered request, 429 (shed or over budget) and 503 (no pool) included."),
        Panel("Throughput", "Tokens/s by pool and direction", "short", (
            Target(f"sum by (pool, direction) (rate({wire.TOKENS_TOTAL}{{{BOTH}}}[{RATE}]))",
                   "{{pool}} {{direction}}"),
        )),
    ]


def _utilization(config: TrilemmaConfig) -> list[Panel]:
    occupancy = tuple(
        Target(f'sum({wire.REQUESTS_IN_ENGINE}{{pool="{name}"}}) / '
               f'(count({wire.REQUESTS_IN_ENGINE}{{pool="{name}"}}) * {config.max_in_engine_ceiling(name)})',
               name)
        for name in config.pools
    )
    return [
        Panel("Utilization", "Engine busy fraction", "percentunit", (
            Target(promql.busy_fraction(RATE, f"{{{POOL}}}"), "{{pool}}"),
        ), "Share of replica time with at least one request in the engine.",
            {"utilization alert": config.alerts.utilization_below}),
        Panel("Utilization", "Batch occupancy", "percentunit", occupancy,
              "Requests in the engines over their slots (replicas x the most a replica takes in)."),
        Panel("Utilization", "vLLM: KV-cache usage", "percentunit", (
            Target(f"max by (pool) (ray_vllm_kv_cache_usage_perc * {ENGINE_POOL})", "{{pool}}"),
        ), "vLLM's own gauge, as Ray exports it, per pool (the fullest replica)."),
        Panel("Utilization", "vLLM: requests running and waiting", "short", (
            Target(f"sum by (pool) (ray_vllm_num_requests_running * {ENGINE_POOL})", "running {{pool}}"),
            Target(f"sum by (pool) (ray_vllm_num_requests_waiting * {ENGINE_POOL})", "waiting {{pool}}"),
        )),
    ]


def _queues() -> list[Panel]:
    return [
        Panel("Queues", "Admission queue depth", "short", (
            Target(f"sum by (pool) ({wire.REQUESTS_WAITING}{{{POOL}}})", "waiting {{pool}}"),
            Target(f"sum by (pool) ({wire.REQUESTS_IN_ENGINE}{{{POOL}}})", "in engine {{pool}}"),
        )),
        Panel("Queues", "Sheds by priority", "reqps", (
            Target(f"sum by (pool, priority, action) (rate({wire.REQUESTS_SHED_TOTAL}{{{POOL}}}[{RATE}]))",
                   "{{pool}} priority {{priority}} {{action}}"),
        ), "Requests the admission queues refused (shed) or pushed out for a more urgent one (evicted)."),
    ]


def _cost(names: Names) -> list[Panel]:
    usd_per_s = promql.pool_usd_per_s(RATE, f"{{{POOL}}}")
    return [
        Panel("Cost", "$/hour by pool, busy and idle", "currencyUSD", tuple(
            Target(f"sum by (pool) (rate({metric}{{{POOL}}}[{RATE}])) * 3600", f"{state} {{{{pool}}}}")
            for state, metric in (("busy", wire.POOL_BUSY_USD_TOTAL), ("idle", wire.POOL_IDLE_USD_TOTAL))
        ), "What the replicas cost, split by whether their engines had work."),
        Panel("Cost", "$ per request and per 1M tokens", "currencyUSD", (
            Target(f"{usd_per_s} / sum by (pool) (rate({wire.REQUESTS_TOTAL}{{{POOL}, status=\"200\"}}[{RATE}]))",
                   "per request {{pool}}"),
            Target(f"{usd_per_s} / sum by (pool) (rate({wire.TOKENS_TOTAL}{{{POOL}}}[{RATE}])) * 1e6",
                   "per 1M tokens {{pool}}"),
        ), "The replicas' dollars, busy and idle, over what they served."),
        Panel("Cost", "$ per request charged, p50 / p99 by scenario", "currencyUSD", tuple(
            Target(promql.quantile(q / 100, wire.REQUEST_COST_USD, RATE, "scenario", f"{{{SCENARIO}}}"),
                   f"p{q} {{{{scenario}}}}") for q in (50, 99)
        ), "Each request's share of busy engine time, as its answer reports it."),
        Panel("Cost", "$ per 1M tokens charged, by LoRA adapter", "currencyUSD", (
            Target(f"sum by (adapter) (rate({wire.REQUEST_COST_USD_TOTAL}{{{POOL}}}[{RATE}])) / "
                   f"sum by (adapter) (rate({wire.TOKENS_TOTAL}{{{POOL}}}[{RATE}])) * 1e6", "{{adapter}}"),
        ), "What requests with each adapter were charged per token (`base`: none), the loads they caused "
           "included: on a CPU an adapter's requests cost more than the base's (docs/adapters.md)."),
        Panel("Cost", "Spend by tenant, last 24 h, against its daily budget", "currencyUSD", (
            Target(f"sum by (tenant) (increase({wire.REQUEST_COST_USD_TOTAL}[24h]))", "spent {{tenant}}"),
            Target(f"max by (tenant) ({wire.TENANT_DAILY_BUDGET_USD})", "budget {{tenant}}"),
        ), "What each tenant's requests were charged over the last 24 h, and its daily budget "
           "(budgets reset at midnight UTC)."),
    ]


def _scaling() -> list[Panel]:
    return [
        Panel("Scaling", "Replicas: target and running", "short", (
            Target(f"max by (pool) ({wire.TARGET_REPLICAS}{{{POOL}}})", "target {{pool}}"),
            Target(f'count by (deployment) ({SERVE_REPLICAS} == 1)', "running {{deployment}}"),
        ), "The autoscaler's target per pool and the healthy replicas Serve runs; its decisions are annotations."),
        Panel("Scaling", "Scaling decisions", "short", (
            Target(f"sum by (pool, direction) (increase({wire.SCALING_DECISIONS_TOTAL}{{{POOL}}}[{RATE}]))",
                   "{{pool}} {{direction}}"),
        )),
    ]


def _batch() -> list[Panel]:
    return [
        Panel("Batch job", "Batch documents by state", "short", (
            Target(f"sum by (output, state) ({wire.BATCH_DOCUMENTS})", "{{state}} {{output}}"),
        ), "Documents of the running summarization job still to do, done and failed."),
        Panel("Batch job", "Batch tokens/s and $/hour", "short", (
            Target(f"sum by (output) (rate({wire.BATCH_TOKENS_TOTAL}[{RATE}]))", "tokens/s {{output}}"),
            Target(f"sum by (output) (rate({wire.BATCH_COST_USD_TOTAL}[{RATE}])) * 3600", "$/hour {{output}}"),
        )),
    ]


def scaling_annotation() -> str:
    return f"sum by (pool, direction, policy) (increase({wire.SCALING_DECISIONS_TOTAL}[1m])) > 0"


def concrete(expr: str, *, rate_window: str = "1m", app: str = "trilemma") -> str:
    """The expression Prometheus evaluates for Grafana's: every pool and scenario, a fixed window."""
    expr = expr.replace(RATE, rate_window).replace("$app", app)
    return re.sub(r'(pool|scenario)=~"\$(pool|scenario)"', r'\1=~".*"', expr)
