"""A replay's verdicts against the issue's targets, its Markdown table, and its plot: the
trace's arrival rate and each arm's TTFT over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: benchmarks run on headless machines

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench.metrics import percentile  # noqa: E402
from bench.result_files import fmt  # noqa: E402

# The targets: the app's goodput against plain vLLM's at 1x and at 2x the trace's rate, chat's
# p99 TTFT against one shared pool, and $ per good request against plain vLLM's.
GOODPUT_VS_PLAIN = {1.0: 1.0, 2.0: 1.3}
SHARED_OVER_APP_CHAT_P99 = 3.0
BIN_S = 10.0


def pooled_figures(rounds: list[dict[str, Any]], key_path: tuple[str, ...]) -> float | None:
    """The median over rounds of one figure (None where a round lacks it)."""
    values = []
    for figures in rounds:
        value: Any = figures
        for key in key_path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(float(value))
    return percentile(values, 50) if values else None


def compare(arms: dict[str, dict[str, list[dict[str, Any]]]], chat: str) -> dict[str, Any]:
    """Per rate scale: the app's figures over plain vLLM's and the shared pool's, with the
    targets that apply met or not (medians of the rounds). Ratios are judged as printed, to three
    decimals: two arms that served the same requests alike differ in the last digits only by
    when their last answers came."""
    comparisons = {}
    rates = sorted({rate for by_rate in arms.values() for rate in by_rate}, key=float)
    for rate in rates:
        def figure(arm: str, *path: str) -> float | None:
            rounds = arms.get(arm, {}).get(rate)
            return pooled_figures(rounds, path) if rounds else None

        row: dict[str, Any] = {}
        app_goodput, plain_goodput = figure("app", "goodput_rps"), figure("vllm", "goodput_rps")
        if app_goodput is not None and plain_goodput:
            row["goodput_app_over_vllm"] = round(app_goodput / plain_goodput, 3)
            target = GOODPUT_VS_PLAIN.get(float(rate))
            if target is not None:
                row["goodput_target"] = target
                row["goodput_met"] = row["goodput_app_over_vllm"] >= target
        app_p99, shared_p99 = (figure(arm, "by_scenario", chat, "ttft_ms", "p99") for arm in ("app", "shared"))
        if app_p99 and shared_p99:
            row["chat_p99_ttft_shared_over_app"] = round(shared_p99 / app_p99, 3)
            row["chat_p99_target"] = SHARED_OVER_APP_CHAT_P99
            row["chat_p99_met"] = row["chat_p99_ttft_shared_over_app"] >= SHARED_OVER_APP_CHAT_P99
        app_usd, plain_usd = figure("app", "usd_per_good_request"), figure("vllm", "usd_per_good_request")
        if app_usd is not None and plain_usd:
            row["usd_per_good_request_app_over_vllm"] = round(app_usd / plain_usd, 3)
            row["usd_met"] = row["usd_per_good_request_app_over_vllm"] <= 1.0
        comparisons[rate] = row
    return comparisons


def markdown(result: dict[str, Any]) -> str:
    trace, window = result["trace"], result["window"]
    lines = [f"# Replay of {trace['source']}", "", f"Command: `{result['command']}`", ""]
    for run in result.get("earlier_runs", []):
        lines += [f"Arms {', '.join(run['arms'])}, joined from {run['measured_at']}: `{run['command']}`", ""]
    lines += [
        f"Trace: {trace['summary']}", "",
        f"Window: start {window['start_s']} s, duration {window['duration_s']} s, rate scales "
        f"{', '.join(result['rate_scales'])}, speed {window['speed']}, token scale {window['token_scale']}, "
        f"endpoint {result['endpoint']}, {result['rounds']} round(s), arms in ABAB order.", "",
        "| arm | rate | requests | refused | goodput req/s | SLO met | TTFT p50 / p99 ms | TPOT p50 / p99 ms "
        "| E2E p99 ms | out tok/s | $/1M tok | $/good req | prefix hit |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arm, by_rate in result["arms"].items():
        for rate, rounds in by_rate.items():
            for index, f in enumerate(rounds):
                refused = ", ".join(f"{k} {v}" for k, v in sorted(f["refused"].items())) or "0"
                hits = f.get("prefix_cache") or {}
                hit = ", ".join(f"{pool} {fmt(100 * h['hit_rate'], 0)}%" for pool, h in hits.items()
                                if h.get("hit_rate") is not None) or "-"
                lines.append(
                    f"| {arm} (round {index + 1}) | {rate}x | {f['requests']} | {refused} | {fmt(f['goodput_rps'], 2)} "
                    f"| {fmt(100 * f['slo_attainment'], 1)}% | {fmt(f['ttft_ms']['p50'], 0)} / {fmt(f['ttft_ms']['p99'], 0)} "
                    f"| {fmt(f['tpot_ms']['p50'], 1)} / {fmt(f['tpot_ms']['p99'], 1)} | {fmt(f['e2e_ms']['p99'], 0)} "
                    f"| {fmt(f['output_token_throughput_tps'], 0)} | {fmt(f['usd_per_1m_tokens'], 3)} "
                    f"| {fmt(f['usd_per_good_request'] and f['usd_per_good_request'] * 1000, 4)}m | {hit} |")
    lines += ["", "SLO attainment by prompt length (medians of rounds where several):", "",
              "| arm | rate | " + " | ".join(result["length_buckets"]) + " |",
              "| --- | --- | " + " | ".join("---" for _ in result["length_buckets"]) + " |"]
    for arm, by_rate in result["arms"].items():
        for rate, rounds in by_rate.items():
            cells = []
            for bucket in result["length_buckets"]:
                share = pooled_figures(rounds, ("by_prompt_length", bucket, "attainment"))
                count = rounds[0]["by_prompt_length"].get(bucket, {}).get("requests", 0)
                cells.append(f"{fmt(100 * share, 0)}% of {count}" if share is not None else "-")
            lines.append(f"| {arm} | {rate}x | " + " | ".join(cells) + " |")
    lines += ["", "Against the targets (medians of rounds):", ""]
    for rate, row in result["comparison"].items():
        parts = []
        if "goodput_app_over_vllm" in row:
            target = f" (target >= {row['goodput_target']}: {'met' if row['goodput_met'] else 'missed'})" \
                if "goodput_target" in row else ""
            parts.append(f"goodput app / plain vLLM {row['goodput_app_over_vllm']:.2f}x{target}")
        if "chat_p99_ttft_shared_over_app" in row:
            parts.append(f"{result['chat_scenario']} p99 TTFT shared / app {row['chat_p99_ttft_shared_over_app']:.2f}x "
                         f"(target >= {row['chat_p99_target']}: {'met' if row['chat_p99_met'] else 'missed'})")
        if "usd_per_good_request_app_over_vllm" in row:
            parts.append(f"$ per good request app / plain vLLM {row['usd_per_good_request_app_over_vllm']:.2f}x "
                         f"(target <= 1: {'met' if row['usd_met'] else 'missed'})")
        lines.append(f"- {rate}x: " + ("; ".join(parts) or "no pair of arms to compare"))
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], records: dict[str, dict[str, list[list[dict[str, Any]]]]], path: Path) -> Path:
    """Top: requests sent per second (the trace's arrivals, as scaled); below, per rate scale,
    each arm's rolling p99 TTFT over replay time (first round)."""
    rates = result["rate_scales"]
    figure, axes = plt.subplots(1 + len(rates), 1, figsize=(10, 3 + 2.6 * len(rates)), sharex=False)
    top = axes[0]
    for rate in rates:
        any_arm = next(iter(records.values()))[rate][0]
        times = [r["planned_s"] for r in any_arm]
        if times:
            bins = int(max(times) // BIN_S) + 1
            counts = [0] * bins
            for t in times:
                counts[int(t // BIN_S)] += 1
            top.step([i * BIN_S for i in range(bins)], [c / BIN_S for c in counts], where="post", label=f"{rate}x")
    top.set_title("Arrivals (req/s, 10 s bins)")
    top.set_ylabel("req/s")
    top.legend()
    top.grid(alpha=0.3)
    for axis, rate in zip(axes[1:], rates):
        for arm, by_rate in records.items():
            served = sorted((r["planned_s"], r["ttft_s"]) for r in by_rate[rate][0] if r.get("ttft_s") is not None)
            xs, ys = [], []
            for at, _ in served:
                window = [ttft for t, ttft in served if at - 30.0 < t <= at]
                xs.append(at)
                ys.append(percentile(window, 99) * 1000)
            axis.plot(xs, ys, label=arm)
        axis.set_title(f"TTFT p99 over the last 30 s, {rate}x")
        axis.set_ylabel("ms")
        axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend()
    axes[-1].set_xlabel("replay time (s)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
