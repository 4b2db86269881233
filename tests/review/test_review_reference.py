"""The recipe comment reader: a `# ...` on a key's line (or right above it), keyed by YAML key path."""

from __future__ import annotations

from vramfit.paths import PACKAGE_ROOT
from vramfit.review.reference import key_comments


def test_comments_by_key_path(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(
        "# =====\n# header\n# =====\nname: x\n\n"
        "### batch: 4 x 4 x 8 = 128\n# keeps upstream's global batch\nglobal_batch_size: 128\n"
        "model:\n  lora:\n    target_modules: '.*attn.*\\.(q|v)_proj'   # LLM attention only\n    r: 64\n"
        'training:\n  eval_steps: 1000   # every 1000 steps: # not a second comment\n  prediction_loss_only: "#true"\n'
    )
    assert key_comments(path) == {
        "name": "header",
        "global_batch_size": "batch: 4 x 4 x 8 = 128 keeps upstream's global batch",
        "model.lora.target_modules": "LLM attention only",
        "training.eval_steps": "every 1000 steps: # not a second comment",
    }


def test_a_real_recipe_comments_are_found_under_their_keys():
    comments = key_comments(PACKAGE_ROOT / "recipes/vlm-r1-h20/recipe.yaml")
    for key in ("training.num_generations", "training.gradient_checkpointing", "data.max_pixels", "deepspeed", "global_batch_size"):
        assert comments.get(key), key
