"""The machine a result was measured on, for its file: CPU results differ between CPU models."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from engine.cpu_engine import read_cpu_flags


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.machine()


def describe() -> str:
    """E.g. 'AMD EPYC, 2 cores, AVX2 (no AVX-512)'."""
    flags = read_cpu_flags() or frozenset()
    vector = "AVX-512" if "avx512f" in flags else "AVX2 (no AVX-512)" if "avx2" in flags else "no AVX2"
    amx = ", AMX" if "amx_tile" in flags else ""
    return f"{cpu_model()}, {os.cpu_count()} cores, {vector}{amx}"
