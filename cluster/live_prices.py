"""Live AWS prices for the catalog's instances: on demand from the Price List API, spot from
EC2's spot price history. Looked up when the app is built (never on a request's path),
cached for a TTL, and replaced by the catalog's figures, with one log line, when AWS cannot
be asked (no credentials, no network, an API error).

The standard credential chain applies, and so does AWS_ENDPOINT_URL (or the per-service
AWS_ENDPOINT_URL_EC2 / AWS_ENDPOINT_URL_PRICING) for an AWS-compatible endpoint.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from typing import Any, Callable, Iterable

from core.price_catalog import PriceCatalog

logger = logging.getLogger(__name__)

# The Price List API answers from a few regions only; us-east-1 serves every region's prices.
PRICING_API_REGION = "us-east-1"


class LivePriceError(RuntimeError):
    """AWS did not give a usable price."""


def on_demand_usd_per_hour(pricing_client: Any, instance_type: str, region: str) -> float:
    """The Linux, shared-tenancy on-demand price of one instance in `region`."""
    filters = {
        "instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux",
        "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
    }
    response = pricing_client.get_products(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
        MaxResults=10,
    )
    for entry in response.get("PriceList", []):
        product = json.loads(entry) if isinstance(entry, str) else entry
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = float(dimension.get("pricePerUnit", {}).get("USD", 0))
                if usd > 0:
                    return usd
    raise LivePriceError(f"no on-demand price for {instance_type} in {region}")


def spot_usd_per_hour(ec2_client: Any, instance_type: str) -> float:
    """The median of the latest spot price in each availability zone of the client's region."""
    history = ec2_client.describe_spot_price_history(
        InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX"], MaxResults=100,
    ).get("SpotPriceHistory", [])
    latest: dict[str, tuple[Any, float]] = {}
    for entry in history:
        zone, stamp, price = entry.get("AvailabilityZone", ""), entry.get("Timestamp"), float(entry["SpotPrice"])
        if zone not in latest or (stamp is not None and latest[zone][0] is not None and stamp > latest[zone][0]):
            latest[zone] = (stamp, price)
    prices = [price for _, price in latest.values() if price > 0]
    if not prices:
        raise LivePriceError(f"no spot price history for {instance_type}")
    return statistics.median(prices)


class LivePrices:
    """Per-instance prices from AWS, fetched at most once per TTL, applied to any catalog."""

    def __init__(self, region: str, ttl_s: float, clients: Callable[[str, str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._region = region
        self._ttl_s = ttl_s
        self._clients = clients or _boto3_client
        self._clock = clock
        # instance type -> (fetched at, on-demand $/h, spot $/h) for a whole instance
        self._fetched: dict[str, tuple[float, float, float]] = {}

    def apply(self, catalog: PriceCatalog, accelerators: Iterable[str] | None = None) -> PriceCatalog:
        """`catalog` with live prices for `accelerators` (default: all it lists). One that AWS
        cannot price keeps its catalog figures, and says so in one log line."""
        names = [catalog_key(catalog, n) for n in (accelerators or catalog.accelerators)]
        updated = catalog
        for name in dict.fromkeys(names):
            price = catalog.accelerators[name]
            if not price.aws_instance_type:
                continue
            try:
                on_demand, spot = self._instance_prices(price.aws_instance_type)
            except Exception as error:  # any failure to ask AWS means the catalog stands
                logger.warning("live AWS prices unavailable for %s (%s: %s); using the catalog of %s",
                               name, type(error).__name__, " ".join(str(error).split())[:200], catalog.as_of)
                continue
            updated = updated.with_prices(name, on_demand=on_demand / price.units_per_instance,
                                          spot=spot / price.units_per_instance)
            logger.info("live AWS prices for %s (%s in %s) replace the catalog's", name,
                        price.aws_instance_type, self._region)
        return updated

    def _instance_prices(self, instance_type: str) -> tuple[float, float]:
        cached = self._fetched.get(instance_type)
        if cached and self._clock() - cached[0] < self._ttl_s:
            return cached[1], cached[2]
        on_demand = on_demand_usd_per_hour(self._clients("pricing", PRICING_API_REGION), instance_type, self._region)
        spot = spot_usd_per_hour(self._clients("ec2", self._region), instance_type)
        self._fetched[instance_type] = (self._clock(), on_demand, spot)
        return on_demand, spot


def catalog_key(catalog: PriceCatalog, name: str) -> str:
    """The catalog's own spelling of an accelerator name given in any case."""
    catalog.accelerator(name)  # raises, naming the known ones, when it is not there
    return next(key for key in catalog.accelerators if key.lower() == name.lower())


def _boto3_client(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    # Short timeouts and no retries: this runs while the app is being built.
    config = Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1})
    return boto3.client(service, region_name=region, config=config)


def aws_credentials_present() -> bool:
    try:
        import boto3
    except ImportError:
        return False
    return boto3.Session().get_credentials() is not None
