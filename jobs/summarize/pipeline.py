"""Serve mode's Ray Data pipeline: documents -> chunks (model tokenizer) -> summaries through
the app -> rows the driver records as they arrive."""

from __future__ import annotations

import math
from typing import Any, Iterator

import ray

from core.upstream import one_actor_running_batches_at_once
from jobs.summarize.chunking import ChunkPlan
from jobs.summarize.concurrency import AimdSettings
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.inputs import Document
from jobs.summarize.latency_signal import LatencyWatch
from jobs.summarize.prompts import Prompts
from jobs.summarize.serve_client import ServeSettings
from jobs.summarize.stages import ChunkStage, ServeSummarizeStage, SummarizeSettings

# Documents per Ray Data batch: rows of a batch come back together, so small batches record
# finished documents sooner (and lose fewer to a kill) at a little scheduling cost.
DOCUMENTS_PER_BATCH = 2
# Tokenizing is CPU work, but brief; the summarize actor only waits on the network.
CHUNK_STAGE_CPUS = 0.5
def summarize_settings(config: SummarizeConfig, plan: ChunkPlan, api_key: str | None) -> SummarizeSettings:
    concurrency, slo = config.concurrency, config.concurrency.latency_slo
    return SummarizeSettings(
        serve=ServeSettings(
            url=config.serve.url, model=config.model.requested, scenario=config.serve.scenario, pool=config.serve.pool,
            api_key=api_key, max_tokens=config.prompt.max_tokens, temperature=config.prompt.temperature,
            timeout_s=config.serve.request_timeout_s, max_attempts=config.serve.max_attempts,
        ),
        aimd=AimdSettings(initial=concurrency.initial, minimum=concurrency.min, maximum=concurrency.max,
                          decrease_factor=concurrency.decrease_factor),
        prompts=Prompts.from_config(config.prompt),
        combine_budget_tokens=plan.combine_budget_tokens,
        signal_interval_s=concurrency.signal_interval_s,
        latency=LatencyWatch(slo.metrics_url, slo.scenario, slo.ttft_p99_ms, slo.headroom) if slo else None,
    )


def serve_results(
    config: SummarizeConfig, documents: list[Document], plan: ChunkPlan, tokenizer_source: str,
    api_key: str | None,
) -> Iterator[dict[str, Any]]:
    """One result row per document, in the order they finish (roughly)."""
    in_flight = config.concurrency.documents_in_flight or config.concurrency.max
    per_batch = min(DOCUMENTS_PER_BATCH, in_flight)
    batches_at_once = math.ceil(in_flight / per_batch)
    rows = [{"id": document.id, "text": document.text} for document in documents]
    dataset = ray.data.from_items(rows, override_num_blocks=max(1, math.ceil(len(rows) / per_batch)))
    dataset = dataset.map(
        ChunkStage, fn_constructor_kwargs={"tokenizer_source": tokenizer_source, "plan": plan},
        compute=ray.data.ActorPoolStrategy(size=1), num_cpus=CHUNK_STAGE_CPUS,
    )
    dataset = dataset.map_batches(
        ServeSummarizeStage,
        fn_constructor_kwargs={"settings": summarize_settings(config, plan, api_key)},
        batch_size=per_batch, batch_format="pyarrow", num_cpus=0,
        # One actor: one controller sees every request. Its batches run at once on its loop.
        **one_actor_running_batches_at_once(batches_at_once),
    )
    yield from dataset.iter_rows()
