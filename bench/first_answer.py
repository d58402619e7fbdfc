"""Times `make serve` from launch to its first answer, then TTFT and TPOT of short requests.

    python bench/first_answer.py [--requests 10] [--cold]

--cold first removes the converted model and vLLM's compile cache, as on a fresh machine
(the virtual environment is kept: its install time is reported by `make setup` itself).
Writes bench/results/first-answer-cpu/first-answer-{cold,warm}.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from openai import OpenAI

from bench.metrics import percentile

ROOT = Path(__file__).resolve().parent.parent
URL = "http://127.0.0.1:8000/v1"
MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def streamed_request(client: OpenAI) -> dict[str, float]:
    started = time.perf_counter()
    first = None
    tokens = 0
    for chunk in client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=32, temperature=0, stream=True,
        stream_options={"include_usage": True},
        # The answer itself is 8 tokens; 32 steady decode steps give TPOT something to average.
        extra_body={"min_tokens": 32},
    ):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    total = time.perf_counter() - started
    return {"ttft_s": first, "tpot_s": (total - first) / max(tokens - 1, 1), "tokens": tokens}


def wait_for_first_answer(client: OpenAI, deadline_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        try:
            client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=8)
            return time.monotonic()
        except Exception:  # not up yet: connection refused or the app still deploying
            time.sleep(1)
    raise TimeoutError(f"no answer within {deadline_s} s")


def stop(server: subprocess.Popen) -> None:
    """Ctrl-C as a user would, then the hard way: engines must not outlive the benchmark."""
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    subprocess.run([str(ROOT / ".venv/bin/ray"), "stop", "--force"], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    if args.cold:
        cache = Path(os.environ.get("TRILEMMA_CACHE_DIR", Path.home() / ".cache" / "trilemma"))
        for folder in (cache / "models", Path.home() / ".cache" / "vllm" / "torch_compile_cache"):
            shutil.rmtree(folder, ignore_errors=True)
    client = OpenAI(base_url=URL, api_key="unused", max_retries=0, timeout=60)
    launched = time.monotonic()
    server = subprocess.Popen(["make", "serve"], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first_answer_s = wait_for_first_answer(client, deadline_s=900) - launched
        runs = [streamed_request(client) for _ in range(args.requests)]
    finally:
        stop(server)
    ttft = [r["ttft_s"] * 1000 for r in runs]
    tpot = [r["tpot_s"] * 1000 for r in runs]
    result = {
        "command": "python bench/first_answer.py" + (" --cold" if args.cold else "")
        + f" --requests {args.requests}",
        "cold": args.cold,
        "make_serve_to_first_answer_s": round(first_answer_s, 1),
        "ttft_ms": {"first": round(ttft[0]), "p50": round(statistics.median(ttft)), "p99": round(percentile(ttft, 99))},
        "tpot_ms": {"p50": round(statistics.median(tpot), 1), "p99": round(percentile(tpot, 99), 1)},
        "completion_tokens": [r["tokens"] for r in runs],
    }
    out = ROOT / "bench" / "results" / "first-answer-cpu"
    out.mkdir(parents=True, exist_ok=True)
    name = "first-answer-cold" if args.cold else "first-answer-warm"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{name}.md").write_text(
        f"# make serve to first answer ({'cold caches' if args.cold else 'warm caches'})\n\n"
        f"Command: `{result['command']}`\n\n"
        f"| make serve to first answer | TTFT first | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 |\n"
        f"| --- | --- | --- | --- | --- | --- |\n"
        f"| {result['make_serve_to_first_answer_s']} s | {result['ttft_ms']['first']} ms "
        f"| {result['ttft_ms']['p50']} ms | {result['ttft_ms']['p99']} ms "
        f"| {result['tpot_ms']['p50']} ms | {result['tpot_ms']['p99']} ms |\n\n"
        f"One short chat request at a time (32 completion tokens, temperature 0), streamed, "
        f"through the router to the short pool; {args.requests} requests.\n"
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
