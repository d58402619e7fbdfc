"""Builds the LoRA adapters the tests serve: two small ones trained on the embedded model, and
broken ones for the refusals.

    python -m bench.make_adapters --out tests/data/adapters [--steps 150] [--seed 0] [--adapters tagged jsonish]
    python -m bench.make_adapters --out tests/data/adapters --bad-fixtures

Training needs the `adapters` extra (peft); vLLM serves the result without it. `tagged` starts
every answer with `[[ZEBRA]] `, `jsonish` writes every answer as `{"answer": "..."}`: formats
the base never writes, so a test sees by a string match which adapter answered. Each is LoRA
r=8, alpha 16 on q, k, v and o, trained on about 300 templated chats with the loss on the
assistant's turn only, and written with a MANIFEST.json (its weights' and its base config's
sha256, seed, steps, losses, the held-out check, the command). The adapters are committed, not
built by the tests: training takes minutes of CPU and its numbers depend on the threading.

--bad-fixtures writes, without training, the broken adapters under <out>/bad/ (a truncated
safetensors file, adapters of a larger and of a smaller base, one of rank 64), each with the
refusal core.adapter_files gives it in bad/MANIFEST.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from bench.adapter_training_data import (
    STYLE_DESCRIPTIONS,
    STYLES,
    chat_example,
    in_style,
    padded_batch,
    prompt_text,
    qa_pairs,
    split_held_out,
    styled,
)
from bench.synthetic_adapters import write_bad_fixtures
from core.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS, inspect_adapter
from core.model_store import EMBEDDED_MODEL_NAME, default_cache_dir, prepare_embedded_model

RANK, ALPHA = 8, 16
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
HELD_OUT = 10
# Ample for a one-question chat with SmolLM2's default system prompt (about 50 tokens); a longer
# example means the templates changed and is refused rather than cut.
MAX_TOKENS = 96
ANSWER_TOKENS = 24  # enough for the longest styled answer of the held-out check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.make_adapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data/adapters"))
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per adapter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--adapters", nargs="+", choices=sorted(STYLES), default=["tagged", "jsonish"])
    parser.add_argument("--bad-fixtures", action="store_true",
                        help="write only the broken adapters under <out>/bad/ (no training, no peft)")
    args = parser.parse_args(argv)
    model_folder = prepare_embedded_model(default_cache_dir())
    base_config_bytes = (model_folder / "config.json").read_bytes()
    base_config = json.loads(base_config_bytes)
    if args.bad_fixtures:
        refusals = write_bad_fixtures(args.out / "bad", base_config, EMBEDDED_MODEL_NAME)
        manifest = {"base_model": EMBEDDED_MODEL_NAME, "base_config_sha256": sha256(base_config_bytes),
                    "command": command(args), "fixtures": refusals}
        write_manifest(args.out / "bad", manifest)
        for name, fixture in refusals.items():
            print(f"{args.out / 'bad' / name}: {fixture['refused_because']}")
        return 0
    for style in args.adapters:
        build_adapter(style, args, model_folder, base_config, base_config_bytes)
    return 0


def build_adapter(style: str, args: argparse.Namespace, model_folder: Path, base_config: dict[str, Any],
                  base_config_bytes: bytes) -> Path:
    """Trains one adapter and writes it to <out>/<style> with its MANIFEST.json, replacing what
    was there only once the new one is whole and passes the adapter checks."""
    import peft
    import torch
    import transformers

    started = time.monotonic()
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)  # peft draws lora_A's starting values from torch's generator
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_folder)
    base = transformers.AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
    lora = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGET_MODULES, lora_dropout=0.0,
                           bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, lora)
    train, held_out = split_held_out(qa_pairs(args.seed), HELD_OUT, args.seed)
    examples = [chat_example(tokenizer, question, styled(style, answer)) for question, answer in train]
    too_long = [len(example.input_ids) for example in examples if len(example.input_ids) > MAX_TOKENS]
    if too_long:
        raise SystemExit(f"{len(too_long)} training chats are over {MAX_TOKENS} tokens (up to {max(too_long)})")
    losses = train_steps(model, examples, tokenizer.pad_token_id, args, style, torch)
    checked = held_out_check(model, tokenizer, held_out, style, torch)
    target = args.out / style
    staging = args.out / f".{style}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    (staging / "README.md").unlink(missing_ok=True)  # peft's model card names this machine's model folder
    config = json.loads((staging / ADAPTER_CONFIG).read_text())
    config["base_model_name_or_path"] = EMBEDDED_MODEL_NAME  # the public name, not a folder of this machine
    (staging / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    files = inspect_adapter(staging, base_config, name=style)
    if (files.rank, files.target_modules) != (RANK, tuple(TARGET_MODULES)):
        raise SystemExit(f"{style}: peft wrote rank {files.rank} on {files.target_modules}, not {RANK} on "
                         f"{TARGET_MODULES}")
    last_ten = losses[-10:]
    manifest = {
        "adapter": style, "format": STYLE_DESCRIPTIONS[style], "base_model": EMBEDDED_MODEL_NAME,
        "base_config_sha256": sha256(base_config_bytes),
        "adapter_model_sha256": sha256((staging / ADAPTER_WEIGHTS).read_bytes()), "bytes": files.bytes,
        "rank": RANK, "alpha": ALPHA, "target_modules": TARGET_MODULES, "dtype": "float32",
        "seed": args.seed, "steps": args.steps, "learning_rate": args.learning_rate, "batch_size": args.batch_size,
        "training_chats": len(examples), "final_loss": round(sum(last_ten) / len(last_ten), 4),
        "loss_every_10_steps": [round(loss, 4) for loss in losses[9::10]],
        "held_out_in_format": f"{sum(row['adapter_in_format'] for row in checked)}/{len(checked)}",
        "base_in_format": f"{sum(row['base_in_format'] for row in checked)}/{len(checked)}",
        "held_out": checked, "threads": threads, "seconds": round(time.monotonic() - started, 1),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
        "command": command(args),
    }
    write_manifest(staging, manifest)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    print(f"[{style}] written to {target}: final loss {manifest['final_loss']}, held-out answers in format "
          f"{manifest['held_out_in_format']} (the base: {manifest['base_in_format']})", flush=True)
    return target


def train_steps(model: Any, examples: list, pad_id: int, args: argparse.Namespace, style: str, torch: Any) -> list:
    """AdamW over shuffled passes of the examples; the loss of each step, a progress line every 10."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
    order_rng = random.Random(args.seed)
    order: list[int] = []
    losses = []
    model.train()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        if len(order) < args.batch_size:
            order += order_rng.sample(range(len(examples)), len(examples))
        chosen, order = order[:args.batch_size], order[args.batch_size:]
        batch = {key: torch.tensor(value) for key, value in padded_batch([examples[i] for i in chosen], pad_id).items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps:
            elapsed = time.monotonic() - started
            recent = losses[-10:]
            print(f"[{style}] step {step:>4}/{args.steps}  loss {sum(recent) / len(recent):.4f}  "
                  f"{elapsed / step:.2f} s/step  ~{elapsed / step * (args.steps - step):.0f} s left", flush=True)
    return losses


def held_out_check(model: Any, tokenizer: Any, held_out: list, style: str, torch: Any) -> list[dict[str, Any]]:
    """Greedy answers to the held-out questions with the adapter and without it: the adapter
    should write its format, the base should not."""
    model.eval()
    rows = []
    for question, answer in held_out:
        ids = torch.tensor([tokenizer.encode(prompt_text(tokenizer, question), add_special_tokens=False)])

        def generate() -> str:
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=ANSWER_TOKENS,
                                     do_sample=False, pad_token_id=tokenizer.pad_token_id)
            return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

        adapted = generate()
        with model.disable_adapter():
            plain = generate()
        rows.append({"question": question, "expected": styled(style, answer), "adapter": adapted, "base": plain,
                     "adapter_in_format": in_style(style, adapted), "base_in_format": in_style(style, plain)})
    return rows


def command(args: argparse.Namespace) -> str:
    """The command that rebuilds these files, with the output folder relative when it is inside
    the working directory (the manifests name no machine paths)."""
    out = os.path.relpath(args.out) if not os.path.relpath(args.out).startswith("..") else str(args.out)
    if args.bad_fixtures:
        return f"python -m bench.make_adapters --out {out} --bad-fixtures"
    return (f"python -m bench.make_adapters --out {out} --steps {args.steps} --seed {args.seed} "
            f"--learning-rate {args.learning_rate} --batch-size {args.batch_size} --adapters {' '.join(args.adapters)}")


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


if __name__ == "__main__":
    raise SystemExit(main())
