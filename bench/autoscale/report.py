"""Markdown tables and timeline plots of the autoscaling benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.result_files import fmt


def _row(arm: dict[str, Any], peak: dict[str, Any]) -> str:
    saved = 1 - arm["replica_seconds"] / peak["replica_seconds"]
    return (f"| {arm['arm']} | {arm['replica_seconds']:.0f} | {arm['usd']:.4f} | {saved:+.0%} "
            f"| {arm['slo_attainment']:.2%} | {fmt(arm['ttft_ms']['p50'], 0)} / {fmt(arm['ttft_ms']['p99'], 0)} "
            f"| {fmt(arm['tpot_ms']['p50'], 0)} / {fmt(arm['tpot_ms']['p99'], 0)} | {arm['peak_replicas']} |")


def simulation_markdown(result: dict[str, Any], png: str) -> str:
    peak = next(arm for arm in result["static"] if arm["arm"] == result["static_peak"])
    model, slo = result["model"], result["slo"]
    phases = ", ".join(f"{p['name']} {p['seconds']:.0f} s at {p['rate_from']:g}->{p['rate_to']:g} req/s"
                       for p in result["day"]["phases"])
    verdict = result["verdict"]
    lines = [
        f"# {result['name']}", "",
        f"Command: `{result['command']}`", "",
        f"Pool `{result['pool']}`, SLO p99 TTFT {fmt(slo['ttft_ms'], 0)} ms, TPOT {fmt(slo['tpot_ms'], 0)} ms; "
        f"a request meets it when both hold, and an arm meets the target when {slo['target']:.0%} of its "
        f"requests do. One replica costs ${result['usd_per_hour']:.4f}/h.", "",
        f"The day: {phases}; {result['day']['requests']} requests, prompts of {result['day']['prompt_tokens']} "
        f"tokens, answers of {result['day']['output_tokens']} (seed {result['day']['seed']}).", "",
        f"Replica model (from `{model['source']}`): an iteration takes {model['decode_base_s'] * 1000:.2f} ms "
        f"+ {model['decode_s_per_seq'] * 1000:.3f} ms per running request + {model['prefill_s_per_token'] * 1000:.3f}"
        f" ms per prompt token joining; at most {model['max_num_seqs']} requests run; a new replica serves "
        f"{model['startup_s']:.0f} s after its launch and costs from the launch"
        + ("." if model.get("wake_s") is None else
           f"; a scale-down puts a replica to sleep (its engine's memory freed) and a scale-up wakes one, "
           f"serving {model['wake_s']:g} s later.") + "",
        "| arm | replica-seconds | $ | saved vs static peak | SLO attainment | TTFT p50 / p99 (ms) "
        "| TPOT p50 / p99 (ms) | peak replicas |",
        "|---|---|---|---|---|---|---|---|",
        _row(result["autoscaled"], peak),
        *(_row(arm, peak) for arm in result["static"]), "",
        f"Static peak provisioning is `{result['static_peak']}`, the smallest static pool that meets the target"
        + ("" if verdict["static_peak_meets_slo"] else " (none does: the largest is shown)") + ".", "",
        f"- Replica-seconds (and $) saved by autoscaling: **{result['savings']:.1%}** (target at least 30%): "
        f"{'met' if verdict['savings_at_least_30pct'] else 'missed'}.",
        *([] if model.get("wake_s") is None else [
            f"- Replicas asleep: {result['autoscaled']['asleep_seconds']:.0f} replica-seconds, not counted above: "
            f"their GPU memory serves other work (the batch job, the other pool). Were those GPUs paid while "
            f"idle, the saving would be {result['savings_if_asleep_paid']:.1%}."]),
        f"- SLO attainment of the autoscaled pool: **{result['autoscaled']['slo_attainment']:.2%}** "
        f"(target at least 99%): {'met' if verdict['attainment_at_least_99pct'] else 'missed'}.", "",
        f"![timeline]({png})", "",
        "Scaling decisions (the policy's own reasons):", "",
        *(f"- {d['at']:.0f} s: {d['from']} -> {d['to']} [{d.get('policy', '?')}] {d.get('reason', '')}"
          for d in result["decisions"]),
    ]
    return "\n".join(lines) + "\n"


def timeline_png(timeline: list[dict[str, Any]], slo_ttft_ms: float | None, path: Path, title: str,
                 offered: list[tuple[float, float]] | None = None) -> Path:
    """Replicas, p99 TTFT against the SLO, and $/hour over time; the offered rate when known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in timeline]
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    axes[0].step(t, [s["replicas"] for s in timeline], where="post", label="replicas (paid)")
    axes[0].step(t, [s["serving"] for s in timeline], where="post", label="replicas serving", linestyle="--")
    axes[0].set_ylabel("replicas")
    if offered:
        rate_axis = axes[0].twinx()
        rate_axis.plot([o[0] for o in offered], [o[1] for o in offered], color="grey", alpha=0.5,
                       label="offered req/s")
        rate_axis.set_ylabel("offered req/s")
        rate_axis.legend(loc="upper right")
    axes[0].legend(loc="upper left")
    p99 = [(s["t"], s["ttft_p99_s"] * 1000) for s in timeline if s.get("ttft_p99_s") is not None]
    axes[1].plot([p[0] for p in p99], [p[1] for p in p99], label="TTFT p99, last 30 s")
    if slo_ttft_ms:
        axes[1].axhline(slo_ttft_ms, color="red", linestyle=":", label=f"SLO {slo_ttft_ms:.0f} ms")
    axes[1].set_ylabel("ms")
    axes[1].legend(loc="upper left")
    axes[2].step(t, [s["usd_per_hour"] for s in timeline], where="post", color="green")
    axes[2].set_ylabel("$ / hour")
    axes[2].set_xlabel("seconds")
    return save_figure(fig, title, path)


