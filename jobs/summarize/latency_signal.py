"""Online latency as a signal to the batch job: the p99 TTFT of an online scenario (the router's
`trilemma_ttft_seconds` histogram, read from the app's Prometheus metrics) against its SLO.

Two scrapes make a window (histograms are cumulative); a window over the SLO makes the job
shrink, one within `headroom` of it makes the job hold. Ray's exporter refreshes the figures
about every 10 s, so this signal is slower than the pools' queues; it is for the latency the
queues do not show (engines full of batch work decode every sequence more slowly).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.prometheus_text import phase_latency
from jobs.summarize.concurrency import Load


def judge(p99_ms: float, slo_ms: float, headroom: float) -> Load:
    if p99_ms > slo_ms:
        return "congested"
    if p99_ms > headroom * slo_ms:
        return "busy"
    return "clear"


@dataclass
class LatencyWatch:
    metrics_url: str
    scenario: str
    slo_ms: float
    headroom: float = 0.8
    _last: str | None = None

    def reading(self, metrics_text: str) -> tuple[Load, str] | None:
        """The load this scrape shows against the previous one; None for the first scrape and
        for a window without requests of the scenario (no news is no signal)."""
        previous, self._last = self._last, metrics_text
        window = phase_latency(previous, metrics_text, keys=("scenario",))
        figures = (window or {}).get(self.scenario)
        if not figures or not figures.get("ttft_count"):
            return None
        p99 = figures["ttft_p99_ms"]
        return judge(p99, self.slo_ms, self.headroom), f"{self.scenario} TTFT p99 {p99:.0f} ms, SLO {self.slo_ms:.0f} ms"
