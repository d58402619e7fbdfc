"""The dtype a CPU engine runs when its pool names none, chosen from what the CPU offers.

The embedded model's checkpoint is bfloat16, so vLLM's `auto` loads it in bf16. Where the
CPU multiplies bf16 natively (AVX512_BF16 or AMX-BF16), that is the fast path and it stays.
Where it does not (AVX2-only and older AVX-512 x86 CPUs), every bf16 product is widened to
fp32 before it is computed, so bf16 saves memory traffic and no arithmetic, while its
rounding still moves the model's answers: vLLM's compiled CPU graph (torch.compile, the
default) keeps fused intermediates in fp32 where its eager kernels round them to bf16, and on
an AVX2 EPYC that alone turned greedy "The capital of France is Paris." into "L'Étoile, la
Marseillaise, la femme," (the reference's two first tokens are 0.10 nats apart). Such a CPU
runs float32, which answers as the fp32 reference does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# /proc/cpuinfo's names for the instructions that multiply bf16 without widening it first.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class DtypeChoice:
    """`dtype` is None where vLLM's own default stands."""

    dtype: str | None
    reason: str


def choose_cpu_dtype(flags: frozenset[str] | None) -> DtypeChoice:
    """bfloat16 on a CPU with native bf16 arithmetic, float32 on any other x86 CPU; `flags`
    None (not an x86 CPU, or flags unreadable) leaves the dtype to vLLM."""
    if flags is None:
        return DtypeChoice(None, "no x86 CPU flags to read; vLLM's default dtype")
    native = [flag for flag in NATIVE_BF16_FLAGS if flag in flags]
    if native:
        return DtypeChoice("bfloat16", f"the CPU multiplies bf16 natively ({', '.join(native)})")
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
