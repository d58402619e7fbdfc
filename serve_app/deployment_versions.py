"""Versions for the app's deployments, so that a redeploy restarts only what changed.

Ray Serve gives a deployment run from Python without a version a random one, so every
`serve.run` replaced every replica, even of deployments whose code and arguments were the same:
deploying the running config with one pool's setting changed restarted every engine of every
pool, and giving a pool one more replica did too (each engine start is minutes on a GPU). Here
each deployment's version is a hash of what makes its replicas: the project's code and its own
part of the config, without replica counts. Serve then leaves an unchanged deployment alone and
turns a change of replica count into adding or removing replicas.

A deployment from a Serve config file (`serve deploy`, KubeRay's RayService) is versioned by
Serve from the app's arguments as a whole instead; there any change restarts every deployment.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from ray.serve.deployment import Application

from core.config import PROJECT_ROOT

# The packages whose code runs in replicas.
CODE_PACKAGES = ("core", "contract", "engine", "pool", "router", "autoscaling", "cluster", "serve_app")


def with_version(app: Application, *parts: Any) -> Application:
    """`app` with its deployment versioned by the project's code and `parts` (JSON-able)."""
    digest = hashlib.sha256(json.dumps([code_fingerprint(), *parts], sort_keys=True, default=str).encode())
    deployment = app._bound_deployment  # Serve's own builders set versions the same way
    app._bound_deployment = deployment.options(version=digest.hexdigest()[:16], _internal=True)
    return app


@functools.cache
def code_fingerprint(root: Path = PROJECT_ROOT) -> str:
    """A hash of every source file the replicas run: new code restarts them."""
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def without_replica_counts(config_dump: dict[str, Any]) -> dict[str, Any]:
    """A config's dump less what Serve scales by itself (replica counts are not a new version)."""
    dump = json.loads(json.dumps(config_dump, default=str))
    dump.get("router", {}).pop("replicas", None)
    for pool in dump.get("pools", {}).values():
        pool.pop("replicas", None)
    return dump
