"""Engine mode: the job's own vLLM engines through `ray.data.llm`, for when no app is running.

A processor runs a whole dataset through its engines, so map-reduce goes in rounds: the first
pass summarizes every chunk of every document (a one-chunk document is done when its row comes
back); each further pass combines the partial summaries of the long documents, until each has
one. Every pass starts its engines afresh (Ray Data gives each dataset its own actors), which
costs a pass's startup per round: on a GPU tens of seconds, on a CPU minutes.

Cost: the engines are priced from the project's price catalog (engine.accelerator, purchase)
for the wall time of each pass, startup included; the time up to a batch of rows is split
among its rows by tokens, so the rows of a pass add up to what its engines cost.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from engine import vllm_compile_cache
from engine.cpu_engine import read_cpu_flags, with_cpu_dtype
from jobs.summarize.chunking import ChunkPlan, combine_groups
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.engine_lifetime import SETUP_HOOK
from jobs.summarize.inputs import Document
from jobs.summarize.mapreduce import Completion, Outcome, Partial
from jobs.summarize.prompts import Prompts
from jobs.summarize.stages import RESULT_COLUMNS, ChunkStage

logger = logging.getLogger(__name__)
ERROR_COLUMN = "__inference_error__"  # set by ray.data.llm on a row the engine failed
# A pass: rows in (documents when chunking, else prompts), batches of answered rows out.
RunPass = Callable[[list[dict[str, Any]], bool], Iterator[list[dict[str, Any]]]]


def processor_config(config: SummarizeConfig, model_source: str):
    """The vLLMEngineProcessorConfig of the job's engines. On CPU each engine takes a
    placement-group bundle of `engine.resources` (vLLM's CPU build runs in Ray Data's actor);
    on a GPU Ray Data's default of one GPU per engine, of `engine.accelerator`'s type."""
    from ray.data.llm import vLLMEngineProcessorConfig

    engine = config.engine
    stage = {"num_cpus": engine.stage_num_cpus}
    engine_kwargs = {
        "max_model_len": config.chunking.context_tokens, "max_num_seqs": engine.max_num_seqs,
        **engine.engine_kwargs,
    }
    env = dict(engine.env)
    if engine.accelerator == "cpu":
        # The job's engines run on this machine's CPU, as the app's CPU pools do theirs.
        engine_kwargs, choice = with_cpu_dtype(engine_kwargs, read_cpu_flags())
        logger.info("engine dtype %s: %s", choice.dtype or "auto", choice.reason)
        env = vllm_compile_cache.with_cpu_engine_env(env)
    options: dict[str, Any] = {
        "model_source": model_source,
        "engine_kwargs": engine_kwargs,
        "concurrency": engine.replicas,
        "batch_size": engine.batch_size,
        "runtime_env": {"env_vars": env, "worker_process_setup_hook": SETUP_HOOK},
        "chat_template_stage": stage, "tokenize_stage": stage, "detokenize_stage": stage,
        # A row the engine fails comes back marked, not as an exception that ends the pass.
        "should_continue_on_error": True,
    }
    if engine.accelerator == "cpu":
        options["placement_group_config"] = {"bundles": [dict(engine.resources)]}
    else:
        options["accelerator_type"] = engine.accelerator
    return vLLMEngineProcessorConfig(**options)


def engine_usd_per_s(config: SummarizeConfig) -> float:
    from cluster.pricing import load_catalog
    from core.config import CostConfig
    from core.price_catalog import replica_rate

    engine = config.engine
    units = engine.resources.get("CPU", 1) if engine.accelerator == "cpu" else 1
    rate = replica_rate(load_catalog(CostConfig()), engine.accelerator, units, engine.purchase)
    return rate.usd_per_s * engine.replicas


class EngineMeter:
    """Splits the engines' wall time among the rows as their batches arrive."""

    def __init__(self, usd_per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._usd_per_s = usd_per_s
        self._clock = clock
        self._last = clock()

    def restart(self) -> None:
        self._last = self._clock()

    def charge(self, tokens: list[int]) -> list[float]:
        now = self._clock()
        usd = (now - self._last) * self._usd_per_s
        self._last = now
        total = sum(tokens)
        if total == 0:
            return [usd / len(tokens)] * len(tokens) if tokens else []
        return [usd * count / total for count in tokens]


@dataclass
class _Document:
    """A document between rounds: its spending so far and the partial summaries of this round."""

    id: str
    document_tokens: int
    chunks: int = 0
    expected: int = 0  # partial summaries this round ends with
    carried: int = 0  # of those, carried from the last round without a request
    answered: int = 0  # rows of this round back from the engines
    partials: dict[int, Partial] = field(default_factory=dict)
    outcome: Outcome = field(default_factory=Outcome)
    failed: str | None = None


def engine_results(
    config: SummarizeConfig, documents: list[Document], plan: ChunkPlan, run_pass: RunPass,
    meter: EngineMeter,
) -> Iterator[dict[str, Any]]:
    """One result row per document (the columns of serve mode), as documents finish."""
    prompts = Prompts.from_config(config.prompt)
    state: dict[str, _Document] = {}
    rows: list[dict[str, Any]] = [{"id": document.id, "text": document.text} for document in documents]
    first = True
    while rows:
        next_rows: list[dict[str, Any]] = []
        meter.restart()
        for batch in run_pass(rows, first):
            costs = meter.charge([int(r.get("num_input_tokens") or 0) + int(r.get("num_generated_tokens") or 0)
                                  for r in batch])
            for row, cost in zip(batch, costs):
                yield from _take(row, cost, state, next_rows, prompts, plan)
        rows, first = next_rows, False


def _take(row, cost, state, next_rows, prompts: Prompts, plan: ChunkPlan) -> Iterator[dict[str, Any]]:
    doc = state.setdefault(row["doc"], _Document(row["doc"], int(row.get("document_tokens") or 0)))
    if not doc.expected:  # first answer of the first round: the document's chunk count
        doc.expected = doc.chunks = int(row["of"])
    doc.outcome.add(Completion(row.get("generated_text") or "", int(row.get("num_input_tokens") or 0),
                               int(row.get("num_generated_tokens") or 0), cost, "engine"))
    doc.answered += 1
    if row.get(ERROR_COLUMN):
        doc.failed = doc.failed or f"engine: {row[ERROR_COLUMN]}"
    else:
        doc.partials[int(row["slot"])] = Partial(row.get("generated_text") or "",
                                                 int(row.get("num_generated_tokens") or 0))
    if doc.answered < doc.expected - doc.carried:
        return  # the round's other rows are still in the engines (and cost money: wait for them)
    if doc.failed:
        yield _result(doc, "failed")
        return
    partials = [doc.partials[slot] for slot in sorted(doc.partials)]
    if len(partials) == 1:
        doc.outcome.summary = partials[0].text.strip()
        yield _result(doc, "done")
        return
    groups = combine_groups([partial.tokens for partial in partials], plan.combine_budget_tokens)
    doc.expected, doc.partials, doc.answered, doc.carried = len(groups), {}, 0, 0
    for slot, group in enumerate(groups):
        if len(group) == 1:  # alone in its group: carried to the next round as it is
            doc.partials[slot] = partials[group[0]]
            doc.carried += 1
            continue
        prompt = prompts.combine([partials[index].text for index in group])[-1]["content"]
        next_rows.append({"doc": doc.id, "slot": slot, "of": len(groups), "document_tokens": doc.document_tokens,
                          "prompt": prompt})


def _result(doc: _Document, status: str) -> dict[str, Any]:
    outcome = doc.outcome
    result = {
        "id": doc.id, "status": status, "summary": outcome.summary if status == "done" else None,
        "error": doc.failed, "input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens,
        "cost_usd": outcome.cost_usd, "pool": "engine", "chunks": doc.chunks, "requests": outcome.requests,
        "document_tokens": doc.document_tokens, "concurrency_limit": None,
    }
    return {column: result[column] for column in RESULT_COLUMNS}


class ExplodeChunks:
    """One prompt row per chunk of a chunked document (a Ray Data flat_map)."""

    def __init__(self, prompts: Prompts) -> None:
        self._prompts = prompts

    def __call__(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = list(row["chunks"])
        return [{"doc": row["id"], "slot": slot, "of": len(chunks), "document_tokens": row["document_tokens"],
                 "prompt": self._prompts.summarize(chunk)[-1]["content"]} for slot, chunk in enumerate(chunks)]


def ray_pass(config: SummarizeConfig, model_source: str, plan: ChunkPlan) -> RunPass:
    """A pass through fresh engines: Ray Data chunks (first pass) and ray.data.llm summarizes."""
    import ray
    from ray.data.llm import build_processor

    from serve_app.ray_driver import interrupt_on_sigterm

    prompts, sampling = Prompts.from_config(config.prompt), {
        "max_tokens": config.prompt.max_tokens, "temperature": config.prompt.temperature}
    stage_cpus = {"num_cpus": config.engine.stage_num_cpus}

    def preprocess(row: dict[str, Any]) -> dict[str, Any]:
        messages = [{"role": "user", "content": row["prompt"]}]
        if prompts.system:
            messages.insert(0, {"role": "system", "content": prompts.system})
        return {**row, "messages": messages, "sampling_params": sampling}

    def postprocess(row: dict[str, Any]) -> dict[str, Any]:
        keep = ("doc", "slot", "of", "document_tokens", "generated_text", "num_input_tokens", "num_generated_tokens")
        return {key: row.get(key) for key in keep}

    def run(rows: list[dict[str, Any]], chunk: bool) -> Iterator[list[dict[str, Any]]]:
        dataset = ray.data.from_items(rows)
        if chunk:
            dataset = dataset.map(ChunkStage, fn_constructor_kwargs={"tokenizer_source": model_source, "plan": plan},
                                  compute=ray.data.ActorPoolStrategy(size=1), **stage_cpus)
            dataset = dataset.flat_map(ExplodeChunks(prompts), **stage_cpus)
        processor = build_processor(processor_config(config, model_source), preprocess=preprocess,
                                    postprocess=postprocess, preprocess_map_kwargs=stage_cpus,
                                    postprocess_map_kwargs=stage_cpus)
        interrupt_on_sigterm()  # build_processor calls ray.init(), which replaces the job's handler
        for batch in processor(dataset).iter_batches(batch_format="pyarrow", batch_size=None):
            yield batch.to_pylist()

    return run
