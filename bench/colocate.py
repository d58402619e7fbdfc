"""Co-location: the batch summarization job on the GPUs (or cores) that serve chat.

One deployment serves the same Poisson schedule of real-time chat alone, then beside
`python -m jobs.summarize` running as the lowest-priority `batch` scenario, for a number of
interleaved rounds (the job is stopped after each and resumes in the next). The client's chat
TTFT says what users felt; the app's own token counters (`trilemma_tokens_total`, every
scenario) say how much work the deployment did in each window.
"""

from __future__ import annotations

import asyncio
import os
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
from core import wire
from core.config import TrilemmaConfig
from core.prometheus_text import samples, scrape, settled_scrape
from jobs.summarize.sample_corpus import write_sample

TOKENS_METRIC = wire.exported(wire.TOKENS_TOTAL)
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


def _window(url: str, model: str, metrics_url: str, load: dict[str, Any], seed: int,
            api_key: str | None) -> tuple[list[RequestRecord], float, float | None]:
    """One phase of chat: its records, the window's length, and the tokens the app counted in it."""
    before, started = scrape(metrics_url), time.monotonic()
    records, _ = _online(url, model, api_key=api_key, **{**load, "seed": seed})
    after = settled_scrape(metrics_url)
    done = [tokens_done(before), tokens_done(after)]
    return records, time.monotonic() - started, None if None in done else done[1] - done[0]


def _ttft_p99_ms(records: list[RequestRecord]) -> float:
    return distribution_ms([r.ttft_s for r in records if r.ok and r.ttft_s is not None])["p99"]


def _arm(windows: list[tuple[list[RequestRecord], float, float | None]]) -> dict[str, Any]:
    """One arm's figures over all its rounds' windows pooled."""
    records = [r for window in windows for r in window[0]]
    chat = [r for r in records if r.ok]
    seconds = sum(window[1] for window in windows)
    tokens = None if any(window[2] is None for window in windows) else sum(window[2] for window in windows)
    return {
        "requests": len(records), "failed": len(records) - len(chat),
        "chat_ttft_ms": distribution_ms([r.ttft_s for r in chat if r.ttft_s is not None]),
        "chat_tpot_ms": distribution_ms([r.tpot_s for r in chat if r.tpot_s is not None]),
        "window_s": seconds, "tokens": tokens,
        "total_tokens_per_s": None if tokens is None else tokens / seconds,
        "rounds": [{"chat_ttft_p99_ms": _ttft_p99_ms(records), "total_tokens_per_s": None if n is None else n / s}
                   for records, s, n in windows],
    }


class BatchJob:
    """`python -m jobs.summarize` as `ray job submit` would run it: on the serving cluster, through
    the app. Stopping it is Ctrl-C; starting it again with the same output resumes it."""

    def __init__(self, url: str, output: Path, args: list[str]) -> None:
        import ray

        self.command = [sys.executable, "-m", "jobs.summarize", "--url", url, "--no-progress",
                        "--output", str(output), *args]
        self.env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
        self.process: subprocess.Popen | None = None
        self.outputs: list[str] = []

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # the job records what finished and stops
        self.outputs.append(self.process.communicate(timeout=180)[0])
        self.process = None


