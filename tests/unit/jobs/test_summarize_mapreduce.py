"""Summarize job: map-reduce over a stand-in model, in serve mode's shape (per document) and
engine mode's (in rounds over passes), and the engine processor's config."""

from __future__ import annotations

import asyncio

import pytest

from jobs.summarize.chunking import ChunkPlan
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.engine_lifetime import SETUP_HOOK
from jobs.summarize.engine_mode import ERROR_COLUMN, EngineMeter, engine_results, processor_config
from jobs.summarize.inputs import Document
from jobs.summarize.mapreduce import Completion, Outcome, summarize_document
from jobs.summarize.prompts import Prompts
from tests.support import ManualClock

PROMPTS = Prompts(system=None, template="Summarize: {text}", combine_template="Combine: {text}")


class FakeModel:
    """Answers each prompt with a fixed-length summary naming what it read."""

    def __init__(self, summary_tokens=10, fail_on=None):
        self.prompts = []
        self.summary_tokens = summary_tokens
        self.fail_on = fail_on

    async def complete(self, messages):
        content = messages[-1]["content"]
        self.prompts.append(content)
        await asyncio.sleep(0)
        if self.fail_on and self.fail_on in content:
            raise RuntimeError(f"refused {self.fail_on}")
        return Completion(f"S({content[:14]})", prompt_tokens=len(content), completion_tokens=self.summary_tokens,
                          cost_usd=0.5, pool="short")


async def test_a_one_chunk_document_takes_one_request():
    model = FakeModel()
    outcome = await summarize_document(["Just this."], model.complete, PROMPTS, combine_budget_tokens=100)
    assert model.prompts == ["Summarize: Just this."]
    assert outcome.summary == "S(Summarize: Jus)" and outcome.requests == 1 and outcome.pools == {"short"}


async def test_many_chunks_are_combined_in_rounds_until_one_summary_is_left():
    model = FakeModel(summary_tokens=10)
    chunks = [f"part {i}" for i in range(5)]
    # Two summaries (10 tokens + separator each) fit a combine prompt of 24 tokens, three do not.
    outcome = await summarize_document(chunks, model.complete, PROMPTS, combine_budget_tokens=24)
    combines = [p for p in model.prompts if p.startswith("Combine")]
    # Round 1: (0,1) (2,3) and 4 carried as it is; round 2: (01,23) and 4 carried; round 3: the last pair.
    assert len(model.prompts) == 5 + 2 + 1 + 1 and len(combines) == 4
    assert outcome.requests == 9 and outcome.cost_usd == pytest.approx(4.5)
    assert outcome.summary.startswith("S(Combine:")


async def test_a_failed_chunk_fails_the_document_and_keeps_what_was_spent():
    model = FakeModel(fail_on="part 2")
    outcome = Outcome()
    with pytest.raises(RuntimeError, match="refused part 2"):
        await summarize_document([f"part {i}" for i in range(3)], model.complete, PROMPTS, 100, outcome)
    assert outcome.requests == 2 and outcome.cost_usd == pytest.approx(1.0)


def fake_pass(prompts, summary_tokens=10, fail_doc=None):
    """Engine mode's pass, without Ray: chunks a document by its words (3 per chunk) on the
    first pass, answers every prompt row, in batches of two rows."""
    passes = []

    def run(rows, chunk):
        if chunk:
            prompt_rows = []
            for row in rows:
                words = row["text"].split()
                chunks = [" ".join(words[i:i + 3]) for i in range(0, len(words), 3)]
                prompt_rows += [{"doc": row["id"], "slot": i, "of": len(chunks), "document_tokens": len(words),
                                 "prompt": prompts.summarize(c)[-1]["content"]} for i, c in enumerate(chunks)]
            rows = prompt_rows
        passes.append([row["prompt"] for row in rows])
        answered = [{**row, "generated_text": f"S[{row['prompt']}]", "num_input_tokens": 20,
                     "num_generated_tokens": summary_tokens,
                     ERROR_COLUMN: "engine died" if row["doc"] == fail_doc else None} for row in rows]
        for start in range(0, len(answered), 2):
            yield answered[start:start + 2]

    return run, passes


