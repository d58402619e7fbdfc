"""What a replica reads from its vLLM engine's own stats: the KV cache's fill, and where its
requests' time went inside the engine.

vLLM's AsyncLLM hands every scheduler step's stats to its stat loggers; these join them. An
engine without stat loggers (log stats off, or not vLLM) gets neither, and the replica reports
no figure rather than a guess.
"""

from __future__ import annotations

from typing import Any, Callable

from core.upstream import get_logger

logger = get_logger(__name__)


def attach(engine: Any, stat_logger: Any) -> bool:
    """Adds `stat_logger` to the engine's; False where the engine has none."""
    manager = getattr(getattr(engine, "_engine_client", None), "logger_manager", None)
    loggers = getattr(manager, "stat_loggers", None)
    if not isinstance(loggers, list):
        return False
    loggers.append(stat_logger)
    return True


class StatLogger:
    """The stat logger interface StatLoggerManager calls; `record` is the one these use."""

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        pass

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def record_sleep_state(self, sleep: int = 0, level: int = 0) -> None:
        pass


class KvCacheProbe(StatLogger):
    """The last `kv_cache_usage` (0 to 1) the engine's scheduler reported, and its prefix cache's
    prompt tokens looked up and found since the engine started (vLLM's prefix_cache_queries and
    _hits counters), so that a benchmark can read a pool's hit rate over a run."""

    def __init__(self) -> None:
        self.usage: float | None = None
        self.prefix_queries = 0
        self.prefix_hits = 0

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        usage = getattr(scheduler_stats, "kv_cache_usage", None)
        if usage is not None:
            self.usage = float(usage)
        prefix = getattr(scheduler_stats, "prefix_cache_stats", None)
        if prefix is not None:
            # Counted on through a reset of the cache (a sleep), as vLLM's own counters are.
            self.prefix_queries += getattr(prefix, "queries", 0) or 0
            self.prefix_hits += getattr(prefix, "hits", 0) or 0


# A request's stages inside the engine, as vLLM times them: from the arrival vLLM stamps on it (vLLM
# 0.29 stamps it as its renderer starts, before the chat template and tokenization) to its first
# token leaving the output processor; and in the engine core, queued until scheduled, then
# scheduled until its first token (prefill).
FIRST_TOKEN, QUEUED, PREFILL = "first_token", "queued", "prefill"


class EngineStageTimes(StatLogger):
    """Hands `on_stage(stage, seconds)` each request's time in each stage, exactly as vLLM measured
    it: the first token's as it comes, the core's when the request finishes. (vLLM's own
    histograms of the same times reach Prometheus through Ray's agent only as bucket midpoints.)

    A request that ended before its first token (aborted while queued) has no queue or prefill
    time to give: vLLM reports them from timestamps it never set. `record` runs inside vLLM's
    output handler, where an exception would fail every request of the engine, so a figure that
    cannot be recorded is logged and dropped instead."""

    def __init__(self, on_stage: Callable[[str, float], None]) -> None:
        self._on_stage = on_stage
        self._failed = False

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if iteration_stats is None:
            return
        try:
            for seconds in iteration_stats.time_to_first_tokens_iter:
                self._on_stage(FIRST_TOKEN, seconds)
            for finished in iteration_stats.finished_requests:
                if finished.num_generation_tokens > 0:
                    self._on_stage(QUEUED, finished.queued_time)
                    self._on_stage(PREFILL, finished.prefill_time)
        except Exception:  # noqa: BLE001 - a lost figure, never a failed request
            if not self._failed:
                logger.exception("the engine's stage times could not be recorded; figures are dropped")
            self._failed = True
