"""Tenants: API keys to tenant names, and each tenant's daily budget.

Keys are stored hashed (SHA-256): the keys file holds only hashes, so reading it leaks no key.
Keys can also come from the environment as `name:key,name:key` (for a secret manager that
injects them); the app reads them where it is built and hands only their hashes to the router.

    # tenants.yaml (`trilemma tenants add NAME --file tenants.yaml` writes these)
    tenants:
      acme:
        key_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        daily_budget_usd: 5.0
        default_adapter: acme-support   # optional: its requests that name no model get this adapter
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Iterable

import yaml
from pydantic import Field, NonNegativeFloat

from core.config import ConfigError, StrictModel

KEY_PREFIX = "tk-"


class TenantEntry(StrictModel):
    key_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the tenant's API key, hex.")
    daily_budget_usd: NonNegativeFloat | None = Field(
        None, description="Most the tenant may spend per UTC day, across its models and adapters; null: no cap."
    )
    default_adapter: str | None = Field(
        None, description="The LoRA adapter (a name in the config's `adapters`) of the tenant's requests that "
        "name no model; null: the scenario's model.",
    )


class TenantsFile(StrictModel):
    tenants: dict[str, TenantEntry] = Field(default_factory=dict)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)


class TenantDirectory:
    """Resolves an API key to its tenant; knows each tenant's budget."""

    def __init__(self, entries: dict[str, TenantEntry]) -> None:
        self._entries = entries
        self._by_hash = {entry.key_sha256: name for name, entry in entries.items()}

    @property
    def enabled(self) -> bool:
        """With no keys configured the app is open; with any, every request needs one."""
        return bool(self._entries)

    def tenant_for(self, key: str | None) -> str | None:
        if not key:
            return None
        digest = hash_key(key)
        # compare_digest over every entry: the time taken says nothing about which hash matched.
        match = None
        for known, name in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                match = name
        return match

    def daily_budget_usd(self, tenant: str) -> float | None:
        entry = self._entries.get(tenant)
        return entry.daily_budget_usd if entry else None

    def default_adapter(self, tenant: str) -> str | None:
        entry = self._entries.get(tenant)
        return entry.default_adapter if entry else None

    def check_adapters(self, adapters: Iterable[str]) -> None:
        """Every tenant's default adapter is one the config serves."""
        known = sorted(adapters)
        for name, entry in self._entries.items():
            if entry.default_adapter is not None and entry.default_adapter not in known:
                raise ConfigError(f"tenant {name!r}: default_adapter {entry.default_adapter!r} is not in the "
                                  f"config's adapters {known}")

    @property
    def entries(self) -> dict[str, TenantEntry]:
        return dict(self._entries)

    @classmethod
    def load(cls, path: str | Path | None, env_var: str | None) -> TenantDirectory:
        """A configured keys file that cannot be read is an error, never an open app."""
        entries: dict[str, TenantEntry] = {}
        if path:
            if not Path(path).is_file():
                raise ConfigError(f"tenants.keys_file {str(path)!r} does not exist")
            entries.update(read_tenants_file(path).tenants)
        raw = os.environ.get(env_var, "") if env_var else ""
        for item in filter(None, (part.strip() for part in raw.split(","))):
            name, sep, key = item.partition(":")
            if not sep or not name or not key:
                raise ConfigError(f"${env_var}: expected name:key[,name:key...], got an item without ':'")
            # The file's settings for a tenant whose key the environment holds.
            settings = entries[name].model_dump(exclude={"key_sha256"}) if name in entries else {}
            entries[name] = TenantEntry(key_sha256=hash_key(key), **settings)
        return cls(entries)


def read_tenants_file(path: str | Path) -> TenantsFile:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read tenants: {error}") from None
    return TenantsFile.validated(raw, str(path))


def add_tenant(path: str | Path, name: str, daily_budget_usd: float | None, default_adapter: str | None = None) -> str:
    """Adds (or re-keys) a tenant in the file and returns its new key, shown only this once.
    Re-keying keeps the tenant's budget and default adapter unless new ones are given."""
    current = read_tenants_file(path) if Path(path).exists() else TenantsFile()
    key = new_key()
    previous = current.tenants.get(name)
    if daily_budget_usd is None and previous is not None:
        daily_budget_usd = previous.daily_budget_usd
    if default_adapter is None and previous is not None:
        default_adapter = previous.default_adapter
    entry = TenantEntry(key_sha256=hash_key(key), daily_budget_usd=daily_budget_usd, default_adapter=default_adapter)
    tenants = {**current.tenants, name: entry}
    Path(path).write_text(yaml.safe_dump(TenantsFile(tenants=tenants).model_dump(), sort_keys=True))
    return key
