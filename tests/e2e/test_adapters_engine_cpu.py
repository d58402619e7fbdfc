"""The committed test adapters on vLLM's real CPU engine: each answers the held-out questions of
its training in its own format, the base in neither, and the base's answers are the same after
the adapters were used (bench/adapter_answers.py, in a process of its own: vLLM spawns its
engine core, and this process may hold the tier's Ray driver)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# An engine start without compilation (LoRA turns it off on CPU) and five batches of ten chats.
WITHIN_S = 600


def test_each_adapter_answers_in_its_format_and_the_base_is_unchanged(embedded_model_dir, tmp_path):
    run = subprocess.run([sys.executable, "-m", "bench.adapter_answers", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=WITHIN_S)
    assert (tmp_path / "adapter-answers.json").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "adapter-answers.json").read_text())
    questions = len(result["questions"])
    assert result["base"]["unchanged_after_adapters"], result["base"]
    for name in ("tagged", "jsonish"):
        adapter = result["adapters"][name]
        assert adapter["in_format"] >= 0.9 * questions, adapter["answers"]
        assert adapter["base_in_format"] == 0, result["base"]["answers"]
    assert adapter["answers"] != result["adapters"]["tagged"]["answers"]  # the two differ from each other too
    assert run.returncode == 0, run.stdout[-3000:]
