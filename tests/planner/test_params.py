"""Parameter counts read off the meta-device model, and trainable / frozen per recipe."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vramfit.planner import Setup, params

from planner_support import REPO, SHARED_CONFIGS, needs_shared, recipe_path

CONFIGS = sorted((REPO / "model_configs").glob("*.json")) + sorted(SHARED_CONFIGS.glob("*.json"))


def _setup(config, **kw) -> Setup:
    return Setup(label="t", source="t", model_config=config, gpu="a100-80g", gpus_per_node=1, **kw)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_total_matches_the_published_meta_count(config):
    """Every config's `_params` (meta-device count, T5 lm_head added back) is reproduced exactly."""
    expected = json.loads(config.read_text())["_params"]
    arch = params.summary(config)
    assert arch.total == expected
    assert sum(arch.groups.values()) == arch.total


@needs_shared
def test_t5_untied_lm_head_is_counted():
    arch = params.summary(SHARED_CONFIGS / "t0_3b.json")
    assert arch.groups["lm_head"] == 32128 * 2048 and not arch.tied_embeddings


def test_lora_rank_times_in_plus_out_per_targeted_linear():
    config = REPO / "model_configs" / "llama-3.2-3b.json"
    arch = params.summary(config)
    c = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=16,
                                  lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"]))
    per_layer = 16 * (3072 + 3072) + 2 * 16 * (3072 + 1024) + 16 * (3072 + 3072)  # q, k, v, o (8 KV heads x 128)
    assert c.lora == 28 * per_layer
    assert c.trainable_base == arch.groups["projector"]  # nothing else trains in place
    assert c.total == arch.total and c.quantized == 0


def test_regex_targets_only_the_language_model():
    """The MiniCPM-V recipe's regex adapts the LLM attention, not the ViT's q/k/v/out projections."""
    from vramfit.recipe import load

    recipe = load(recipe_path("minicpmv-lora-8xa100-80g"))
    setup = Setup.from_recipe(recipe)
    arch = params.summary(setup.model_config)
    c = params.count(arch, setup)
    assert {a.stack for a in c.adapted} == {"text"}
    llm = 32 * 64 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096))
    assert c.lora == llm
    assert c.vision_full and c.vision_grad_layers == arch.stacks["vision"].layers


@needs_shared
def test_fused_qkv_is_one_adapter_for_q_k_v():
    config = SHARED_CONFIGS / "qwen-7b.json"
    arch = params.summary(config)
    fused = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=64, lora_fused_qkv=True,
                                      lora_targets=["q_proj", "k_proj", "v_proj"]))
    separate = params.count(arch, _setup(config, method="lora", train_llm=False, lora_r=64,
                                         lora_targets=["q_proj", "k_proj", "v_proj"]))
    assert fused.lora == 32 * 64 * (4096 + 3 * 4096)
    assert separate.lora == 32 * 3 * 64 * (4096 + 4096)


def test_vision_tower_unfrozen_from_layer_n():
    config = REPO / "model_configs" / "llava-1.5-7b.json"
    arch = params.summary(config)
    full = params.count(arch, _setup(config, train_vision=True))
    from_12 = params.count(arch, _setup(config, train_vision=12))
    frozen = params.count(arch, _setup(config, train_vision=False))
    layers = arch.stacks["vision"].layer_params
    assert from_12.trainable_base - frozen.trainable_base == sum(layers[12:])
    assert full.trainable_base - frozen.trainable_base == arch.groups["vision"]
    assert (from_12.vision_grad_layers, frozen.vision_grad_layers) == (12, 0)


def test_modules_to_save_are_copies_unless_trained_in_place():
    config = REPO / "model_configs" / "llama-3.2-3b.json"
    arch = params.summary(config)
    kw = dict(method="lora", train_llm=False, train_projector=False, lora_r=8, lora_targets="all-linear", modules_to_save=("embed_tokens",))
    copies = params.count(arch, _setup(config, **kw))
    in_place = params.count(arch, _setup(config, modules_to_save_copies=False, **kw))
    assert copies.copies == arch.groups["embed"] and copies.trainable_base == 0
    assert in_place.copies == 0 and in_place.trainable_base == arch.groups["embed"]


def test_warm_cache_plans_without_importing_torch(tmp_path):
    """After one planning, counts come from the disk cache: no torch, no transformers."""
    env = {**os.environ, "VRAMFIT_CACHE_DIR": str(tmp_path)}
    code = ("import sys\nfrom vramfit.recipe import load\nfrom vramfit.planner import plan_recipe\n"
            f"p = plan_recipe(load({str(recipe_path('vlm-r1-h20'))!r}), fixes=False)\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules, round(p.per_gpu_peak_gib, 2))")
    first = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split()[0] == "True"  # the cold run builds the model
    torch_loaded, transformers_loaded, peak = second.stdout.split()
    assert (torch_loaded, transformers_loaded) == ("False", "False")
    assert peak == first.stdout.split()[2]
    assert list(tmp_path.glob("planner/*.json"))
