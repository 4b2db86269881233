"""Every recipe in the tree, smoke variant: its real entrypoint, launcher and DeepSpeed JSON on 2 ranks.

A new recipe folder gets this test with no edit here (the list is the glob of recipes/*/recipe.yaml).
"""

from __future__ import annotations

import json

import pytest

from train_support import QLORA, RECIPES, WALL_TIMES, check_run, launch, smoke


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_smoke(name, tmp_path):
    run = smoke(name, tmp_path / "run")
    WALL_TIMES[name] = run.seconds
    check_run(run)


@pytest.mark.slow
def test_qlora_smoke(tmp_path):
    """No recipe uses QLoRA yet: the Llama recipe made QLoRA by overrides, 4-bit weights under ZeRO-3 on CPU."""
    run = launch("axolotl-llama-3b-8xa100-80g", tmp_path / "run", QLORA)
    check_run(run)
    adapter = json.loads((run.output / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["peft_type"] == "LORA"
