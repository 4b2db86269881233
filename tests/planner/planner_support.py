"""Paths shared by the planner tests (imported by name: tests/ folders are not packages)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("VRAMFIT_SHARED", REPO.parent / "shared"))
SHARED_CONFIGS = SHARED / "reference" / "model-configs"
RECIPES = REPO / "recipes"

needs_shared = pytest.mark.skipif(not (SHARED / "reference").is_dir(), reason="shared/reference not present")


def recipe_path(name: str) -> Path:
    return RECIPES / name / "recipe.yaml"
