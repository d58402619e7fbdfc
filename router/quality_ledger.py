"""What moving a request to another pool costs in quality, from the last `trilemma bench quality`.

The cost profile and `prefer: cheapest` send a scenario to the cheapest pool that fits; when
that pool runs a smaller model or a lower precision, the saving is bought with quality. The
ledger holds each pool's measured perplexity and task score, so that a move says what it
gives up (on the route reason a client and the logs see), and a scenario's
`max_quality_loss` refuses the moves that give up more. A move whose loss was never measured
is refused where a limit is set: an unknown loss is not shown to be within it.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from core.config import QualityLossLimit
from core.config_base import ConfigError


@dataclass(frozen=True)
class PoolQuality:
    perplexity: float
    task_score: float  # the share of the task's questions answered right
    # The tokens of the pool's measured open answers (summaries), each measured up to answer_max_tokens.
    answer_tokens: tuple[int, ...] = ()
    answer_max_tokens: int = 0


@dataclass(frozen=True)
class QualityLoss:
    """Serving in `to_pool` instead of `from_pool`: perplexity added, task points lost (both
    negative where `to_pool` measured better)."""

    from_pool: str
    to_pool: str
    perplexity_added: float
    task_points_lost: float

    def describe(self) -> str:
        return (f"quality against pool {self.from_pool}: perplexity {self.perplexity_added:+.2f}, "
                f"task {0.0 - self.task_points_lost:+.1f} points")  # 0.0 - x: no "-0.0"

    def over(self, limit: QualityLossLimit) -> str | None:
        """Why the loss exceeds `limit`, or None when it stays within."""
        if limit.perplexity is not None and self.perplexity_added > limit.perplexity:
            return f"perplexity {self.perplexity_added:+.2f} over max_quality_loss.perplexity {limit.perplexity:g}"
        if limit.task_points is not None and self.task_points_lost > limit.task_points:
            return (f"{self.task_points_lost:.1f} task points lost, over max_quality_loss.task_points "
                    f"{limit.task_points:g}")
        return None


class QualityLedger:
    def __init__(self, pools: Mapping[str, PoolQuality], source: str) -> None:
        self.pools = dict(pools)
        self.source = source  # the result file the measurements come from, for the reasons

    @classmethod
    def from_result(cls, path: str | Path) -> QualityLedger:
        """From a `trilemma bench quality` JSON result; a ConfigError names what is wrong with it."""
        try:
            result = json.loads(Path(path).read_text())
            pools = {row["pool"]: PoolQuality(float(row["perplexity"]), float(row["task_score"]),
                                              tuple(int(n) for n in row.get("answer_tokens") or ()),
                                              int(row.get("answer_max_tokens") or 0))
                     for row in result["pools"]}
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"quality.results {str(path)!r} is not a `trilemma bench quality` result: "
                              f"{error!r}") from None
        return cls(pools, Path(path).name)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "pools": {name: asdict(quality) for name, quality in self.pools.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QualityLedger:
        return cls({name: PoolQuality(**{**quality, "answer_tokens": tuple(quality.get("answer_tokens", ()))})
                    for name, quality in data["pools"].items()}, data["source"])

    def loss(self, from_pool: str, to_pool: str) -> QualityLoss | None:
        """None when either pool was not measured."""
        before, after = self.pools.get(from_pool), self.pools.get(to_pool)
        if before is None or after is None:
            return None
        return QualityLoss(from_pool, to_pool, after.perplexity - before.perplexity,
                           (before.task_score - after.task_score) * 100)

    def token_cap_note(self, pool: str, cap: int) -> str | None:
        """What a max_tokens cap of `cap` gives up on `pool`: how many of its measured answers run
        longer. None when the pool's answers were not measured."""
        quality = self.pools.get(pool)
        if quality is None or not quality.answer_tokens:
            return None
        lengths = quality.answer_tokens
        cut = sum(length > cap for length in lengths)
        # An answer measured at its limit may have run on: past the limit, nothing is known.
        limit = quality.answer_max_tokens
        unknown = f", none measured past {limit}" if 0 < limit <= cap else ""
        return (f"token cap {cap}: {cut} of {len(lengths)} measured answers of pool {pool} run longer "
                f"(median {statistics.median(lengths):g} tokens{unknown}; {self.source})")

    def refusal(self, from_pool: str, to_pool: str, limit: QualityLossLimit | None) -> str | None:
        """Why a move from `from_pool` to `to_pool` is not made under `limit`, or None."""
        if limit is None or from_pool == to_pool:
            return None
        loss = self.loss(from_pool, to_pool)
        if loss is None:
            return f"pool {to_pool} refused: no measured quality for it or pool {from_pool} in {self.source}"
        why = loss.over(limit)
        return None if why is None else f"pool {to_pool} refused: {why} (against pool {from_pool})"
