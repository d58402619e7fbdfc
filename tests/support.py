"""Helpers shared by the test tiers."""

from __future__ import annotations

from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig

TEST_PORT = 8011
# Where the test cluster's Ray serves the app's metrics (Prometheus text format).
METRICS_TEST_PORT = 8091


class ManualClock:
    """A clock that moves only when a test sets `now`."""

    def __init__(self, now=0.0) -> None:
        self.now = now

    def __call__(self):
        return self.now


def config_for_tests() -> TrilemmaConfig:
    """The shipped default config on a test port, plus a scenario that no pool may serve."""
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["http"]["port"] = TEST_PORT
    raw["scenarios"]["closed"] = {"priority": 3, "pools": [], "description": "no pool"}
    raw["costs"]["live_prices"] = "off"  # tests price from the shipped catalog, whatever the machine
    return TrilemmaConfig.from_dict(raw)


def aws_client(service: str, region: str = "us-east-1", endpoint: str | None = None):
    """A boto3 client that fails fast: tests talk to a local AWS-compatible server or a stub."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=1, read_timeout=5, retries={"max_attempts": 1})
    return boto3.client(service, region_name=region, endpoint_url=endpoint, config=config)
