"""The same model in int8: a W8A8 checkpoint derived from a local one, for a cheaper pool.

`pools.<name>.quantization: w8a8-int8` asks for it. Every linear layer of the transformer
blocks gets int8 weights, one scale per output channel (symmetric, round to nearest), and the
engine quantizes activations per token as they come (dynamic), so no calibration text is
needed. Embeddings, norms and the output head stay as they are. The folder is written in the
compressed-tensors format, which vLLM loads on CPU (oneDNN int8 matmuls, also on AVX2-only
x86) and on GPU (CUTLASS). It is derived once per source checkpoint and kept in the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

W8A8_INT8 = "w8a8-int8"
# What vLLM is told: it reads the scheme from the checkpoint's config.
VLLM_METHOD = "compressed-tensors"
LINEAR_WEIGHT = re.compile(r"\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")
QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                              "dynamic": True},
    }},
    "ignore": ["lm_head"],
}


def prepare_w8a8_int8(source: Path, cache_dir: Path) -> Path:
    """The int8 folder derived from the checkpoint folder `source`, made on first use."""
    target = cache_dir / "models" / f"{source.name}-{W8A8_INT8}-{_fingerprint(source)}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        staging = Path(scratch) / "int8"
        write_w8a8_int8(source, staging)
        staging.rename(target)  # atomic: a concurrent or interrupted run leaves no half model
    logger.info("int8 (W8A8) checkpoint of %s ready at %s", source, target)
    return target


def write_w8a8_int8(source: Path, out_dir: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((source / "config.json").read_text())
    if "quantization_config" in config:
        raise ValueError(f"{source} is quantized already ({config['quantization_config'].get('quant_method')})")
    out_dir.mkdir(parents=True)
    shards = sorted(source.glob("*.safetensors"))
    if not shards:
        raise ValueError(f"{source} holds no safetensors weights to quantize")
    quantized = 0
    for shard in shards:
        tensors = load_file(shard)
        for name in [n for n in tensors if LINEAR_WEIGHT.search(n)]:
            weight = tensors[name].to(torch.float32)
            scale = (weight.abs().amax(dim=1, keepdim=True) / 127).clamp(min=torch.finfo(torch.float32).tiny)
            tensors[name] = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
            tensors[name.removesuffix("weight") + "weight_scale"] = scale
            quantized += 1
        save_file(tensors, out_dir / shard.name, metadata={"format": "pt"})
    if not quantized:
        raise ValueError(f"{source}: no transformer linear layer found to quantize")
    for other in source.iterdir():  # tokenizer, chat template, generation config, shard index
        if other.is_file() and other.suffix != ".safetensors" and other.name != "config.json":
            shutil.copy2(other, out_dir / other.name)
    (out_dir / "config.json").write_text(json.dumps({**config, "quantization_config": QUANTIZATION_CONFIG}, indent=2))


def _fingerprint(source: Path) -> str:
    """Changes when the source's weights do: their names, sizes and modification times."""
    digest = hashlib.sha256(str(source.resolve()).encode())
    for shard in sorted(source.glob("*.safetensors")):
        stat = shard.stat()
        digest.update(f"{shard.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:10]
