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


def qwen3_next_config(tmp_path: Path, layers: int = 4) -> Path:
    """Qwen3-Next at toy widths, written as a config.json: Gated DeltaNet layers with full attention every 4th, fused MoE
    experts (the trace tests of tests/planner/test_trace.py and test_trace_length.py)."""
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(
        hidden_size=64,
        intermediate_size=128,
        head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        linear_key_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_value_head_dim=16,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=2,
        num_hidden_layers=layers,
        vocab_size=512,
    )
    path = tmp_path / "qwen3_next.json"
    path.write_text(json.dumps(cfg.to_dict(), default=str))
    return path
