"""The PromQL the dashboard, the rules and `trilemma top` share: one expression per figure,
written once.

Series are the app's (core/wire.py) with Ray's `ray_` prefix dropped by the scrape config
(`scrape_config`), Ray Serve's own (`ray_serve_...`) and vLLM's as Ray exports them
(`ray_vllm_...`). Recording rules (observability/rules.py) name the figures alerts use.
"""

from __future__ import annotations

from core import wire

# Levels of the recording rules' names (`level:metric:operation`, as Prometheus advises).
BY_POOL_SCENARIO = "pool, scenario"


def rate(metric: str, window: str, by: str, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{window}]))"


def quantile(q: float, histogram: str, window: str, by: str, selector: str = "") -> str:
    return f"histogram_quantile({q}, {rate(histogram + '_bucket', window, by + ', le', selector)})"


def requests_per_s(window: str, by: str, selector: str = "") -> str:
    return rate(wire.REQUESTS_TOTAL, window, by, selector)


def pool_usd_per_s(window: str, selector: str = "") -> str:
    """Busy and idle dollars of a pool's replicas. Each counter exists only once it has moved
    (a pool that never served has no busy dollars), so a missing one counts as 0."""
    busy = rate(wire.POOL_BUSY_USD_TOTAL, window, "pool", selector)
    idle = rate(wire.POOL_IDLE_USD_TOTAL, window, "pool", selector)
    return f"(({busy} or {idle} * 0) + ({idle} or {busy} * 0))"


def busy_fraction(window: str, selector: str = "") -> str:
    return (f"{rate(wire.ENGINE_BUSY_SECONDS_TOTAL, window, 'pool', selector)} / "
            f"{rate(wire.REPLICA_SECONDS_TOTAL, window, 'pool', selector)}")


def over_slo_fraction(histogram: str, bucket_le_s: float, window: str, scenario: str) -> str:
    """Share of a scenario's requests slower than the bucket boundary `bucket_le_s` (see
    `slo_bucket`). Ray writes `1.0` where Prometheus 3 writes `1`; both spellings match."""
    le = _le_pattern(bucket_le_s)
    selector = f'{{scenario="{scenario}"}}'
    within = f'sum by (scenario) (rate({histogram}_bucket{{scenario="{scenario}", le=~"{le}"}}[{window}]))'
    return f"1 - {within} / {rate(histogram + '_count', window, 'scenario', selector)}"


def slo_bucket(buckets: tuple[float, ...], slo_s: float) -> float:
    """The boundary an SLO is counted from: the largest at or below it, so a request between that
    boundary and the SLO counts as above it (an alert errs early, never late); the smallest when
    the SLO is below every boundary. The boundaries are fixed (core/wire.py)."""
    return max((b for b in buckets if b <= slo_s), default=min(buckets))


def _le_pattern(bound_s: float) -> str:
    text = repr(float(bound_s))  # 2.5 -> "2.5", 1 -> "1.0"
    whole, _, fraction = text.partition(".")
    return f"{whole}(\\\\.0)?" if fraction == "0" else text.replace(".", "\\\\.")

