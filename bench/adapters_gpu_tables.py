"""The GPU adapter bench's prices and tables (`python -m bench.adapters_gpu table`): each cell of
each run priced from the catalog for its GPU, set against base-only requests on the engine
without LoRA at the same concurrency, and written as markdown. No vLLM, no GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.result_files import fmt

# The catalog's accelerator for each GPU name torch reports (the first that the name contains).
GPU_NAMES = (("H200", "H200"), ("H100", "H100"), ("A100-SXM4-80GB", "A100-80G"), ("A100", "A100-40G"),
             ("A10G", "A10G"), ("L4", "L4"))


def accelerator_for(device_name: str | None) -> str | None:
    """The price catalog's accelerator for a GPU name torch reports ('NVIDIA H200' -> 'H200')."""
    if not device_name:
        return None
    upper = device_name.upper()
    return next((catalog for needle, catalog in GPU_NAMES if needle.upper() in upper), None)


def hourly_prices(accelerator: str, purchase: str = "on_demand", catalog_path: Path | None = None) -> dict[str, Any]:
    """One GPU's $/h from the catalog: the hardware price alone, and the app's replica rate
    (hardware, energy at board power, the cloud premium) as core.price_catalog bills a replica."""
    from bench.cli_common import shown_path
    from core.price_catalog import DEFAULT_CATALOG_PATH, PriceCatalog, replica_rate

    path = catalog_path or DEFAULT_CATALOG_PATH
    catalog = PriceCatalog.from_yaml(path)
    price = catalog.accelerator(accelerator)
    return {"accelerator": accelerator, "purchase": purchase, "catalog_as_of": catalog.as_of,
            "catalog": shown_path(path), "gpu_usd_per_hour": price.usd_per_hour(purchase),
            "replica_usd_per_hour": replica_rate(catalog, accelerator, 1, purchase).usd_per_hour}


