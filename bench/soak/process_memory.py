"""The resident memory of every serving process, sampled through a run, and how much each
grew over the run's last stretch (a leak grows; a warmed-up process stays flat)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import psutil

from bench.app_processes import label_of, serving_processes
from engine.processes import engine_processes, orphaned_engines

# Each end of the window is the median of this many samples: one garbage collection or one
# batch of long prompts does not make a leak.
EDGE_SAMPLES = 3


@dataclass(frozen=True)
class Sample:
    """One reading of the machine: each serving process's RSS, and the engines."""

    at_s: float
    rss_bytes: dict[str, int]  # "<label> <pid>" -> RSS
    engines: int
    orphaned_engines: int


@dataclass(frozen=True)
class Growth:
    process: str
    start_mib: float
    end_mib: float

    @property
    def fraction(self) -> float:
        return (self.end_mib - self.start_mib) / self.start_mib if self.start_mib else 0.0


def take_sample(at_s: float, extra_pids: tuple[int, ...] = ()) -> Sample:
    """`extra_pids`: processes to watch beside Ray's and vLLM's (the `trilemma serve` driver)."""
    rss = {}
    for process in serving_processes() + [p for p in map(_process, extra_pids) if p is not None]:
        try:
            rss[f"{label_of(process)} {process.pid}"] = process.memory_info().rss
        except psutil.Error:  # ended between the listing and the reading
            continue
    return Sample(at_s, rss, len(engine_processes()), len(orphaned_engines()))


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def growth_over(samples: list[Sample], window_s: float) -> list[Growth]:
    """Per process alive through the last `window_s` of the run: RSS at the window's start and
    at its end, largest growth first. A process that started or ended inside the window (a
    replaced replica, an idle worker) has no window to compare and is left out."""
    if not samples:
        return []
    end = samples[-1].at_s
    window = [s for s in samples if s.at_s >= end - window_s]
    head, tail = window[:EDGE_SAMPLES], window[-EDGE_SAMPLES:]
    through = set.intersection(*(set(s.rss_bytes) for s in head + tail))
    growths = [
        Growth(process, _median_mib(head, process), _median_mib(tail, process))
        for process in through
    ]
    return sorted(growths, key=lambda g: g.fraction, reverse=True)


def _median_mib(samples: list[Sample], process: str) -> float:
    return statistics.median(s.rss_bytes[process] for s in samples) / 2**20
