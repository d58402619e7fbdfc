"""The CPU engine's dtype, A/B on this machine: greedy answers against the fp32 reference, and speed.

    python -m bench.cpu_dtype --model FOLDER [--variants bf16-compiled,fp32-compiled] --name NAME

The reference is transformers in float32 on the same weights, computed in this run. Each
variant is vLLM's offline engine with the short pool's settings (one core, 2048 tokens, 8
sequences) in a process of its own; it answers the same chat prompts greedily, then is timed:
one stream, and a batch of 8, both of `--output-tokens` tokens. vLLM loads the model it compiled
on an earlier run of the same variant (its AOT compile cache), except where the variant turns
that off: run it twice for a warm engine start. A variant's answer that leaves
the reference is shown with the reference's log-probability gap between its own next token
and the engine's at that point: a small gap is a near tie that any rounding may flip.
Writes NAME.json and NAME.md under --out, with the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.machine import cpu_model
from bench.result_files import write_json
from engine.cpu_engine import NATIVE_BF16_FLAGS, choose_cpu_dtype, read_cpu_flags

RESULTS_DIR = Path("bench/results")
VARIANTS: dict[str, dict[str, Any]] = {
    "bf16-compiled": {"dtype": "bfloat16"},
    "bf16-eager": {"dtype": "bfloat16", "enforce_eager": True},
    # Compiled, with vLLM's C++ rotary kernel in place of the PyTorch-native rotary.
    "bf16-compiled-rotary-kernel": {"dtype": "bfloat16",
                                    "compilation_config": {"custom_ops": ["none", "+rotary_embedding"]}},
    # Compiled, with inductor rounding to bf16 wherever eager PyTorch would.
    "bf16-compiled-emulated-casts": {"dtype": "bfloat16",
                                     "compilation_config": {"inductor_compile_config": {"emulate_precision_casts": True}}},
    "fp32-compiled": {"dtype": "float32"},
    # The same, tracing and compiling the model again instead of loading vLLM's AOT compile cache.
    "fp32-compiled-aot-off": {"dtype": "float32"},
}
# A variant's environment beyond ENGINE_ENV.
VARIANT_ENV: dict[str, dict[str, str]] = {"fp32-compiled-aot-off": {"VLLM_USE_AOT_COMPILE": "0"}}
QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of Japan?",
    "Name three primary colors.",
    "What is 12 times 12?",
    "Who wrote Romeo and Juliet?",
    "Write one sentence about the sea.",
    "What does a CPU do?",
    "Give me a synonym for happy.",
]
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}


def chats() -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": question}] for question in QUESTIONS]


def run_variant(model: str, engine_kwargs: dict[str, Any], answer_tokens: int, output_tokens: int,
                repeats: int) -> dict[str, Any]:
    """In the variant's own process: its greedy answers (token ids) and its speed."""
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(model=model, max_model_len=2048, max_num_seqs=8, **engine_kwargs)
    start_s = time.perf_counter() - started
    greedy = SamplingParams(temperature=0, max_tokens=answer_tokens)
    answers = [list(out.outputs[0].token_ids) for out in llm.chat(chats(), greedy, use_tqdm=False)]

    def tokens_per_s(batch: int) -> float:
        params = SamplingParams(temperature=0, max_tokens=output_tokens, ignore_eos=True)
        began = time.perf_counter()
        outputs = llm.chat(chats()[:batch], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs) / (time.perf_counter() - began)

    single = [tokens_per_s(1) for _ in range(repeats)]
    batched = [tokens_per_s(8) for _ in range(repeats)]
    return {"engine_kwargs": engine_kwargs, "start_s": start_s, "answers": answers,
            "single_stream_tokens_per_s": {"median": statistics.median(single), "min": min(single)},
            "batch8_tokens_per_s": {"median": statistics.median(batched), "min": min(batched)}}


class Reference:
    """transformers in float32 on the same weights and chat template."""

    def __init__(self, model: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()

    def prompt_ids(self, chat: list[dict[str, str]]) -> list[int]:
        encoded = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)

    def greedy(self, prompt: list[int], tokens: int) -> list[int]:
        with self._torch.no_grad():
            out = self.model.generate(self._torch.tensor([prompt]), max_new_tokens=tokens, do_sample=False)
        generated = out[0, len(prompt):].tolist()
        eos = self.tokenizer.eos_token_id
        return generated[: generated.index(eos) + 1] if eos in generated else generated

    def logprobs(self, ids: list[int]):
        with self._torch.no_grad():
            return self.model(self._torch.tensor([ids])).logits[0, -1].float().log_softmax(-1)


