"""The app's Prometheus metrics, recorded through Ray's metrics API.

Ray's metrics agent on each node serves them (`local_ray.metrics_export_port`) with its own
`ray_` prefix; the shipped Prometheus config (`cluster/prometheus.yml`) strips that prefix,
so queries use the names below. Counters end in `_total`, as Prometheus expects.

Two recorders: the router's, per request (tokens, dollars, latencies by pool, scenario,
priority, tenant and LoRA adapter), and each pool replica's: per interval, busy and idle dollars from its
busy clock and its queue's depth; per event, requests its admission queue shed.
"""

from __future__ import annotations

from typing import Any

from ray.util.metrics import Counter, Gauge, Histogram

from core import wire
from core.adapter_config import NO_ADAPTER

# Spans a one-token reply on a small model to a long document on a large one.
COST_BOUNDARIES_USD = [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]


class RequestMetrics:
    """What the router records for every answered request."""

    def __init__(self) -> None:
        # `adapter`: a configured adapter's name or "base", never the request's own text: bounded series.
        by_request = ("pool", "scenario", "tenant", "adapter")
        self.tokens = Counter(
            wire.TOKENS_TOTAL, "Tokens processed, by direction (prompt or completion).",
            tag_keys=("direction", *by_request),
        )
        self.cost = Counter(
            wire.REQUEST_COST_USD_TOTAL, "Dollars charged to requests: their share of busy engine time.",
            tag_keys=by_request,
        )
        self.requests = Counter(
            wire.REQUESTS_TOTAL, "Requests answered, by HTTP status (429: shed or over budget).",
            tag_keys=(*by_request, "priority", "status"),
        )
        self.cost_histogram = Histogram(
            wire.REQUEST_COST_USD, "Dollars per request.", boundaries=COST_BOUNDARIES_USD,
            tag_keys=("pool", "scenario", "adapter"),
        )
        self.ttft = Histogram(
            wire.TTFT_SECONDS, "Time to first token of streamed requests, at the router.",
            boundaries=list(wire.TTFT_BUCKETS_S), tag_keys=("pool", "scenario", "priority", "adapter"),
        )
        self.tokens_saved = Counter(
            wire.PROMPT_TOKENS_SAVED_TOTAL, "Prompt tokens removed by whitespace normalization.",
            tag_keys=("scenario",),
        )
        self.route_moves = Counter(
            wire.ROUTE_MOVES_TOTAL, "Requests that the prompt's exact token count moved to another pool or "
            "budget after its estimate had sent them (from_pool to to_pool).",
            tag_keys=("from_pool", "to_pool", "scenario"),
        )
        self.tpot = Histogram(
            wire.TPOT_SECONDS, "Time per output token after the first, of streamed requests.",
            boundaries=list(wire.TPOT_BUCKETS_S), tag_keys=("pool", "scenario", "priority", "adapter"),
        )

        self.daily_budget = Gauge(
            wire.TENANT_DAILY_BUDGET_USD, "A tenant's daily budget (per UTC day), for the spend panel's line.",
            tag_keys=("tenant",),
        )

    def daily_budgets(self, budgets: dict[str, float]) -> None:
        for tenant, usd in budgets.items():
            self.daily_budget.set(usd, {"tenant": tenant})

    def route_moved(self, scenario: str, from_pool: str, to_pool: str) -> None:
        self.route_moves.inc(1, {"from_pool": from_pool, "to_pool": to_pool, "scenario": scenario})

    def prompt_tokens_saved(self, scenario: str, tokens: int) -> None:
        if tokens > 0:
            self.tokens_saved.inc(tokens, {"scenario": scenario})

    def record(
        self, *, pool: str, scenario: str, tenant: str, status: int, usage: dict[str, Any] | None,
        priority: int | None = None, ttft_s: float | None = None, decode_s: float | None = None,
        adapter: str = NO_ADAPTER,
    ) -> None:
        tags = {"pool": pool, "scenario": scenario, "tenant": tenant, "adapter": adapter}
        klass = "none" if priority is None else str(priority)
        self.requests.inc(1, {**tags, "priority": klass, "status": str(status)})
        if not usage:
            return
        prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
        if prompt:
            self.tokens.inc(prompt, {**tags, "direction": "prompt"})
        if completion:
            self.tokens.inc(completion, {**tags, "direction": "completion"})
        cost = usage.get("cost_usd")
        by_pool = {"pool": pool, "scenario": scenario, "adapter": adapter}
        if cost is not None:
            if cost > 0:
                self.cost.inc(cost, tags)
            self.cost_histogram.observe(cost, by_pool)
        by_class = {**by_pool, "priority": klass}
        if ttft_s is not None:
            self.ttft.observe(ttft_s, by_class)
        if decode_s is not None and completion > 1:
            self.tpot.observe(decode_s / (completion - 1), by_class)


