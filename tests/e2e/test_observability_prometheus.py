"""The operator's view against the real app and a real Prometheus: after a short load, every
panel's query and every recording rule evaluates through Prometheus's HTTP API and returns data
for the default config's pools and scenarios, every metric a query names exists, and
`trilemma top` shows the pools."""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest
import yaml

from core import wire
from observability.panels import board, concrete
from serve_app.cli import main
from tests.e2e.prometheus_reads import settled, wait_for
from tests.support import METRICS_TEST_PORT, config_for_tests

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
RATE_WINDOW = "5m"
# Series that appear only on an event this load does not cause: a shed (an overload), a scaling
# decision (the default config does not autoscale), a batch job's progress (no job runs here;
# tests/integration/test_summarize_job.py checks the job exports them). Their queries must
# still evaluate, and their metrics must be the app's.
ON_EVENT = {wire.REQUESTS_SHED_TOTAL, wire.SCALING_DECISIONS_TOTAL, wire.TARGET_REPLICAS,
            wire.BATCH_DOCUMENTS, wire.BATCH_TOKENS_TOTAL, wire.BATCH_COST_USD_TOTAL}
# A metric's name in an expression (recording rules' names have colons, and panels use none).
METRIC = re.compile(r"\b(?:trilemma|ray)_[a-z_]+")


def _query(prometheus: str, expr: str) -> list[dict]:
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert body["status"] == "success", f"Prometheus refused {expr}: {body.get('error')}"
    return body["data"]["result"]


