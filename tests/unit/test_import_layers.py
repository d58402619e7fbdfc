"""The layers (pyproject.toml's [tool.importlinter]): each package imports only the layers below
it, nothing in the product imports bench or tests, and the request-path and scaling logic takes
nothing of Ray Serve's or vLLM's. A wrong import fails here with the rule it breaks."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_LOGIC_CONTRACT = "The request-path and scaling logic takes nothing of Ray Serve's or vLLM's internals"
# Pure logic (the modules and packages that contract names): it runs in the router, the replicas
# and Serve's controller alike, and in tests without a cluster. Ray core (actors, the KV store) is
# allowed; Ray Serve, Ray's LLM library and vLLM are not.
NOT_IN_PURE_LOGIC = ("ray.serve", "ray.llm", "vllm", "core.upstream")


def pure_logic_files() -> list[Path]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == PURE_LOGIC_CONTRACT]
    files = []
    for name in contract["source_modules"]:
        path = ROOT / name.replace(".", "/")
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    assert all(path.is_file() for path in files), [path for path in files if not path.is_file()]
    return files


def test_the_import_contracts_hold():
    # In a process of its own: import-linter configures logging with dictConfig, which disables
    # every logger that exists by then (the tests that read log lines would see none).
    lint = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_pure_logic_imports_no_ray_serve_llm_or_vllm():
    """import-linter sees an outside package only as a whole (`ray`), so the parts of Ray this
    rule is about are checked here, module by module."""
    found = []
    for path in pure_logic_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names
                      if any(name == f or name.startswith(f + ".") for f in NOT_IN_PURE_LOGIC)]
    assert not found, "\n".join(found)
