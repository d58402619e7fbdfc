"""The traffic split's comparison as Markdown, and the self-tuning fleet's timeline as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.result_files import fmt


def _pair(pools: dict[str, Any], short: str, long: str, key: str) -> str:
    return " / ".join(f"{fmt(pools[p][key]['p50'], 0)}, {fmt(pools[p][key]['p99'], 0)}" for p in (short, long))


def _row(arm: dict[str, Any], best: dict[str, Any] | None, short: str, long: str) -> str:
    threshold = arm["threshold"]
    if isinstance(threshold, dict):
        shown = f"{threshold['start']} -> {threshold['end']} (range {threshold['range'][0]}-{threshold['range'][1]})"
        replicas = f"auto, peak {arm['peak_replicas'][short]} + {arm['peak_replicas'][long]}"
    else:
        shown, replicas = str(threshold), f"{arm['replicas'][short]} + {arm['replicas'][long]}"
    saved = "" if best is None else f"{1 - arm['replica_seconds'] / best['replica_seconds']:+.1%}"
    return (f"| {arm['arm']} | {shown} | {replicas} | {arm['replica_seconds']:.0f} | {arm['usd']:.2f} | {saved} "
            f"| {arm['slo_attainment']:.2%} | {arm['rejected']} | {_pair(arm['pools'], short, long, 'ttft_ms')} "
            f"| {_pair(arm['pools'], short, long, 'tpot_ms')} |")


def _cheapest_by_threshold(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per threshold, its cheapest static arm meeting the target, else its best attaining one."""
    rows = []
    for threshold in result["thresholds"]:
        arms = [arm for arm in result["static"] if arm["threshold"] == threshold]
        meeting = [arm for arm in arms if arm["slo_attainment"] >= result["target"]]
        rows.append(min(meeting, key=lambda a: a["replica_seconds"]) if meeting
                    else max(arms, key=lambda a: a["slo_attainment"]))
    return rows


