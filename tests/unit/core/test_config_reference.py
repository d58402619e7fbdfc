"""docs/configuration.md is what the config models say: regenerated, it is unchanged."""

from __future__ import annotations

from pathlib import Path

from core.config_reference import config_reference

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_configuration_reference_is_current():
    assert DOC.read_text() == config_reference(), (
        "docs/configuration.md is out of date: run `trilemma config-reference --out docs/configuration.md`")


def test_every_key_has_a_meaning():
    rows = [line for line in config_reference().splitlines() if line.startswith("| `")]
    assert len(rows) > 80
    assert not [row for row in rows if row.endswith("|  |")]
