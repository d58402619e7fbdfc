"""The base of every config section: unknown keys and bad values fail with their key named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A config file that cannot be used, with the file and the offending keys named."""


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def validated(cls, raw: Any, source: str):
        """`raw` as this model, or a ConfigError naming `source` and every offending key."""
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in issue['loc']) or '(top level)'}: {issue['msg']}"
                for issue in error.errors()
            )
            raise ConfigError(f"{source}: {problems}") from None

    def with_overrides(self, overrides: dict[str, Any], source: str = "command line"):
        """A copy with dotted keys replaced (`pools.short.max_num_seqs` -> 64), validated like
        a file: a key the config does not have is refused by name (free-form maps such as
        `engine_kwargs` take new keys)."""
        raw = self.model_dump(mode="json")
        for dotted, value in overrides.items():
            section = raw
            *parents, leaf = dotted.split(".")
            for depth, part in enumerate(parents, 1):
                walked = ".".join(parents[:depth])
                if part not in section:
                    raise ConfigError(f"{source}: {dotted}: the config has no {walked!r}")
                if not isinstance(section[part], dict):
                    raise ConfigError(f"{source}: {dotted}: {walked!r} is a value, not a section")
                section = section[part]
            section[leaf] = value
        return type(self).validated(raw, source)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`--set` arguments (`DOTTED.KEY=VALUE`, repeatable) as a mapping; each value is read as
    YAML, so numbers, booleans and null stay what they look like."""
    overrides = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"--set {item!r}: expected DOTTED.KEY=VALUE")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def read_yaml(path: Path) -> dict[str, Any]:
    """A config file's mapping (empty for an empty file), or a ConfigError naming the file."""
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read config: {error}") from error