def test_engine_mode_summarizes_in_passes_and_prices_every_row():
    config = SummarizeConfig()
    documents = [Document("short", "one two", "f:1"), Document("long", "a b c d e f g h i j", "f:2"),
                 Document("broken", "x y z w", "f:3")]
    run_pass, passes = fake_pass(Prompts.from_config(config.prompt), fail_doc="broken")
    clock = ManualClock()
    meter = EngineMeter(usd_per_s=1.0, clock=clock)

    def ticking(rows, chunk):
        for batch in run_pass(rows, chunk):
            clock.now += 1.0  # each batch takes the engines a second
            yield batch

    plan = ChunkPlan(chunk_tokens=3, overlap_tokens=0, combine_budget_tokens=1000)
    results = {row["id"]: row for row in engine_results(config, documents, plan, ticking, meter)}
    # Chunk summaries, then one round that combines the long document's four in one prompt.
    assert len(passes) == 2 and len(passes[0]) == 1 + 4 + 2 and len(passes[1]) == 1
    short, long_, broken = results["short"], results["long"], results["broken"]
    assert (short["status"], short["chunks"], short["requests"]) == ("done", 1, 1)
    assert short["summary"] == "S[" + config.prompt.template.replace("{text}", "one two") + "]"
    assert (long_["status"], long_["chunks"], long_["requests"]) == ("done", 4, 5)
    assert long_["summary"].startswith("S[" + config.prompt.combine_template.split("{text}")[0])
    assert broken["status"] == "failed" and broken["error"] == "engine: engine died"
    total = sum(row["cost_usd"] for row in results.values())
    assert total == pytest.approx(clock.now)  # every second of the engines is charged to someone


def test_processor_config_for_cpu_and_gpu_engines():
    config = SummarizeConfig.validated({"engine": {"max_num_seqs": 4, "engine_kwargs": {"enforce_eager": True}}},
                                       "test")
    cpu = processor_config(config, "/models/x")
    assert cpu.model_source == "/models/x" and cpu.accelerator_type is None
    assert [bundle["CPU"] for bundle in cpu.placement_group_config["bundles"]] == [1]
    assert cpu.engine_kwargs["max_model_len"] == 2048 and cpu.engine_kwargs["max_num_seqs"] == 4
    assert cpu.engine_kwargs["enforce_eager"] is True and cpu.should_continue_on_error
    assert cpu.runtime_env == {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_USE_AOT_COMPILE": "1"},
                               "worker_process_setup_hook": SETUP_HOOK}
    assert cpu.chat_template_stage["num_cpus"] == 0.25
    gpu = processor_config(config.with_overrides({"engine.accelerator": "H100", "engine.env": {}}), "org/model")
    assert gpu.accelerator_type == "H100" and gpu.placement_group_config is None
    assert gpu.runtime_env == {"env_vars": {}, "worker_process_setup_hook": SETUP_HOOK}


def test_engine_mode_carries_a_lone_summary_to_the_next_round():
    config = SummarizeConfig()
    run_pass, passes = fake_pass(Prompts.from_config(config.prompt), summary_tokens=10)
    documents = [Document("five-chunks", " ".join(f"w{i}" for i in range(15)), "f:1")]
    plan = ChunkPlan(chunk_tokens=3, overlap_tokens=0, combine_budget_tokens=24)  # two summaries per prompt
    (result,) = engine_results(config, documents, plan, run_pass, EngineMeter(0.0))
    # The same rounds as serve mode: 5 chunks; (0,1) (2,3) and 4 carried; (01,23) and 4 carried; the last pair.
    assert [len(prompts) for prompts in passes] == [5, 2, 1, 1]
    assert (result["status"], result["chunks"], result["requests"]) == ("done", 5, 9)
