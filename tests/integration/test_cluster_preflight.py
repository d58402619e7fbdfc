"""`trilemma cluster check` against a local AWS-compatible server (moto) for EC2's instance
offerings and spot price history. moto's Service Quotas knows only VPC quotas (EC2's answer
NoSuchResource, and GetAWSDefaultServiceQuota is not implemented), so the quota values are
tested with botocore's Stubber, which checks each call against the real API's model; against
moto itself, `cluster check` must report every EC2 quota as one it could not read."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.stub import Stubber

from cluster import launcher_config
from cluster.launcher_config import DEFAULT_LAUNCHER_PATH
from cluster.preflight import QUOTAS, launched_types, quota_family, run_checks
from core.price_catalog import PriceCatalog
from serve_app.cli import main
from tests.support import aws_client as client

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fake_aws_credentials")]

# moto stamps its spot price history 2006-01-02 15:04 UTC: an hour later it is current.
MOTO_SPOT_NOW = dt.datetime(2006, 1, 2, 16, 4, tzinfo=dt.timezone.utc)
MAX_SPOT_AGE = dt.timedelta(hours=6)
# The shipped menu: L4, A100-40G, H100 and H200, on demand and on spot, and a c7i head.
LAUNCHER = launcher_config.parse(DEFAULT_LAUNCHER_PATH.read_text())
CATALOG = PriceCatalog.from_yaml()
PLENTY = 10_000.0


def stubbed_quotas(values: dict[str, float | None]):
    """A Service Quotas client answering, in the order the check asks, each quota's value; None
    answers as AWS does for a quota never raised: NoSuchResource, then the default (5)."""
    quotas = client("service-quotas")
    stub = Stubber(quotas)
    needed = sorted({(quota_family(row.instance_type, row.purchase), row.purchase) for row in launched_types(LAUNCHER)})
    for key in needed:
        code, name = QUOTAS[key]
        params = {"ServiceCode": "ec2", "QuotaCode": code}
        value = values.get(code, PLENTY)
        if value is None:
            stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=params)
            stub.add_response("get_aws_default_service_quota", {"Quota": {"QuotaCode": code, "QuotaName": name,
                                                                         "Value": 5.0}}, params)
        else:
            stub.add_response("get_service_quota", {"Quota": {"QuotaCode": code, "QuotaName": name,
                                                             "Value": value}}, params)
    stub.activate()
    return quotas


def check(moto_endpoint, region="us-east-1", quotas=None, now=MOTO_SPOT_NOW):
    ec2 = client("ec2", region, moto_endpoint)
    quotas = quotas or stubbed_quotas({})
    findings = run_checks(LAUNCHER, lambda service: ec2 if service == "ec2" else quotas, CATALOG,
                          region=region, now=now, max_spot_age=MAX_SPOT_AGE)
    return findings


def messages(findings, level, check_name):
    return [f.message for f in findings if f.level == level and f.check == check_name]


def test_a_ready_account_passes_every_check(moto_endpoint):
    findings = check(moto_endpoint)
    assert [f.message for f in findings if f.level == "problem"] == []
    assert sorted(messages(findings, "ok", "offering")) == [
        f"{t} is offered in us-east-1" for t in ("c7i.4xlarge", "g6.xlarge", "p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge")]
    assert len(messages(findings, "ok", "quota")) == 6
    assert ("quota 'All P5 Spot Instance Requests' (L-C4BD4855) in us-east-1 is 10000 vCPUs, >= the 768 needed "
            "(2 x p5.48xlarge x 192 + 2 x p5en.48xlarge x 192)") in messages(findings, "ok", "quota")
    spot = messages(findings, "ok", "spot price")
    assert len(spot) == 4 and all("spot in us-east-1: $1e-05/h" in m for m in spot)
    # moto's spot price is $0.00001: far off the catalog's, which is worth a warning, not a failure.
    drift = messages(findings, "warning", "spot price")
    assert any(m.startswith("the catalog's spot price of H100 ($27.52/h per p5.48xlarge, as of 2026-11-01)")
               for m in drift)


def test_an_instance_type_the_region_does_not_offer_is_a_problem(moto_endpoint):
    findings = check(moto_endpoint, region="sa-east-1")   # moto's sa-east-1 has no p5en
    assert messages(findings, "problem", "offering") == [
        "p5en.48xlarge (ray.worker.h200.on-demand, ray.worker.h200.spot) is not offered in sa-east-1: pick a "
        "region that offers it (provider.region), or drop the type (max_workers: 0)"]
    assert len(messages(findings, "ok", "offering")) == 4


def test_a_quota_below_what_the_workers_need_names_the_increase(moto_endpoint):
    findings = check(moto_endpoint, quotas=stubbed_quotas({"L-417A185B": 96, "L-1216C47A": None}))
    assert messages(findings, "problem", "quota") == [
        "quota 'Running On-Demand P instances' (L-417A185B) in us-east-1 is 96 vCPUs; the launcher config needs "
        "960 at max_workers (2 x p4d.24xlarge x 96 + 2 x p5.48xlarge x 192 + 2 x p5en.48xlarge x 192): request "
        "an increase to at least 960, or lower max_workers",
        # Never raised: AWS answers NoSuchResource and the default (5) applies; the head needs 16.
        "quota 'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' (L-1216C47A) in us-east-1 is 5 "
        "vCPUs; the launcher config needs 16 at max_workers (1 x c7i.4xlarge x 16): request an increase to at "
        "least 16, or lower max_workers",
    ]


def test_cluster_check_against_moto_reports_missing_quotas_and_stale_spot_prices(moto_endpoint, capsys):
    assert main(["cluster", "check", "--endpoint-url", moto_endpoint]) == 1
    out = capsys.readouterr().out
    assert "OK       offering    p5en.48xlarge is offered in us-east-1" in out
    assert ("PROBLEM  quota       quota 'Running On-Demand P instances' (L-417A185B) in us-east-1 could not be "
            "read (GetServiceQuota: NoSuchResourceException, then GetAWSDefaultServiceQuota: 500)") in out
    # Against today's clock moto's 2006 prices are stale: the spot types cannot be trusted.
    assert ("PROBLEM  spot price  no spot price for p5.48xlarge (ray.worker.h100.spot) in us-east-1 within the "
            "last 6 h (the latest is from 2006-01-02 15:04 UTC)") in out
    assert out.strip().endswith("problem(s) for cluster/aws.yaml in us-east-1")


def test_cluster_check_without_credentials_says_so(monkeypatch, tmp_path, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["cluster", "check"]) == 1
    assert "PROBLEM  credentials no AWS credentials" in capsys.readouterr().out


def test_an_unreachable_endpoint_is_a_problem_for_each_check(capsys):
    assert main(["cluster", "check", "--endpoint-url", "http://127.0.0.1:9"]) == 1
    out = capsys.readouterr().out
    for name in ("offering", "quota", "spot price"):
        assert f"PROBLEM  {name:11} could not ask AWS in us-east-1: EndpointConnectionError" in out
