"""`trilemma` finds the benchmark's commands through the `trilemma.commands` entry points, so the
CLI never imports bench; a plugin whose extra is missing becomes a command that says so."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from core.config import DEFAULT_CONFIG_PATH
from serve_app import cli

ROOT = Path(__file__).resolve().parents[3]


class Unloadable:
    name = "bench"

    def load(self):
        raise ImportError("No module named 'matplotlib'")


def test_the_benchmark_registers_its_commands_as_an_entry_point():
    found = {plugin.name: plugin.value for plugin in entry_points(group=cli.COMMAND_GROUP)}
    assert found.get("bench") == "bench.cli:add_commands"


def test_a_command_whose_extra_is_missing_says_which_and_the_rest_still_work(monkeypatch, capsys):
    monkeypatch.setattr(cli, "entry_points", lambda group: [Unloadable()])
    assert cli.main(["bench", "run", "--url", "http://127.0.0.1:1"]) == 2
    error = capsys.readouterr().err
    assert "No module named 'matplotlib'" in error and "pip install -e '.[bench]'" in error
    assert cli.main(["check-config", str(DEFAULT_CONFIG_PATH)]) == 0


def test_python_m_bench_runs_the_benchmark_commands_without_an_install():
    """What `bench/gpu_bench.sh` runs on a GPU host, where the project is on PYTHONPATH only."""
    shown = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert all(command in shown.stdout for command in ("overhead", "isolation", "colocate"))
