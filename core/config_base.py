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


def read_yaml(path: Path) -> dict[str, Any]:
    """A config file's mapping (empty for an empty file), or a ConfigError naming the file."""
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read config: {error}") from error