class PoolMetrics:
    """What a pool replica records from its busy clock: its dollars, busy and idle."""

    def __init__(self, pool: str) -> None:
        self._tags = {"pool": pool}
        self.busy_seconds = Counter(
            wire.ENGINE_BUSY_SECONDS_TOTAL, "Seconds an engine had at least one request.",
            tag_keys=("pool",),
        )
        self.replica_seconds = Counter(
            wire.REPLICA_SECONDS_TOTAL, "Seconds replicas existed and could serve.", tag_keys=("pool",),
        )
        self.busy_usd = Counter(
            wire.POOL_BUSY_USD_TOTAL, "Dollars of replica time with work in the engine.",
            tag_keys=("pool",),
        )
        self.idle_usd = Counter(
            wire.POOL_IDLE_USD_TOTAL, "Dollars of replica time with an idle engine.", tag_keys=("pool",),
        )

        # A stage's mean: its seconds over its requests (engine.stat_loggers names them).
        self.stage_seconds = Counter(
            wire.ENGINE_STAGE_SECONDS_TOTAL, "Seconds requests spent in each stage inside the engine, as "
            "vLLM times them: first_token (from the arrival vLLM stamps to the first token), queued and "
            "prefill (in the engine core).", tag_keys=("pool", "stage"),
        )
        self.stage_requests = Counter(
            wire.ENGINE_STAGE_REQUESTS_TOTAL, "Requests timed in each stage inside the engine.",
            tag_keys=("pool", "stage"),
        )
        self.shed_requests = Counter(
            wire.REQUESTS_SHED_TOTAL,
            "Requests a replica's admission queue refused: `shed` on arrival, `evicted` while "
            "waiting, for a more urgent one.",
            tag_keys=("pool", "priority", "action"),
        )
        self.in_engine = Gauge(
            wire.REQUESTS_IN_ENGINE, "Requests a replica's engine holds.", tag_keys=("pool",),
        )
        self.waiting = Gauge(
            wire.REQUESTS_WAITING, "Requests waiting in a replica's admission queue.", tag_keys=("pool",),
        )

        self.asleep = Gauge(
            wire.ENGINE_ASLEEP, "1 while a replica's engine sleeps (pools.<name>.sleep_when_idle).",
            tag_keys=("pool",),
        )
        self.wake_seconds = Histogram(
            wire.ENGINE_WAKE_SECONDS, "How long a sleeping engine took to wake for a request.",
            boundaries=[0.1, 0.25, 0.5, 1, 2, 5, 10, 30], tag_keys=("pool",),
        )

    def woke(self, seconds: float) -> None:
        self.wake_seconds.observe(seconds, self._tags)

    def engine_stage(self, stage: str, seconds: float) -> None:
        tags = {**self._tags, "stage": stage}
        if seconds > 0:  # Ray's counters take only positive steps; a queue of no time adds none
            self.stage_seconds.inc(seconds, tags)
        self.stage_requests.inc(1, tags)

    def shed(self, priority: int, action: str) -> None:
        self.shed_requests.inc(1, {**self._tags, "priority": str(priority), "action": action})

    def queue(self, *, in_engine: int, waiting: int, asleep: bool = False) -> None:
        self.in_engine.set(in_engine, self._tags)
        self.waiting.set(waiting, self._tags)
        self.asleep.set(1.0 if asleep else 0.0, self._tags)

    def record(self, *, busy_s: float, wall_s: float, usd_per_s: float) -> None:
        """One interval's increments (the caller diffs its clock readings)."""
        idle_s = max(0.0, wall_s - busy_s)
        if busy_s > 0:
            self.busy_seconds.inc(busy_s, self._tags)
            self.busy_usd.inc(busy_s * usd_per_s, self._tags)
        if wall_s > 0:
            self.replica_seconds.inc(wall_s, self._tags)
        if idle_s > 0:
            self.idle_usd.inc(idle_s * usd_per_s, self._tags)
