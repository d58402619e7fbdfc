"""`trilemma bench vs-vllm`: the app against what a user would run instead, plain `vllm serve`
with exactly one pool's engine settings, both measured by vLLM's own `vllm bench serve`.

Plain vLLM is started here with the pool's engine arguments and environment (on CPU also the
dtype the pool picks for this CPU), beside the app (started here too, or already running at
`--app-url`). Both serve at once and are loaded in turn, ABBA per round, so a drift of the
machine's speed falls on both alike. Per load point the rounds' requests are pooled (vLLM's
detailed results) and TTFT, TPOT, inter-token latency and output tokens/s compared against
the targets: TTFT p50 at most plain + max(5 ms, 5%) and p99 at most plain + 10%, ITL p99 at
most plain + 5 ms (both at up to 16 in flight), output tokens/s at least 0.97x plain (at 64
in flight and more).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import httpx
import yaml

from bench import machine
from bench.app_ready import wait_until_serving
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail, shown_path
from bench.engine_stats import EngineStats, account_table, app_totals, plain_vllm_totals, pooled_means
from bench.metrics import percentile
from bench.result_files import write_json
from bench.vllm_bench_client import VllmBenchClient
from core.config import ConfigError, TrilemmaConfig
from core.model_store import resolve_model_source
from engine.cpu_engine import read_cpu_flags, with_cpu_dtype

ARMS = ("vllm", "app")
# Load points at or below this many in flight are judged on time, from this many on throughput.
LATENCY_LEVELS_UP_TO, THROUGHPUT_LEVELS_FROM = 16, 64


def vllm_serve_argv(engine_kwargs: dict[str, Any], model_source: str, served_name: str, port: int,
                    config_file: Path) -> list[str]:
    """`vllm serve` with the engine arguments the pool's engine gets, written to `config_file`
    (vLLM's own `--config`, which turns booleans, lists and dicts into its flags as they are)."""
    config_file.write_text(yaml.safe_dump({key.replace("_", "-"): value for key, value in engine_kwargs.items()}))
    return [sys.executable, "-m", "bench.vllm_cli", "serve", model_source, "--served-model-name", served_name,
            "--host", "127.0.0.1", "--port", str(port), "--config", str(config_file)]


def pool_engine(config: TrilemmaConfig, pool: str, model_source: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The pool engine's arguments and environment, as the app gives them to it."""
    from pool.deployment import llm_config_for_pool  # Ray Serve LLM: loaded when a comparison runs

    llm_config = llm_config_for_pool(pool, config.pools[pool], config.pool_model(pool), model_source)
    engine_kwargs = dict(llm_config.engine_kwargs)
    if config.pools[pool].is_cpu:
        engine_kwargs, _ = with_cpu_dtype(engine_kwargs, read_cpu_flags())
    return engine_kwargs, dict((llm_config.runtime_env or {}).get("env_vars", {}))


def wait_for_models(url: str, timeout_s: float, process: subprocess.Popen | None = None) -> float:
    """Seconds until `url`/v1/models answers; raises if the process ends first or time runs out."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {process.returncode} before it served")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return time.monotonic() - started
        time.sleep(1)  # as often as `bench start` asks the app: their ready times compare
    raise RuntimeError(f"{url} did not serve within {timeout_s:.0f} s")


@contextlib.contextmanager
def plain_vllm(argv: list[str], env: dict[str, str], url: str, log: Path, timeout_s: float) -> Iterator[float]:
    """Plain vLLM serving while the block runs; yields its ready time in seconds."""
    with plain_vllm_process(argv, env, log) as process:
        yield wait_for_models(url, timeout_s, process)


@contextlib.contextmanager
def plain_vllm_process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """Plain vLLM started, not waited for, while the block runs: for a caller that starts more
    beside it and waits for it later (`wait_for_models`)."""
    with open(log, "w") as out:
        process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def bench_serve(client: VllmBenchClient, url: str, model: str, tokenizer: str, *, concurrency: int,
                num_prompts: int, input_len: int, output_len: int, seed: int, workdir: Path,
                api_key: str | None = None, temperature: float = 0.0) -> dict[str, Any]:
    """One `vllm bench serve` run, by `client`; its detailed result. vLLM's client sends `OPENAI_API_KEY`.
    The client times a gap before every chunk with choices, text or not. At `temperature` 0 both
    arms generate the same tokens for the same prompts, so their gaps compare; sampled, each arm
    draws its own text, and a server that sends no chunk for a token without text (a skipped
    special token, part of a character) stretches a gap over several steps."""
    name = f"run-{time.monotonic_ns()}.json"
    argv = ["--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", model,
            "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len",
            str(output_len), "--ignore-eos", "--max-concurrency", str(concurrency), "--num-prompts",
            str(num_prompts), "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--temperature", str(temperature),
            "--save-result", "--save-detailed", "--result-dir", str(workdir),
            "--result-filename", name, "--disable-tqdm"]
    client.run(argv, env={"OPENAI_API_KEY": api_key} if api_key else {})
    result = json.loads((workdir / name).read_text())
    if not result["completed"]:
        first_error = next((error for error in result.get("errors", []) if error), "no error given")
        raise RuntimeError(f"no request to {url} succeeded: {first_error[:500]}")
    return result


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds of one arm at one load point as one sample, in ms and tokens/s; the requests
    that failed count only as failed."""
    done = [(ttft, gaps, out) for run in runs
            for ttft, gaps, out, error in zip(run["ttfts"], run["itls"], run["output_lens"], _errors(run))
            if not error]
    ttft = [first * 1000 for first, _, _ in done if first]
    itl = [gap * 1000 for _, gaps, _ in done for gap in gaps]
    # vLLM's client records one gap per chunk received; their sum is the time after the first token.
    tpot = [sum(gaps) * 1000 / (out - 1) for _, gaps, out in done if out > 1 and gaps]
    tokens = sum(out for _, _, out in done)
    failed = sum(run.get("failed", 0) for run in runs)
    return {
        "requests": sum(run["completed"] for run in runs) + failed, "failed": failed,
        "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99),
                    "mean": statistics.fmean(ttft) if ttft else None},
        "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)},
        "itl_ms": {"p50": percentile(itl, 50), "p99": percentile(itl, 99)},
        "output_tps": statistics.median(run["output_throughput"] for run in runs),
        # The chunks the client timed (one gap before each but the first) per output token: equal in
        # two arms that sent the same chunks; lower where tokens came without a chunk of their own,
        # whose gaps then span several steps.
        "chunks_per_token": sum(len(gaps) + 1 for _, gaps, _ in done) / tokens if tokens else None,
        # vLLM's own account of the same requests (bench.engine_stats), where the server's could be read.
        "engine": pooled_means([run.get("engine") for run in runs]),
    }


def _errors(run: dict[str, Any]) -> list[str]:
    return run.get("errors") or [""] * len(run["ttfts"])


def judged(concurrency: int, vllm: dict[str, Any], app: dict[str, Any]) -> dict[str, Any]:
    """The comparison at one load point, and the targets that apply to it."""
    ttft_p50_allowed = vllm["ttft_ms"]["p50"] + max(5.0, 0.05 * vllm["ttft_ms"]["p50"])
    comparison: dict[str, Any] = {
        "ttft_p50_added_ms": app["ttft_ms"]["p50"] - vllm["ttft_ms"]["p50"],
        "ttft_p99_ratio": app["ttft_ms"]["p99"] / vllm["ttft_ms"]["p99"],
        "itl_p99_added_ms": app["itl_ms"]["p99"] - vllm["itl_ms"]["p99"],
        "output_tps_ratio": app["output_tps"] / vllm["output_tps"],
        "targets": {},
    }
    if concurrency <= LATENCY_LEVELS_UP_TO:
        comparison["targets"].update({
            "TTFT p50 at most plain + max(5 ms, 5%)": app["ttft_ms"]["p50"] <= ttft_p50_allowed,
            "TTFT p99 at most plain + 10%": comparison["ttft_p99_ratio"] <= 1.10,
            "ITL p99 at most plain + 5 ms": comparison["itl_p99_added_ms"] <= 5.0,
        })
    if concurrency >= THROUGHPUT_LEVELS_FROM:
        comparison["targets"]["output tok/s at least 0.97x plain"] = comparison["output_tps_ratio"] >= 0.97
    return comparison


def run_comparison(
    config: TrilemmaConfig, *, pool: str, app_url: str | None, levels: list[int], rounds: int, num_prompts: int,
    input_len: int, output_len: int, vllm_port: int, seed: int, timeout_s: float, workdir: Path,
    api_key: str | None = None, sequential: bool = False, temperature: float = 0.0,
    on_round: Callable[[dict[str, Any]], None] = lambda result: None,
) -> dict[str, Any]:
    """Both arms serving at once, loaded in turn (ABBA per round); or, `sequential`, plain vLLM's
    rounds first and then the app's, for a device that cannot hold both (drift then falls on
    one arm). `on_round` gets the result of the rounds done so far after each round that both
    arms have run, so a run stopped early keeps them."""
    from serve_app.launcher import deployed, shutdown_local_ray

    model = config.pool_model(pool)
    source = resolve_model_source(model.source)
    engine_kwargs, env = pool_engine(config, pool, source)
    vllm_url = f"http://127.0.0.1:{vllm_port}"
    argv = vllm_serve_argv(engine_kwargs, source, model.name, vllm_port, workdir / "vllm-serve.yaml")
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {(arm, c): [] for arm in ARMS for c in levels}
    urls: dict[str, str] = {}
    engine_stats: dict[str, EngineStats] = {}
    ready_s: dict[str, float | None] = {"app": None}

    def load(arm: str, concurrency: int, prompts: int, seed_offset: int) -> dict[str, Any]:
        before = engine_stats[arm].read()
        run = bench_serve(client, urls[arm], model.name, source, concurrency=concurrency, num_prompts=prompts,
                          input_len=input_len, output_len=output_len, seed=seed + seed_offset, workdir=workdir,
                          api_key=api_key if arm == "app" else None, temperature=temperature)
        # Also after a warm-up: until its requests are in the figures, the next run's would hold them.
        run["engine"] = engine_stats[arm].since(before, run["completed"])
        return run

    def warm_up(arm: str) -> None:  # the first requests pay for compilation and caches
        load(arm, max(levels), max(levels), rounds * len(levels))

    def one_round(index: int, arms: tuple[str, ...]) -> None:
        # A seed per round and load point: no load point finds its prompts in the prefix cache.
        for offset, concurrency in enumerate(levels):
            order = arms if index % 2 == 0 else tuple(reversed(arms))
            for arm in order:
                print(f"round {index + 1}, {concurrency} in flight: {arm}", flush=True)
                # At least two waves, so that the load point is held and not just reached.
                prompts = max(num_prompts, 2 * concurrency)
                runs[(arm, concurrency)].append(load(arm, concurrency, prompts, index * len(levels) + offset))
        if "app" in arms:  # both arms have run this round (ABBA), or the app's follows all of vLLM's
            on_round(result(rounds_done=index + 1))

    def result(rounds_done: int) -> dict[str, Any]:
        points = []
        for concurrency in levels:
            pooled_arms = {arm: pooled(runs[(arm, concurrency)]) for arm in ARMS}
            points.append({"concurrency": concurrency, **pooled_arms,
                           **judged(concurrency, pooled_arms["vllm"], pooled_arms["app"])})
        # As results show it: no folder of the machine it ran on.
        shown = [arg.replace(str(workdir), "<workdir>").replace(str(Path.home()), "~") for arg in argv[3:]]
        return {"pool": pool, "engine_kwargs": engine_kwargs, "env": env, "vllm_command": shown,
                "order": "sequential" if sequential else "ABBA", "vllm_ready_s": ready_s["vllm"],
                "app_ready_s": ready_s["app"], "rounds_done": rounds_done, "points": points}

    def start_app(stack: contextlib.ExitStack) -> None:
        started = time.monotonic()
        if app_url:  # an app started elsewhere may still be starting its pools
            wait_until_serving(app_url, timeout_s)
        urls["app"] = app_url or stack.enter_context(deployed(config))
        if not app_url:
            ready_s["app"] = time.monotonic() - started
        # Ray's metrics agent on the app's node, which takes up to 10 s to show what engines record.
        metrics_url = f"http://{urlparse(urls['app']).hostname}:{config.local_ray.metrics_export_port}/metrics"
        engine_stats["app"] = EngineStats(metrics_url, app_totals, settle_s=30.0)
        print(f"vs-vllm: the app serves at {urls['app']}", flush=True)

    def start_vllm(stack: contextlib.ExitStack) -> None:
        print("vs-vllm: starting plain vLLM ...", flush=True)
        ready_s["vllm"] = stack.enter_context(plain_vllm(argv, env, vllm_url, workdir / "vllm-serve.log", timeout_s))
        urls["vllm"] = vllm_url
        engine_stats["vllm"] = EngineStats(f"{vllm_url}/metrics", plain_vllm_totals, settle_s=5.0)

    with contextlib.ExitStack() as stack:
        stack.callback(shutdown_local_ray)
        client = stack.enter_context(VllmBenchClient(workdir / "vllm-bench-serve.log"))
        if sequential:
            with contextlib.ExitStack() as vllm_stack:
                start_vllm(vllm_stack)
                warm_up("vllm")
                for index in range(rounds):
                    one_round(index, ("vllm",))
            start_app(stack)
            warm_up("app")
            for index in range(rounds):
                one_round(index, ("app",))
        else:
            start_app(stack)
            start_vllm(stack)
            for arm in ARMS:
                warm_up(arm)
            for index in range(rounds):
                one_round(index, ARMS)
    return result(rounds_done=rounds)


def markdown(result: dict[str, Any]) -> str:
    ready = f"plain vLLM {result['vllm_ready_s']:.0f} s"
    if result["app_ready_s"]:
        ready += f", the app {result['app_ready_s']:.0f} s"
    lines = [
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"On {result['machine']}. Pool `{result['pool']}`; plain vLLM: `vllm {' '.join(result['vllm_command'])}` "
        f"with the engine arguments {result['engine_kwargs']} and {result['env'] or 'no extra environment'}. "
        f"`vllm bench serve`, random prompts of {result['input_len']} tokens, {result['output_len']} out "
        f"(ignore_eos, temperature {result['temperature']:g}), {_rounds(result)} of {result['num_prompts']} requests (at least twice the "
        f"in-flight count) per load point, {result['order']}. Ready: {ready}.", "",
        "| in flight | TTFT p50 app / vLLM (ms) | TTFT p99 app / vLLM | TPOT p50 app / vLLM | ITL p99 app / vLLM "
        "| out tok/s app / vLLM | ratio | targets |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in result["points"]:
        a, v = p["app"], p["vllm"]
        met = ", ".join(f"{name}: {'yes' if ok else '**no**'}" for name, ok in p["targets"].items()) or "-"
        lines.append(
            f"| {p['concurrency']} | {a['ttft_ms']['p50']:.1f} / {v['ttft_ms']['p50']:.1f} "
            f"| {a['ttft_ms']['p99']:.1f} / {v['ttft_ms']['p99']:.1f} "
            f"| {a['tpot_ms']['p50']:.1f} / {v['tpot_ms']['p50']:.1f} "
            f"| {a['itl_ms']['p99']:.1f} / {v['itl_ms']['p99']:.1f} | {a['output_tps']:.1f} / {v['output_tps']:.1f} "
            f"| {p['output_tps_ratio']:.3f} | {met} |")
    failed = sum(p[arm]["failed"] for p in result["points"] for arm in ARMS)
    lines += ["", f"Failed requests: {failed}.", "", "Chunks per output token, app / vLLM (vLLM's client times one gap "
              "before each chunk; equal when both sent the same chunks, lower where tokens came without a chunk "
              "of their own, whose gaps span several steps): " + ", ".join(
                  f"{_share(p['app'])} / {_share(p['vllm'])} at {p['concurrency']}" for p in result["points"]) + "."]
    return "\n".join(lines + account_table(result["points"])) + "\n"


def _rounds(result: dict[str, Any]) -> str:
    done = result.get("rounds_done", result["rounds"])  # results of before the field: all rounds ran
    if done == result["rounds"]:
        return f"{done} rounds"
    return f"**{done} of {result['rounds']} rounds** (the run stopped early)"


def _share(arm: dict[str, Any]) -> str:
    return "-" if arm["chunks_per_token"] is None else f"{arm['chunks_per_token']:.3f}"


def add_vs_vllm_command(sub: argparse._SubParsersAction) -> None:
    vs = sub.add_parser("vs-vllm", help="the app against plain `vllm serve` with one pool's engine settings, "
                                        "both by `vllm bench serve`, in alternating rounds", allow_abbrev=False)
    add_app_args(vs)
    vs.add_argument("--pool", default="short", help="the pool whose engine settings plain vLLM gets")
    vs.add_argument("--app-url", help="an app already serving this config (default: deploy it here)")
    vs.add_argument("--concurrency", default="1,16", help="requests in flight, comma-separated load points")
    vs.add_argument("--rounds", type=int, default=2, help="rounds per arm and load point (ABBA order)")
    vs.add_argument("--num-prompts", type=int, default=32,
                    help="requests per round and load point (at least twice the requests in flight)")
    vs.add_argument("--input-len", type=int, default=512)
    vs.add_argument("--output-len", type=int, default=128)
    vs.add_argument("--vllm-port", type=int, default=8100)
    vs.add_argument("--ready-timeout-s", type=float, default=900.0)
    vs.add_argument("--sequential", action="store_true",
                    help="plain vLLM's rounds first, then the app's: for a GPU that cannot hold both at once")
    vs.add_argument("--seed", type=int, default=0)
    vs.add_argument("--temperature", type=float, default=0.0,
                    help="sent with every request; 0 (greedy) makes both arms generate the same tokens")
    add_output_args(vs, "vs-vllm")
    vs.set_defaults(func=bench_vs_vllm)


def bench_vs_vllm(args: argparse.Namespace) -> int:
    try:
        config = app_config(args)
        levels = [int(value) for value in args.concurrency.split(",")]
        if args.pool not in config.pools:
            raise ConfigError(f"no pool {args.pool!r}; pools: {sorted(config.pools)}")
        if args.seed < 0:
            raise ValueError(f"--seed must be 0 or more (vLLM's random prompts need it), got {args.seed}")
    except (ConfigError, ValueError) as error:
        return fail(error)
    name = args.name or "vs-vllm"
    about = {"name": name, "command": command_line(args), "machine": machine.describe(),
             "rounds": args.rounds, "num_prompts": args.num_prompts, "temperature": args.temperature,
             "input_len": args.input_len, "output_len": args.output_len}

    def write(result: dict[str, Any]) -> Path:
        json_path = write_json({**about, **result}, Path(args.out), name)
        json_path.with_suffix(".md").write_text(markdown({**about, **result}))
        return json_path

    with tempfile.TemporaryDirectory(prefix="vs-vllm-") as workdir:
        try:
            result = run_comparison(
                config, pool=args.pool, app_url=args.app_url, levels=levels, rounds=args.rounds,
                num_prompts=args.num_prompts, input_len=args.input_len, output_len=args.output_len,
                vllm_port=args.vllm_port, seed=args.seed, timeout_s=args.ready_timeout_s, workdir=Path(workdir),
                api_key=args.api_key, sequential=args.sequential, temperature=args.temperature, on_round=write)
        except RuntimeError as error:
            log = Path(workdir) / "vllm-serve.log"
            if log.exists():
                print(log.read_text()[-3000:], file=sys.stderr)
            return fail(error)
    json_path = write(result)
    md_path = json_path.with_suffix(".md")
    print(md_path.read_text())
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    return 0 if all(ok for p in result["points"] for ok in p["targets"].values()) else 1
