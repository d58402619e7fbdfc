"""The real model answers sensibly on this machine: SmolLM2-135M-Instruct's real weights (the
embedded GGUF converted as `make serve` does), greedy, through vLLM's offline engine.

    python -m bench.real_weights_check --model FOLDER --name NAME [--compare OTHER.json]

Random weights measure speed; only real ones show that the engine, its kernels and the
conversion produce the model's answers. Checks a fact and a summary by their content, and
with --compare, how many leading tokens agree with another machine's run of the same prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.result_files import write_json

DOCUMENT = (
    "The Apollo 11 mission landed the first humans on the Moon on July 20, 1969. Neil Armstrong "
    "and Buzz Aldrin spent about two and a half hours outside the lunar module, collecting rock "
    "samples and setting up experiments, while Michael Collins orbited above in the command module. "
    "The crew returned safely to Earth on July 24, splashing down in the Pacific Ocean."
)
CHECKS = [
    {"name": "fact", "prompt": "What is the capital of France? Answer in one word.", "max_tokens": 8,
     "expect_any": ["Paris"]},
    {"name": "summary", "prompt": f"Summarize in one sentence:\n\n{DOCUMENT}", "max_tokens": 48,
     "expect_any": ["Apollo", "Moon", "moon", "Armstrong", "1969"]},
]


def run_checks(model: str, **engine_kwargs: Any) -> list[dict[str, Any]]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, **engine_kwargs)
    results = []
    for check in CHECKS:
        params = SamplingParams(max_tokens=check["max_tokens"], temperature=0)
        output = llm.chat([[{"role": "user", "content": check["prompt"]}]], params, use_tqdm=False)[0].outputs[0]
        found = [word for word in check["expect_any"] if word in output.text]
        results.append({"name": check["name"], "text": output.text, "token_ids": list(output.token_ids),
                        "expected_any": check["expect_any"], "found": found, "ok": bool(found)})
    return results


def agreement(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, int]:
    """Leading tokens two runs share, per check: greedy decoding agrees until rounding differs."""
    shared = {}
    for a, b in zip(ours, theirs):
        count = 0
        for x, y in zip(a["token_ids"], b["token_ids"]):
            if x != y:
                break
            count += 1
        shared[a["name"]] = count
    return shared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="the converted model folder")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--engine-kwargs", help="more engine arguments, as JSON")
    parser.add_argument("--compare", type=Path, help="another run's result, for token agreement")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    extra = json.loads(args.engine_kwargs) if args.engine_kwargs else {}
    checks = run_checks(args.model, max_model_len=args.max_model_len, **extra)
    result: dict[str, Any] = {"command": "python -m bench.real_weights_check " + " ".join(argv or sys.argv[1:]),
                              "checks": checks, "ok": all(check["ok"] for check in checks)}
    if args.compare:
        other = json.loads(args.compare.read_text())
        result["agreement_with"] = {"run": args.compare.name,
                                    "leading_tokens_shared": agreement(checks, other["checks"])}
    path = write_json(result, args.out, args.name)
    for check in checks:
        print(f"{check['name']}: {'ok' if check['ok'] else 'MISSING'} {check['found']}: {check['text']!r}")
    if "agreement_with" in result:
        print(f"leading tokens shared with {args.compare.name}: {result['agreement_with']['leading_tokens_shared']}")
    print(f"wrote {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
