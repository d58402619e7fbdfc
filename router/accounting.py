"""Who is asking and what they owe: API keys to tenants, budgets, and the books of every
answered request (metrics and the tenant's spend). The router asks it at a request's start
and tells it at the request's end."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from contract.serving_metrics import RequestMetrics
from core.adapter_config import NO_ADAPTER
from core.errors import ApiError
from core.upstream import get_logger
from router.spend_ledger import ledger_handle, next_reset
from router.tenants import TenantDirectory, TenantEntry

logger = get_logger(__name__)

DEFAULT_TENANT = "default"  # every request, while no API keys are configured
BUDGET_EXPORT_INTERVAL_S = 5.0


class Accounting:
    def __init__(self, tenants: dict[str, dict[str, Any]], spend_file: str | None) -> None:
        self._tenants = TenantDirectory({name: TenantEntry(**entry) for name, entry in tenants.items()})
        self._ledger = ledger_handle(spend_file)
        self.metrics = RequestMetrics()
        self._budgets = {name: entry.daily_budget_usd for name, entry in self._tenants.entries.items()
                         if entry.daily_budget_usd is not None}
        self._budget_export: asyncio.Task | None = None

    def _keep_budgets_exported(self) -> None:
        """The budgets as gauges, for the spend panel's lines, set again every
        BUDGET_EXPORT_INTERVAL_S: Ray's metrics agent drops a gauge that was not set within two
        export intervals. Started by the first request (it needs the router's event loop)."""
        if not self._budgets or self._budget_export is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the router's loop (a script): nothing to keep alive
            return

        async def export() -> None:
            while True:
                self.metrics.daily_budgets(self._budgets)
                await asyncio.sleep(BUDGET_EXPORT_INTERVAL_S)

        self._budget_export = loop.create_task(export())

    def authenticate(self, authorization: str | None) -> str:
        """The tenant of an `Authorization: Bearer <key>` header; 401 when keys are configured
        and the header has none or an unknown one."""
        self._keep_budgets_exported()
        if not self._tenants.enabled:
            return DEFAULT_TENANT
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "missing API key: send it as 'Authorization: Bearer <key>'",
                           code="invalid_api_key")
        tenant = self._tenants.tenant_for(key.strip())
        if tenant is None:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
        return tenant

    def default_adapter(self, tenant: str) -> str | None:
        return self._tenants.default_adapter(tenant)

    async def check_budget(self, tenant: str) -> None:
        """429, naming the budget and its reset, when the tenant has spent its day's budget."""
        budget = self._tenants.daily_budget_usd(tenant)
        if budget is None:
            return
        reason = await self._ledger.over_budget.remote(tenant, budget)
        if reason is not None:
            now = datetime.now(timezone.utc)
            retry_after = int((next_reset(now) - now).total_seconds()) + 1
            raise ApiError(429, reason, code="budget_exceeded", headers={"Retry-After": str(retry_after)})

    def record(self, *, pool: str, scenario: str, tenant: str, priority: int | None, status: int,
               usage: dict[str, Any] | None, adapter: str = NO_ADAPTER, **timings: float) -> None:
        """Books a finished request on the metrics and on its tenant's spend. It never fails an
        answer that was served: a failure here is logged."""
        try:
            self.metrics.record(pool=pool, scenario=scenario, tenant=tenant, adapter=adapter, priority=priority,
                                status=status, usage=usage, **timings)
            cost = (usage or {}).get("cost_usd")
            # Only budgets read the ledger: tenants without one cost it no call per request.
            if cost and self._tenants.daily_budget_usd(tenant) is not None:
                self._ledger.add.remote(tenant, cost)  # not awaited: the answer does not wait on it
        except Exception as error:
            logger.warning("accounting of a %s/%s request failed: %r", pool, scenario, error)
