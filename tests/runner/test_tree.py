"""The tree is the index: names, folders, the README table and the DeepSpeed presets agree."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramfit import recipe_index
from vramfit.recipe import NAME_RE, load

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted(p.parent.name for p in (REPO / "recipes").glob("*/recipe.yaml"))
VRAMFIT = [sys.executable, "-m", "vramfit.cli"]


def test_the_required_recipes_exist():
    required = {
        "sharegpt4v-7b-8xa100-40g",
        "sharegpt4v-7b-16xa100-80g",
        "docowl1.5-8b-8xa100-80g",
        "tinychart-3b-8xa100-80g-offload",
        "minicpmv-lora-8xa100-80g",
        "vlm-r1-h20",
        "axolotl-llama-3b-8xa100-80g",
    }
    assert required <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_folder(name):
    folder = REPO / "recipes" / name
    recipe = load(folder / "recipe.yaml")
    assert recipe.name == name and NAME_RE.match(name)
    assert recipe.hardware.gpu in name
    header = (folder / "recipe.yaml").read_text().split("\nname:")[0]
    for field in ("Hardware:", "Command:", "Expect:"):
        assert field in header, f"{name}: runbook header lacks {field}"
    assert f"make run RECIPE={name}" in header
    launch_sh = folder / "launch.sh"
    assert os.access(launch_sh, os.X_OK) and "set -euo pipefail" in launch_sh.read_text()
    assert subprocess.run(["bash", "-n", str(launch_sh)]).returncode == 0
    assert (folder / "README.md").is_file()


def test_launch_scripts_are_one_script():
    """Each folder carries its own copy (a copied folder runs by itself); the copies must not drift."""
    texts = {(REPO / "recipes" / n / "launch.sh").read_text() for n in RECIPES}
    assert len(texts) == 1


def test_list_and_readme_table_agree_with_the_tree():
    names = [row[0] for row in recipe_index.rows()]
    assert names == RECIPES
    readme = (REPO / "README.md").read_text()
    table = readme.split("<!-- recipes:start -->\n")[1].split("\n<!-- recipes:end -->")[0]
    assert table == recipe_index.markdown_table(), "README table is stale: paste `vramfit list --markdown` between the markers"


def test_vramfit_list_prints_every_recipe():
    out = subprocess.run([*VRAMFIT, "list"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    for name in RECIPES:
        assert name in out


@pytest.mark.parametrize("path", sorted((REPO / "deepspeed_configs").glob("*.json")), ids=lambda p: p.name)
def test_deepspeed_file_name_says_what_it_does(path):
    config = json.loads(path.read_text())
    zero = config["zero_optimization"]
    offload = [part for part in ("optimizer", "params") if (zero.get("offload_" + part.rstrip("s")) or {}).get("device", "none") != "none"]
    expected = f"zero{zero['stage']}" + ("_offload_" + "_".join(offload) if offload else "")
    assert path.stem == expected
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"):
        assert config[key] == "auto", f'{path.name}: {key} must be "auto" (the Trainer fills it)'
    assert config["bf16"]["enabled"] == "auto" and config["fp16"]["enabled"] == "auto"
    assert path.name in (REPO / "deepspeed_configs" / "README.md").read_text()


def test_help_and_list_do_not_import_torch():
    code = "import sys; from vramfit.cli import main; main(['list']); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    help_code = "import sys\nfrom vramfit.cli import build_parser\nbuild_parser()\nassert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", help_code], cwd=REPO, check=True)


def test_cp_copies_and_renames(tree):
    from vramfit.cli import main

    assert main(["cp", "vlm-r1-h20", "vlm-r1-4xh20"]) == 0
    copied = load(tree / "recipes" / "vlm-r1-4xh20" / "recipe.yaml")
    assert copied.name == "vlm-r1-4xh20"
    assert "make run RECIPE=vlm-r1-4xh20" in (tree / "recipes" / "vlm-r1-4xh20" / "recipe.yaml").read_text()
    assert main(["cp", "vlm-r1-h20", "vlm-r1-4xh20"]) == 2  # never overwrites


def test_show_prints_derived_numbers(capsys):
    from vramfit.cli import main

    assert main(["show", "vlm-r1-h20"]) == 0
    out = capsys.readouterr().out
    assert "global batch       = 96           # 4 micro x 4 accumulation x 6 ranks; ok" in out
    assert "generation batch   = 96" in out and "prompts/generation = 24" in out


def test_makefile_guards_recipe():
    result = subprocess.run(["make", "-s", "run"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and "RECIPE is not set. Example: make run RECIPE=vlm-r1-h20" in result.stderr


def test_make_help_is_the_default_target():
    out = subprocess.run(["make", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for target in ("run", "validate", "list", "show", "test"):
        assert re.search(rf"make {target}\b", out)


def test_generated_docs_are_current():
    """The README table and each recipe README's memory block come from the tree and the planner."""
    result = subprocess.run([sys.executable, "-m", "vramfit.docs", "--check"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
