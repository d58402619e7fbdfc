"""A CPU engine started twice loads the model vLLM compiled on its first start (the AOT compile
cache, which engine/vllm_compile_cache.py makes load), and answers as the model does.

Two starts of vLLM's offline engine, each in a process of its own as an engine process runs,
with the plugin as the installed package registers it, and a compile cache of their own: the
first compiles the model and saves it, the second must load it. Its greedy tokens are then held
against transformers in float32 on the same weights, as the served engine's are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.cpu_dtype import Reference
from engine import vllm_compile_cache

pytestmark = pytest.mark.e2e

QUESTIONS = ["What is the capital of France?", "Name three primary colors."]
ANSWER_TOKENS = 16
LOADED = "Directly load AOT compilation"
RECOMPILED = "Compiling model again due to a load failure"
# The short pool's engine settings on one core, float32 (the app's choice on every CPU).
ENGINE = f"""
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=2048, max_num_seqs=8, dtype="float32")
chats = [[{{"role": "user", "content": q}}] for q in {QUESTIONS!r}]
outputs = llm.chat(chats, SamplingParams(temperature=0, max_tokens={ANSWER_TOKENS}), use_tqdm=False)
print("ANSWERS " + json.dumps([list(o.outputs[0].token_ids) for o in outputs]))
"""
START_TIMEOUT_S = 600


def start_engine(model_dir, cache_root) -> tuple[list[list[int]], str]:
    """One start of the engine: its greedy answers (token ids) and its log."""
    env = {**os.environ, "VLLM_USE_AOT_COMPILE": "1", "VLLM_CACHE_ROOT": str(cache_root),
           "VLLM_LOGGING_LEVEL": "INFO",  # the lines that tell a load from a compile
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    done = subprocess.run([sys.executable, "-c", ENGINE, str(model_dir)], env=env, capture_output=True, text=True,
                          timeout=START_TIMEOUT_S)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    answers = next(line for line in done.stdout.splitlines() if line.startswith("ANSWERS "))
    return json.loads(answers.removeprefix("ANSWERS ")), log


def test_a_second_start_loads_the_compiled_model_and_answers_as_the_model(embedded_model_dir, tmp_path):
    assert vllm_compile_cache.registered({}), "vLLM will not load the plugin: reinstall the package (make setup)"
    _, first = start_engine(embedded_model_dir, tmp_path)
    assert LOADED not in first, "a fresh cache had a compiled model to load"
    answers, log = start_engine(embedded_model_dir, tmp_path)
    assert LOADED in log and RECOMPILED not in log, log[-4000:]
    reference = Reference(str(embedded_model_dir))
    for question, answer in zip(QUESTIONS, answers):
        prompt = reference.prompt_ids([{"role": "user", "content": question}])
        assert answer == reference.greedy(prompt, ANSWER_TOKENS), question
