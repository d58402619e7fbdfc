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
    lines += ["![output tokens/s](throughput.png)", ""]
    lines += _isolation_section(folder) + _real_weights_section(folder)
    lines += ["Made by `python -m bench.gpu_report`."]
    report = folder / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


ISOLATION_PHASES = {
    "split_short_only": "split pools, short chat alone",
    "split_mixed": "split pools + priority, long documents mixed in",
    "shared_mixed": "one shared pool (FCFS), the same mix",
    "split_overload": "split pools, overload",
}


def _isolation_section(folder: Path) -> list[str]:
    run = _load(folder, "isolation-8b")
    if run is None:
        return []
    ratios, phases = run["ratios"], run["phases"]
    rows = []
    for key, label in ISOLATION_PHASES.items():
        if key not in phases:
            continue
        phase = phases[key]
        shed = ", ".join(f"{name} {count}" for name, count in (phase.get("shed") or {}).items()) or "none"
        rows.append(f"| {label} | {phase['short_ttft_ms']['p50']:.0f} | {phase['short_ttft_ms']['p99']:.0f} "
                    f"| {phase['short_tpot_ms']['p50']:.1f} | {phase['all']['total_token_throughput_tps']:.0f} "
                    f"| {phase['all']['succeeded']}/{phase['all']['requests']} | {shed} |")
    figure, axis = plt.subplots(figsize=(8, 3))
    shown = [key for key in ISOLATION_PHASES if key in phases and key != "split_overload"]
    axis.barh([ISOLATION_PHASES[k] for k in shown], [phases[k]["short_ttft_ms"]["p99"] for k in shown],
              color=["#444", "#88a", "#c63"][:len(shown)])
    axis.set_xlabel("short chat TTFT p99 (ms)")
    axis.invert_yaxis()
    figure.tight_layout()
    figure.savefig(folder / "isolation.png", dpi=120)
    plt.close(figure)
    return [
        "## Isolation: short chat beside long documents", "",
        "| phase | short TTFT p50 (ms) | short TTFT p99 (ms) | short TPOT p50 (ms) | total tok/s | ok/sent | shed (429) |",
        "| --- | --- | --- | --- | --- | --- | --- |", *rows, "",
        f"- Short p99 TTFT, mixed over alone: {ratios['mixed_over_alone_p99']:.2f} (target at most 1.5).",
        f"- Short p99 TTFT, shared pool over split: {ratios['shared_over_split_p99']:.2f} (target at least 3).",
        f"- Total tokens/s, split over shared: {ratios['throughput_split_over_shared']:.3f} (target at least 0.9).",
        f"- Long documents' share of the mixed load's prompt tokens: {ratios['long_prompt_token_share']:.0%}.", "",
        "![short chat TTFT p99](isolation.png)", "",
        f"Command (both arms; `isolation-8b-split.json` holds the first): `{run['command']}`", "",
    ]


def _real_weights_section(folder: Path) -> list[str]:
    run = _load(folder, "real-weights-h200")
    if run is None:
        return []
    rows = [f"| {check['name']} | {'ok' if check['ok'] else 'missing'} | {check['text']!r} |" for check in run["checks"]]
    # The CPU run of the same checks, made on the development machine, holds the comparison.
    cpu = _load(folder.parent, "real-weights-cpu")
    agreement = (cpu or {}).get("agreement_with")
    return [
        "## Real weights", "",
        "SmolLM2-135M-Instruct's real weights, converted from the embedded GGUF as `make serve` does, greedy:", "",
        "| check | expected words | answer |", "| --- | --- | --- |", *rows, "",
        *([f"Greedy tokens shared from the start with the CPU engine's run (`../real-weights-cpu.json`), per "
           f"check: {agreement['leading_tokens_shared']} (of {[len(c['token_ids']) for c in run['checks']]}).", ""]
          if agreement else []),
        f"Command: `{run['command']}`", "",
    ]


if __name__ == "__main__":
    print(write_gpu_report(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu-h200")))