def split_markdown(result: dict[str, Any], png: str) -> str:
    short, long = result["pools"]["short"], result["pools"]["long"]
    arms = {arm["arm"]: arm for arm in result["static"]}
    best = arms.get(result["best_static"]) if result["best_static"] else None
    tuned, trace, model = result["tuned"], result["trace"], result["models"][short]
    slos = "; ".join(f"{name}: TTFT {fmt(s['ttft_ms'], 0)} ms, TPOT {fmt(s['tpot_ms'], 0)} ms"
                     for name, s in result["slo"].items())
    shown = [tuned, result["split_off"]]
    for arm in ([best] if best else []) + [arms[result["static_at_start"]]] + _cheapest_by_threshold(result):
        if arm not in shown:
            shown.append(arm)
    verdict = result["verdict"]
    lines = [
        f"# {result['name']}", "",
        f"Command: `{result['command']}`", "",
        f"Trace `{trace['source']}`: {trace['summary']}. Replayed: {trace['window']}; {tuned['requests']} requests "
        f"over {trace['replay_s']:.0f} s ({tuned['requests'] / max(trace['replay_s'], 1e-9):.2f} req/s), "
        f"{trace['capped']} cut by their scenario's max_tokens_cap, {tuned['rejected']} refused (larger than "
        f"every pool's max_model_len: a miss in every arm). Each request is sent with max_tokens = its output "
        "(ignore_eos), so its size is prompt + output.", "",
        f"Pools: `{short}` (max_model_len {result['max_model_len'][short]}, max_num_seqs "
        f"{result['models'][short]['max_num_seqs']}, ${result['usd_per_hour'][short]:.4f}/h a replica) takes "
        f"requests at or below the threshold, `{long}` (max_model_len {result['max_model_len'][long]}, max_num_seqs "
        f"{result['models'][long]['max_num_seqs']}, ${result['usd_per_hour'][long]:.4f}/h) the rest. SLOs: {slos}; "
        f"a request meets them when both hold, and an arm meets the target when {result['target']:.0%} of its "
        "requests do.", "",
        f"Replica model (from `{model['source']}`): an iteration takes {model['decode_base_s'] * 1000:.2f} ms "
        f"+ {model['decode_s_per_seq'] * 1000:.3f} ms per running request + {model['prefill_s_per_token'] * 1000:.4f}"
        f" ms per prompt token joining; a new replica serves {model['startup_s']:.0f} s after its launch and costs "
        "from the launch to its stop or the fleet's last answer; a static split's pools are both held until "
        "the later one's last answer. KV-cache limits and chunked prefill are not modelled: a prompt "
        "prefills in the iteration it joins.", "",
        "| arm | threshold | replicas short + long | replica-seconds | $ | vs best static | SLO attainment "
        f"| refused | TTFT p50, p99 (ms) {short} / {long} | TPOT p50, p99 (ms) {short} / {long} |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(arm, best, short, long) for arm in shown), "",
        ("The best static split is `" + result["best_static"] + "`: the fewest replica-seconds among the static "
         "arms that meet the target." if best else "No static split meets the target."),
        f"The static grid: thresholds {', '.join(map(str, result['thresholds']))} (the split's candidates and the "
        f"configured one); at each, each pool's replicas raised from its minimum only until that pool alone "
        f"meets the target (more cost more, and can only make up another pool's misses), and every pair of "
        f"those: {len(result['static'])} arms from {result['compute_s']['static_pool_runs']} pool runs "
        "(with the threshold held the pools do not interact).", "",
        f"- Replica-seconds saved by the self-tuning split against the best static split: "
        + ("**n/a**" if result["savings"] is None else f"**{result['savings']:.1%}**") + ".",
        f"- SLO attainment of the self-tuning split: **{tuned['slo_attainment']:.2%}** (target at least "
        f"{result['target']:.0%}): {'met' if verdict['tuned_meets_target'] else 'missed'}; the same static split "
        f"it starts from (`{result['static_at_start']}`): {arms[result['static_at_start']]['slo_attainment']:.2%}.",
        f"- Computed in {sum(v for k, v in result['compute_s'].items() if k != 'static_pool_runs'):.0f} s "
        f"(self-tuning {result['compute_s']['tuned']:.1f} s, split off {result['compute_s']['split_off']:.1f} s, "
        f"static grid {result['compute_s']['static_grid']:.1f} s).", "",
        f"![timeline]({png})", "",
        f"Threshold moves ({len(result['split_moves'])}), with the split's reasons:", "",
        *(f"- {m['at']:.0f} s: {m['from']} -> {m['to']}: {m['reason']}" for m in result["split_moves"]), "",
        "The split's periods by what it said:", "",
        "| the split | periods |", "|---|---|",
        *(f"| {kind} | {count} |" for kind, count in result["split_periods_by_kind"].items()), "",
        "Replica changes (the policy's own reasons):", "",
        *(f"- {d['at']:.0f} s: {d['pool']} {d['from']} -> {d['to']} [{d.get('policy', '?')}] {d.get('reason', '')}"
          for d in result["decisions"]),
    ]
    return "\n".join(lines) + "\n"


def split_timeline_png(result: dict[str, Any], path: Path, title: str) -> Path:
    """Offered rate, the threshold, replicas per pool and TTFT p99 per pool over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.autoscale.report import save_figure

    timeline = result["timeline"]
    short, long = result["pools"]["short"], result["pools"]["long"]
    t = [s["t"] for s in timeline]
    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    axes[0].plot(t, [s["offered_rps"] for s in timeline], color="grey")
    axes[0].set_ylabel("offered req/s\n(last minute)")
    axes[1].step(t, [s["threshold"] for s in timeline], where="post", color="purple")
    axes[1].set_yscale("log", base=2)
    axes[1].set_yticks(result["thresholds"], [str(t) for t in result["thresholds"]])
    axes[1].minorticks_off()
    axes[1].set_ylabel("threshold\n(tokens)")
    for move in result["split_moves"]:
        axes[1].axvline(move["at"], color="purple", alpha=0.15)
    for pool, style in ((short, "-"), (long, "--")):
        axes[2].step(t, [s["replicas"][pool] for s in timeline], where="post", linestyle=style, label=pool)
        p99 = [(s["t"], s["pool_ttft_p99_s"][pool] * 1000) for s in timeline if s["pool_ttft_p99_s"][pool] is not None]
        axes[3].plot([p[0] for p in p99], [p[1] for p in p99], linestyle=style, label=pool)
    axes[2].set_ylabel("replicas (paid)")
    axes[2].legend(loc="upper left")
    slo = min((s["ttft_ms"] for s in result["slo"].values() if s["ttft_ms"]), default=None)
    if slo:
        axes[3].axhline(slo, color="red", linestyle=":", label=f"SLO {slo:.0f} ms")
    axes[3].set_ylabel("TTFT p99 (ms)\nlast 30 s")
    axes[3].set_xlabel("seconds")
    axes[3].legend(loc="upper left")
    return save_figure(fig, title, path)
