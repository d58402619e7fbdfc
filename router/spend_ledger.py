"""Each tenant's spend in the current UTC day, shared by every router replica.

The ledger is one named, detached Ray actor: router replicas come and go (restarts, scaling)
and all of them see the same spend. It also writes its totals to a JSON file (when one is
configured), so a restart of the whole app does not hand every tenant a fresh budget.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import ray

LEDGER_NAME = "trilemma-spend-ledger"
LEDGER_NAMESPACE = "trilemma"
# A write per request would make the ledger disk-bound: it writes at most once a second, on
# the next spend after the second has passed.
PERSIST_INTERVAL_S = 1.0


def day_of(now: datetime) -> str:
    return now.astimezone(timezone.utc).date().isoformat()


def next_reset(now: datetime) -> datetime:
    """Budgets reset at midnight UTC."""
    today = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=1)


class DailySpend:
    """Spend per tenant for one UTC day; a new day starts from zero."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self._clock = clock
        self.day = day_of(clock())
        self.spent: dict[str, float] = {}

    def _roll(self) -> None:
        today = day_of(self._clock())
        if today != self.day:
            self.day, self.spent = today, {}

    def add(self, tenant: str, usd: float) -> float:
        self._roll()
        self.spent[tenant] = self.spent.get(tenant, 0.0) + usd
        return self.spent[tenant]

    def of(self, tenant: str) -> float:
        self._roll()
        return self.spent.get(tenant, 0.0)

    def over_budget(self, tenant: str, budget_usd: float | None) -> str | None:
        """Why the tenant may not spend more today, or None."""
        if budget_usd is None:
            return None
        spent = self.of(tenant)
        if spent < budget_usd:
            return None
        resets = next_reset(self._clock()).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"tenant {tenant!r} has spent ${spent:.6f} of its daily budget of ${budget_usd:.6g}; "
                f"the budget resets at {resets}")


@ray.remote(num_cpus=0, max_restarts=-1)
class SpendLedger:
    def __init__(self, state_path: str | None) -> None:
        self._path = Path(state_path) if state_path else None
        self._spend = DailySpend()
        self._written_at = 0.0
        if self._path and self._path.exists():
            saved = json.loads(self._path.read_text())
            if saved.get("day") == self._spend.day:
                self._spend.spent = {k: float(v) for k, v in saved.get("spent", {}).items()}

    def add(self, tenant: str, usd: float) -> float:
        total = self._spend.add(tenant, usd)
        if self._path and time.monotonic() - self._written_at >= PERSIST_INTERVAL_S:
            self._persist()
        return total

    def over_budget(self, tenant: str, budget_usd: float | None) -> str | None:
        return self._spend.over_budget(tenant, budget_usd)

    def spent_today(self) -> dict[str, float]:
        return dict(self._spend.spent)

    def _persist(self) -> None:
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"day": self._spend.day, "spent": self._spend.spent}))
        os.replace(temporary, self._path)  # atomic: a crash leaves the old file or the new one
        self._written_at = time.monotonic()


def ledger_handle(state_path: str | None) -> ray.actor.ActorHandle:
    """The cluster's one ledger, created by whichever router replica asks first."""
    return SpendLedger.options(
        name=LEDGER_NAME, namespace=LEDGER_NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote(state_path)
