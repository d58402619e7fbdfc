"""The configuration reference, written from the config models' own field descriptions, so the
document and the code cannot drift apart (`trilemma config-reference --out docs/configuration.md`)."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Iterator

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from core.config import TrilemmaConfig

HEADER = """# Configuration reference

One YAML file (`serve_app/configs/local-cpu.yaml` is the default; `gpu.yaml`, `gpu-h200.yaml`,
`gpu-cluster.yaml` and `autoscale-cpu.yaml` are the other shipped ones). Every section rejects
unknown keys, and a bad value fails at load time with its key named; `trilemma check-config
FILE` validates a file and prints it with every default filled in. `trilemma serve --set
DOTTED.KEY=VALUE` (repeatable; the value read as YAML) overrides one key of the file, e.g.
`--set router.replicas=2`, validated the same way. `<name>` stands for a key the file chooses
(a pool's or a scenario's name).

This page is generated from the config models (`core/config.py`, `core/pool_config.py`,
`core/autoscaling_config.py`): `trilemma config-reference --out docs/configuration.md`.

| key | default | meaning |
| --- | --- | --- |
"""


def config_reference(model: type[BaseModel] = TrilemmaConfig) -> str:
    rows = [f"| `{key}` | {default} | {meaning} |" for key, default, meaning in _rows(model, "")]
    return HEADER + "\n".join(rows) + "\n"


def _rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str]]:
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        meaning = _one_line(field.description or "")
        section = _section_model(field.annotation)
        mapped = _mapped_model(field.annotation)
        if section is not None:
            # A section that may be null shows that default; one always present shows none.
            default = "`null`" if field.default is None else ""
            yield key, default, meaning
            yield from _rows(section, f"{key}.")
        elif mapped is not None:
            yield key, _default(field), meaning
            yield from _rows(mapped, f"{key}.<name>.")
        else:
            yield key, _default(field), meaning


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """A nested section: a model, or a model that may be null."""
    for candidate in _union_members(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _mapped_model(annotation: Any) -> type[BaseModel] | None:
    """Sections by name: `dict[str, Model]`."""
    for candidate in _union_members(annotation):
        if typing.get_origin(candidate) is dict:
            value = typing.get_args(candidate)[1]
            if isinstance(value, type) and issubclass(value, BaseModel):
                return value
    return None


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    return f"`{json.dumps(value, default=str)}`".replace("|", "\\|")


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
