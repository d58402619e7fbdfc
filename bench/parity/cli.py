"""`trilemma bench parity`: the parity suite (bench/parity/cases.py) sent to two servers, the
first the reference (plain `vllm serve`), case by case, and how many answers are at parity,
differ as documented (docs/api.md), or differ.

    trilemma bench parity --url-a http://127.0.0.1:8100 --url-b http://127.0.0.1:8000 --api-key-b KEY
    trilemma bench parity --vllm-pool short --url-b http://127.0.0.1:8000

With `--vllm-pool POOL`, the reference is started here: plain `vllm serve` with that pool's
engine settings from `--config` (the app's own arguments for its engine).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx

from bench import machine
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail
from bench.parity.cases import Case, cases
from bench.parity.compare import OUTCOMES, Verdict, compare
from bench.parity.exchange import Answer, send
from bench.result_files import write_json
from core.config import ConfigError, TrilemmaConfig

PLAIN_PORT = 8100
START_TIMEOUT_S = 900.0


def add_parity_command(sub: argparse._SubParsersAction) -> None:
    parity = sub.add_parser("parity", help="the API parity suite against two servers (the first plain vLLM)",
                            allow_abbrev=False)
    add_app_args(parity)
    parity.add_argument("--url-a", help="the reference server (plain `vllm serve`)")
    parity.add_argument("--vllm-pool", help="start the reference here: plain `vllm serve` with this pool's engine "
                                            "settings from --config")
    parity.add_argument("--url-b", required=True, help="the server checked (the app)")
    parity.add_argument("--api-key-a", help="the reference's key, if it asks for one")
    parity.add_argument("--api-key-b", help="the checked server's key (else --api-key, or TRILEMMA_API_KEY)")
    parity.add_argument("--model", help="the model both serve (default: the config's)")
    add_output_args(parity, "parity")
    parity.set_defaults(func=bench_parity)


def bench_parity(args: argparse.Namespace) -> int:
    try:
        if (args.url_a is None) == (args.vllm_pool is None):
            raise ValueError("give the reference: --url-a URL, or --vllm-pool POOL to start plain vLLM here")
        config = app_config(args)
        if args.vllm_pool is not None and args.vllm_pool not in config.pools:
            raise ValueError(f"--vllm-pool {args.vllm_pool!r} is not a pool of the config; {sorted(config.pools)}")
    except (ConfigError, ValueError) as error:
        return fail(error)
    model = args.model or config.default_model
    suite = suite_for(config, model, args.vllm_pool)
    with reference(args, config) as url_a:
        results = run_suite(suite, url_a, args.url_b, args.api_key_a, args.api_key_b or args.api_key)
    result = summary(results, command=command_line(args), url_a=url_a, url_b=args.url_b, model=model)
    name = args.name or f"parity-{time.strftime('%Y%m%d-%H%M%S')}"
    json_path = write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {json_path}, {args.out / f'{name}.md'}")
    return 0 if result["counts"]["differs"] == 0 else 1


def suite_for(config: TrilemmaConfig, model: str, reference_pool: str | None = None) -> list[Case]:
    """The cases for the app of `config` against plain vLLM (with `reference_pool`'s settings)."""
    default_scenario = config.scenarios[config.routing.default_scenario]
    return cases(model, max(pool.max_model_len for pool in config.pools.values()),
                 reference_max_model_len(config, reference_pool), default_scenario.max_tokens_cap)


def reference_max_model_len(config: TrilemmaConfig, pool: str | None = None) -> int:
    """The longest context of the reference: `pool`'s, where plain vLLM runs with its settings,
    else the shortest of the default model's pools (what a plain vLLM beside it would serve)."""
    if pool is not None:
        return config.pools[pool].max_model_len
    return min(config.pools[name].max_model_len for name in config.pools_serving(config.default_model))


@contextlib.contextmanager
def reference(args: argparse.Namespace, config: TrilemmaConfig) -> Iterator[str]:
    if args.url_a is not None:
        yield args.url_a.rstrip("/")
        return
    with plain_vllm_of_pool(config, args.vllm_pool, Path("build/parity")) as url:
        yield url


@contextlib.contextmanager
def plain_vllm_of_pool(config: TrilemmaConfig, pool: str, workdir: Path) -> Iterator[str]:
    """Plain `vllm serve` with `pool`'s engine arguments and environment, while the block runs."""
    with started_plain_vllm_of_pool(config, pool, workdir) as plain:
        yield plain.ready()


@dataclass(frozen=True)
class StartedPlainVllm:
    """Plain `vllm serve` started and perhaps not serving yet."""

    url: str
    process: subprocess.Popen

    def ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The URL, once it serves."""
        from bench.vs_vllm import wait_for_models

        wait_for_models(self.url, timeout_s, self.process)
        return self.url


@contextlib.contextmanager
def started_plain_vllm_of_pool(config: TrilemmaConfig, pool: str, workdir: Path) -> Iterator[StartedPlainVllm]:
    """As `plain_vllm_of_pool`, but yields as soon as the process is started: a caller that starts
    something else too (an app) lets the two starts overlap and calls `ready()` after."""
    from bench.vs_vllm import plain_vllm_process, pool_engine, vllm_serve_argv
    from core.model_store import resolve_model_source

    model = config.pool_model(pool)
    source = resolve_model_source(model.source)
    engine_kwargs, env = pool_engine(config, pool, source)
    workdir.mkdir(parents=True, exist_ok=True)
    argv = vllm_serve_argv(engine_kwargs, source, model.name, PLAIN_PORT, workdir / "vllm-serve.yaml")
    with plain_vllm_process(argv, env, workdir / "vllm-serve.log") as process:
        yield StartedPlainVllm(f"http://127.0.0.1:{PLAIN_PORT}", process)


def run_suite(suite: list[Case], url_a: str, url_b: str, key_a: str | None,
              key_b: str | None) -> list[tuple[Case, Answer, Answer, Verdict]]:
    """Each case to the reference, then to the checked server, one at a time (a case sent to
    both at once would share their CPUs, not change what they answer)."""
    results = []
    with httpx.Client() as client:
        for case in suite:
            a, b = send(client, url_a, case, key_a), send(client, url_b, case, key_b)
            results.append((case, a, b, compare(case, a, b)))
    return results


def summary(results: list[tuple[Case, Answer, Answer, Verdict]], **context: Any) -> dict[str, Any]:
    verdicts = [verdict for _, _, _, verdict in results]
    return {
        "kind": "parity", **context, "machine": machine.describe(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "counts": {outcome: sum(v.outcome == outcome for v in verdicts) for outcome in OUTCOMES},
        "cases": [{**asdict(verdict), "path": case.path, "compare": case.compare,
                   "a": a.summary(), "b": b.summary()} for case, a, b, verdict in results],
    }


def markdown(result: dict[str, Any]) -> str:
    counts = result["counts"]
    lines = [f"# API parity: {result['url_b']} against {result['url_a']}", "", f"`{result['command']}`", "",
             f"Model {result['model']}, on {result['machine']}: {sum(counts.values())} cases, "
             f"**{counts['parity']} at parity**, {counts['documented']} documented differences, "
             f"{counts['differs']} differing.", "",
             "| case | path | compared | outcome | status a / b | why |", "| --- | --- | --- | --- | --- | --- |"]
    for case in result["cases"]:
        why = case["difference"] or "; ".join(case["reasons"])
        lines.append(f"| {case['case']} | `{case['path']}` | {case['compare']} | {case['outcome']} "
                     f"| {case['a']['status']} / {case['b']['status']} | {why.replace('|', '/')[:300]} |")
    return "\n".join(lines) + "\n"
