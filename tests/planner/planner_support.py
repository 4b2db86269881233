"""Paths shared by the planner tests (imported by name: tests/ folders are not packages)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("VRAMFIT_SHARED", REPO.parent / "shared"))
SHARED_CONFIGS = SHARED / "reference" / "model-configs"
RECIPES = REPO / "recipes"
if str(REPO) not in sys.path:  # benchmarks/calibration.py: calibration scenarios are benchmark code
    sys.path.insert(0, str(REPO))


def scenario_rows() -> dict[str, dict]:
    """The published calibration scenarios (shared/reference/calibration/scenarios.jsonl), by id."""
    lines = (SHARED / "reference" / "calibration" / "scenarios.jsonl").read_text().splitlines()
    return {row["id"]: row for row in map(json.loads, filter(str.strip, lines))}


needs_shared = pytest.mark.skipif(not (SHARED / "reference").is_dir(), reason="shared/reference not present")


def recipe_path(name: str) -> Path:
    return RECIPES / name / "recipe.yaml"


def scenario_setup(row: dict):
    """A calibration scenario as a planner Setup (benchmarks/calibration.py)."""
    from benchmarks.calibration import scenario_setup as build

    return build(row, SHARED)
