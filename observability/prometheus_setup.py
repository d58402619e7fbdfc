"""A Prometheus that scrapes the app out of the box: its config finds Ray's metrics endpoints
through the service-discovery file Ray writes on its head node (as Ray's docs advise), drops
Ray's `ray_` prefix from the app's series, and loads the rules written from the app's config.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from core.config import TrilemmaConfig
from observability.rules import rules_for

# Ray's head node keeps the addresses of every node's metrics agent here (its temp dir).
RAY_DISCOVERY_FILE = "prom_metrics_service_discovery.json"
SCRAPE_INTERVAL_S = 5
# The app's series lose Ray's prefix; Ray's and vLLM's keep theirs.
APP_SERIES_RELABEL = {"source_labels": ["__name__"], "regex": "ray_(trilemma_.*)",
                      "target_label": "__name__", "replacement": "$1"}


@dataclass(frozen=True)
class PrometheusSetup:
    folder: Path

    @property
    def config_file(self) -> Path:
        return self.folder / "prometheus.yml"

    @property
    def rules_file(self) -> Path:
        return self.folder / "trilemma.rules.yml"

    @property
    def data(self) -> Path:
        return self.folder / "data"


def scrape_config(*, rules_file: Path, discovery_file: Path | None = None, targets: list[str] | None = None,
                  interval_s: int = SCRAPE_INTERVAL_S) -> dict[str, Any]:
    """Scrape Ray's nodes (from Ray's discovery file) or fixed `targets`."""
    job: dict[str, Any] = {"job_name": "trilemma", "metric_relabel_configs": [APP_SERIES_RELABEL]}
    if targets:
        job["static_configs"] = [{"targets": targets}]
    else:
        job["file_sd_configs"] = [{"files": [str(discovery_file)]}]
    return {
        "global": {"scrape_interval": f"{interval_s}s", "scrape_timeout": f"{interval_s}s",
                   "evaluation_interval": f"{interval_s}s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [job],
    }


def write_setup(config: TrilemmaConfig, folder: Path, *, ray_temp_dir: Path = Path("/tmp/ray"),
                targets: list[str] | None = None, interval_s: int = SCRAPE_INTERVAL_S) -> PrometheusSetup:
    setup = PrometheusSetup(folder)
    folder.mkdir(parents=True, exist_ok=True)
    setup.rules_file.write_text(rules_yaml(config))
    setup.config_file.write_text(yaml.safe_dump(scrape_config(
        rules_file=setup.rules_file.resolve(), discovery_file=ray_temp_dir / RAY_DISCOVERY_FILE, targets=targets,
        interval_s=interval_s), sort_keys=False))
    return setup


def rules_yaml(config: TrilemmaConfig) -> str:
    header = (f"# Written by `trilemma observe rules` from the config of app {config.app_name!r}; "
              "regenerate it after changing the config's SLOs or alerts.\n")
    return header + yaml.safe_dump(rules_for(config), sort_keys=False, width=1000)


def prometheus_rule_yaml(config: TrilemmaConfig) -> str:
    """The same rules as a PrometheusRule object (Prometheus Operator, on Kubernetes)."""
    rule = {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": f"{config.app_name}-rules", "labels": {"release": "prometheus"}},
        "spec": rules_for(config),
    }
    return yaml.safe_dump(rule, sort_keys=False, width=1000)


def start(setup: PrometheusSetup, port: int, *, quiet: bool = False) -> subprocess.Popen:
    """Prometheus on 127.0.0.1:`port`; `quiet` drops its log."""
    output = subprocess.DEVNULL if quiet else None
    return subprocess.Popen([
        prometheus_binary(), f"--config.file={setup.config_file}", f"--storage.tsdb.path={setup.data}",
        f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
    ], stdout=output, stderr=output)


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        raise FileNotFoundError("no `prometheus` on PATH: `make prometheus` installs Debian's package, "
                                "or get it from the Prometheus project's releases")
    return binary


def check_rules(path: Path) -> subprocess.CompletedProcess:
    """`promtool check rules`: the file parses and every expression is valid PromQL."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise FileNotFoundError("no `promtool` on PATH: it comes with the prometheus package")
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
