"""Whether vLLM, run in a given environment, loads one of this package's vLLM plugins."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Mapping

PLUGIN_GROUP = "vllm.general_plugins"
# vLLM's own variable: the names of the plugins to load, comma-separated; unset, all of them.
PLUGINS_ENV = "VLLM_PLUGINS"


def plugin_loads(name: str, environ: Mapping[str, str]) -> bool:
    """Whether vLLM, run in `environ`, loads the plugin `name` on this machine: the package is
    installed with its entry points (a source tree on PYTHONPATH has none), and `VLLM_PLUGINS`,
    where set, names it."""
    allowed = environ.get(PLUGINS_ENV)
    if allowed is not None and name not in allowed.split(","):
        return False
    return any(point.name == name for point in entry_points(group=PLUGIN_GROUP))
