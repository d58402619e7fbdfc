"""`trilemma cluster plan` (the cheapest node types for the pools, written into the launcher
config) and `trilemma cluster check` (AWS offers them, the quotas hold them, spot is priced)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from cluster import launcher_config
from cluster.launcher_config import DEFAULT_LAUNCHER_PATH
from cluster.node_types import gpu_node_types
from cluster.plan import PlanError, plan_cluster
from cluster.pool_needs import cpu_pools, pool_needs
from cluster.pricing import load_catalog
from core.config import CONFIG_DIR, TrilemmaConfig
from core.price_catalog import DEFAULT_CATALOG_PATH, PriceCatalog

DEFAULT_CLUSTER_CONFIG = CONFIG_DIR / "gpu-cluster.yaml"


def add_commands(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser("cluster", help="GPU node types for Ray's autoscaler, and an AWS pre-flight")
    sub = cluster.add_subparsers(dest="cluster_command", required=True)
    plan = sub.add_parser("plan", help="the cheapest node types and max workers for the pools; "
                                       "a diff of the launcher config, or --write")
    plan.add_argument("--config", type=Path, default=DEFAULT_CLUSTER_CONFIG, help="the Trilemma config")
    plan.add_argument("--launcher", type=Path, default=DEFAULT_LAUNCHER_PATH, help="Ray cluster-launcher config")
    plan.add_argument("--write", action="store_true", help="write the worker types into the launcher config")
    plan.set_defaults(func=plan_command)
    check = sub.add_parser("check", help="pre-flight: offerings, vCPU quotas, spot prices (boto3)")
    check.add_argument("--launcher", type=Path, default=DEFAULT_LAUNCHER_PATH, help="Ray cluster-launcher config")
    check.add_argument("--region", help="default: the launcher config's provider.region")
    check.add_argument("--endpoint-url", help="an AWS-compatible endpoint for EC2 and Service Quotas")
    check.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG_PATH,
                       help="price catalog whose spot prices are compared with AWS's")
    check.add_argument("--max-spot-age-hours", type=float, default=6.0,
                       help="a spot price older than this is not current")
    check.set_defaults(func=check_command)


def plan_command(args: argparse.Namespace) -> int:
    config = TrilemmaConfig.from_yaml(args.config)
    catalog = load_catalog(config.costs)
    text = args.launcher.read_text()
    launcher = launcher_config.parse(text, str(args.launcher))
    needs = pool_needs(config)
    if not needs:
        print(f"{_shown(args.config)}: no GPU pools, nothing to plan (CPU pools run on the head: "
              f"{', '.join(cpu_pools(config))})")
        return 0
    try:
        plan = plan_cluster(needs, gpu_node_types(catalog), launcher_config.head_node(launcher, catalog),
                            cpu_pools(config))
    except PlanError as error:
        print(f"trilemma cluster plan: {error}", file=sys.stderr)
        return 2
    print(f"cluster plan for {_shown(args.config)} (AWS prices of the catalog as of {catalog.as_of})")
    print("\n".join(plan.report()))
    planned = launcher_config.apply_plan(text, plan)
    launcher_config.validate(launcher_config.parse(planned), f"{args.launcher} as planned")
    if not args.write:
        diff = launcher_config.unified_diff(text, planned, _shown(args.launcher))
        print(f"\n{diff}" if diff else f"\n{_shown(args.launcher)} already has these worker types")
        return 0
    if plan.config_edits:
        print(f"trilemma cluster plan: not written: {_shown(args.config)} must change first, or its replicas "
              f"would ask for nodes the launcher no longer has: {'; '.join(plan.config_edits)}",
              file=sys.stderr)
        return 2
    args.launcher.write_text(planned)
    print(f"\nwrote the worker types into {_shown(args.launcher)}")
    return 0


def _shown(path: Path) -> str:
    """A path as people typed it: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_command(args: argparse.Namespace) -> int:
    from cluster.preflight import Finding, run_checks

    launcher = launcher_config.parse(args.launcher.read_text(), str(args.launcher))
    region = args.region or launcher.get("provider", {}).get("region")
    if not region:
        print("trilemma cluster check: no region: pass --region or set provider.region", file=sys.stderr)
        return 2
    if not _credentials_present():
        findings = [Finding(check="credentials", level="problem", message=(
            "no AWS credentials: boto3 found none (environment, ~/.aws, instance role); "
            "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"))]
    else:
        findings = run_checks(
            launcher, _clients(region, args.endpoint_url), PriceCatalog.from_yaml(args.catalog),
            region=region, now=dt.datetime.now(dt.timezone.utc),
            max_spot_age=dt.timedelta(hours=args.max_spot_age_hours),
        )
    for finding in findings:
        print(f"{finding.level.upper():8} {finding.check:11} {finding.message}")
    problems = sum(finding.level == "problem" for finding in findings)
    print(f"{problems} problem(s) for {_shown(args.launcher)} in {region}" if problems
          else f"ready: {_shown(args.launcher)} in {region}")
    return 1 if problems else 0


def _credentials_present() -> bool:
    import boto3

    return boto3.Session().get_credentials() is not None


def _clients(region: str, endpoint_url: str | None):
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2})
    made = {}

    def client(service: str):
        if service not in made:
            made[service] = boto3.client(service, region_name=region, endpoint_url=endpoint_url, config=config)
        return made[service]

    return client