def live_markdown(result: dict[str, Any], png: str) -> str:
    v = result["verdict"]

    def at(key: str) -> str:
        return "never" if v[key] is None else f"{v[key]:.0f} s"

    phases = ", ".join(f"{p['name']} {p['seconds']:.0f} s at {p['rate_from']:g} req/s" for p in result["phases"])
    lines = [
        f"# {result['name']}", "",
        f"Command: `{result['command']}`", "",
        f"Pool `{result['pool']}`, SLO p99 TTFT {result['slo_ttft_ms']:.0f} ms, ${result['usd_per_hour']:.4f}/h a "
        f"replica. Load: {phases}.", "",
        "| event | at |", "|---|---|",
        f"| client p99 TTFT (last 30 s) first above the SLO | {at('slo_crossed_at_s')} |",
        f"| scale-up decided | {at('scale_up_decided_at_s')} |",
        f"| new replica serving | {at('new_replica_serving_at_s')} |",
        f"| burst ended | {at('burst_ended_at_s')} |",
        f"| scale-down decided | {at('scale_down_decided_at_s')} |",
        f"| back to the starting replicas | {at('back_to_start_at_s')} |", "",
        f"- Scale-up within 30 s of the SLO crossing: "
        f"{'met' if v['scale_up_within_30s_of_crossing'] else 'missed'}"
        + ("" if v["decision_after_crossing_s"] is None else f" ({v['decision_after_crossing_s']:.0f} s after it)")
        + ".",
        f"- Scaled back down after the burst: {'met' if v['scaled_down_after_burst'] else 'missed'}.",
        f"- Requests failed: {v['failed']} of {v['requests']}" + (f" ({v['failures']})" if v["failed"] else "") + ".", "",
        f"![timeline]({png})", "",
        "Decisions (`trilemma autoscale explain`, times from the start of the load):", "",
        *(f"- {d['at']:.0f} s: {d['current']} -> {d['target']} [{d['policy']}] {d['reason']}"
          + (f" (x{d['repeated']})" if d.get("repeated") else "") for d in result["decisions"]),
    ]
    return "\n".join(lines) + "\n"


def save_figure(fig, title: str, path: Path) -> Path:
    """A timeline figure under its title, written as a PNG and closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
