"""Before `ray up`: does the region offer every instance type of the launcher config, do the
account's EC2 vCPU quotas hold its worker types at max_workers, and are spot prices current
for its spot types? Each answer is a finding with a message that says what to do."""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from typing import Any, Callable, Literal

from pydantic import Field

from cluster.launcher_config import instance_vcpus, is_spot, worker_types
from core.config_base import StrictModel
from core.price_catalog import PriceCatalog

Clients = Callable[[str], Any]  # service name -> boto3 client of the checked region

# EC2 counts running vCPUs per instance family and purchase against these quotas (Service
# Quotas codes). On demand, every P family shares one quota; on spot, P5 (p5, p5e, p5en) has
# its own.
QUOTAS: dict[tuple[str, str], tuple[str, str]] = {
    ("G", "on_demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("P", "on_demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("P", "spot"): ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    ("P5", "spot"): ("L-C4BD4855", "All P5 Spot Instance Requests"),
    ("Standard", "on_demand"): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("Standard", "spot"): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
}
_STANDARD_FAMILIES = "acdhimrtz"
# A catalog price this far from the live one would have misled the plan.
SPOT_PRICE_TOLERANCE = 0.25


class Finding(StrictModel):
    check: Literal["credentials", "offering", "quota", "spot price"]
    level: Literal["ok", "warning", "problem"]
    message: str


class LaunchedType(StrictModel):
    """One instance type the launcher config may start, with what it counts against."""

    node_types: list[str] = Field(description="Launcher node types of this instance type and purchase.")
    instance_type: str
    spot: bool
    max_nodes: int
    vcpus: int

    @property
    def purchase(self) -> str:
        return "spot" if self.spot else "on_demand"


def launched_types(launcher: dict[str, Any]) -> list[LaunchedType]:
    """The head (one, on demand) and every worker type that may start a node."""
    head = launcher["available_node_types"][launcher["head_node_type"]]
    rows = [(launcher["head_node_type"], head["node_config"]["InstanceType"], False, 1)]
    for name, entry in worker_types(launcher).items():
        if entry.get("max_workers", 0) > 0:
            rows.append((name, entry["node_config"]["InstanceType"], is_spot(entry), entry["max_workers"]))
    merged: dict[tuple[str, bool], LaunchedType] = {}
    for name, instance_type, spot, count in rows:
        key = (instance_type, spot)
        if key in merged:
            known = merged[key]
            merged[key] = known.model_copy(update={"node_types": [*known.node_types, name],
                                                   "max_nodes": known.max_nodes + count})
        else:
            merged[key] = LaunchedType(node_types=[name], instance_type=instance_type, spot=spot,
                                       max_nodes=count, vcpus=instance_vcpus(instance_type))
    return list(merged.values())


def quota_family(instance_type: str, purchase: str) -> str | None:
    """`G` (g*, vt*), `P` (p*; `P5` for p5* on spot), `Standard`, or None for families with
    quotas this check does not know."""
    family = instance_type.split(".", 1)[0].lower()
    if family.startswith(("g", "vt")):
        return "G"
    if family.startswith("p5") and purchase == "spot":
        return "P5"
    if family.startswith("p"):
        return "P"
    if family[0] in _STANDARD_FAMILIES:
        return "Standard"
    return None


def check_offerings(ec2: Any, region: str, launched: list[LaunchedType]) -> list[Finding]:
    wanted = sorted({row.instance_type for row in launched})
    offered: set[str] = set()
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="region", Filters=[{"Name": "instance-type", "Values": wanted}])
    for page in pages:
        offered |= {offering["InstanceType"] for offering in page.get("InstanceTypeOfferings", [])}
    findings = []
    for instance_type in wanted:
        names = ", ".join(n for row in launched if row.instance_type == instance_type for n in row.node_types)
        if instance_type in offered:
            findings.append(Finding(check="offering", level="ok", message=f"{instance_type} is offered in {region}"))
        else:
            findings.append(Finding(check="offering", level="problem", message=(
                f"{instance_type} ({names}) is not offered in {region}: pick a region that offers it "
                f"(provider.region), or drop the type (max_workers: 0)")))
    return findings


class QuotaUnknown(RuntimeError):
    """Service Quotas gave no value for a quota; the message says what each call answered."""