def compare(reference: Reference, prompt: list[int], expected: list[int], answer: list[int]) -> dict[str, Any]:
    """Where the engine's greedy answer leaves the reference's, and how close a call it was."""
    same = next((i for i, (a, b) in enumerate(zip(expected, answer)) if a != b), None)
    if same is None and len(expected) == len(answer):
        return {"match": True}
    at = same if same is not None else min(len(expected), len(answer))
    result: dict[str, Any] = {"match": False, "diverges_at_token": at,
                              "reference": reference.tokenizer.decode(expected),
                              "engine": reference.tokenizer.decode(answer)}
    if same is not None:
        logprobs = reference.logprobs(prompt + expected[:at])
        result["reference_gap_nats"] = float(logprobs[expected[at]] - logprobs[answer[at]])
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    reference = Reference(args.model)
    prompts = [reference.prompt_ids(chat) for chat in chats()]
    expected = [reference.greedy(prompt, args.answer_tokens) for prompt in prompts]
    flags = read_cpu_flags()
    result: dict[str, Any] = {
        "kind": "cpu_dtype", "model": Path(args.model).name, "machine": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(), "native_bf16_flags": sorted(set(NATIVE_BF16_FLAGS) & (flags or set())),
        "avx512f": bool(flags and "avx512f" in flags), "default_choice": choose_cpu_dtype(flags).__dict__,
        "questions": QUESTIONS, "reference_answers": [reference.tokenizer.decode(e) for e in expected],
        "variants": {},
    }
    for name in args.variants.split(","):
        measured = _in_own_process(args, name)
        checks = [compare(reference, p, e, a) for p, e, a in zip(prompts, expected, measured.pop("answers"))]
        measured["matches"] = sum(check["match"] for check in checks)
        measured["differences"] = {QUESTIONS[i]: check for i, check in enumerate(checks) if not check["match"]}
        result["variants"][name] = measured
        print(f"{name}: {measured['matches']}/{len(QUESTIONS)} answers as the fp32 reference, "
              f"{measured['batch8_tokens_per_s']['median']:.1f} tok/s at batch 8, "
              f"{measured['single_stream_tokens_per_s']['median']:.1f} single", flush=True)
    return result


def _in_own_process(args: argparse.Namespace, name: str) -> dict[str, Any]:
    out = Path(args.out) / f".{args.name}-{name}.json"
    command = [sys.executable, "-m", "bench.cpu_dtype", "--model", args.model, "--name", args.name,
               "--answer-tokens", str(args.answer_tokens), "--output-tokens", str(args.output_tokens),
               "--repeats", str(args.repeats), "--child", name, "--child-out", str(out)]
    subprocess.run(command, check=True, env={**os.environ, **ENGINE_ENV, **VARIANT_ENV.get(name, {})})
    measured = json.loads(out.read_text())
    out.unlink()
    return measured


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# {result['name']}\n", f"Command: `{result['command']}`\n",
        f"CPU: {result['cpu_model']}; native bf16: {', '.join(result['native_bf16_flags']) or 'none'}; "
        f"AVX-512: {'yes' if result['avx512f'] else 'no'}. The app's choice here: "
        f"{result['default_choice']['dtype']} ({result['default_choice']['reason']}).\n",
        "| variant | answers as fp32 reference | batch 8 tok/s (median) | single stream tok/s (median) | engine start s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, v in result["variants"].items():
        lines.append(f"| {name} | {v['matches']}/{len(result['questions'])} | {v['batch8_tokens_per_s']['median']:.1f} "
                     f"| {v['single_stream_tokens_per_s']['median']:.1f} | {v['start_s']:.0f} |")
    lines.append("\nWhere a variant's answer left the reference's:\n")
    for name, v in result["variants"].items():
        for question, d in v["differences"].items():
            gap = f", reference gap {d['reference_gap_nats']:.3f} nats" if "reference_gap_nats" in d else ""
            lines.append(f"- {name}, {question!r} (token {d['diverges_at_token']}{gap}): "
                         f"engine {d['engine']!r}, reference {d['reference']!r}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_dtype", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model folder (safetensors, config and tokenizer)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--answer-tokens", type=int, default=24)
    parser.add_argument("--output-tokens", type=int, default=64, help="tokens of each timed request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--name", default="cpu-dtype")
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        measured = run_variant(args.model, VARIANTS[args.child], args.answer_tokens, args.output_tokens, args.repeats)
        args.child_out.parent.mkdir(parents=True, exist_ok=True)
        args.child_out.write_text(json.dumps(measured))
        return 0
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    # The home folder as `~`, so the recorded command reads the same on any machine.
    command = " ".join(argv or sys.argv[1:]).replace(str(Path.home()), "~")
    result = {"name": args.name, "command": f"python -m bench.cpu_dtype {command}", **measure(args)}
    write_json(result, args.out, args.name)
    (args.out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
