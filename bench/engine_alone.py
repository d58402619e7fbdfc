"""The engine alone: vLLM's offline `LLM`, no Ray, no HTTP; what the serving path is held to.

    python -m bench.engine_alone --model FOLDER [--load-format dummy] --name NAME

Measures, on the prompts `trilemma bench overhead` sends (random documentation words):
- single stream: TTFT (one token generated) and TPOT ((time to N tokens - TTFT) / (N - 1)),
  repeated, median and worst;
- saturated: every prompt at once, `--output-tokens` each (ignore_eos), output tokens/s;
- the weight-streaming floor of TPOT at batch 1 (weight bytes / measured copy bandwidth),
  on a GPU: decoding one token reads every weight once, so no engine beats it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.datasets import random_dataset
from bench.result_files import write_json

RESULTS_DIR = Path("bench/results")


def llama_weight_bytes(config: dict[str, Any], bytes_per_param: int = 2) -> int:
    """Parameters of a Llama-architecture config (embeddings, attention, MLP, norms, head)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    vocab, inner = config["vocab_size"], config["intermediate_size"]
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    mlp = 3 * hidden * inner
    per_layer = attention + mlp + 2 * hidden
    head = 0 if config.get("tie_word_embeddings") else vocab * hidden
    return (vocab * hidden + layers * per_layer + hidden + head) * bytes_per_param


def copy_bandwidth_bytes_per_s(gib: float = 4.0, repeats: int = 10) -> float:
    """Bytes moved (read plus written) per second by a device-to-device copy, the best of
    `repeats`: what the memory delivers, in either direction, and so what a pure read of
    the weights can reach."""
    import torch

    source = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    target.copy_(source)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    del source, target
    torch.cuda.empty_cache()
    return 2 * gib * 2**30 / best


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    # The prompts `trilemma bench overhead` sends in its first round, for the same count and seed.
    prompts = random_dataset(args.num_prompts, min_words=args.min_words, max_words=args.max_words, seed=args.seed)
    messages = [prompt.messages for prompt in prompts]
    config = json.loads((Path(args.model) / "config.json").read_text())
    result: dict[str, Any] = {"kind": "engine_alone", "model": Path(args.model).name}
    if args.bandwidth:
        bandwidth = copy_bandwidth_bytes_per_s()
        weights = llama_weight_bytes(config)
        result["floor"] = {"weight_bytes": weights, "memory_bandwidth_bytes_per_s": bandwidth,
                           "tpot_floor_ms": weights / bandwidth * 1000}
    engine_kwargs = json.loads(args.engine_kwargs) if args.engine_kwargs else {}
    llm = LLM(model=args.model, load_format=args.load_format, max_model_len=args.max_model_len,
              max_num_seqs=args.max_num_seqs, gpu_memory_utilization=args.gpu_memory_utilization,
              **engine_kwargs)

    def timed(batch: list, max_tokens: int) -> tuple[float, int, int]:
        """Seconds, output tokens and prompt tokens of one generate call."""
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
        started = time.perf_counter()
        outputs = llm.chat(batch, params, use_tqdm=False)
        return (time.perf_counter() - started, sum(len(o.outputs[0].token_ids) for o in outputs),
                sum(len(o.prompt_token_ids) for o in outputs))

    timed(messages[:8], 8)  # compile and warm the kernels out of the measurement
    ttft, tpot, prompt_tokens = [], [], []
    for index in range(args.single_repeats):
        one = [messages[index % len(messages)]]
        first, _, prompt = timed(one, 1)
        full, tokens, _ = timed(one, args.output_tokens)
        ttft.append(first * 1000)
        tpot.append((full - first) / (tokens - 1) * 1000)
        prompt_tokens.append(prompt)
    result["single_stream"] = {
        "prompt": "the first prompts of the set, one at a time", "output_tokens": args.output_tokens,
        "prompt_tokens": {"median": statistics.median(prompt_tokens)},
        "ttft_ms": {"median": statistics.median(ttft), "max": max(ttft)},
        "tpot_ms": {"median": statistics.median(tpot), "max": max(tpot)},
    }
    seconds, tokens, prompt = timed(messages, args.output_tokens)
    result["saturated"] = {"prompts": len(messages), "output_tokens_each": args.output_tokens,
                           "prompt_tokens": prompt, "max_num_seqs": args.max_num_seqs,
                           "seconds": seconds, "output_tokens_per_s": tokens / seconds}
    if "floor" in result:
        result["floor"]["tpot_over_floor"] = result["single_stream"]["tpot_ms"]["median"] / result["floor"]["tpot_floor_ms"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="model folder (config.json and tokenizer)")
    parser.add_argument("--load-format", default="auto", help="`dummy`: random weights")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--engine-kwargs", help="more engine arguments, as JSON")
    parser.add_argument("--num-prompts", type=int, default=256, help="prompts of the saturated run")
    parser.add_argument("--min-words", type=int, default=32)
    parser.add_argument("--max-words", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--single-repeats", type=int, default=5)
    parser.add_argument("--bandwidth", action="store_true", help="measure the TPOT floor (GPU only)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    result = {"command": "python -m bench.engine_alone " + " ".join(argv or __import__("sys").argv[1:]),
              **measure(args)}
    path = write_json(result, args.out, args.name)
    print(json.dumps({k: v for k, v in result.items() if k != "command"}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