def measure_colocation(config: TrilemmaConfig, *, metrics_url: str, rate: float, count: int, output_tokens: int,
                       job_args: list[str], job_lead_s: float, rounds: int = 1, corpus_copies: int = 1,
                       seed: int = 0, api_key: str | None = None) -> dict[str, Any]:
    """`rounds` times: chat alone, then chat beside the job (stopped after each round and resumed
    in the next), so slow drift of the machine falls on both arms alike."""
    from serve_app.launcher import deployed  # Ray Serve LLM and vLLM: only for a run

    load = {"rate": rate, "count": count, "output_tokens": output_tokens}
    alone, beside, through = [], [], []
    with deployed(config) as url, tempfile.TemporaryDirectory() as scratch:
        model = config.model.name
        _online(url, model, rate=rate, count=min(count, 8), seed=seed + 10_000, output_tokens=output_tokens,
                api_key=api_key)  # warm-up, uncounted
        input_args = []
        if "--input" not in job_args:  # every help topic: minutes of work, so the job outlasts the window
            corpus = write_sample(Path(scratch) / "corpus.jsonl", every_topic=True, copies=corpus_copies)
            input_args = ["--input", str(corpus)]
        job = BatchJob(url, Path(scratch) / "summaries.jsonl", [*input_args, *job_args])
        try:
            for round_ in range(rounds):
                alone.append(_window(url, model, metrics_url, load, seed + round_, api_key))
                job.start()
                time.sleep(job_lead_s)  # the job reads, chunks and reaches its pace before the window
                if not job.running():
                    job.stop()
                    raise RuntimeError(f"the batch job ended before the window: {job.outputs[-1][-2000:]}")
                beside.append(_window(url, model, metrics_url, load, seed + round_, api_key))
                through.append(job.running())
                job.stop()
        finally:
            job.stop()
    alone_arm, beside_arm = _arm(alone), _arm(beside)
    ttft_ratio = beside_arm["chat_ttft_ms"]["p99"] / alone_arm["chat_ttft_ms"]["p99"]
    throughput_ratio = (beside_arm["total_tokens_per_s"] / alone_arm["total_tokens_per_s"]
                        if alone_arm["total_tokens_per_s"] and beside_arm["total_tokens_per_s"] is not None else None)
    return {
        "kind": "colocation", "load": {**load, "seed": seed, "rounds": rounds},
        "job": {"args": job_args, "lead_s": job_lead_s,
                "input": "given" if "--input" in job_args else
                f"every Python help topic (pydoc_data.topics){f' x {corpus_copies}' if corpus_copies > 1 else ''}",
                "ran_through_every_window": all(through), "reports": [out[-1200:] for out in job.outputs]},
        "phases": {"online_only": alone_arm, "online_with_batch_job": beside_arm},
        "ratios": {"chat_ttft_p99_with_job_over_alone": ttft_ratio,
                   "total_tokens_per_s_with_job_over_alone": throughput_ratio},
        "verdict": {"chat_ttft_p99_within_1_1x": ttft_ratio <= TTFT_TARGET,
                    "total_tokens_per_s_at_least_1_5x": throughput_ratio is not None
                    and throughput_ratio >= THROUGHPUT_TARGET,
                    "no_chat_request_failed": not alone_arm["failed"] and not beside_arm["failed"],
                    "job_ran_through_every_window": all(through)},
    }


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for name, label in (("online_only", "chat alone"), ("online_with_batch_job", "chat + batch job")):
        phase = result["phases"][name]
        ttft, tpot = phase["chat_ttft_ms"], phase["chat_tpot_ms"]
        tps = phase["total_tokens_per_s"]
        per_round = ", ".join(f"{r['chat_ttft_p99_ms']:.0f}" for r in phase.get("rounds", []))
        rows.append(f"| {label} | {ttft['p50']:.0f} | {ttft['p99']:.0f} | {per_round or '-'} | {tpot['p50']:.1f} "
                    f"| {tpot['p99']:.1f} | {'-' if tps is None else f'{tps:.1f}'} "
                    f"| {phase['requests'] - phase['failed']}/{phase['requests']} |")
    ratios, verdict, load, job = result["ratios"], result["verdict"], result["load"], result["job"]
    throughput = ratios["total_tokens_per_s_with_job_over_alone"]
    rounds = load.get("rounds", 1)
    return "\n".join([
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"Chat at {load['rate']:g} req/s (Poisson, {load['count']} requests of {load['output_tokens']} tokens "
        f"per phase), alone and then beside the batch job, {rounds} round{'s' if rounds > 1 else ''} of each, "
        "interleaved on one deployment. The job (`python -m jobs.summarize "
        f"{' '.join(job['args'])}`, input: {job['input']}) joins the serving cluster as `ray job submit` "
        f"would, starts {job['lead_s']:.0f} s before its window, and is stopped with Ctrl-C after it; the "
        "next round resumes it. Total tokens/s: every scenario's prompt and completion tokens by the app's "
        "counters over the windows.", "",
        "| phase | chat TTFT p50 (ms) | chat TTFT p99 (ms) | p99 by round (ms) | chat TPOT p50 (ms) "
        "| chat TPOT p99 (ms) | total tokens/s | chat ok/sent |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        f"- Chat p99 TTFT with the job over alone: **{ratios['chat_ttft_p99_with_job_over_alone']:.2f}** "
        f"(target at most 1.1): {'met' if verdict['chat_ttft_p99_within_1_1x'] else 'missed'}.",
        f"- Total tokens/s with the job over alone: **{'-' if throughput is None else f'{throughput:.2f}'}** "
        f"(target at least 1.5): {'met' if verdict['total_tokens_per_s_at_least_1_5x'] else 'missed'}.",
        f"- Chat requests failed: {'none' if verdict['no_chat_request_failed'] else 'some'}; the job ran "
        f"through every window: {'yes' if verdict['job_ran_through_every_window'] else 'no'}.", "",
    ]) + "\n"


def add_command(sub) -> None:
    from bench.cli_common import add_app_args, add_output_args

    colocate = sub.add_parser("colocate", allow_abbrev=False,
                              help="chat alone, then beside the batch summarization job: TTFT and total tokens/s")
    add_app_args(colocate)
    colocate.add_argument("--rate", type=float, default=1.0, help="chat requests per second (Poisson)")
    colocate.add_argument("--num-prompts", type=int, default=90, help="chat requests per phase")
    colocate.add_argument("--output-tokens", type=int, default=64, help="tokens per chat answer (ignore_eos)")
    colocate.add_argument("--rounds", type=int, default=1,
                          help="alone/beside pairs, interleaved (the job resumes each round)")
    colocate.add_argument("--corpus-copies", type=int, default=1,
                          help="without --input: the help topics this many times over (a GPU needs more work)")
    colocate.add_argument("--job-lead-s", type=float, default=30.0, help="seconds the job runs before the window")
    colocate.add_argument("--job-arg", action="append", default=[], metavar="ARG",
                          help="an argument for `python -m jobs.summarize` (repeat); without --input the job "
                               "summarizes every Python help topic")
    colocate.add_argument("--seed", type=int, default=0)
    add_output_args(colocate, "colocate")
    colocate.set_defaults(func=bench_colocate)


def bench_colocate(args) -> int:
    from bench.cli_common import app_config, command_line, fail
    from bench.result_files import write_json
    from core.config import ConfigError
    from serve_app.launcher import shutdown_local_ray

    try:
        config = app_config(args)
        for flag, value in (("--rounds", args.rounds), ("--corpus-copies", args.corpus_copies)):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1; got {value}")
    except ConfigError as error:
        return fail(error)
    try:
        result = measure_colocation(
            config, metrics_url=f"http://127.0.0.1:{config.local_ray.metrics_export_port}/metrics",
            rate=args.rate, count=args.num_prompts, output_tokens=args.output_tokens, job_args=args.job_arg,
            job_lead_s=args.job_lead_s, rounds=args.rounds, corpus_copies=args.corpus_copies, seed=args.seed,
            api_key=args.api_key)
    finally:
        shutdown_local_ray()
    name = args.name or "colocate"
    result = {"name": name, "command": command_line(args), **result}
    write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(markdown(result))
    print((args.out / f"{name}.md").read_text())
    return 0 if all(result["verdict"].values()) else 1
