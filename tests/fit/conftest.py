"""A private copy of the repository tree for tests that write a recipe."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TREE = ("recipes", "deepspeed_configs", "model_configs", "launch")


@pytest.fixture
def tree(tmp_path, monkeypatch) -> Path:
    for name in TREE:
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy2(REPO / "README.md", tmp_path / "README.md")
    monkeypatch.chdir(tmp_path)
    return tmp_path
