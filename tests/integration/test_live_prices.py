"""Live AWS prices through boto3: parsed from real API shapes, spot from a local AWS-compatible
server (moto), and the catalog kept, with one log line, whenever AWS cannot answer."""

from __future__ import annotations

import json
import logging

import pytest
from botocore.stub import Stubber

from cluster.live_prices import LivePrices, on_demand_usd_per_hour, spot_usd_per_hour
from core.price_catalog import PriceCatalog
from tests.support import aws_client as client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fake_aws_credentials")]

CATALOG = PriceCatalog.model_validate({
    "as_of": "catalog-date", "energy_usd_per_kwh": 0.1, "cloud_premium_multiplier": 1.0,
    "accelerators": {"H100": {"aws_instance_type": "p5.48xlarge", "units_per_instance": 8,
                              "on_demand_usd_per_hour": 6.0, "spot_usd_per_hour": 3.0, "board_power_watts": 700},
                     "cpu": {"on_demand_usd_per_hour": 0.04, "spot_usd_per_hour": 0.01, "board_power_watts": 8}},
})


def price_list_entry(usd: str) -> str:
    """One product as the Price List API returns it: a JSON document inside a string."""
    return json.dumps({
        "product": {"attributes": {"instanceType": "p5.48xlarge"}},
        "terms": {"OnDemand": {"X.JRTCKXETXF": {"priceDimensions": {
            "X.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
    })


def test_on_demand_price_is_read_from_the_price_list_answer():
    pricing = client("pricing")
    with Stubber(pricing) as stub:
        stub.add_response("get_products", {"PriceList": [price_list_entry("55.0400000000")], "FormatVersion": "aws_v1"})
        assert on_demand_usd_per_hour(pricing, "p5.48xlarge", "us-east-1") == 55.04


def test_spot_prices_come_from_an_aws_compatible_server(moto_endpoint):
    ec2 = client("ec2", endpoint=moto_endpoint)
    price = spot_usd_per_hour(ec2, "t3.micro")
    assert 0 < price < 1


def test_live_prices_replace_catalog_figures_per_unit(moto_endpoint):
    pricing = client("pricing")
    stub = Stubber(pricing)
    stub.add_response("get_products", {"PriceList": [price_list_entry("80.0")], "FormatVersion": "aws_v1"})
    stub.activate()
    calls = []

    def clients(service, region):
        calls.append(service)
        return pricing if service == "pricing" else client("ec2", region, moto_endpoint)

    live = LivePrices("us-east-1", ttl_s=3600, clients=clients)
    # moto's spot history knows common instance types; point the H100 entry at one it has.
    catalog = CATALOG.with_prices("H100", on_demand=None, spot=None)
    catalog = catalog.model_copy(update={"accelerators": {
        **catalog.accelerators,
        "H100": catalog.accelerators["H100"].model_copy(update={"aws_instance_type": "t3.micro"})}})
    updated = live.apply(catalog)
    assert updated.accelerator("h100").on_demand_usd_per_hour == pytest.approx(80.0 / 8)
    assert updated.accelerator("h100").spot_usd_per_hour != 3.0
    assert updated.accelerator("cpu") == catalog.accelerator("cpu")   # no instance type: untouched
    # Fetched once per TTL, and applied to whatever catalog is given (an edited one, say).
    edited = catalog.model_copy(update={"energy_usd_per_kwh": 0.3})
    again = live.apply(edited)
    assert calls == ["pricing", "ec2"]
    assert again.energy_usd_per_kwh == 0.3 and again.accelerator("h100") == updated.accelerator("h100")


def test_an_unreachable_aws_leaves_the_catalog_with_one_log_line(caplog):
    live = LivePrices("us-east-1", ttl_s=3600, clients=lambda service, region: client(
        service, region, endpoint="http://127.0.0.1:9"))
    with caplog.at_level(logging.WARNING, logger="cluster.live_prices"):
        assert live.apply(CATALOG, ["h100"]) == CATALOG
    lines = [r.getMessage() for r in caplog.records if r.name == "cluster.live_prices"]
    assert len(lines) == 1 and "for H100" in lines[0] and "using the catalog of catalog-date" in lines[0]


def test_an_endpoint_without_the_price_list_api_falls_back_too(moto_endpoint, caplog):
    live = LivePrices("us-east-1", ttl_s=3600, clients=lambda service, region: client(
        service, region, endpoint=moto_endpoint))
    with caplog.at_level(logging.WARNING, logger="cluster.live_prices"):
        assert live.apply(CATALOG) == CATALOG
    assert "live AWS prices unavailable for H100" in caplog.text
