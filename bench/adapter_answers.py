"""Whether vLLM's engine serves the committed test adapters as trained: the held-out questions
of their training data, answered greedily by the base and by each adapter in one engine.

    python -m bench.adapter_answers [--adapters tests/data/adapters] [--out bench/results/adapters-cpu]

Each adapter must answer in its own format (bench/adapter_training_data.py) and the base in
neither, and the base's answers must be the same before and after the adapters were used: an
adapter changes only the requests that name it. Each adapter is checked against the base first
(core.adapter_files). Reports each adapter's count in format, the seconds of its first batch
(which loads it) and of the next (loaded), and exits 1 when an adapter or the base fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.adapter_training_data import STYLES, in_style, qa_pairs, split_held_out
from bench.result_files import write_json
from core.adapter_files import inspect_adapter
from core.model_store import EMBEDDED_MODEL_NAME, default_cache_dir, prepare_embedded_model
from engine.cpu_engine import choose_cpu_dtype, read_cpu_flags

# The ranks vLLM's max_lora_rank accepts; the engine is sized for the largest adapter's.
LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
# What make_adapters held out of training, for the same seed.
HELD_OUT = 10
# The adapters' answers are a few words; the base's are cut here, which is enough to see its format.
ANSWER_TOKENS = 24
# In format on at least this share of the held-out questions (the training's own check gave 10 of 10).
MIN_IN_FORMAT = 0.9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adapter_answers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=Path, default=Path("tests/data/adapters"))
    parser.add_argument("--names", nargs="+", choices=sorted(STYLES), default=["tagged", "jsonish"])
    parser.add_argument("--seed", type=int, default=0, help="the seed the adapters were trained with")
    parser.add_argument("--out", type=Path, default=Path("bench/results/adapters-cpu"))
    args = parser.parse_args(argv)
    result = measure(args)
    path = write_json(result, args.out, "adapter-answers")
    (args.out / "adapter-answers.md").write_text(markdown(result))
    print(markdown(result))
    print(f"written: {path}")
    return 0 if result["passed"] else 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    # One engine of ten short chats: a KV cache of 1 GiB is ample, where vLLM's CPU default is 4.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    model = prepare_embedded_model(default_cache_dir())
    base_config = json.loads((model / "config.json").read_text())
    folders = {name: (args.adapters / name).resolve() for name in args.names}
    files = {name: inspect_adapter(folder, base_config, name=name) for name, folder in folders.items()}
    max_rank = next(rank for rank in LORA_RANKS if rank >= max(f.rank for f in files.values()))
    _, held_out = split_held_out(qa_pairs(args.seed), HELD_OUT, args.seed)
    chats = [[{"role": "user", "content": question}] for question, _ in held_out]
    params = SamplingParams(max_tokens=ANSWER_TOKENS, temperature=0)
    started = time.monotonic()
    llm = LLM(model=str(model), served_model_name=EMBEDDED_MODEL_NAME, dtype=choose_cpu_dtype(read_cpu_flags()).dtype,
              max_model_len=1024, max_num_seqs=len(chats), enable_lora=True, max_loras=len(folders),
              max_lora_rank=max_rank)
    engine_s = time.monotonic() - started

    def answers(lora: LoRARequest | None) -> tuple[list[str], float]:
        began = time.monotonic()
        outputs = llm.chat(chats, params, use_tqdm=False, lora_request=lora)
        return [output.outputs[0].text for output in outputs], time.monotonic() - began

    base, base_s = answers(None)
    adapters = {}
    for lora_id, (name, folder) in enumerate(folders.items(), start=1):
        lora = LoRARequest(name, lora_id, str(folder))
        texts, first_s = answers(lora)  # the first batch that names it loads it
        _, loaded_s = answers(lora)
        in_format = sum(in_style(name, text) for text in texts)
        adapters[name] = {
            "rank": files[name].rank, "target_modules": list(files[name].target_modules),
            "in_format": in_format, "base_in_format": sum(in_style(name, text) for text in base),
            "first_batch_s": round(first_s, 2), "loaded_batch_s": round(loaded_s, 2),
            "load_s": round(max(first_s - loaded_s, 0.0), 2), "answers": texts,
        }
    base_after, _ = answers(None)
    passed = base == base_after and all(
        a["in_format"] >= MIN_IN_FORMAT * len(chats) and a["base_in_format"] == 0 for a in adapters.values())
    return {
        "kind": "adapter_answers", "command": "python -m " + " ".join(["bench.adapter_answers", *sys.argv[1:]]),
        "model": EMBEDDED_MODEL_NAME, "questions": [question for question, _ in held_out],
        "engine": {"max_lora_rank": max_rank, "max_loras": len(folders), "start_s": round(engine_s, 1)},
        "base": {"answers": base, "batch_s": round(base_s, 2), "unchanged_after_adapters": base == base_after},
        "adapters": adapters, "passed": passed,
    }


def markdown(result: dict[str, Any]) -> str:
    n = len(result["questions"])
    rows = [f"| {name} | {a['rank']} | {a['in_format']}/{n} | {a['base_in_format']}/{n} | {a['first_batch_s']} | "
            f"{a['loaded_batch_s']} | {a['load_s']} |" for name, a in result["adapters"].items()]
    return "\n".join([
        "# Adapter answers", "", f"Command: `{result['command']}`", "",
        f"{result['model']}, {n} held-out questions, greedy, one engine with LoRA on (max_lora_rank "
        f"{result['engine']['max_lora_rank']}). The base's answers after the adapters were used: "
        f"{'unchanged' if result['base']['unchanged_after_adapters'] else 'CHANGED'}.", "",
        "| adapter | rank | in its format | the base in that format | first batch s (loads it) | next batch s | "
        "load s |",
        "| --- | --- | --- | --- | --- | --- | --- |", *rows, "",
        f"Passed: {'yes' if result['passed'] else 'no'}.", "",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
