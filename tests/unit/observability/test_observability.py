"""The operator's view, checked without a running app: the shipped rules and dashboard are what
the default config writes, promtool accepts the rules and passes their unit tests, every panel
parses as PromQL, the dashboard's layout and variables hold together, and `trilemma top`
renders what Prometheus answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from contract.serving_metrics import RequestMetrics
from core import wire
from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from observability.grafana import GRID_WIDTH, dashboard
from observability.panels import board, concrete
from observability.prometheus_setup import rules_yaml, scrape_config
from observability.promql import slo_bucket
from observability.rules import rules_for
from observability.top import ExporterSource, PrometheusSource, render

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "observability" / "prometheus" / "trilemma.rules.yml"
RULE_TESTS = ROOT / "observability" / "prometheus" / "trilemma.rules.test.yml"
DASHBOARD = ROOT / "observability" / "grafana" / "dashboards" / "trilemma.json"


@pytest.fixture(scope="module")
def config() -> TrilemmaConfig:
    return TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)


def _promtool() -> str:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make prometheus` installs Debian's prometheus package, which has it"
    return promtool


def test_the_shipped_rules_and_dashboard_are_what_the_default_config_writes(config):
    assert RULES.read_text() == rules_yaml(config), (
        "observability/prometheus/trilemma.rules.yml is out of date: "
        "run `trilemma observe rules --out observability/prometheus/trilemma.rules.yml`")
    assert json.loads(DASHBOARD.read_text()) == dashboard(config), (
        "the dashboard is out of date: run `trilemma observe dashboard --out observability/grafana/dashboards/trilemma.json`")


def test_promtool_accepts_the_rules_and_every_alert_passes_its_unit_tests():
    checked = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([_promtool(), "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
              if "alert" in rule}
    tested_alerts = {check["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
                     for check in test["alert_rule_test"]}
    assert alerts == tested_alerts, f"alerts without a unit test: {sorted(alerts - tested_alerts)}"


def test_every_panel_query_is_valid_promql(config, tmp_path):
    """promtool parses each panel's expression (as a recording rule) the way Prometheus will."""
    exprs = [concrete(target.expr) for panel in board(config) for target in panel.targets]
    exprs += [panel["expr"] for panel in dashboard(config)["annotations"]["list"]]
    rules = {"groups": [{"name": "panels", "rules": [{"record": f"panel:query_{i}", "expr": expr}
                                                      for i, expr in enumerate(exprs)]}]}
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(rules))
    checked = subprocess.run([_promtool(), "check", "rules", str(tmp_path / "panels.yml")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_layout_holds_together(config):
    board_json = dashboard(config)
    panels = board_json["panels"]
    assert board_json["uid"] and len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= GRID_WIDTH, panel["title"]
        covered = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
    text = json.dumps(panels) + json.dumps(board_json["annotations"])
    for variable in board_json["templating"]["list"]:
        assert f"${variable['name']}" in text or f"${{{variable['name']}}}" in text, \
            f"template variable {variable['name']} is used by no panel"


def test_every_row_the_issue_names_is_on_the_board(config):
    rows = {panel.row for panel in board(config)}
    assert rows == {"Latency", "Throughput", "Utilization", "Queues", "Cost", "Scaling", "Batch job"}
    slo_lines = {legend: value for panel in board(config) for legend, value in panel.thresholds.items()}
    assert slo_lines["chat SLO"] in (2.5, 0.25)


def test_rules_follow_the_config(config):
    """Thresholds and SLOs come from the config: change one and the rule changes with it."""
    stricter = config.with_overrides({"scenarios.chat.slo_ttft_ms": 900, "alerts.usd_per_request_above": 0.02},
                                     source="test")
    exprs = {rule.get("alert") or rule["record"]: rule["expr"]
             for group in rules_for(stricter)["groups"] for rule in group["rules"]}
    assert '{scenario="chat"} > 0.9 and' in exprs["TrilemmaTTFTAboveSLO"]
    assert exprs["TrilemmaCostPerRequestHigh"].endswith("> 0.02")
    # 0.9 s is not a bucket boundary: counted from 0.75 s, the largest below it.
    assert 'le=~"0\\\\.75"' in exprs["scenario:trilemma_ttft_over_slo:ratio_5m"]
    without_slos = config.with_overrides({"scenarios.chat.slo_ttft_ms": None, "scenarios.chat.slo_tpot_ms": None},
                                         source="test")
    alerts = [rule["alert"] for rule in rules_for(without_slos)["groups"][1]["rules"]]
    assert alerts == ["TrilemmaPoolUnderused", "TrilemmaCostPerRequestHigh"]


def test_the_scrape_config_finds_rays_nodes_and_loads_the_rules(tmp_path):
    scrape = scrape_config(rules_file=tmp_path / "r.yml", discovery_file=Path("/tmp/ray/prom_metrics_service_discovery.json"))
    job = scrape["scrape_configs"][0]
    assert job["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]
    assert scrape["rule_files"] == [str(tmp_path / "r.yml")]
    assert re.fullmatch(job["metric_relabel_configs"][0]["regex"], "ray_trilemma_tokens_total")


def test_top_from_prometheus_shows_each_pool_and_scenario_against_its_slo(config):
    def answer(request: httpx.Request) -> httpx.Response:
        expr = request.url.params["query"]
        if "trilemma_ttft_seconds_bucket" in expr and "0.99" in expr:
            result = [{"metric": {"pool": "short", "scenario": "chat"}, "value": [0, "0.42"]}]
        elif expr.startswith("sum by (pool, scenario) (rate(trilemma_requests_total"):
            result = [{"metric": {"pool": "short", "scenario": "chat"}, "value": [0, "1.5"]}]
        elif expr.startswith("sum by (pool) (rate(trilemma_engine_busy_seconds_total"):
            result = [{"metric": {"pool": "short"}, "value": [0, "0.25"]}, {"metric": {"pool": "long"}, "value": [0, "0"]}]
        else:
            result = []
        return httpx.Response(200, json={"status": "success", "data": {"result": result}})

    source = PrometheusSource("http://prometheus", client=httpx.Client(transport=httpx.MockTransport(answer)))
    text = render(source, config, "test")
    chat = next(line for line in text.splitlines() if line.startswith("short") and "chat" in line)
    assert "420 ms" in chat and "1.50" in chat and "2500 ms / 250 ms" in chat
    assert any(line.startswith("long") and "0%" in line for line in text.splitlines())


def test_top_from_the_apps_own_endpoint_diffs_two_readings(config):
    def exposition(requests: int, busy_s: float, slow: int) -> str:
        common = 'pool="short",priority="0",scenario="chat"'
        return "\n".join([
            f'ray_trilemma_requests_total{{{common},status="200",tenant="default"}} {requests}',
            f'ray_trilemma_ttft_seconds_bucket{{le="0.5",{common}}} {requests - slow}',
            f'ray_trilemma_ttft_seconds_bucket{{le="5.0",{common}}} {requests}',
            f'ray_trilemma_ttft_seconds_bucket{{le="+Inf",{common}}} {requests}',
            f'ray_trilemma_engine_busy_seconds_total{{pool="short"}} {busy_s}',
            f'ray_trilemma_replica_seconds_total{{pool="short"}} {busy_s * 4}',
            'ray_trilemma_requests_waiting{pool="short"} 3',
        ])

    readings = iter([exposition(10, 1.0, 0), exposition(110, 26.0, 100)])
    source = ExporterSource("http://app/metrics", fetch=lambda url: next(readings))
    source.refresh()
    assert not source.ready and render(source, config, "t").count("short") == 0
    source.refresh()
    rows = source.scenario_figures()[("short", "chat")]
    assert rows["req/s"] > 0 and rows["TTFT p99"] == pytest.approx(0.5 + 4.5 * 0.99)
    pool = source.pool_figures()["short"]
    assert pool["busy"] == pytest.approx(25 / 100) and pool["waiting"] == 3


def test_the_shipped_scrape_config_loads_the_rules():
    checked = subprocess.run([_promtool(), "check", "config", str(ROOT / "cluster" / "prometheus.yml")],
                             capture_output=True, text=True)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0 and "trilemma.rules.yml" in output and "SUCCESS" in output, output


def test_an_slo_is_counted_from_the_largest_boundary_at_or_below_it():
    assert slo_bucket(wire.TTFT_BUCKETS_S, 2.5) == 2.5
    assert slo_bucket(wire.TTFT_BUCKETS_S, 0.9) == 0.75
    assert slo_bucket(wire.TTFT_BUCKETS_S, 0.001) == wire.TTFT_BUCKETS_S[0]


def test_the_router_histograms_boundaries_do_not_follow_the_config():
    """Ray keeps a histogram's first boundaries per node and drops points with others: boundaries
    that followed the SLOs would empty the histogram after a redeploy that changed one."""
    metrics = RequestMetrics()
    assert metrics.ttft.boundaries == sorted(set(wire.TTFT_BUCKETS_S))
    assert metrics.tpot.boundaries == sorted(set(wire.TPOT_BUCKETS_S))
