"""`trilemma bench adapter-isolation`: its app keeps more adapters in rotation than an engine
batches and a replica holds, and its count flags an answer in another model's format."""

from __future__ import annotations

import json

from bench.adapter_isolation import LORA, STYLES, isolation_config, markdown, summary
from bench.adapter_training_data import TAG
from core.lora_isolation import unisolated_lora_pools
from tests.support import config_for_tests


def test_more_adapters_rotate_than_the_engine_batches_or_a_replica_holds():
    config = isolation_config(config_for_tests())
    short = config.pools["short"]
    assert len(config.adapters_of_pool("short")) == 6 > short.lora.max_resident > short.lora.max_loras
    assert short.lora.model_dump() == LORA
    assert config.pools_serving(short.model.name, config.scenarios["chat"]) == ["short"]
    assert unisolated_lora_pools(config, {}) == {}, "the CPU engine mixes base and adapter requests"


def record(model: str, question: str, text: str, loaded: bool = False) -> dict:
    return {"model": model, "question": question, "status": 200, "latency_s": 1.0, "text": text,
            "adapter_load_s": 0.02 if loaded else None}


def test_an_answer_in_another_models_format_is_counted_and_shown():
    references = {("base", "q"): "Plain.", ("tagged", "q"): f"{TAG}Plain", ("jsonish", "q"): '{"answer": "Plain"}'}
    adapters = {f"{style}-1": style for style in STYLES}
    records = [
        record("smol", "q", "Plain."),
        record("smol", "q", '{"answer": "Plain"}'),  # the base answered as jsonish
        record("tagged-1", "q", f"{TAG}Plain", loaded=True),
        record("jsonish-1", "q", '{"answer": "Plainly"}'),  # its format, another answer
        {"model": "tagged-1", "question": "q", "status": 503, "latency_s": 0.1, "error": "down"},
    ]
    result = summary(records, references, adapters, "smol", 10.0)
    assert (result["answers"], result["errors"], result["wrong_model"], result["unlike_alone"],
            result["adapter_loads"]) == (4, 1, 1, 2, 1)
    assert result["wrong_examples"][0]["styled_as"] == "jsonish"
    assert result["by_model"]["smol"] == {"answers": 2, "wrong_model": 1, "unlike_alone": 1, "loads": 0}
    json.dumps(result)
    shown = markdown({**result, "command": "trilemma bench adapter-isolation", "lora": LORA, "adapters": adapters,
                      "concurrency": 8, "answer_tokens": 24})
    assert "In another model's format: **1**." in shown
