"""Cost math against hand-computed values: rates from the catalog, work shares, metering."""

from __future__ import annotations

import json

import pytest

from cluster.pricing import load_catalog, pool_rates
from contract import request_timeline
from contract.request_timeline import ENGINE_OUTPUTS, TIMING_KEY, RequestTimeline, gaps_s
from contract.usage_events import final_usage, map_events
from core.config import DEFAULT_CONFIG_PATH, ConfigError, CostConfig, TrilemmaConfig
from core.price_catalog import PriceCatalog, replica_rate
from pool.engine_activity import EngineActivity
from pool.request_metering import metered, prompt_tokens_hint, with_timeline
from pool.work_share import WorkShare
from tests.support import ManualClock

CATALOG = PriceCatalog.model_validate({
    "as_of": "test", "energy_usd_per_kwh": 0.10, "cloud_premium_multiplier": 1.25,
    "accelerators": {"H100": {"on_demand_usd_per_hour": 8.0, "spot_usd_per_hour": 2.0,
                              "board_power_watts": 500},
                     "cpu": {"on_demand_usd_per_hour": 0.04, "spot_usd_per_hour": 0.01,
                             "board_power_watts": 10}},
})


def test_replica_rate_terms_for_on_demand_and_spot():
    on_demand = replica_rate(CATALOG, "h100", units=2, purchase="on_demand")
    # hardware 2 x $8 = $16/h; energy 2 x 0.5 kW x $0.10 = $0.10/h; premium 25% on both
    assert on_demand.usd_per_hour == pytest.approx((16 + 0.10) * 1.25)
    spot = replica_rate(CATALOG, "H100", units=2, purchase="spot")
    assert spot.usd_per_hour == pytest.approx((4 + 0.10) * 1.25)
    bill = on_demand.breakdown(3600)
    assert bill == pytest.approx({"total": 20.125, "hardware": 16.0, "energy": 0.10, "premium": 4.025})
    overridden = replica_rate(CATALOG, "H100", units=2, purchase="spot", override_usd_per_hour=1.0)
    assert overridden.breakdown(3600)["hardware"] == pytest.approx(1.0)


def test_the_catalog_refuses_unknown_accelerators_and_keys(tmp_path):
    with pytest.raises(ConfigError, match="'B200' is not in the price catalog"):
        replica_rate(CATALOG, "B200", units=1, purchase="on_demand")
    bad = tmp_path / "prices.yaml"
    bad.write_text("as_of: x\nenergy_usd_per_kwh: -1\ncloud_premium_multiplier: 1\naccelerators: {}\nextra: 1\n")
    with pytest.raises(ConfigError, match="energy_usd_per_kwh.*extra"):
        PriceCatalog.from_yaml(bad)


def test_shipped_config_prices_its_cpu_pools_from_the_shipped_catalog():
    config = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    catalog = load_catalog(CostConfig())
    rates = pool_rates(config, catalog)
    cpu = catalog.accelerator("cpu")
    expected = (cpu.on_demand_usd_per_hour + cpu.board_power_watts / 1000 * catalog.energy_usd_per_kwh) \
        * catalog.cloud_premium_multiplier
    assert rates["short"].usd_per_hour == pytest.approx(expected) == rates["long"].usd_per_hour


def test_work_shares_add_up_to_the_busy_time_exactly():
    clock = ManualClock()
    work = WorkShare(clock)
    work.prefill_s_per_token, work.decode_s_per_token = 0.001, 0.05
    a = work.start(prompt_tokens=100)         # weight 0.1
    clock.now = 1.0
    b = work.start(prompt_tokens=400)         # weight 0.4; a keeps 0.1
    clock.now = 2.0
    work.first_token(a)                       # a: 0.05
    work.first_token(b)                       # b: 0.05
    clock.now = 4.0
    seconds_a = work.finish(a, completion_tokens=10)
    clock.now = 5.0                           # b alone
    seconds_b = work.finish(b, completion_tokens=10)
    # [0,1] a alone: 1 s to a. [1,2] 0.1 vs 0.4: a 0.2, b 0.8. [2,4] equal: 1 each. [4,5] b: 1.
    assert seconds_a == pytest.approx(1 + 0.2 + 1)
    assert seconds_b == pytest.approx(0.8 + 1 + 1)
    assert seconds_a + seconds_b == pytest.approx(5.0)


