"""The LoRA adapters one pool replica holds: each fetched, checked against the base model and
loaded into the engine when a request first needs it, and unloaded when Ray Serve's
multiplexing evicts it (the least recently used, beyond the pool's lora.max_resident).

Checked before the engine sees it: vLLM answers a corrupt file or a rank over its limit with a
bare error, and an adapter that fails to load inside an engine step ends the engine. So the
files are read here (core/adapter_files.py: the config and the safetensors header) and kept on
disk while the adapter is resident, because vLLM may read them again from its CPU cache's misses.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from contract.pool_faults import AdapterUnusable
from core.adapter_config import AdapterConfig
from core.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterOverRank,
    AdapterRefused,
    inspect_adapter,
    refuse_over_rank,
)
from core.storage import StorageError, locate
from core.upstream import get_logger

logger = get_logger(__name__)

LoadIntoEngine = Callable[[str, str], Awaitable[None]]     # (name, local folder)
UnloadFromEngine = Callable[[str], Awaitable[None]]       # (name)


@dataclass
class ResidentAdapter:
    """One adapter loaded into this replica's engine. Ray Serve's multiplexing keeps these in its
    LRU and, evicting one, calls its `__del__` (from a worker thread), which unloads it from the
    engine on the replica's event loop."""

    name: str
    folder: str
    load_s: float       # fetch, checks and the engine's load: what the request that loaded it waited
    _unload: Callable[[str], None]
    _unloaded: bool = False
    _load_charged: bool = False

    def take_load_s(self) -> float:
        """The load's seconds the first time (the request that loaded it pays them), then 0."""
        if self._load_charged:
            return 0.0
        self._load_charged = True
        return self.load_s

    def __del__(self) -> None:
        if not self._unloaded:
            self._unloaded = True
            self._unload(self.name)


class ResidentAdapters:
    def __init__(
        self, pool: str, adapters: dict[str, AdapterConfig], base_config: Callable[[], dict[str, Any]],
        max_lora_rank: int, cache_dir: Path, load: LoadIntoEngine, unload: UnloadFromEngine,
    ) -> None:
        self._pool = pool
        self._adapters = adapters
        self._base_config = base_config
        self._max_lora_rank = max_lora_rank
        self._cache_dir = cache_dir
        self._load_into_engine = load
        self._unload_from_engine = unload
        self._loop: asyncio.AbstractEventLoop | None = None
        # Adapters whose files passed the checks, by name: their folders stay on disk as checked.
        self._checked: dict[str, Path] = {}
        # What the fetch and checks took, until the load that follows them adds it to its own time.
        self._check_s: dict[str, float] = {}

    @property
    def names(self) -> list[str]:
        return sorted(self._adapters)

    async def checked(self, name: str) -> Path:
        """The adapter's local folder once its files passed the checks; raises AdapterUnusable
        (the engine untouched) when they are missing, corrupt, for another base or over the
        pool's rank. Called before the adapter takes a place among the resident ones: Serve's
        multiplexing evicts one to make room before it loads, so a refused adapter must not get
        that far."""
        folder = self._checked.get(name)
        if folder is not None:
            return folder
        adapter = self._adapters.get(name)
        if adapter is None:
            raise AdapterUnusable(self._pool, name, f"this pool serves no adapter of that name; it serves "
                                  f"{self.names}", over_rank=False)
        started = time.monotonic()
        try:
            folder = await asyncio.to_thread(self._checked_folder, name, adapter)
        except AdapterRefused as refused:
            logger.warning("Pool %s: %s", self._pool, refused)
            raise AdapterUnusable(self._pool, name, refused.reason, isinstance(refused, AdapterOverRank)) from None
        except StorageError as error:
            raise AdapterUnusable(self._pool, name, f"its files could not be fetched: {error}", False) from None
        self._checked[name] = folder
        self._check_s[name] = time.monotonic() - started
        return folder

    async def load(self, name: str) -> ResidentAdapter:
        """The adapter `name`, checked (see `checked`) and loaded into the engine."""
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        folder = await self.checked(name)
        try:
            await self._load_into_engine(name, str(folder))
        except Exception as error:  # the engine refused it after our checks: say why, keep serving
            # Checked again next time: the files may have been replaced meanwhile.
            self._checked.pop(name, None)
            raise AdapterUnusable(self._pool, name, f"the engine did not load it: {error}", False) from None
        load_s = time.monotonic() - started + self._check_s.pop(name, 0.0)
        logger.info("Pool %s: adapter %s loaded in %.2f s", self._pool, name, load_s)
        return ResidentAdapter(name, str(folder), load_s, self._unload_soon)

    def _checked_folder(self, name: str, adapter: AdapterConfig) -> Path:
        folder = self._local_folder(name, adapter)
        files = inspect_adapter(folder, self._base_config(), name)
        refuse_over_rank(name, files, self._max_lora_rank)
        return folder

    def _local_folder(self, name: str, adapter: AdapterConfig) -> Path:
        """A local source as it is; an s3:// one copied into this node's cache once (its two
        files), where it stays: vLLM may read it again while the adapter is registered."""
        where = locate(adapter.source, endpoint_url=adapter.endpoint_url)
        if where.is_local:
            return Path(where.path)
        folder = self._cache_dir / self._pool / name
        for file in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            target = folder / file
            if not target.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                scratch = target.with_suffix(".part")
                scratch.write_bytes(where.child(file).read_bytes())
                scratch.replace(target)
        return folder

    def _unload_soon(self, name: str) -> None:
        """From any thread: the unload runs on the replica's loop (the engine's client lives there)."""
        if self._loop is None or self._loop.is_closed():
            return
        try:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._unload(name)))
        except RuntimeError:  # the loop closed meanwhile: the replica is ending
            pass

    async def _unload(self, name: str) -> None:
        try:
            await self._unload_from_engine(name)
            logger.info("Pool %s: adapter %s unloaded (least recently used)", self._pool, name)
        except Exception as error:  # the engine keeps it in its own LRU cache; serving goes on
            logger.warning("Pool %s: adapter %s could not be unloaded: %r", self._pool, name, error)


def base_model_config(model_source: str) -> dict[str, Any]:
    """The base model's config.json, which every adapter is checked against: from the model's
    folder, or from the Hugging Face cache the engine loaded it into."""
    folder = Path(model_source)
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    from huggingface_hub import hf_hub_download

    return json.loads(Path(hf_hub_download(model_source, "config.json")).read_text())