def quota_value(quotas: Any, code: str) -> float:
    """The account's applied value; AWS answers NoSuchResource for a quota never changed, whose
    value is then the default."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as error:
        applied = _short(error)
        if _code(error) != "NoSuchResourceException":
            raise QuotaUnknown(applied) from None
    try:
        return float(quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except (ClientError, BotoCoreError) as error:
        raise QuotaUnknown(f"{applied}, then {_short(error)}") from None


def check_quotas(quotas: Any, region: str, launched: list[LaunchedType]) -> list[Finding]:
    needed: dict[tuple[str, str], list[LaunchedType]] = defaultdict(list)
    findings = []
    for row in launched:
        family = quota_family(row.instance_type, row.purchase)
        if family is None:
            findings.append(Finding(check="quota", level="warning", message=(
                f"{row.instance_type}: its family has a vCPU quota this check does not know; check it "
                f"in the Service Quotas console")))
            continue
        needed[(family, row.purchase)].append(row)
    for key, rows in sorted(needed.items()):
        code, name = QUOTAS[key]
        vcpus = sum(row.max_nodes * row.vcpus for row in rows)
        how = " + ".join(f"{row.max_nodes} x {row.instance_type} x {row.vcpus}" for row in rows)
        try:
            value = quota_value(quotas, code)
        except QuotaUnknown as error:
            findings.append(Finding(check="quota", level="problem", message=(
                f"quota '{name}' ({code}) in {region} could not be read ({error}); the launcher "
                f"config needs {vcpus} vCPUs of it ({how}): check it in the Service Quotas console")))
            continue
        if value < vcpus:
            findings.append(Finding(check="quota", level="problem", message=(
                f"quota '{name}' ({code}) in {region} is {value:g} vCPUs; the launcher config needs "
                f"{vcpus} at max_workers ({how}): request an increase to at least {vcpus}, "
                f"or lower max_workers")))
        else:
            findings.append(Finding(check="quota", level="ok", message=(
                f"quota '{name}' ({code}) in {region} is {value:g} vCPUs, >= the {vcpus} needed ({how})")))
    return findings


def check_spot_prices(ec2: Any, region: str, launched: list[LaunchedType], catalog: PriceCatalog,
                      now: dt.datetime, max_age: dt.timedelta) -> list[Finding]:
    """A spot type needs a price AWS set within `max_age`; none means AWS is not selling that
    type on spot there now. A current price far from the catalog's is a warning: the plan
    chose with the catalog's."""
    findings = []
    per_instance = {price.aws_instance_type: (name, price) for name, price in catalog.accelerators.items()}
    for row in (row for row in launched if row.spot):
        history = ec2.describe_spot_price_history(
            InstanceTypes=[row.instance_type], ProductDescriptions=["Linux/UNIX"], StartTime=now - max_age,
        ).get("SpotPriceHistory", [])
        latest: dict[str, tuple[dt.datetime, float]] = {}
        for entry in history:
            zone, stamp = entry.get("AvailabilityZone", ""), entry["Timestamp"]
            if zone not in latest or stamp > latest[zone][0]:
                latest[zone] = (stamp, float(entry["SpotPrice"]))
        current = [price for stamp, price in latest.values() if now - stamp <= max_age]
        if not current:
            newest = max((stamp for stamp, _ in latest.values()), default=None)
            seen = f"the latest is from {newest:%Y-%m-%d %H:%M} UTC" if newest else "none at all"
            findings.append(Finding(check="spot price", level="problem", message=(
                f"no spot price for {row.instance_type} ({', '.join(row.node_types)}) in {region} within "
                f"the last {max_age.total_seconds() / 3600:g} h ({seen}): AWS is not pricing it on spot "
                f"there now; use its on-demand type or another region")))
            continue
        live = statistics.median(current)
        findings.append(Finding(check="spot price", level="ok", message=(
            f"{row.instance_type} spot in {region}: ${live:.4g}/h (median of {len(current)} zones)")))
        if row.instance_type in per_instance:
            name, price = per_instance[row.instance_type]
            listed = price.spot_usd_per_hour * price.units_per_instance
            if listed > 0 and abs(listed - live) / live > SPOT_PRICE_TOLERANCE:
                findings.append(Finding(check="spot price", level="warning", message=(
                    f"the catalog's spot price of {name} (${listed:.2f}/h per {row.instance_type}, as of "
                    f"{catalog.as_of}) is {100 * (listed - live) / live:+.0f}% off the live ${live:.4g}/h; "
                    f"`cluster plan` chose with the catalog's: update core/prices.yaml")))
    return findings


def run_checks(launcher: dict[str, Any], clients: Clients, catalog: PriceCatalog, *, region: str,
               now: dt.datetime, max_spot_age: dt.timedelta) -> list[Finding]:
    """Every check; one that cannot reach AWS becomes a problem naming why, and the rest go on."""
    launched = launched_types(launcher)
    findings: list[Finding] = []
    steps = (
        ("offering", lambda: check_offerings(clients("ec2"), region, launched)),
        ("quota", lambda: check_quotas(clients("service-quotas"), region, launched)),
        ("spot price", lambda: check_spot_prices(clients("ec2"), region, launched, catalog, now, max_spot_age)),
    )
    for check, step in steps:
        try:
            findings += step()
        except Exception as error:  # no network, no permission, an endpoint without the API
            findings.append(Finding(check=check, level="problem",
                                    message=f"could not ask AWS in {region}: {_short(error)}"))
    return findings


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _short(error: Exception) -> str:
    """`GetServiceQuota: NoSuchResourceException`, or the error's class and first words."""
    operation = getattr(error, "operation_name", None)
    if operation and _code(error):
        return f"{operation}: {_code(error)}"
    return f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
