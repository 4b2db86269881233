"""Fixtures of the robustness tests: a private copy of the tree per case (see harness.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness import REPO, TREE


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("pristine")
    for name in TREE:
        shutil.copytree(REPO / name, base / name, symlinks=True)
    return base


@pytest.fixture
def sandbox(pristine, tmp_path, monkeypatch) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree, symlinks=True)
    monkeypatch.chdir(tree)
    monkeypatch.setenv("VRAMFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VRAMFIT_DEBUG", raising=False)
    return tree