def usd_per_1m_tokens(usd_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """What a million tokens cost on a GPU rented at usd_per_hour that makes tokens_per_s."""
    if not usd_per_hour or not tokens_per_s:
        return None
    return usd_per_hour / 3600 / tokens_per_s * 1e6


def cell_label(run: Mapping[str, Any], cell: Mapping[str, Any]) -> str:
    if not run["engine"]["enable_lora"]:
        return "no LoRA, base only"
    rank = run["engine"]["max_lora_rank"]
    count = cell["adapters"]
    adapters = f"{count} adapter{'' if count == 1 else 's'}"
    if cell.get("mixed"):
        return f"r{rank}, base + {adapters}, half each"
    return f"r{rank}, base only" if count == 0 else f"r{rank}, {adapters}"


def priced_rows(runs: Sequence[Mapping[str, Any]], prices: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Every cell of every run, with its cost and its ratios to base-only on the engine without
    LoRA at the same concurrency (where such a run is among them)."""
    reference = {cell["concurrency"]: cell["summary"] for run in runs if not run["engine"]["enable_lora"]
                 for cell in run["cells"]}
    gpu_hour = prices["gpu_usd_per_hour"] if prices else None
    replica_hour = prices["replica_usd_per_hour"] if prices else None
    rows = []
    for run in runs:
        for cell in run["cells"]:
            s, ref = cell["summary"], reference.get(cell["concurrency"])
            tps = s["output_tokens_per_s"]
            # A mixed cell gives half of its requests to the base, the other half to its adapters.
            n = 2 * cell["adapters"] if cell.get("mixed") else max(cell["adapters"], 1)
            rows.append({
                "label": cell_label(run, cell),
                "rank": run["engine"]["max_lora_rank"] if run["engine"]["enable_lora"] else 0,
                "adapters": cell["adapters"], "mixed": bool(cell.get("mixed")), "concurrency": cell["concurrency"],
                "summary": s,
                "usd_per_1m_tokens": usd_per_1m_tokens(gpu_hour, tps),
                "replica_usd_per_1m_tokens": usd_per_1m_tokens(replica_hour, tps),
                "tokens_per_s_per_adapter": tps / n if tps else None,
                "token_share_per_adapter": 1 / n,
                "throughput_vs_no_lora": tps / ref["output_tokens_per_s"] if ref and tps else None,
                "ttft_p50_vs_no_lora": (s["ttft_ms"]["p50"] / ref["ttft_ms"]["p50"]
                                        if ref and s["ttft_ms"]["p50"] and ref["ttft_ms"]["p50"] else None),
                "tpot_p50_vs_no_lora": (s["tpot_ms"]["p50"] / ref["tpot_ms"]["p50"]
                                        if ref and s["tpot_ms"]["p50"] and ref["tpot_ms"]["p50"] else None),
            })
    rows.sort(key=lambda r: (r["concurrency"], r["rank"], r["mixed"], r["adapters"]))
    return rows


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = ("| in flight | engine, requests | out tok/s | vs no LoRA | req/s | TTFT p50 ms | TTFT p99 ms "
              "| TPOT p50 ms | TPOT p99 ms | $/1M out tok | tok/s per adapter (share) |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for r in rows:
        s = r["summary"]
        share = "-" if r["adapters"] == 0 else \
            f"{fmt(r['tokens_per_s_per_adapter'], 0)} ({r['token_share_per_adapter']:.1%})"
        lines.append(
            f"| {r['concurrency']} | {r['label']} | {fmt(s['output_tokens_per_s'], 0)} "
            f"| {ratio(r['throughput_vs_no_lora'])} | {fmt(s['requests_per_s'], 2)} | {fmt(s['ttft_ms']['p50'], 1)} "
            f"| {fmt(s['ttft_ms']['p99'], 1)} | {fmt(s['tpot_ms']['p50'], 2)} | {fmt(s['tpot_ms']['p99'], 2)} "
            f"| {fmt(r['usd_per_1m_tokens'], 4)} | {share} |")
    return header + "\n".join(lines) + "\n"


def mixed_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Each mixed cell's base and adapter requests against the same engine's cells of base requests
    alone and of the same adapters alone, at the same concurrency."""
    alone = {(r["rank"], r["concurrency"], r["adapters"]): r["summary"] for r in rows if not r["mixed"]}
    header = ("| in flight | engine, requests | base TTFT p50 ms (alone) | base TPOT p50 ms (alone) "
              "| adapter TTFT p50 ms (alone) | adapter TPOT p50 ms (alone) |\n"
              "| --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for r in rows:
        if not r["mixed"]:
            continue
        kinds = r["summary"]["by_kind"]
        base_alone = alone.get((r["rank"], r["concurrency"], 0))
        adapters_alone = alone.get((r["rank"], r["concurrency"], r["adapters"]))

        def pair(kind: str, metric: str, reference: Mapping[str, Any] | None) -> str:
            theirs = fmt(reference[metric]["p50"], 2) if reference else "-"
            return f"{fmt(kinds[kind][metric]['p50'], 2)} ({theirs})"

        lines.append(f"| {r['concurrency']} | {r['label']} | {pair('base', 'ttft_ms', base_alone)} "
                     f"| {pair('base', 'tpot_ms', base_alone)} | {pair('adapter', 'ttft_ms', adapters_alone)} "
                     f"| {pair('adapter', 'tpot_ms', adapters_alone)} |")
    return header + "\n".join(lines) + "\n" if lines else ""


def first_load_table(runs: Sequence[Mapping[str, Any]]) -> str:
    header = ("| rank | adapter size MB | base TTFT ms | 1st adapter, first request ms | others' first request, "
              "median (max) ms | loaded, median ms | load cost, median ms |\n"
              "| --- | --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for run in runs:
        load = run.get("first_load")
        if not load:
            continue
        lines.append(
            f"| {run['engine']['max_lora_rank']} | {run['adapter_files']['bytes_each'] / 1e6:.1f} "
            f"| {fmt(load['base_ttft_ms_p50'], 1)} | {fmt(load['first_adapter_cold_ttft_ms'], 1)} "
            f"| {fmt(load['cold_ttft_ms_p50'], 1)} ({fmt(load['cold_ttft_ms_max'], 1)}) "
            f"| {fmt(load['warm_ttft_ms_p50'], 1)} | {fmt(load['load_cost_ms_p50'], 1)} |")
    return header + "\n".join(lines) + "\n" if lines else ""


def combine(runs: Sequence[Mapping[str, Any]], prices: Mapping[str, Any] | None) -> dict[str, Any]:
    rows = priced_rows(runs, prices)
    return {"kind": "adapters_gpu_table", "prices": prices,
            "devices": sorted({run.get("device") or "?" for run in runs}),
            "vllm_versions": sorted({run.get("vllm_version") or "?" for run in runs}),
            "runs": [run.get("name") for run in runs], "rows": rows}


def table_markdown(result: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str:
    prices = result["prices"]
    priced = (f"{prices['accelerator']} at ${prices['gpu_usd_per_hour']:.2f}/h ({prices['purchase']}, catalog of "
              f"{prices['catalog_as_of']})" if prices else "no price (GPU not in the catalog)")
    parts = [f"Devices: {', '.join(result['devices'])}; vLLM {', '.join(result['vllm_versions'])}; {priced}.", "",
             markdown_table(result["rows"])]
    mixed = mixed_table(result["rows"])
    if mixed:
        parts += ["Mixed cells: their base and adapter requests apart, against the same engine's cells of each "
                  "alone (in brackets):", "", mixed]
    loads = first_load_table(runs)
    if loads:
        parts += ["First request of each adapter (one request at a time, max_tokens 1):", "", loads]
    return "\n".join(parts)
