"""`trilemma bench adapter-isolation`: whether every request gets its own model while adapters are
loaded, evicted and reloaded under concurrent load, for as long as you let it run.

One app whose short pool serves the base model and six adapters (the two committed ones, three
names each: to vLLM a name is an adapter, whatever its files), more than the engine batches at once
(`max_loras` 2) and than a replica holds (`max_resident` 3), so adapters are evicted and loaded
again all the time. The run

1. asks each held-out question of the base and of each adapter's files alone, greedy: the
   reference answers;
2. keeps `--concurrency` requests in flight for `--duration` seconds, each for a model drawn at
   random (the base one time in three) and a held-out question, greedy, so that the base and
   several adapters share the engine's batches;
3. counts the answers in another model's format (the adapters' formats are exact: a tag, or a
   JSON object), the answers that differ from the same request's reference, the loads the
   requests paid, and the errors. It exits 1 on any answer in another model's format or any error.

    trilemma bench adapter-isolation --duration 600 --out bench/results/adapter-isolation \
        --name adapter-isolation-cpu
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench import machine
from bench.adapter_answers import HELD_OUT
from bench.adapter_training_data import qa_pairs, split_held_out, style_of_answer
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail
from bench.metrics import percentile
from bench.result_files import write_json
from core.config import ConfigError, TrilemmaConfig
from serve_app.launcher import deployed

ADAPTERS = Path(__file__).resolve().parents[1] / "tests" / "data" / "adapters"
STYLES = ("tagged", "jsonish")
# Each adapter's name and the committed adapter whose files it loads: three names each.
ADAPTER_STYLES = {f"{style}-{copy}": style for style in STYLES for copy in range(1, 4)}
LORA = {"max_loras": 2, "max_lora_rank": 16, "max_resident": 3}
ANSWER_TOKENS = 24  # a whole JSON answer of the jsonish adapter
BASE_SHARE = 1 / 3


def add_adapter_isolation_command(sub: argparse._SubParsersAction) -> None:
    command = sub.add_parser("adapter-isolation", allow_abbrev=False,
                             help="the base and six adapters at once, loaded and evicted all along: answers in "
                                  "another model's format (must be 0), answers unlike the same request alone")
    add_app_args(command)
    command.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    command.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    command.add_argument("--seed", type=int, default=0)
    add_output_args(command, "adapter-isolation")
    command.set_defaults(func=bench_adapter_isolation)


def bench_adapter_isolation(args: argparse.Namespace) -> int:
    try:
        config = isolation_config(app_config(args))
    except ConfigError as error:
        return fail(error)
    model = config.pools["short"].model.name
    questions = [question for question, _ in split_held_out(qa_pairs(0), HELD_OUT, 0)[1]]
    with deployed(config) as url:
        references = asyncio.run(reference_answers(url, model, questions))
        records, wall_s = asyncio.run(mixed_load(url, model, ADAPTER_STYLES, questions, args))
    result = summary(records, references, ADAPTER_STYLES, model, wall_s)
    result.update({"kind": "adapter_isolation", "command": command_line(args), "machine": machine.describe(),
                   "lora": LORA, "adapters": ADAPTER_STYLES, "concurrency": args.concurrency,
                   "duration_s": args.duration, "answer_tokens": ANSWER_TOKENS})
    path = write_json(result, args.out, args.name or f"adapter-isolation-{time.strftime('%Y%m%d-%H%M%S')}")
    path.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {path}")
    return 0 if result["wrong_model"] == 0 and result["errors"] == 0 else 1


def isolation_config(config: TrilemmaConfig) -> TrilemmaConfig:
    """The config's short pool serving the base model (under a name of its own) and six adapters;
    the chat scenario on it alone, so base and adapter requests share its batches."""
    raw = config.model_dump(mode="json")
    name = "smol-chat"
    raw["pools"]["short"].update(model={"name": name, "source": raw["model"]["source"]}, lora=LORA)
    raw["adapters"] = {adapter: {"base": name, "source": str(ADAPTERS / style)}
                       for adapter, style in ADAPTER_STYLES.items()}
    raw["scenarios"]["chat"].update(models=[name], pools=["short"])
    raw["autoscaling"]["enabled"] = False
    return TrilemmaConfig.from_dict(raw)


async def ask(client: httpx.AsyncClient, url: str, model: str, question: str) -> dict[str, Any]:
    started = time.monotonic()
    response = await client.post(f"{url}/v1/chat/completions", headers={"X-Scenario": "chat"}, json={
        "model": model, "messages": [{"role": "user", "content": question}], "max_tokens": ANSWER_TOKENS,
        "temperature": 0})
    record: dict[str, Any] = {"model": model, "question": question, "status": response.status_code,
                              "latency_s": time.monotonic() - started}
    if response.status_code == 200:
        body = response.json()
        record["text"] = body["choices"][0]["message"]["content"]
        record["adapter_load_s"] = body["usage"].get("adapter_load_s")
    else:
        record["error"] = response.text[:300]
    return record


async def reference_answers(url: str, model: str, questions: list[str]) -> dict[tuple[str, str], str]:
    """Each question's answer from the base and from each adapter's files, one request at a time."""
    references = {}
    async with httpx.AsyncClient(timeout=300) as client:
        for question in questions:
            for kind, name in ((None, model), *((style, f"{style}-1") for style in STYLES)):
                record = await ask(client, url, name, question)
                if record["status"] != 200:
                    raise RuntimeError(f"reference answer of {name!r} failed: {record['error']}")
                references[kind or "base", question] = record["text"]
    return references


async def mixed_load(url: str, model: str, adapters: dict[str, str], questions: list[str],
                     args: argparse.Namespace) -> tuple[list[dict[str, Any]], float]:
    """`args.concurrency` clients, each asking its next request as its last one ends, until the deadline."""
    chooser = random.Random(args.seed)
    names = list(adapters)
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    deadline = started + args.duration

    async def client_loop(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            name = model if chooser.random() < BASE_SHARE else chooser.choice(names)
            records.append(await ask(client, url, name, chooser.choice(questions)))
            if not args.no_progress and len(records) % 100 == 0:
                print(f"{len(records)} answers, {time.monotonic() - started:.0f} s", flush=True)

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=args.concurrency)) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(args.concurrency)))
    return records, time.monotonic() - started


def summary(records: list[dict[str, Any]], references: dict[tuple[str, str], str], adapters: dict[str, str],
            model: str, wall_s: float) -> dict[str, Any]:
    answered = [record for record in records if record["status"] == 200]
    by_model: dict[str, Counter] = {}
    wrong_examples = []
    for record in answered:
        expected = adapters.get(record["model"], "base")
        style = style_of_answer(record["text"]) or "base"
        counts = by_model.setdefault(record["model"], Counter())
        counts["answers"] += 1
        counts["wrong_model"] += style != expected
        counts["unlike_alone"] += record["text"] != references[expected, record["question"]]
        counts["loads"] += record["adapter_load_s"] is not None
        if style != expected and len(wrong_examples) < 10:
            wrong_examples.append({**record, "styled_as": style})
    latencies = [record["latency_s"] for record in answered]
    total = sum(by_model.values(), Counter())
    return {
        "model": model, "wall_s": round(wall_s, 1), "requests": len(records), "answers": len(answered),
        "errors": len(records) - len(answered), "wrong_model": total["wrong_model"],
        "unlike_alone": total["unlike_alone"], "adapter_loads": total["loads"],
        "latency_s": {"p50": round(percentile(latencies, 50), 3), "p99": round(percentile(latencies, 99), 3)}
        if latencies else None,
        "by_model": {name: dict(counts) for name, counts in sorted(by_model.items())},
        "wrong_examples": wrong_examples,
        "error_examples": [record for record in records if record["status"] != 200][:5],
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [f"| {name} | {counts['answers']} | {counts.get('wrong_model', 0)} | {counts.get('unlike_alone', 0)} | "
            f"{counts.get('loads', 0)} |" for name, counts in result["by_model"].items()]
    latency = result["latency_s"] or {"p50": "-", "p99": "-"}
    return "\n".join([
        "# Adapter isolation under load", "", f"Command: `{result['command']}`", "",
        f"{result['model']} and {len(result['adapters'])} adapters on one pool (lora {result['lora']}), "
        f"{result['concurrency']} requests in flight for {result['wall_s']} s, greedy, {result['answer_tokens']} "
        f"tokens each; the base one request in three.", "",
        f"- Answers: {result['answers']} of {result['requests']} requests ({result['errors']} errors); "
        f"latency p50 {latency['p50']} s, p99 {latency['p99']} s.",
        f"- In another model's format: **{result['wrong_model']}**.",
        f"- Unlike the same request's answer alone: {result['unlike_alone']}.",
        f"- Adapter loads paid by requests (evicted, then needed again): {result['adapter_loads']}.", "",
        "| model | answers | in another model's format | unlike alone | loads |",
        "| --- | --- | --- | --- | --- |", *rows, "",
    ])
