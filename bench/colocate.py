"""Co-location: the batch summarization job on the GPUs (or cores) that serve chat.

One deployment serves the same Poisson schedule of real-time chat twice: alone, then with
`python -m jobs.summarize` running beside it as the lowest-priority `batch` scenario. The
client's chat TTFT says what users felt; the app's own token counters (`trilemma_tokens_total`,
every scenario) say how much work the deployment did in each window.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.arrivals import LoadShape, poisson_arrival_times
from bench.datasets import load_dataset
from bench.load_generator import run_load
from bench.metrics import RequestRecord, distribution_ms
from bench.server_latency import scrape, settled_scrape
from cluster.exposition import samples
from serve_app.config import TrilemmaConfig

TOKENS_METRIC = "ray_trilemma_tokens_total"
TTFT_TARGET, THROUGHPUT_TARGET = 1.1, 1.5


def tokens_done(text: str | None) -> float | None:
    """Prompt and completion tokens of every scenario the app has served, from one scrape."""
    if text is None:
        return None
    return sum(samples(text, TOKENS_METRIC).values())


def _online(url: str, model: str, *, rate: float, count: int, seed: int, output_tokens: int,
            api_key: str | None) -> tuple[list[RequestRecord], float]:
    prompts = [replace(p, scenario="chat", max_tokens=output_tokens, extra={**p.extra, "ignore_eos": True})
               for p in load_dataset("questions", count, seed=seed)]
    return asyncio.run(run_load(url, prompts, LoadShape(concurrency=1), model=model, progress=False,
                                api_key=api_key, arrivals=poisson_arrival_times(rate, count, seed=seed)))


def _phase(url: str, model: str, metrics_url: str, load: dict[str, Any], api_key: str | None) -> dict[str, Any]:
    before, started = scrape(metrics_url), time.monotonic()
    records, duration = _online(url, model, api_key=api_key, **load)
    after = settled_scrape(metrics_url)
    window = time.monotonic() - started
    done = [tokens_done(before), tokens_done(after)]
    chat = [r for r in records if r.ok]
    return {
        "requests": len(records), "failed": len(records) - len(chat), "duration_s": duration,
        "chat_ttft_ms": distribution_ms([r.ttft_s for r in chat if r.ttft_s is not None]),
        "chat_tpot_ms": distribution_ms([r.tpot_s for r in chat if r.tpot_s is not None]),
        "window_s": window,
        "tokens": None if None in done else done[1] - done[0],
        "total_tokens_per_s": None if None in done else (done[1] - done[0]) / window,
    }


def measure_colocation(config: TrilemmaConfig, *, metrics_url: str, rate: float, count: int, output_tokens: int,
                       job_args: list[str], job_lead_s: float, seed: int = 0,
                       api_key: str | None = None) -> dict[str, Any]:
    from serve_app.launcher import deployed  # Ray Serve LLM and vLLM: only for a run

    load = {"rate": rate, "count": count, "seed": seed, "output_tokens": output_tokens}
    with deployed(config) as url, tempfile.TemporaryDirectory() as scratch:
        model = config.model.name
        _online(url, model, rate=rate, count=min(count, 8), seed=seed + 1, output_tokens=output_tokens,
                api_key=api_key)  # warm-up, uncounted
        alone = _phase(url, model, metrics_url, load, api_key)
        command = [sys.executable, "-m", "jobs.summarize", "--url", url, "--no-progress",
                   "--output", str(Path(scratch) / "summaries.jsonl"), *job_args]
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(job_lead_s)  # the job reads, chunks and reaches its pace before the window
            if job.poll() is not None:
                raise RuntimeError(f"the batch job ended before the window: {job.stdout.read()[-2000:]}")
            beside = _phase(url, model, metrics_url, load, api_key)
            still_running = job.poll() is None
        finally:
            if job.poll() is None:
                job.send_signal(signal.SIGINT)  # the job records what finished and stops
            job_output = job.communicate(timeout=120)[0]
    ttft_ratio = beside["chat_ttft_ms"]["p99"] / alone["chat_ttft_ms"]["p99"]
    throughput_ratio = (beside["total_tokens_per_s"] / alone["total_tokens_per_s"]
                        if alone["total_tokens_per_s"] and beside["total_tokens_per_s"] is not None else None)
    return {
        "kind": "colocation", "load": load, "job": {"args": job_args, "lead_s": job_lead_s,
                                                     "ran_through_the_window": still_running,
                                                     "output_tail": job_output[-1500:]},
        "phases": {"online_only": alone, "online_with_batch_job": beside},
        "ratios": {"chat_ttft_p99_with_job_over_alone": ttft_ratio,
                   "total_tokens_per_s_with_job_over_alone": throughput_ratio},
        "verdict": {"chat_ttft_p99_within_1_1x": ttft_ratio <= TTFT_TARGET,
                    "total_tokens_per_s_at_least_1_5x": throughput_ratio is not None
                    and throughput_ratio >= THROUGHPUT_TARGET,
                    "no_chat_request_failed": not alone["failed"] and not beside["failed"],
                    "job_ran_through_the_window": still_running},
    }


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for name, label in (("online_only", "chat alone"), ("online_with_batch_job", "chat + batch job")):
        phase = result["phases"][name]
        ttft, tpot = phase["chat_ttft_ms"], phase["chat_tpot_ms"]
        tps = phase["total_tokens_per_s"]
        rows.append(f"| {label} | {ttft['p50']:.0f} | {ttft['p99']:.0f} | {tpot['p50']:.1f} | {tpot['p99']:.1f} "
                    f"| {'-' if tps is None else f'{tps:.1f}'} | {phase['requests'] - phase['failed']}/{phase['requests']} |")
    ratios, verdict = result["ratios"], result["verdict"]
    throughput = ratios["total_tokens_per_s_with_job_over_alone"]
    return "\n".join([
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"Chat at {result['load']['rate']:g} req/s (Poisson, {result['load']['count']} requests of "
        f"{result['load']['output_tokens']} tokens), alone and then with the batch job running "
        f"(`python -m jobs.summarize {' '.join(result['job']['args'])}`, started {result['job']['lead_s']:.0f} s "
        "before the window). Total tokens/s: every scenario's prompt and completion tokens by the app's "
        "counters over the window.", "",
        "| phase | chat TTFT p50 (ms) | chat TTFT p99 (ms) | chat TPOT p50 (ms) | chat TPOT p99 (ms) "
        "| total tokens/s | chat ok/sent |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"- Chat p99 TTFT with the job over alone: **{ratios['chat_ttft_p99_with_job_over_alone']:.2f}** "
        f"(target at most 1.1): {'met' if verdict['chat_ttft_p99_within_1_1x'] else 'missed'}.",
        f"- Total tokens/s with the job over alone: **{'-' if throughput is None else f'{throughput:.2f}'}** "
        f"(target at least 1.5): {'met' if verdict['total_tokens_per_s_at_least_1_5x'] else 'missed'}.",
        f"- Chat requests failed: {'none' if verdict['no_chat_request_failed'] else 'some'}; the job ran "
        f"through the window: {'yes' if verdict['job_ran_through_the_window'] else 'no'}.", "",
    ]) + "\n"


def add_command(sub) -> None:
    from bench.cli_common import add_app_args, add_output_args

    colocate = sub.add_parser("colocate", allow_abbrev=False,
                              help="chat alone, then beside the batch summarization job: TTFT and total tokens/s")
    add_app_args(colocate)
    colocate.add_argument("--rate", type=float, default=1.0, help="chat requests per second (Poisson)")
    colocate.add_argument("--num-prompts", type=int, default=90, help="chat requests per phase")
    colocate.add_argument("--output-tokens", type=int, default=64, help="tokens per chat answer (ignore_eos)")
    colocate.add_argument("--job-lead-s", type=float, default=30.0, help="seconds the job runs before the window")
    colocate.add_argument("--job-arg", action="append", default=[], metavar="ARG",
                          help="an argument for `python -m jobs.summarize` (repeat; give --input at least)")
    colocate.add_argument("--seed", type=int, default=0)
    add_output_args(colocate, "colocate")
    colocate.set_defaults(func=bench_colocate)


def bench_colocate(args) -> int:
    from bench.cli_common import app_config, command_line, fail
    from bench.results import write_json
    from serve_app.config import ConfigError
    from serve_app.launcher import shutdown_local_ray

    try:
        config = app_config(args)
        if "--input" not in args.job_arg:
            raise ConfigError("give the job its input: --job-arg=--input --job-arg=PATH")
    except ConfigError as error:
        return fail(error)
    try:
        result = measure_colocation(
            config, metrics_url=f"http://127.0.0.1:{config.local_ray.metrics_export_port}/metrics",
            rate=args.rate, count=args.num_prompts, output_tokens=args.output_tokens, job_args=args.job_arg,
            job_lead_s=args.job_lead_s, seed=args.seed, api_key=args.api_key)
    finally:
        shutdown_local_ray()
    name = args.name or "colocate"
    result = {"name": name, "command": command_line(args), **result}
    write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(markdown(result))
    print((args.out / f"{name}.md").read_text())
    return 0 if all(result["verdict"].values()) else 1
