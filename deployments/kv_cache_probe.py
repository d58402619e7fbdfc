"""How full a replica's KV cache is, read from the vLLM engine's own scheduler stats.

vLLM's AsyncLLM hands every scheduler step's stats to its stat loggers; the probe joins them
and keeps the last `kv_cache_usage` (0 to 1). An engine without stat loggers (log stats off,
or not vLLM) has no probe, and the replica reports no KV-cache figure rather than a guess.
"""

from __future__ import annotations

from typing import Any


class KvCacheProbe:
    def __init__(self) -> None:
        self.usage: float | None = None

    @classmethod
    def attach(cls, engine: Any) -> KvCacheProbe | None:
        manager = getattr(getattr(engine, "_engine_client", None), "logger_manager", None)
        loggers = getattr(manager, "stat_loggers", None)
        if not isinstance(loggers, list):
            return None
        probe = cls()
        loggers.append(probe)
        return probe

    # The stat logger interface StatLoggerManager calls.
    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        usage = getattr(scheduler_stats, "kv_cache_usage", None)
        if usage is not None:
            self.usage = float(usage)

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def record_sleep_state(self, sleep: int = 0, level: int = 0) -> None:
        pass