def test_work_share_learns_per_token_times_from_its_requests():
    clock = ManualClock()
    work = WorkShare(clock)
    share = work.start(prompt_tokens=100)
    clock.now = 0.5                           # 5 ms per prompt token
    work.first_token(share)
    clock.now = 1.5                           # 10 more tokens in 1 s: 100 ms each
    work.finish(share, completion_tokens=11)
    assert work.prefill_s_per_token == pytest.approx(0.002 + 0.1 * (0.005 - 0.002))
    assert work.decode_s_per_token == pytest.approx(0.04 + 0.1 * (0.1 - 0.04))


def sse(body):
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


async def test_metering_writes_the_cost_into_the_streamed_usage():
    clock = ManualClock()
    rate = replica_rate(CATALOG, "cpu", units=1, purchase="on_demand")

    async def engine():
        clock.now = 1.0
        yield [sse({"choices": [{"delta": {"content": "Hi"}}]})]
        clock.now = 3.0
        yield [sse({"choices": [{"delta": {"content": "!"}}]}),
               sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}), "data: [DONE]\n\n"]

    activity, work = EngineActivity(clock), WorkShare(clock)
    items = [item async for item in metered(engine(), activity=activity, work=work, rate=rate, prompt_tokens=5)]
    usage = json.loads(items[-1][1][len("data: "):])["usage"]
    assert usage["engine_busy_s"] == pytest.approx(3.0)     # alone on the replica for 3 s
    assert usage["cost_usd"] == pytest.approx(rate.usd_per_s * 3.0)
    assert set(usage["cost_breakdown_usd"]) == {"hardware", "energy", "premium"}
    assert sum(usage["cost_breakdown_usd"].values()) == pytest.approx(usage["cost_usd"])
    assert items[-1][2] == "data: [DONE]\n\n" and activity.snapshot().busy_s == pytest.approx(3.0)


async def test_a_timed_request_carries_every_replica_stamp_on_its_usage_even_in_one_batch():
    async def engine():  # a one-token answer: its token and its usage leave in one batch
        yield [sse({"choices": [{"delta": {"content": "Hi"}}]}),
               sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})]

    timeline = RequestTimeline()
    timeline.stamp("pool_received")
    metered_stream = metered(engine(), activity=EngineActivity(), work=WorkShare(), rate=None, prompt_tokens=5,
                             timeline=timeline)
    (batch,) = [item async for item in with_timeline(metered_stream, timeline)]
    assert batch[0] == sse({"choices": [{"delta": {"content": "Hi"}}]})  # passed on as it came
    stamps = json.loads(batch[1][len("data: "):])["usage"][TIMING_KEY]
    assert list(stamps) == ["pool_received", "engine_first_output", "pool_first_sent", ENGINE_OUTPUTS]
    assert stamps["pool_received"] <= stamps["engine_first_output"] <= stamps["pool_first_sent"]
    assert stamps[ENGINE_OUTPUTS] == [stamps["engine_first_output"]]  # the one item the engine gave


async def test_a_timed_request_carries_the_time_of_every_engine_output(monkeypatch):
    clock = ManualClock()
    monkeypatch.setattr(request_timeline.time, "time", clock)

    async def engine():  # two tokens, then the usage, each from a step of its own
        clock.now = 10.0
        yield sse({"choices": [{"delta": {"content": "Hi"}}]})
        clock.now = 10.05
        yield sse({"choices": [{"delta": {"content": "!"}}]})
        clock.now = 10.3
        yield sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})

    timeline = RequestTimeline()
    metered_stream = metered(engine(), activity=EngineActivity(), work=WorkShare(), rate=None, prompt_tokens=5,
                             timeline=timeline)
    items = [item async for item in with_timeline(metered_stream, timeline)]
    timing = json.loads(items[-1][len("data: "):])["usage"][TIMING_KEY]
    assert timing[ENGINE_OUTPUTS] == [10.0, 10.05, 10.3] and timing["engine_first_output"] == 10.0
    assert gaps_s(timing[ENGINE_OUTPUTS]) == pytest.approx([0.05, 0.25])


