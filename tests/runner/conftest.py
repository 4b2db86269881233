"""A private copy of the repository tree per test, so broken variants never touch the real files."""

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
    monkeypatch.chdir(tmp_path)
    return tmp_path
