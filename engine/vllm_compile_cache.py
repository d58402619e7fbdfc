"""A vLLM plugin that lets a CPU engine load the model vLLM compiled on an earlier start.

vLLM saves the compiled model ("AOT compile") and loads it on the next start, which skips
tracing the model with Dynamo. vLLM 0.29 finishes every load by calling `finalize_loading` on
the loaded artifact. Only vLLM's own compile backend makes artifacts that have the method; the
CPU backend compiles in vLLM's DYNAMO_TRACE_ONCE mode, straight through inductor, whose
artifact is torch's `BundledAOTAutogradSerializableCallable` and needs nothing finalized. The
call raised, vLLM took the load for a cache miss ("Compiling model again due to a load
failure ... 'function' object has no attribute 'finalize_loading'"), and every start traced
and compiled again. torch rebuilds its artifact whole when it loads it, and vLLM's own
`finalize_loading` returns at once on the path that loads such an artifact (its "mega"
artifact, which carries no fake mode to finish with), so this gives torch's artifact a
`finalize_loading` that does nothing.

On a 2-core EPYC a warm engine alone served after 29 to 30 s instead of 35 to 37 s, its compile
warm-up 7 s instead of 14, and the engine answered 8 greedy chats as transformers' float32
reference either way (bench/results/start-cpu-aot-load-ab).

vLLM loads the plugins of its `vllm.general_plugins` entry point group (pyproject.toml) in
every engine process it starts, the engine core and its workers included, before the model is
compiled or loaded, unless `VLLM_PLUGINS` names the plugins to load and leaves this one out. It
changes nothing where torch's artifact already has the method, or where the class is not there
(another torch).
"""

from __future__ import annotations

import os
from typing import Mapping

from core.vllm_plugins import plugin_loads
from engine.cpu_engine import cpu_engine_env

# The entry point's name in pyproject.toml.
PLUGIN_NAME = "trilemma_compile_cache"


def register() -> None:
    """vLLM's hook: gives torch's inductor artifact the `finalize_loading` vLLM calls."""
    try:
        from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable
    except ImportError:
        return
    # Asked of the class, not of an instance, whose __getattr__ looks in the function it wraps.
    if not hasattr(BundledAOTAutogradSerializableCallable, "finalize_loading"):
        BundledAOTAutogradSerializableCallable.finalize_loading = _nothing_to_finalize


def registered(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether vLLM, run in `environ`, loads this plugin on this machine (core.vllm_plugins)."""
    return plugin_loads(PLUGIN_NAME, environ)


def with_cpu_engine_env(env: Mapping[str, str]) -> dict[str, str]:
    """A CPU engine's environment: what every CPU engine holds (engine.cpu_engine), AOT compile
    on where vLLM, run in this environment and `env`, loads this plugin; then `env` itself, which
    may set any of it."""
    return {**cpu_engine_env(registered({**os.environ, **env})), **env}


def _nothing_to_finalize(self, vllm_config) -> None:  # noqa: ANN001 - vLLM's signature
    """Inductor's artifact comes back from disk whole: nothing to build before its first call."""