async def test_a_dropped_stream_is_still_charged_and_closes_the_clock():
    clock = ManualClock()

    async def engine():
        clock.now = 1.0
        yield "data: {}\n\n"
        yield "data: {}\n\n"

    activity, work = EngineActivity(clock), WorkShare(clock)
    stream = metered(engine(), activity=activity, work=work, rate=None, prompt_tokens=5)
    await stream.__anext__()
    clock.now = 2.5
    await stream.aclose()                     # the client left after 2.5 s
    assert activity.snapshot().in_flight == 0 and activity.snapshot().busy_s == pytest.approx(2.5)
    # Its 2.5 s were charged to it: a second request alone now gets only its own time.
    other = work.start(5)
    clock.now = 3.5
    assert work.finish(other, 1) == pytest.approx(1.0)


async def test_a_whole_response_is_charged_without_teaching_per_token_times():
    clock = ManualClock()

    class Usage:
        completion_tokens = 40

    class Response:
        usage = Usage()

    async def engine():
        clock.now = 2.0                       # the whole answer, at the end
        yield Response()

    work = WorkShare(clock)
    before = (work.prefill_s_per_token, work.decode_s_per_token)
    rate = replica_rate(CATALOG, "cpu", units=1, purchase="on_demand")
    (response,) = [r async for r in metered(engine(), activity=EngineActivity(clock), work=work, rate=rate,
                                            prompt_tokens=100)]
    assert response.usage.engine_busy_s == pytest.approx(2.0)
    assert response.usage.cost_usd == pytest.approx(rate.usd_per_s * 2.0)
    assert (work.prefill_s_per_token, work.decode_s_per_token) == before


def test_map_events_finds_the_final_usage_in_a_batched_packet():
    packet = (sse({"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": 1}})
              + sse({"choices": [], "usage": {"completion_tokens": 2}}) + "data: [DONE]\n\n")
    seen = []

    def take(event):
        usage = final_usage(event)
        if usage is None:
            return event
        seen.append(usage["completion_tokens"])
        return None

    out = map_events(packet, take)
    assert seen == [2]                        # a running-usage chunk is not the final one
    assert out == sse({"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": 1}}) + \
        "data: [DONE]\n\n"
    assert map_events("data: {\"choices\": []}\n\n", take) == "data: {\"choices\": []}\n\n"


def test_prompt_tokens_come_from_the_router_or_a_rough_estimate():
    class Body:
        prompt = "x" * 400

    assert prompt_tokens_hint({"x-trilemma-prompt-tokens": "37"}, Body()) == 37
    assert prompt_tokens_hint({}, Body()) == 100


def test_estimate_spreads_idle_time_over_the_requests(capsys):
    from serve_app.cost_cli import estimate

    figures = estimate(CATALOG, gpu="h100", gpus=1, purchase="spot", tokens_in=512, tokens_out=128,
                       throughput=2.0, utilization=0.5)
    rate_per_s = (2.0 + 0.5 * 0.10) * 1.25 / 3600          # spot H100, energy, premium
    assert figures["usd_per_request"] == pytest.approx(rate_per_s / (2.0 * 0.5))   # 1 s of replica each
    assert figures["usd_per_1m_tokens"] == pytest.approx(figures["usd_per_request"] / 640 * 1e6)
    assert figures["hardware_usd_per_request"] == pytest.approx(2.0 / 3600)
    with pytest.raises(ValueError):
        estimate(CATALOG, gpu="h100", gpus=1, purchase="spot", tokens_in=0, tokens_out=0,
                 throughput=1.0, utilization=1.0)


async def test_the_request_that_loaded_its_adapter_pays_the_load():
    clock = ManualClock()
    rate = replica_rate(CATALOG, "cpu", units=1, purchase="on_demand")

    async def engine():
        clock.now = 2.0
        yield [sse({"choices": [{"delta": {"content": "Hi"}}]}),
               sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})]

    items = [item async for item in metered(engine(), activity=EngineActivity(clock), work=WorkShare(clock),
                                            rate=rate, prompt_tokens=5, adapter_load_s=0.5)]
    usage = json.loads(items[-1][1][len("data: "):])["usage"]
    assert usage["adapter_load_s"] == 0.5 and usage["engine_busy_s"] == pytest.approx(2.5)
    assert usage["cost_usd"] == pytest.approx(rate.usd_per_s * 2.5)