def _until_data(prometheus: str, expr: str, timeout_s: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while not (result := _query(prometheus, expr)) and time.monotonic() < deadline:
        time.sleep(2)
    return result


@pytest.fixture(scope="module")
def loaded(base_url, api_key, prometheus):
    """Streamed chat (TTFT and TPOT are measured on streams) on the short pool, a long prompt on
    the long pool, and a batch request, twice, so that every series has moved within the rate
    window and the quantiles are numbers.

    Each router process has its own series (Ray labels them with its WorkerId), and a series'
    first sample is no increase. So the second round starts only once Prometheus holds all of
    the first round's counts: had both rounds reached Ray's exporter (every 10 s) together, a
    series new in this module would first appear already holding them, and its rate, and so
    its quantiles, would stay empty."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=180)
    long_prompt = "Summarize: " + "the quick brown fox jumps over the lazy dog. " * 150
    requests = [("Name a colour.", "chat")] * 4 + [(long_prompt, "chat"), ("Say hi.", "batch")]
    pools = config_for_tests().pools
    counts = {(histogram, pool): f'sum({histogram}_count{{pool="{pool}"}})'
              for histogram in (wire.TTFT_SECONDS, wire.TPOT_SECONDS) for pool in pools}
    # The engines' stage counters come from the replicas, whose series reach the exporter apart.
    counts.update({(wire.ENGINE_STAGE_REQUESTS_TOTAL, pool): f'sum({wire.ENGINE_STAGE_REQUESTS_TOTAL}'
                   f'{{pool="{pool}",stage="queued"}})' for pool in pools})
    expected = settled(prometheus, tuple(counts.values()))
    for _ in range(2):
        for prompt, scenario in requests:
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=8, stream=True,
                stream_options={"include_usage": True}, extra_headers={wire.SCENARIO_HEADER: scenario})
            chunks = list(raw.parse())
            assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
            pool = raw.headers[wire.POOL_HEADER]
            expected[counts[wire.TTFT_SECONDS, pool]] += 1
            expected[counts[wire.ENGINE_STAGE_REQUESTS_TOTAL, pool]] += 1
            if chunks[-1].usage.completion_tokens > 1:   # a cadence needs a second token
                expected[counts[wire.TPOT_SECONDS, pool]] += 1
        for (histogram, pool), count in counts.items():
            got = wait_for(prometheus, count, expected[count], timeout_s=120)
            assert got >= expected[count], f"{histogram} of pool {pool}: {got} of {expected[count]} requests"
    for pool in pools:
        p99 = f'pool_scenario:trilemma_ttft_seconds:p99_5m{{pool="{pool}"}} >= 0'  # NaN (nothing moved) is not
        assert _until_data(prometheus, p99), f"no TTFT p99 of pool {pool}"
    return prometheus


def test_every_panel_returns_data_for_the_default_pools_and_scenarios(loaded):
    config = config_for_tests()
    empty = []
    for panel in board(config):
        for target in panel.targets:
            expr = concrete(target.expr, rate_window=RATE_WINDOW, app=config.app_name)
            result = _query(loaded, expr)
            if not result and not _metrics_of(expr) & ON_EVENT:
                empty.append(f"{panel.title} / {target.legend}: {expr}")
            if "by (pool" in expr and result and "pool" in result[0]["metric"] and not _metrics_of(expr) & ON_EVENT:
                pools = {series["metric"]["pool"] for series in result}
                assert set(config.pools) <= pools | {"none"}, f"{panel.title}: pools {pools}"
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_every_recording_rule_returns_data(loaded, prometheus_setup):
    rules = yaml.safe_load(prometheus_setup.rules_file.read_text())["groups"][0]["rules"]
    empty = [rule["record"] for rule in rules if not _until_data(loaded, rule["record"], timeout_s=30)]
    assert not empty, f"recording rules without data: {empty}"
    scenarios = {s["metric"]["scenario"] for s in _query(loaded, "scenario:trilemma_requests:rate5m")}
    assert {"chat", "batch"} <= scenarios
    alerts = httpx.get(f"{loaded}/api/v1/rules", params={"type": "alert"}, timeout=30).json()["data"]["groups"]
    assert all(rule["health"] == "ok" for group in alerts for rule in group["rules"]), alerts


def test_every_metric_a_query_names_exists(loaded):
    """A typo, or a metric the app no longer exports, fails here."""
    config = config_for_tests()
    known = set(httpx.get(f"{loaded}/api/v1/label/__name__/values", timeout=30).json()["data"])
    named = set().union(*(_metrics_of(t.expr) for panel in board(config) for t in panel.targets))
    missing = sorted(name for name in named - known if name not in ON_EVENT)
    assert not missing, f"queries name metrics Prometheus has never seen: {missing}"
    assert ON_EVENT <= {value for value in vars(wire).values() if isinstance(value, str)}


@pytest.mark.parametrize("source", ["prometheus", "metrics-url"])
def test_top_shows_every_pool(loaded, capsys, source):
    where = loaded if source == "prometheus" else f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics"
    assert main(["top", "--once", f"--{source}", where, "--window", RATE_WINDOW, "--every", "2"]) == 0
    text = capsys.readouterr().out
    for pool in config_for_tests().pools:
        assert any(line.startswith(pool) for line in text.splitlines()), text


def test_the_engines_own_stage_times_nest_inside_the_wait_the_client_saw(base_url, api_key, prometheus):
    """vLLM's timing of each request, counted by its replica, reaches Prometheus: every streamed
    request adds one to each stage of its pool, and the stages nest as the first token's way does:
    the engine core's prefill inside the engine's first token, inside what the client waited."""
    def stage(metric: str, name: str) -> str:
        return f'sum({metric}{{pool="short",stage="{name}"}})'

    stages = ("first_token", "queued", "prefill")
    seconds = {name: stage(wire.ENGINE_STAGE_SECONDS_TOTAL, name) for name in stages}
    counts = {name: stage(wire.ENGINE_STAGE_REQUESTS_TOTAL, name) for name in stages}
    before = settled(prometheus, (*seconds.values(), *counts.values()))
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=180)
    waited_s, sent = 0.0, 3
    for _ in range(sent):
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8, stream=True,
            extra_headers={wire.POOL_HEADER: "short"})
        first_token_s = None
        for chunk in raw.parse():
            if first_token_s is None and chunk.choices and chunk.choices[0].delta.content:
                first_token_s = time.monotonic() - started
        assert raw.headers[wire.POOL_HEADER] == "short" and first_token_s is not None
        waited_s += first_token_s
    for name in stages:
        assert wait_for(prometheus, counts[name], before[counts[name]] + sent) == before[counts[name]] + sent, name
    spent = settled(prometheus, tuple(seconds.values()))
    first_token, prefill = (spent[seconds[name]] - before[seconds[name]] for name in ("first_token", "prefill"))
    assert 0 < prefill <= first_token < waited_s


def _metrics_of(expr: str) -> set[str]:
    return set(METRIC.findall(expr))
