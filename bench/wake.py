"""`trilemma bench wake`: how fast a pool that sleeps when idle answers again, against its cold start.

On the running app, whose pool `--pool` sleeps when idle (`pools.<name>.sleep_when_idle`), each
round waits until every replica of the pool reports its engine asleep (fallen asleep, not
falling), then times one streamed request into the pool (its first token waits for the wake) and
one right after it (awake). Beside them: how long the engine took to fall asleep and to wake, as
the replica measured them, and how long the replica took to start (its cold start), all from
`GET /trilemma/pools`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench import machine
from bench.app_ready import wait_until_serving
from bench.cli_common import add_api_key_arg, add_output_args, command_line, fail, shown_path
from bench.pool_activity import read_pool_activity
from bench.result_files import write_json

# The bar: a sleeping GPU pool serves its first request within this long of being woken.
FIRST_ANSWER_TARGET_S = 5.0
# Words of about one token each, so that --prompt-words is about the prompt's tokens.
WORDS = ("river", "stone", "light", "green", "house", "water", "music", "paper", "table", "cloud")


def prompt(tag: str, words: int) -> str:
    """A prompt that starts with `tag`: no two share a cached prefix in the engine."""
    return " ".join([tag, *(WORDS[i % len(WORDS)] for i in range(words))])


def pool_replicas(url: str, pool: str) -> list[dict[str, Any]]:
    pools = read_pool_activity(url)
    if pools is None or pool not in pools:
        raise ValueError(f"{url} reports no pool {pool!r}" + (f"; it has {sorted(pools)}" if pools else ""))
    return pools[pool]["replicas"]


def wait_until_asleep(url: str, pool: str, timeout_s: float) -> float:
    """Seconds until every replica of `pool` reports its engine asleep."""
    started = time.monotonic()
    while True:
        replicas = pool_replicas(url, pool)
        if replicas and all(replica.get("asleep") for replica in replicas):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            states = [replica.get("asleep") for replica in replicas]
            raise ValueError(f"pool {pool!r} not asleep after {timeout_s:.0f} s (replicas asleep: {states}); "
                             f"does it set sleep_when_idle.after_s?")
        time.sleep(0.5)


def time_to_first_token(url: str, model: str, prompt: str, api_key: str | None) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 16, "stream": True}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=600) as response:
        if response.status_code != 200:
            raise ValueError(f"the request failed with HTTP {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                return time.perf_counter() - started
    raise ValueError("the answer streamed no token")


def slowest(replicas: list[dict[str, Any]], key: str) -> float | None:
    """The largest of the replicas' readings of `key` (a fall asleep or a wake), None if none has one."""
    readings = [replica[key] for replica in replicas if replica.get(key) is not None]
    return max(readings) if readings else None


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(result: dict[str, Any]) -> str:
    rounds = result["rounds"]
    lines = [
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"{result['url']} ({result['machine']}), pool `{result['pool']}`, prompts of {result['prompt_words']} words.",
        "",
        "| round | asleep after idle (s) | engine fell asleep in (s) | first token, engine asleep (s) | "
        "engine's own wake (s) | first token, awake (s) |",
        "| --- | --- | --- | --- | --- | --- |",
        *(f"| {n} | {r['asleep_after_s']:.1f} | {seconds(r.get('engine_sleep_s'))} | {r['ttft_asleep_s']:.2f} | "
          f"{seconds(r['engine_wake_s'])} | {r['ttft_awake_s']:.3f} |"
          for n, r in enumerate(rounds, 1)),
        "",
        f"- Median first token from asleep: **{result['ttft_asleep_s_median']:.2f} s** (target at most "
        f"{FIRST_ANSWER_TARGET_S:g} s): {'met' if result['met'] else 'missed'}.",
        f"- The same pool's replica took **{result['cold_start_s']} s** to start (its cold start, engine and "
        "warm-up): what a pool scaled to zero makes its next request wait.",
    ]
    return "\n".join(lines) + "\n"


def add_wake_command(sub: argparse._SubParsersAction) -> None:
    wake = sub.add_parser("wake", help="a sleeping pool's first answer after its wake, against its cold start",
                          allow_abbrev=False)
    wake.add_argument("--url", default="http://127.0.0.1:8000", help="the running app (without /v1)")
    add_api_key_arg(wake)
    wake.add_argument("--pool", default="long", help="a pool that sets sleep_when_idle.after_s")
    wake.add_argument("--prompt-words", type=int, default=1500,
                      help="words per prompt: enough for the router to send it to --pool")
    wake.add_argument("--rounds", type=int, default=3)
    wake.add_argument("--asleep-timeout-s", type=float, default=600.0,
                      help="longest wait for the pool to fall asleep in a round")
    wake.add_argument("--ready-timeout-s", type=float, default=900.0)
    add_output_args(wake, "wake")
    wake.set_defaults(func=bench_wake)


def bench_wake(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/")
    try:
        model = wait_until_serving(url, args.ready_timeout_s)
        rounds = []
        for n in range(args.rounds):
            # Prompts of their own: a cached prefix would shorten the engine's part of the awake one.
            asleep_after = wait_until_asleep(url, args.pool, args.asleep_timeout_s)
            asleep = time_to_first_token(url, model, prompt(f"asleep{n}", args.prompt_words), args.api_key)
            awake = time_to_first_token(url, model, prompt(f"awake{n}", args.prompt_words), args.api_key)
            replicas = pool_replicas(url, args.pool)
            rounds.append({"asleep_after_s": asleep_after, "ttft_asleep_s": asleep, "ttft_awake_s": awake,
                           "engine_sleep_s": slowest(replicas, "last_sleep_s"),
                           "engine_wake_s": slowest(replicas, "last_wake_s")})
            print(f"round {n + 1}: first token {asleep:.2f} s asleep, {awake:.3f} s awake", flush=True)
        starts = [r.get("start_s") for r in pool_replicas(url, args.pool) if r.get("start_s") is not None]
    except (ValueError, httpx.HTTPError) as error:
        return fail(error)
    median = statistics.median(r["ttft_asleep_s"] for r in rounds)
    name = args.name or "wake"
    result = {"name": name, "command": command_line(args), "url": url, "machine": machine.describe(),
              "pool": args.pool, "prompt_words": args.prompt_words, "rounds": rounds,
              "ttft_asleep_s_median": median, "cold_start_s": max(starts) if starts else None,
              "met": median <= FIRST_ANSWER_TARGET_S}
    json_path = write_json(result, Path(args.out), name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    return 0 if result["met"] else 1
