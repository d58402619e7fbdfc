"""The alert rules' thresholds (`trilemma observe rules` writes the rules from them); the
latency objectives are the scenarios' own SLOs, so alerts and autoscaler hold the same line."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt

from core.config_base import StrictModel


class AlertsConfig(StrictModel):
    window_minutes: PositiveInt = Field(
        5, description="Rates and p99s of the rules cover this many minutes.",
    )
    busy_requests_per_s: NonNegativeFloat = Field(
        1.0, description="A scenario's p99 above its SLO alerts only while it serves more requests/s than this "
        "(a few slow requests at night page no one).",
    )
    quiet_requests_per_s: NonNegativeFloat = Field(
        0.5, description="A pool whose engines are mostly idle alerts only while it serves fewer requests/s than this.",
    )
    utilization_below: float = Field(
        0.3, gt=0, lt=1, description="The share of time a pool's engines hold a request under which its replicas "
        "are mostly paid for idling.",
    )
    usd_per_request_above: PositiveFloat = Field(
        0.001, description="Alert when a pool's replicas cost more than this per request served "
        "(busy and idle dollars over requests).",
    )
    slo_error_budget: float = Field(
        0.01, gt=0, lt=1, description="Share of a scenario's requests allowed above its SLO (0.01: a p99 objective); "
        "the burn-rate alerts measure how fast it is spent.",
    )
    for_minutes: NonNegativeFloat = Field(
        2, description="How long a condition must hold before its alert fires.",
    )
