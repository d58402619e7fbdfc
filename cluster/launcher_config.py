"""The Ray cluster-launcher config (cluster/aws.yaml): its worker node types as the plan writes
them, the head's price, and validation against Ray's own cluster-config schema.

The plan rewrites only the marked block of worker types and the top-level `max_workers`, so
the file's comments and everything else in it stay as written.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml

from cluster.node_types import NodeType
from cluster.plan import ClusterPlan, HeadNode
from core.config_base import ConfigError
from core.price_catalog import PriceCatalog
from core.upstream import validate_launcher_config

DEFAULT_LAUNCHER_PATH = Path(__file__).with_name("aws.yaml")
BLOCK_START = "  # >>> worker node types: `trilemma cluster plan --write` rewrites this block"
BLOCK_END = "  # <<< worker node types"
_MAX_WORKERS_LINE = re.compile(r"^max_workers:[ \t]*\d+", re.MULTILINE)
# Room for the weights of a few models and the image's layers.
GPU_NODE_DISK_GIB = 500
# vCPUs of the sizes most EC2 families share (c7i.4xlarge: 16); the head is priced from them.
_SIZE_VCPUS = {"large": 2, "xlarge": 4}


def worker_entry(node_type: NodeType, min_workers: int, max_workers: int) -> dict[str, Any]:
    """One worker type as Ray's launcher wants it."""
    node_config: dict[str, Any] = {
        "InstanceType": node_type.instance_type,
        # Ray's Deep Learning AMI for the region (NVIDIA driver and Docker with GPU support).
        "ImageId": "latest_dlami",
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1",
                                 "Ebs": {"VolumeSize": GPU_NODE_DISK_GIB, "VolumeType": "gp3"}}],
    }
    if node_type.purchase == "spot":
        node_config["InstanceMarketOptions"] = {"MarketType": "spot"}
    return {"min_workers": min_workers, "max_workers": max_workers,
            "resources": node_type.ray_resources(), "node_config": node_config}


def render_workers(entries: list[tuple[NodeType, int, int]]) -> str:
    """The marked block's text: a comment with each type's price, then its entry."""
    lines = [BLOCK_START]
    for node_type, low, high in entries:
        lines.append(f"  # {node_type.gpus} x {node_type.accelerator} ({node_type.gpu_memory_gib:g} GiB each), "
                     f"{node_type.vcpus} vCPUs, ${node_type.usd_per_hour:.2f}/h {node_type.purchase.replace('_', '-')}")
        text = yaml.safe_dump({node_type.name: worker_entry(node_type, low, high)}, sort_keys=False,
                              default_flow_style=None, width=110)
        lines += ["  " + line for line in text.rstrip("\n").split("\n")]
    lines.append(BLOCK_END)
    return "\n".join(lines)


def apply_plan(text: str, plan: ClusterPlan) -> str:
    """`text` (a launcher config) with the plan's worker types and their total as max_workers."""
    entries = [(p.node_type, p.min_workers, p.max_workers) for p in plan.node_types]
    return replace_workers(text, entries)


def replace_workers(text: str, entries: list[tuple[NodeType, int, int]]) -> str:
    start, end = text.find(BLOCK_START), text.find(BLOCK_END)
    if start < 0 or end < start:
        raise ConfigError(f"the launcher config lacks the worker block's markers: a line {BLOCK_START!r} "
                          f"and, after it, {BLOCK_END!r}, around the worker types under available_node_types")
    updated = text[:start] + render_workers(entries) + text[end + len(BLOCK_END):]
    total = sum(high for _, _, high in entries)
    if not _MAX_WORKERS_LINE.search(updated):
        raise ConfigError("the launcher config has no top-level `max_workers: N` line to set")
    return _MAX_WORKERS_LINE.sub(f"max_workers: {total}", updated, count=1)


def parse(text: str, source: str = "launcher config") -> dict[str, Any]:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not YAML: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: not a mapping")
    return config


def validate(config: dict[str, Any], source: str = "launcher config") -> dict[str, Any]:
    """What `ray up` does before it launches anything: fill in the provider's defaults, then
    check against Ray's cluster-config schema. Returns the filled-in config."""
    try:
        return validate_launcher_config(config)
    except Exception as error:  # jsonschema's, Ray's ValueError and RuntimeError alike
        message = getattr(error, "message", None) or str(error)
        raise ConfigError(f"{source}: Ray rejects it: {message.splitlines()[0]}") from None


def worker_types(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    head = config.get("head_node_type")
    return {name: entry for name, entry in config.get("available_node_types", {}).items() if name != head}


def is_spot(entry: dict[str, Any]) -> bool:
    market = entry.get("node_config", {}).get("InstanceMarketOptions", {})
    return market.get("MarketType", "").lower() == "spot"


def instance_vcpus(instance_type: str) -> int:
    """vCPUs of a size most EC2 families share: large 2, xlarge 4, Nxlarge 4N."""
    size = instance_type.rsplit(".", 1)[-1]
    if size in _SIZE_VCPUS:
        return _SIZE_VCPUS[size]
    match = re.fullmatch(r"(\d+)xlarge", size)
    if not match:
        raise ConfigError(f"cannot tell the vCPUs of instance type {instance_type!r} from its size")
    return 4 * int(match.group(1))


def head_node(config: dict[str, Any], catalog: PriceCatalog) -> HeadNode:
    """The head's instance, priced per vCPU at the catalog's `cpu` on-demand price (the head is
    never spot: losing it loses the cluster)."""
    head = config["available_node_types"][config["head_node_type"]]
    instance_type = head["node_config"]["InstanceType"]
    vcpus = instance_vcpus(instance_type)
    return HeadNode(instance_type=instance_type, vcpus=vcpus,
                    usd_per_hour=vcpus * catalog.accelerator("cpu").on_demand_usd_per_hour)


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{path} (now)", tofile=f"{path} (planned)"))
