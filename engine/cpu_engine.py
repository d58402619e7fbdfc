"""How a CPU pool's engine runs on the node its replica lands on: at which nice value, and in
which dtype. Both are decided in the replica, before it starts the engine, from that node.

**Nice value.** Ray starts its workers at nice 15, so a pool replica and the engine processes
it spawns all compete for CPU time on equal terms. On a CPU host, a pool that carries batch or long-context
work can yield to the latency pool: at a higher nice value the kernel gives its processes a
smaller share of a contended core and moves other work (the proxy, the router, the replicas'
event loops) onto its cores first. Raising a nice value needs no privilege; lowering it does,
so a target below the current value is left as it is, with a warning.

**Dtype.** The embedded model's checkpoint is bfloat16, so vLLM's `auto` loads it in bf16.
Where the CPU multiplies bf16 natively (AVX512_BF16 or AMX-BF16), that is the fast path and it
stays. Where it does not (AVX2-only and older AVX-512 x86 CPUs), every bf16 product is widened
to fp32 first, so bf16 buys no arithmetic, and its rounding moves the model's greedy answers
wherever two next tokens are close: on an AVX2 EPYC, bf16 left the fp32 model on 3 or 4 of 8
short chats within 24 tokens, compiled or eager (`bench/results/cpu-dtype/cpu-dtype-avx2-epyc.md`).
The compiled graph's rotary embedding, which inductor computes in fp32 with one rounding
where vLLM's C++ kernel rounds differently, turned "The capital of France is Paris." into
"L'Étoile, la Marseillaise, la femme," (a 0.10-nat tie in the fp32 model). float32 answered
all 8 as the reference and ran 3.2x the tokens/s at a batch of 8 (0.72x for one stream), so
such a CPU runs float32. Where the CPU does multiply bf16 natively (an AMD EPYC with
AVX512_BF16), bf16 gave the same wrong answer to the same question: bf16's rounding, not its
arithmetic's speed, decides that tie. So every x86 CPU runs float32 unless the pool's
engine_kwargs name `dtype: bfloat16`, which buys speed at the price of the model's answers.

**Compile cache.** vLLM saves the compiled model ("AOT compile") and loads it on the next start
instead of tracing the model again. vLLM 0.29's load fails on the CPU backend ("'function'
object has no attribute 'finalize_loading'"), and this package's vLLM plugin
(engine/vllm_compile_cache.py) makes it work. On a 2-core EPYC a warm engine alone served
after 29 to 30 s with the cache loaded, 35 to 37 s with AOT compile off (vLLM then traces the
model on every start), and 65 to 85 s with it on and the load failing
(`bench/results/start-cpu-aot-load-ab/`, `bench/results/start-cpu/aot-on-reloading.md`). So a CPU engine runs with AOT
compile on where vLLM will load the plugin, and off where it will not (the package not
installed with its entry points, or `VLLM_PLUGINS` leaving it out). A pool's `env` may set it
either way.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

# /proc/cpuinfo's names for the instructions that multiply bf16 without widening it first.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")


AOT_COMPILE_ENV = "VLLM_USE_AOT_COMPILE"


def cpu_engine_env(compile_cache_loads: bool) -> dict[str, str]:
    """What every CPU engine's environment holds unless its pool's `env` says otherwise: AOT
    compile on where its cache loads (see "Compile cache" above)."""
    return {AOT_COMPILE_ENV: "1" if compile_cache_loads else "0"}


@dataclass(frozen=True)
class DtypeChoice:
    """`dtype` is None where vLLM's own default stands."""

    dtype: str | None
    reason: str


def choose_cpu_dtype(flags: frozenset[str] | None) -> DtypeChoice:
    """float32 on every x86 CPU, where the model's answers are its own; `flags` None (not an x86
    CPU, or flags unreadable) leaves the dtype to vLLM."""
    if flags is None:
        return DtypeChoice(None, "no x86 CPU flags to read; vLLM's default dtype")
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    if native:
        return DtypeChoice(
            "float32",
            f"the CPU multiplies bf16 natively ({', '.join(native)}), but bf16's rounding changes greedy "
            "answers at near ties; set engine_kwargs.dtype: bfloat16 to trade them for speed",
        )
    return DtypeChoice(
        "float32",
        f"the CPU has none of {', '.join(NATIVE_BF16_FLAGS)}: bf16 would be widened to fp32 "
        "for every product anyway, and its rounding in the compiled engine changes greedy answers",
    )


def read_cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The instruction-set flags of this machine's CPU, or None where /proc/cpuinfo has no x86
    `flags` line (other architectures name theirs `Features`)."""
    try:
        lines: Iterable[str] = cpuinfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def with_cpu_dtype(engine_kwargs: dict, flags: frozenset[str] | None) -> tuple[dict, DtypeChoice]:
    """The engine kwargs with the chosen dtype; a dtype the config names is kept as it is."""
    if engine_kwargs.get("dtype") is not None:
        return engine_kwargs, DtypeChoice(str(engine_kwargs["dtype"]), "set in the pool's engine_kwargs")
    choice = choose_cpu_dtype(flags)
    if choice.dtype is None:
        return engine_kwargs, choice
    return {**engine_kwargs, "dtype": choice.dtype}, choice


def apply_cpu_niceness(
    target: int | None, *, nice: Callable[[int], int] = os.nice, log: logging.Logger | None = None,
) -> int:
    """Raises the calling thread to nice `target`, and with it the engine processes it starts
    after (Linux keeps nice values per thread; children inherit their parent thread's); returns
    the nice value it runs at."""
    current = nice(0)
    if target is None or target == current:
        return current
    if target < current:
        (log or logging.getLogger(__name__)).warning(
            "cpu_niceness %d is below the replica's nice value %d; it stays at %d "
            "(lowering it needs privileges)", target, current, current)
        return current
    return nice(target - current)
