"""Checks this harness against vLLM's own client (`vllm bench serve`) on one endpoint.

    python bench/client_check.py [--url http://127.0.0.1:8000] [--num-prompts 40] [--rate 1]
                                 [--concurrency 4] [--pairs 3]

Both clients send the same JSONL prompt set (real documentation text), in the same order and
with no warm-up (the server is warm already), exactly 64 output tokens each (ignore_eos),
alternating A, B, A, B, ... (`--pairs` runs each), in two load shapes: Poisson arrivals at a
rate, and a fixed concurrency. Both scale their random arrival schedule to end at N / rate,
so both offer the same load; the schedules themselves differ (each client draws its own), so
the TTFT of single runs at a rate differs by the luck of the draw, and medians over pairs
are compared. Writes bench/results/client-check/client-check.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import httpx

from bench.datasets import docs_dataset
from core.model_store import default_cache_dir, prepare_embedded_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("bench/results/client-check")  # relative: the commands stored in results name no machine paths
OUTPUT_TOKENS = 64


def run_ours(args, prompts_path: Path, shape: str, name: str) -> dict:
    load = ["--rate", str(args.rate)] if shape == "rate" else ["--concurrency", str(args.concurrency)]
    subprocess.run([
        sys.executable, "-m", "bench", "run", "--url", args.url,
        "--dataset", "jsonl", "--dataset-path", str(prompts_path), "--num-prompts", str(args.num_prompts),
        *load, "--warmup", "0", "--ignore-eos", "--seed", "0",
        "--out", str(RESULTS), "--name", name, "--no-progress",
    ], check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((RESULTS / f"{name}.json").read_text())["points"][0]["summary"]
    return {"ttft_p50_ms": summary["ttft_ms"]["p50"], "tpot_p50_ms": summary["tpot_ms"]["p50"],
            "request_throughput": summary["request_throughput_rps"],
            "output_throughput": summary["output_token_throughput_tps"]}


def run_vllm(args, prompts_path: Path, model: str, tokenizer: str, shape: str, name: str) -> dict:
    load = (["--request-rate", str(args.rate)] if shape == "rate"
            else ["--request-rate", "inf", "--max-concurrency", str(args.concurrency)])
    subprocess.run([
        str(Path(sys.executable).parent / "trilemma-vllm"), "bench", "serve",
        "--backend", "openai-chat", "--base-url", args.url, "--endpoint", "/v1/chat/completions",
        "--dataset-name", "custom", "--dataset-path", str(prompts_path), "--disable-shuffle",
        "--num-prompts", str(args.num_prompts), *load, "--num-warmups", "0",
        "--custom-output-len", str(OUTPUT_TOKENS), "--ignore-eos", "--seed", "0",
        "--model", model, "--tokenizer", tokenizer, "--disable-tqdm",
        "--save-result", "--result-dir", str(RESULTS), "--result-filename", f"{name}.json",
    ], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = json.loads((RESULTS / f"{name}.json").read_text())
    return {"ttft_p50_ms": result["median_ttft_ms"], "tpot_p50_ms": result["median_tpot_ms"],
            "request_throughput": result["request_throughput"],
            "output_throughput": result["output_throughput"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--num-prompts", type=int, default=40)
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=3, help="runs of each client per load shape")
    args = parser.parse_args()
    model = httpx.get(f"{args.url}/v1/models", timeout=30).json()["data"][0]["id"]
    tokenizer = str(prepare_embedded_model(default_cache_dir()))
    os.chdir(ROOT)
    RESULTS.mkdir(parents=True, exist_ok=True)
    prompts_path = RESULTS / "client-check-prompts.jsonl"  # kept: the exact prompts both sent
    with prompts_path.open("w") as out:
        for prompt in docs_dataset(args.num_prompts, seed=0):
            out.write(json.dumps({"prompt": prompt.messages[0]["content"], "max_tokens": OUTPUT_TOKENS}) + "\n")
    runs = []
    for shape in ("rate", "concurrency"):
        for index in range(1, args.pairs + 1):  # alternate: drift in the server hits both alike
            tag = f"{shape}-{index}"
            runs.append((shape, "trilemma", run_ours(args, prompts_path, shape, f"client-check-trilemma-{tag}")))
            runs.append((shape, "vllm", run_vllm(args, prompts_path, model, tokenizer, shape, f"client-check-vllm-{tag}")))
    median = {
        shape: {client: {key: statistics.median(r[key] for s, c, r in runs if (s, c) == (shape, client))
                         for key in runs[0][2]}
                for client in ("trilemma", "vllm")}
        for shape in ("rate", "concurrency")
    }
    ratios = {shape: {key: m["trilemma"][key] / m["vllm"][key] for key in m["trilemma"]} for shape, m in median.items()}
    command = (f"python bench/client_check.py --url {args.url} --num-prompts {args.num_prompts} "
               f"--rate {args.rate} --concurrency {args.concurrency} --pairs {args.pairs}")
    (RESULTS / "client-check.json").write_text(json.dumps(
        {"command": command, "runs": runs, "median": median, "ratio_trilemma_over_vllm": ratios}, indent=2) + "\n")
    shapes = {"rate": f"Poisson {args.rate} req/s", "concurrency": f"concurrency {args.concurrency}"}
    rows = "\n".join(
        f"| {shapes[shape]} | {client} | {r['ttft_p50_ms']:.0f} | {r['tpot_p50_ms']:.1f} "
        f"| {r['request_throughput']:.3f} | {r['output_throughput']:.1f} |"
        for shape, client, r in runs)
    ratio_lines = "\n".join(
        f"- {shapes[shape]}: TTFT p50 {r['ttft_p50_ms']:.3f}, TPOT p50 {r['tpot_p50_ms']:.3f}, "
        f"output throughput {r['output_throughput']:.3f}" for shape, r in ratios.items())
    (RESULTS / "client-check.md").write_text(
        f"# This harness against `vllm bench serve`\n\nCommand: `{command}`\n\n"
        f"Same {args.num_prompts} documentation prompts, {OUTPUT_TOKENS} output tokens each "
        f"(ignore_eos), runs alternated. `vllm` is vLLM's own client (`trilemma-vllm bench serve`).\n\n"
        f"| load | client | TTFT p50 ms | TPOT p50 ms | req/s | out tok/s |\n"
        f"| --- | --- | --- | --- | --- | --- |\n{rows}\n\n"
        f"Ratio of the medians over runs, this harness / vLLM's client:\n\n{ratio_lines}\n")
    # Each client's own files hold per-run detail and vLLM's hold the tokenizer's local path;
    # the comparison above keeps what matters.
    for detail in RESULTS.glob("client-check-*-[0-9].*"):
        detail.unlink()
    print((RESULTS / "client-check.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
