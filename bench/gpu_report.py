"""The GPU benchmark's report: engine alone against the app's paths, from the result files.

    python -m bench.gpu_report [bench/results/gpu-h200]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

# The overhead runs of bench/gpu_bench.sh; `overhead-8b` ran when gpu-h200.yaml had one
# router replica, which its stored command therefore does not name.
OVERHEAD_RUNS = {
    "overhead-8b": "256 in flight, 1 router replica",
    "overhead-8b-4routers": "256 in flight, 4 router replicas",
    "overhead-8b-c16": "16 in flight, 4 router replicas",
}


def _load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_gpu_report(folder: Path) -> Path:
    engine = _load(folder, "engine-alone-8b")
    small = _load(folder, "engine-alone-135m")
    if engine is None:
        raise SystemExit(f"{folder}: no engine-alone-8b.json; run bench/gpu_bench.sh engine first")
    alone_tps = engine["saturated"]["output_tokens_per_s"]
    rows, bars = [], {"engine alone": alone_tps}
    for name, label in OVERHEAD_RUNS.items():
        run = _load(folder, name)
        if run is None:
            continue
        direct, router = run["summaries"]["direct"], run["summaries"]["router"]
        if run["config"]["concurrency"] == engine["saturated"]["prompts"]:  # the engine's load
            bars[f"direct ingress ({label})"] = direct["output_token_throughput_tps"]
            bars[f"router ({label})"] = router["output_token_throughput_tps"]
        rows.append(f"| {label} | {direct['output_token_throughput_tps']:.0f} | {router['output_token_throughput_tps']:.0f} "
                    f"| {router['output_token_throughput_tps'] / alone_tps:.2f} | {direct['ttft_ms']['p50']:.0f} "
                    f"| {router['ttft_ms']['p50']:.0f} | {run['added_ttft_p50_ms']:+.0f} | `{run['command']}` |")
    floor = engine.get("floor", {})
    single = engine["single_stream"]
    lines = [
        "# GPU proof: one NVIDIA H200", "",
        "Llama-3.1-8B shape with random weights (vLLM `load_format: dummy`), vLLM 0.26 and Ray 2.58.", "",
        "## The engine alone", "",
        "| model | TTFT p50 (ms) | TPOT p50 (ms) | TPOT floor (ms) | TPOT / floor | saturated output tok/s |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| 8B shape | {single['ttft_ms']['median']:.1f} | {single['tpot_ms']['median']:.2f} | "
        f"{floor.get('tpot_floor_ms', float('nan')):.2f} | {floor.get('tpot_over_floor', float('nan')):.2f} | {alone_tps:.0f} |",
    ]
    if small:
        lines.append(f"| SmolLM2-135M shape | {small['single_stream']['ttft_ms']['median']:.1f} | "
                     f"{small['single_stream']['tpot_ms']['median']:.2f} | | | {small['saturated']['output_tokens_per_s']:.0f} |")
    lines += ["", f"Commands: `{engine['command']}`" + (f"; `{small['command']}`" if small else ""), ""]
    if rows:
        lines += [
            "## Through the app (prompts of 32-256 words, 128 tokens each, ABBA rounds)", "",
            "| load | direct tok/s | router tok/s | router / engine alone | direct TTFT p50 (ms) "
            "| router TTFT p50 (ms) | added TTFT p50 | command |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |", *rows, "",
            "Direct: Ray Serve LLM's stock OpenAI ingress bound to the same pool. `overhead-8b` ran while "
            "gpu-h200.yaml had one router replica, so its command names none; `bench/gpu_bench.sh` "
            "sets it explicitly.", "",
        ]
    figure, axis = plt.subplots(figsize=(8, 3.5))
    axis.barh(list(bars), list(bars.values()), color=["#444"] + ["#88a", "#c63"] * ((len(bars) - 1) // 2))
    axis.set_xlabel("output tokens/s (8B shape, 256 prompts x 128 tokens)")
    axis.invert_yaxis()
    figure.tight_layout()
    figure.savefig(folder / "throughput.png", dpi=120)
    plt.close(figure)
    lines += ["![output tokens/s](throughput.png)", "", "Made by `python -m bench.gpu_report`."]
    report = folder / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


if __name__ == "__main__":
    print(write_gpu_report(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu-h200")))
