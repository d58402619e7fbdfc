"""`trilemma bench start`: what a start's console says about failed engines and phases, and the
verdict against the engines started alone."""

from __future__ import annotations

from dataclasses import asdict

from bench.start_time import AppStart, judged, markdown, read_start

# As `trilemma serve` printed them on an H200 when the long pool's engine could not bind port 100.
CONSOLE = """\
(ServeReplica:trilemma:pool-long pid=2612) (EngineCore pid=3252) ERROR 12-01 16:44:24 [core.py:1330] \
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. \
port: 100, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use
(ServeReplica:trilemma:pool-long pid=2612) (EngineCore pid=3252) ERROR 12-01 16:44:24 [core.py:1331] Traceback
(ServeReplica:trilemma:pool-short pid=2611) (EngineCore_DP0 pid=3260) ERROR 12-01 16:44:30 [core.py:9] CUDA OOM
(ServeReplica:trilemma:pool-short pid=2611) (EngineCore_DP0 pid=3261) INFO 12-01 16:45:00 [core.py:9] Error budget ok
(ServeReplica:trilemma:pool-short pid=2611) INFO 2026-12-01 16:46:24,470 trilemma_pool-short 83qwucjc -- \
Pool short: replica serving 199.6 s after it was created: before the engine 1.0 s, engine start (load, compile, \
KV cache) 198.5 s, warm-up 0.1 s
"""


def test_each_failed_engine_counts_once_and_a_port_collision_apart():
    failed, collided, phases = read_start(CONSOLE)
    assert (failed, collided) == (2, 1)
    assert phases == ["Pool short: replica serving 199.6 s after it was created: before the engine 1.0 s, "
                      "engine start (load, compile, KV cache) 198.5 s, warm-up 0.1 s"]


def test_a_clean_start_has_no_failed_engine():
    assert read_start("(EngineCore_DP0 pid=7) INFO loading weights\nApplication 'trilemma' is ready\n")[:2] == (0, 0)


def test_the_median_start_is_held_against_the_slowest_engine_alone():
    alone = {"short": 40.0, "long": 50.0}
    starts = [AppStart(ready_s=60.0), AppStart(ready_s=70.0), AppStart(ready_s=61.0)]
    verdict = judged(alone, starts)
    assert verdict["app_ready_median_s"] == 61.0 and verdict["ready_ratio"] == 61.0 / 50.0
    assert all(verdict["targets"].values())
    starts[1].failed_engines = 1
    slow = judged(alone, [*starts, AppStart(ready_s=90.0), AppStart(ready_s=95.0)])
    assert slow["app_ready_median_s"] == 70.0
    assert list(slow["targets"].values()) == [False, False]


def test_a_start_that_never_served_fails_the_ready_target_and_is_shown():
    starts = [AppStart(ready_s=55.0), AppStart(ready_s=None, error="pools ['long'] have no replica serving")]
    verdict = judged({"short": 50.0}, starts)
    assert not verdict["targets"]["ready at most 1.25x the slowest engine alone"]
    text = markdown({"name": "start-cpu", "command": "trilemma bench start", "machine": "m",
                     "engines_alone_s": {"short": 50.0}, "starts": [asdict(s) for s in starts], **verdict})
    assert "not ready: pools ['long'] have no replica serving" in text
    assert "ready at most 1.25x the slowest engine alone: **no**" in text


def test_the_cpu_table_sets_each_engine_alone_beside_the_apps_starts_with_the_floor_of_its_cores():
    starts = [AppStart(ready_s=60.0, cpu_s={"engine workers": 40.0, "router": 8.0}),
              AppStart(ready_s=62.0, cpu_s={"engine workers": 44.0, "router": 9.0, "Ray daemons": 3.0})]
    alone = {"short": {"engine workers": 20.0, "vllm serve front end": 8.0}}
    text = markdown({"name": "start-cpu", "command": "trilemma bench start", "machine": "m",
                     "engines_alone_s": {"short": 30.0}, "engines_alone_cpu_s": alone, "cores": 2,
                     "warm_up": True, "app_warm_up": asdict(AppStart(ready_s=64.5)),
                     "starts": [asdict(s) for s in starts], **judged({"short": 30.0}, starts)})
    assert "its second start: the first warmed its caches): short 30.0 s" in text
    assert "2 times after a start that warmed its caches (ready after 64.5 s)" in text
    assert "| process | short alone | app, start 1 | app, start 2 |" in text
    assert "| engine workers | 20.0 | 40.0 | 44.0 |" in text
    assert "| Ray daemons | 0.0 | 0.0 | 3.0 |" in text
    assert "| **total** | **28.0** | **48.0** | **56.0** |" in text
    # The median of 48 and 56 CPU seconds over 2 cores.
    assert "would keep all 2 cores of this machine busy for 26.0 s" in text


def test_a_result_without_cpu_figures_has_no_cpu_table():
    starts = [AppStart(ready_s=55.0)]
    text = markdown({"name": "start-cpu", "command": "trilemma bench start", "machine": "m",
                     "engines_alone_s": {"short": 50.0}, "starts": [asdict(s) for s in starts],
                     **judged({"short": 50.0}, starts)})
    assert "CPU seconds" not in text and "warmed" not in text  # nor a warm-up: the caches as they were


def test_an_engine_that_failed_in_the_warm_up_fails_the_target_too():
    starts = [AppStart(ready_s=55.0)]
    warm_up = AppStart(ready_s=80.0, failed_engines=1)
    verdict = judged({"short": 50.0}, starts, warm_up)
    assert not verdict["targets"]["no engine failed to start"]
    text = markdown({"name": "start-cpu", "command": "trilemma bench start", "machine": "m",
                     "engines_alone_s": {"short": 50.0}, "warm_up": True, "app_warm_up": asdict(warm_up),
                     "starts": [asdict(s) for s in starts], **verdict})
    assert "after a start that warmed its caches (ready after 80.0 s, 1 failed engine starts)" in text
