"""Every recipe in the tree, smoke variant: its real entrypoint, launcher and DeepSpeed JSON on 2 ranks.

A new recipe folder gets this test with no edit here (the list is the glob of recipes/*/recipe.yaml).
QLoRA (4-bit weights stored as bf16 under ZeRO-3 on CPU) is covered by the QLoRA recipe's own smoke run;
it was once a separate run of the Llama recipe turned QLoRA by overrides, the same path twice.
"""

from __future__ import annotations

import json

import pytest

from train_support import RECIPES, WALL_TIMES, check_run, smoke


@pytest.mark.slow
@pytest.mark.parametrize("name", RECIPES)
def test_smoke(name, tmp_path):
    run = smoke(name, tmp_path / "run")
    WALL_TIMES[name] = run.seconds
    check_run(run)
    recipe = json.loads((run.run_dir / "recipe.json").read_text())
    if recipe["model"].get("lora"):  # the adapter saved is the recipe's
        adapter = json.loads((run.output / "adapter_config.json").read_text())
        assert adapter["r"] == recipe["model"]["lora"]["r"] and adapter["peft_type"] == "LORA", adapter


def test_a_qlora_recipe_is_smoke_tested():
    """The QLoRA path (4-bit, bf16 storage, ZeRO-3) keeps a smoke run: some recipe in the tree is QLoRA."""
    import yaml

    from train_support import REPO

    recipes = [yaml.safe_load((REPO / "recipes" / n / "recipe.yaml").read_text()) for n in RECIPES]
    assert any(r["method"] == "qlora" and r["model"]["quantization"]["bits"] == 4 and r["deepspeed"].endswith("zero3.json") for r in recipes)
