"""vLLM's own account of a load run: from plain vLLM's histograms, and from the app's stage
counters as Ray's agent serves them."""

from __future__ import annotations

import pytest

from bench.engine_stats import EngineStats, app_totals, means_ms, plain_vllm_totals, pooled_means
from engine.stat_loggers import EngineStageTimes


def _plain(engines: dict[str, tuple[tuple[float, int], tuple[float, int], tuple[float, int]]]) -> str:
    """vLLM's /metrics: each engine's histograms (TTFT, queue, prefill) as (sum, count)."""
    names = ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds")
    lines = ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds."]
    for engine, figures in engines.items():
        labels = f'engine="{engine}",model_name="smol"'
        for name, (seconds, count) in zip(names, figures):
            lines += [f'vllm:{name}_bucket{{{labels},le="+Inf"}} {count}',
                      f"vllm:{name}_sum{{{labels}}} {seconds}", f"vllm:{name}_count{{{labels}}} {count}"]
    return "\n".join(lines)


def _app(pools: dict[str, dict[str, tuple[float, int]]]) -> str:
    """Ray's agent: the replicas' stage counters, with the labels it adds."""
    lines = []
    for pool, stages in pools.items():
        for stage, (seconds, count) in stages.items():
            labels = f'Component="core_worker",ReplicaId="r-{pool}",pool="{pool}",stage="{stage}"'
            lines += [f"ray_trilemma_engine_stage_seconds_total{{{labels}}} {seconds}",
                      f"ray_trilemma_engine_stage_requests_total{{{labels}}} {count}"]
    return "\n".join(lines)


def test_plain_vllms_means_are_the_difference_of_two_reads_over_all_engines():
    before = plain_vllm_totals(_plain({"0": ((1.0, 10), (0.1, 10), (0.5, 10)), "1": ((2.0, 4), (0.0, 4), (0.0, 4))}))
    after = plain_vllm_totals(_plain({"0": ((1.6, 20), (0.12, 20), (0.8, 20)), "1": ((2.4, 14), (0.0, 14), (0.2, 14))}))
    run = means_ms(before, after)
    assert run["requests"] == 20  # 10 finished on each engine
    assert run["engine_ttft_ms"] == pytest.approx(1000 * 1.0 / 20)
    assert run["queue_ms"] == pytest.approx(1000 * 0.02 / 20)
    assert run["prefill_ms"] == pytest.approx(1000 * 0.5 / 20)


def test_the_apps_means_come_from_the_stage_counters_that_its_replicas_feed():
    """What a replica's stat logger hands on from vLLM's iteration stats is what the figures read."""
    recorded: list[tuple[str, float]] = []
    times = EngineStageTimes(lambda stage, seconds: recorded.append((stage, seconds)))

    class Finished:
        def __init__(self, queued, prefill, tokens=4):
            self.queued_time, self.prefill_time, self.num_generation_tokens = queued, prefill, tokens

    class Iteration:
        def __init__(self, first_tokens, finished):
            self.time_to_first_tokens_iter, self.finished_requests = first_tokens, finished

    times.record(None, Iteration([0.030, 0.050], []))
    times.record(None, None)  # a step without outputs carries no iteration stats
    times.record(None, Iteration([], [Finished(0.001, 0.020), Finished(0.003, 0.024)]))
    # Aborted while queued: vLLM gives it a queue time from a schedule that never came. Not counted.
    times.record(None, Iteration([], [Finished(-5.0, 0.0, tokens=0)]))
    sums: dict[str, tuple[float, int]] = {}
    for stage, seconds in recorded:
        total, count = sums.get(stage, (0.0, 0))
        sums[stage] = (total + seconds, count + 1)
    run = means_ms(app_totals(_app({})), app_totals(_app({"short": sums, "long": {}})))
    assert run["requests"] == 2
    assert run["engine_ttft_ms"] == pytest.approx(40.0)
    assert run["queue_ms"] == pytest.approx(2.0) and run["prefill_ms"] == pytest.approx(22.0)


def test_a_figure_that_cannot_be_recorded_never_reaches_vllms_output_handler():
    """The stat logger runs inside vLLM's output handler: an exception there would fail every
    request of the engine. A failing recorder loses the figure, and nothing else."""
    def broken(stage, seconds):
        raise ValueError("value must be >0")

    class Iteration:
        time_to_first_tokens_iter, finished_requests = [0.03], []

    EngineStageTimes(broken).record(None, Iteration())


def test_each_server_reads_only_its_own_names():
    assert plain_vllm_totals(_app({"short": {"queued": (1.0, 1)}}))["queue"] == (0.0, 0.0)
    assert app_totals(_plain({"0": ((1.0, 10), (0.1, 10), (0.5, 10))}))["queue"] == (0.0, 0.0)


def test_runs_pool_over_their_requests_and_an_unread_run_leaves_no_figure():
    zero = plain_vllm_totals("")
    short = means_ms(zero, plain_vllm_totals(_plain({"0": ((0.3, 10), (0.0, 10), (0.1, 10))})))
    long = means_ms(zero, plain_vllm_totals(_plain({"0": ((0.9, 10), (0.0, 10), (0.3, 10))})))
    both = pooled_means([short, long])
    assert both["requests"] == 20
    assert both["engine_ttft_ms"] == pytest.approx(60.0) and both["prefill_ms"] == pytest.approx(20.0)
    assert pooled_means([short, None]) is None


def test_the_reader_waits_for_ray_to_export_every_request_of_the_run():
    """Ray's agent shows what replicas recorded up to its report interval late: the run's figures
    are read once all its requests are in them, and are None if they never all arrive."""
    stages = ("first_token", "queued", "prefill")
    pages = [_app({"short": {stage: (0.0, 0) for stage in stages}}),
             _app({"short": {stage: (0.2, 2) for stage in stages}}),
             _app({"short": {stage: (0.4, 4) for stage in stages}})]
    slept = []
    stats = EngineStats("http://node:8080/metrics", app_totals, settle_s=5.0,
                        fetch=lambda url: pages.pop(0) if len(pages) > 1 else pages[0], sleep=slept.append)
    before = stats.read()
    run = stats.since(before, requests=4)
    assert run["requests"] == 4 and run["engine_ttft_ms"] == pytest.approx(100.0)
    assert slept == [0.5]  # one read with 2 of the 4, then all of them
    assert stats.since(before, requests=5) is None  # the fifth never shows: no figure
    assert EngineStats("http://node:8080/metrics", app_totals, fetch=lambda url: None).read() is None


def test_a_server_that_records_no_stage_times_is_given_up_on_after_the_report_interval():
    """An app of fake engines serves metrics but no stage times: no figure, without waiting the
    whole settling time for counts that never come."""
    slept = []
    stats = EngineStats("http://node:8080/metrics", app_totals, settle_s=30.0, fetch=lambda url: "",
                        sleep=slept.append)
    assert stats.since(stats.read(), requests=4) is None
    assert 12.0 <= sum(slept) < 13.0  # Ray's report interval and its margin, not 30 s
