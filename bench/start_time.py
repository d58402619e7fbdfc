"""`trilemma bench start`: how long the app takes to serve, against its engines started alone.

Each pool's engine is first started alone with plain `vllm serve` and exactly the pool's
engine settings: what a user who runs one engine waits for. Then the app is started `--starts`
times with `trilemma serve`, as `make serve` does, each time until every pool serves, and
stopped with SIGTERM. Both are measured with warm caches: each engine alone and the app are
started once, unmeasured, before they are timed (`--no-warm-up` skips that). vLLM keys its
saved compiled model (AOT compile) by the whole engine config, where the app's engines and
plain `vllm serve` differ, so plain vLLM's start does not warm the app's cache. Per start: the
seconds until every pool served, each replica's start phase by phase (its own log line), and
the engines that failed to start, with the port collisions (`EADDRINUSE`) counted apart.

Targets: the app's median ready time at most 1.25x the slowest engine alone, and no engine
that fails to start in any start.

Every start, alone or the app's, is metered (bench.start_cpu): the CPU time its processes spent
until it served, by what each does. Over the machine's cores, the app's total is the least time
it could have served in with every core busy.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import machine
from bench.app_ready import wait_until_serving
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail, shown_path
from bench.result_files import write_json
from bench.start_cpu import CpuMeter
from bench.vs_vllm import plain_vllm, pool_engine, vllm_serve_argv
from core.config import ConfigError, TrilemmaConfig
from core.model_store import resolve_model_source
from engine.processes import engine_processes
from serve_app.launcher import stop_bound_s

READY_RATIO_TARGET = 1.25
# A start is read from `trilemma serve`'s console: Ray prefixes each process's lines with its name.
_ENGINE_ERROR = re.compile(r"\((EngineCore\w*) pid=(\d+)\)[^\n]*\bERROR\b")
_PHASES = re.compile(r"Pool \S+: replica serving [^\n]*")
# Beyond the app's own bound on its stop, which ends a hung stop with every thread's stack:
# the process is killed only if even that did not end it.
STOP_MARGIN_S = 30.0
POLL_S = 1.0


@dataclass
class AppStart:
    """One start of the app, as its console told it."""

    ready_s: float | None
    failed_engines: int = 0
    port_collisions: int = 0
    phases: list[str] = field(default_factory=list)  # each replica's start, phase by phase
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds until it served, by role
    stopped_s: float | None = None  # from SIGTERM until `trilemma serve` ended
    exit_code: int | None = None
    error: str | None = None


def read_start(console: str) -> tuple[int, int, list[str]]:
    """From what `trilemma serve` printed while it started: the engines that logged an error
    (each engine process once), those of them that could not bind a port, and the replicas'
    phase lines."""
    failed: set[str] = set()
    collided: set[str] = set()
    for line in console.splitlines():
        match = _ENGINE_ERROR.search(line)
        if match:
            failed.add(match.group(2))
            if "EADDRINUSE" in line:
                collided.add(match.group(2))
    phases = [re.sub(r"\s+", " ", line).strip() for line in _PHASES.findall(console)]
    return len(failed), len(collided), phases


def serve_argv(config_path: Path, overrides: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "serve_app.cli", "serve", "--config", str(config_path)]
    for override in overrides:
        argv += ["--set", override]
    return argv


def start_app_once(argv: list[str], url: str, log: Path, timeout_s: float, stop_wait_s: float) -> AppStart:
    """`trilemma serve` until every pool serves, then SIGTERM and its exit, killed past
    `stop_wait_s`. The console up to the moment it served is what the start is read from."""
    with open(log, "w") as out, CpuMeter() as meter:
        started = time.monotonic()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            wait_until_serving(url, timeout_s, say=lambda _: None, poll_s=POLL_S,
                               alive=lambda: process.poll() is None)
            result = AppStart(ready_s=time.monotonic() - started)
        except ValueError as error:
            result = AppStart(ready_s=None, error=str(error))
        meter.stop()
        result.cpu_s = meter.by_role()
        result.failed_engines, result.port_collisions, result.phases = read_start(log.read_text(errors="replace"))
        stopping = time.monotonic()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            result.exit_code = process.wait(stop_wait_s)
            result.stopped_s = time.monotonic() - stopping
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            result.exit_code = process.wait()
            result.error = "; ".join(filter(None, [result.error, f"did not exit within {stop_wait_s:.0f} s of SIGTERM"]))
    _wait_for_engines_to_end()
    return result


def _wait_for_engines_to_end(timeout_s: float = 60.0) -> None:
    """The next start finds the machine as a fresh one would: no engine of the last one left."""
    deadline = time.monotonic() + timeout_s
    while engine_processes() and time.monotonic() < deadline:
        time.sleep(1.0)


def engines_alone(config: TrilemmaConfig, workdir: Path, port: int, timeout_s: float,
                  warm_up: bool = True) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each pool's engine started alone by plain `vllm serve`, after a start that warmed its
    caches unless `warm_up` is False: seconds until it answered, and the CPU seconds it spent
    until then, by role."""
    ready: dict[str, float] = {}
    cpu: dict[str, dict[str, float]] = {}
    for pool in config.pools:
        model = config.pool_model(pool)
        source = resolve_model_source(model.source)
        engine_kwargs, env = pool_engine(config, pool, source)
        argv = vllm_serve_argv(engine_kwargs, source, model.name, port, workdir / f"vllm-{pool}.yaml")
        if warm_up:
            print(f"start: plain vLLM with pool {pool}'s engine settings, once to warm its caches ...", flush=True)
            with plain_vllm(argv, env, f"http://127.0.0.1:{port}", workdir / f"vllm-{pool}-warm-up.log",
                            timeout_s) as ready_s:
                print(f"start: plain vLLM ({pool}) served after {ready_s:.1f} s (warm-up)", flush=True)
            _wait_for_engines_to_end()
        with CpuMeter() as meter, plain_vllm(argv, env, f"http://127.0.0.1:{port}", workdir / f"vllm-{pool}.log",
                                             timeout_s) as ready_s:
            meter.stop()
            ready[pool], cpu[pool] = ready_s, meter.by_role()
        print(f"start: plain vLLM ({pool}) served after {ready_s:.1f} s", flush=True)
        _wait_for_engines_to_end()
    return ready, cpu


