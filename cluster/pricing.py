"""What each pool's replicas cost per second: the catalog (live AWS prices where they can be
had), the pool's hardware, its purchase option."""

from __future__ import annotations

import logging

from cluster.live_prices import LivePrices, aws_credentials_present
from core.config import CostConfig, TrilemmaConfig
from core.price_catalog import DEFAULT_CATALOG_PATH, PriceCatalog, ReplicaRate, replica_rate

logger = logging.getLogger(__name__)

# One cache per region and TTL for the process: a redeploy within the TTL asks AWS nothing.
_live_prices: dict[tuple[str, int], LivePrices] = {}


def load_catalog(costs: CostConfig) -> PriceCatalog:
    return PriceCatalog.from_yaml(costs.catalog or DEFAULT_CATALOG_PATH)


def resolve_catalog(costs: CostConfig, accelerators: list[str] | None = None) -> PriceCatalog:
    """The catalog, with live AWS prices for `accelerators` (the ones pools use) when
    configured and credentials are present."""
    catalog = load_catalog(costs)
    if costs.live_prices == "off":
        return catalog
    if not aws_credentials_present():
        logger.info("no AWS credentials: prices come from the catalog of %s", catalog.as_of)
        return catalog
    key = (costs.aws_region, costs.live_price_ttl_s)
    live = _live_prices.setdefault(key, LivePrices(costs.aws_region, costs.live_price_ttl_s))
    return live.apply(catalog, accelerators)


def pool_rates(config: TrilemmaConfig, catalog: PriceCatalog) -> dict[str, ReplicaRate]:
    """Per pool, one replica's rate; a ConfigError names a pool whose accelerator has no price."""
    return {
        name: replica_rate(catalog, pool.accelerator, pool.units, pool.purchase, pool.price_usd_per_hour)
        for name, pool in config.pools.items()
    }
