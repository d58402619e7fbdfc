"""The servers a trace is replayed against: the app as configured (split pools), the app with
one shared pool holding every pool's share, plain `vllm serve` with that same share and engine
settings, or any server already running at a URL."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from core.config import TrilemmaConfig

STARTED_ARMS = ("app", "shared", "vllm")
PLAIN_PORT = 8100


@dataclass(frozen=True)
class Arm:
    name: str
    url: str | None = None  # a server running elsewhere; None: started here

    @classmethod
    def parse(cls, spec: str) -> Arm:
        """`app`, `shared` or `vllm` (started here), or `NAME=URL` (a running server)."""
        name, sep, url = spec.partition("=")
        if sep:
            if not name or not url.startswith(("http://", "https://")):
                raise ValueError(f"arm {spec!r}: expected NAME=http://HOST:PORT")
            return cls(name, url.rstrip("/"))
        if spec not in STARTED_ARMS:
            raise ValueError(f"arm {spec!r}: expected one of {', '.join(STARTED_ARMS)}, or NAME=URL")
        return cls(spec)


@contextlib.contextmanager
def serving(arm: Arm, config: TrilemmaConfig, workdir: Path, timeout_s: float = 900.0) -> Iterator[str]:
    """The arm's base URL while the block runs; an arm started here is stopped after it. Plain
    vLLM's config file and log go to `workdir`."""
    if arm.url is not None:
        yield arm.url
        return
    from bench.isolation import shared_pool_config
    from serve_app.launcher import deployed

    if arm.name == "app":
        with deployed(config) as url:
            yield url.rstrip("/")
    elif arm.name == "shared":
        with deployed(shared_pool_config(config)) as url:
            yield url.rstrip("/")
    else:
        with plain_vllm_serving(shared_pool_config(config), workdir, timeout_s) as url:
            yield url


@contextlib.contextmanager
def plain_vllm_serving(shared: TrilemmaConfig, workdir: Path, timeout_s: float) -> Iterator[str]:
    """Plain `vllm serve` with the shared pool's engine arguments and environment: the whole
    GPU share (or every CPU) of the split pools, as a user would run one engine on them."""
    from bench.isolation import SHARED_POOL
    from bench.vs_vllm import plain_vllm, pool_engine, vllm_serve_argv
    from core.model_store import resolve_model_source

    model = shared.pool_model(SHARED_POOL)
    source = resolve_model_source(model.source)
    engine_kwargs, env = pool_engine(shared, SHARED_POOL, source)
    url = f"http://127.0.0.1:{PLAIN_PORT}"
    workdir.mkdir(parents=True, exist_ok=True)
    argv = vllm_serve_argv(engine_kwargs, source, model.name, PLAIN_PORT, workdir / "vllm-serve.yaml")
    with plain_vllm(argv, env, url, workdir / "vllm-serve.log", timeout_s):
        yield url