def judged(alone: dict[str, float], starts: list[AppStart], warm_up: AppStart | None = None) -> dict[str, Any]:
    """The targets: the measured starts' median ready time, and no failed engine in any start,
    the unmeasured warm-up's included."""
    ready = [start.ready_s for start in starts if start.ready_s is not None]
    slowest = max(alone.values())
    median = statistics.median(ready) if ready else None
    return {
        "slowest_engine_alone_s": slowest,
        "app_ready_median_s": median,
        "ready_ratio": median / slowest if median is not None else None,
        "targets": {
            f"ready at most {READY_RATIO_TARGET:g}x the slowest engine alone":
                median is not None and len(ready) == len(starts) and median <= READY_RATIO_TARGET * slowest,
            "no engine failed to start": all(start.failed_engines == 0 for start in [*starts, *filter(None, [warm_up])]),
        },
    }


def markdown(result: dict[str, Any]) -> str:
    alone = ", ".join(f"{pool} {seconds:.1f} s" for pool, seconds in result["engines_alone_s"].items())
    alone_warmed = app_warmed = ""
    if result.get("warm_up"):  # older results took the caches as they found them
        warm_up_s = (result.get("app_warm_up") or {}).get("ready_s")
        alone_warmed = ", its second start: the first warmed its caches"
        warm_up_failed = (result.get("app_warm_up") or {}).get("failed_engines", 0)
        app_warmed = " after a start that warmed its caches" + (
            f" (ready after {warm_up_s:.1f} s" if warm_up_s is not None else " (it did not serve") + (
            f", {warm_up_failed} failed engine starts)" if warm_up_failed else ")")
    lines = [
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"On {result['machine']}. Each pool's engine alone (plain `vllm serve`, the pool's engine settings"
        f"{alone_warmed}): {alone}. Then `trilemma serve` {len(result['starts'])} times{app_warmed}, each until "
        "every pool served, then SIGTERM.", "",
        "| start | ready (s) | failed engine starts | of them EADDRINUSE | stopped after SIGTERM (s) | exit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for index, start in enumerate(result["starts"], 1):
        ready = f"{start['ready_s']:.1f}" if start["ready_s"] is not None else f"not ready: {start['error']}"
        stopped = f"{start['stopped_s']:.1f}" if start["stopped_s"] is not None else "-"
        lines.append(f"| {index} | {ready} | {start['failed_engines']} | {start['port_collisions']} | {stopped} "
                     f"| {start['exit_code']} |")
    if result["ready_ratio"] is not None:
        lines += ["", f"Median ready {result['app_ready_median_s']:.1f} s against the slowest engine alone "
                      f"{result['slowest_engine_alone_s']:.1f} s: {result['ready_ratio']:.2f}x."]
    met = ", ".join(f"{name}: {'yes' if ok else '**no**'}" for name, ok in result["targets"].items())
    lines += ["", f"Targets: {met}.", "", "Each replica's start, phase by phase (the last start):", ""]
    lines += [f"- {phase}" for phase in (result["starts"][-1]["phases"] if result["starts"] else [])]
    return "\n".join(lines + cpu_markdown(result)) + "\n"


def cpu_markdown(result: dict[str, Any]) -> list[str]:
    """The CPU time until ready, by role: each engine alone beside the app's starts, and the
    least time the app's total allows on this machine's cores."""
    alone = result.get("engines_alone_cpu_s") or {}
    starts = [start for start in result["starts"] if start.get("cpu_s")]
    if not alone and not starts:
        return []
    columns = [*(f"{pool} alone" for pool in alone), *(f"app, start {index}" for index, start in
                                                        enumerate(result["starts"], 1) if start.get("cpu_s"))]
    figures = [*alone.values(), *(start["cpu_s"] for start in starts)]
    roles = list(dict.fromkeys(role for figure in figures for role in figure))
    lines = ["", "CPU seconds until ready, by process (bench/start_cpu.py):", "",
             "| process | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
    lines += [f"| {role} | " + " | ".join(f"{figure.get(role, 0.0):.1f}" for figure in figures) + " |" for role in roles]
    lines.append("| **total** | " + " | ".join(f"**{sum(figure.values()):.1f}**" for figure in figures) + " |")
    cores = result.get("cores")
    if starts and cores:
        median = statistics.median(sum(start["cpu_s"].values()) for start in starts)
        lines += ["", f"The app's median {median:.1f} CPU seconds would keep all {cores} cores of this machine busy "
                      f"for {median / cores:.1f} s: it could not serve sooner without spending less."]
    return lines


def add_start_command(sub: argparse._SubParsersAction) -> None:
    start = sub.add_parser("start", help="the app's ready time over several starts, against each pool's "
                                         "engine started alone with plain `vllm serve`", allow_abbrev=False)
    add_app_args(start)
    start.add_argument("--starts", type=int, default=5, help="how many times the app is started")
    start.add_argument("--vllm-port", type=int, default=8100)
    start.add_argument("--ready-timeout-s", type=float, default=900.0)
    start.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                       help="skip the unmeasured start of each engine alone and of the app that warms their caches "
                            "(where they are warm already)")
    add_output_args(start, "start")
    start.set_defaults(func=bench_start)


def bench_start(args: argparse.Namespace) -> int:
    try:
        config = app_config(args)
        if args.starts < 1:
            raise ValueError(f"--starts must be 1 or more, got {args.starts}")
    except (ConfigError, ValueError) as error:
        return fail(error)
    url = f"http://127.0.0.1:{config.http.port}"
    with tempfile.TemporaryDirectory(prefix="bench-start-") as workdir:
        try:
            alone, alone_cpu = engines_alone(config, Path(workdir), args.vllm_port, args.ready_timeout_s, args.warm_up)
        except RuntimeError as error:
            return fail(error)
        warm_up = None
        if args.warm_up:
            print("start: the app, once to warm its caches ...", flush=True)
            warm_up = start_app_once(serve_argv(args.config, args.set), url, Path(workdir) / "serve-warm-up.log",
                                     args.ready_timeout_s, stop_bound_s(config) + STOP_MARGIN_S)
            print(f"start: the app's warm-up: ready after {warm_up.ready_s} s, {warm_up.failed_engines} engines "
                  "failed to start", flush=True)
        starts = []
        for index in range(args.starts):
            print(f"start: the app, start {index + 1} of {args.starts} ...", flush=True)
            log = Path(workdir) / f"serve-{index + 1}.log"
            starts.append(start_app_once(serve_argv(args.config, args.set), url, log, args.ready_timeout_s,
                                         stop_bound_s(config) + STOP_MARGIN_S))
            print(f"start {index + 1}: {starts[-1]}", flush=True)
            if starts[-1].error:  # kept beside the results: what the start or the drain waited for
                Path(args.out).mkdir(parents=True, exist_ok=True)
                shutil.copy(log, Path(args.out) / f"{args.name or 'start'}-console-{index + 1}.log")
    name = args.name or "start"
    result = {"name": name, "command": command_line(args), "machine": machine.describe(),
              "engines_alone_s": alone, "engines_alone_cpu_s": alone_cpu, "cores": len(os.sched_getaffinity(0)),
              "warm_up": args.warm_up, "app_warm_up": asdict(warm_up) if warm_up else None,
              "starts": [asdict(start) for start in starts], **judged(alone, starts, warm_up)}
    json_path = write_json(result, Path(args.out), name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    return 0 if all(result["targets"].values()) else 1
