"""The vision tower as the model's own code runs it: MiniCPM-V's remote code (trust_remote_code) runs SigLIP
eager unless the model loads with flash_attention_2 (params.EAGER_VISION_REMOTE_CODE), and LoRA target names that PEFT would
also match inside the vision tower stay on the LLM with `lora_vision_tower=false`."""

from __future__ import annotations

import importlib

from vramfit.planner import params, plan
from vramfit.planner.setup import Setup

from planner_support import REPO

MINICPM = REPO / "model_configs" / "minicpm-llama3-v-2_5.json"  # shapes-only llava stand-in, `_model` openbmb/...
LLAVA = REPO / "model_configs" / "llava-1.5-7b.json"  # CLIP: transformers' own SDPA path
plan_module = importlib.import_module("vramfit.planner.plan")  # the module (vramfit.planner.plan is also the function)


def _vision(config, *items) -> float:
    base = ["per_device_train_batch_size=1", "bf16=true", "gradient_checkpointing=false", "train_vision=true", "images_per_sample=1", "trust_remote_code=true"]
    p = plan(Setup.from_args(config, "a100-80g", 8, 1, None, [*base, *items]))
    return max(b.get("vision_activations", 0.0) for b in p.phase_breakdowns.values())


def test_minicpm_v_runs_its_vision_tower_eager_unless_flash_attention_2():
    assert params.summary(MINICPM).image.get("vision_eager") is True
    assert not params.summary(LLAVA).image.get("vision_eager")
    sdpa, flash = _vision(MINICPM, "attn_implementation=sdpa"), _vision(MINICPM, "attn_implementation=flash_attention_2")
    assert sdpa > 1.5 * flash  # heads x patches^2 scores per layer, kept for backward
    llava_sdpa, llava_flash = _vision(LLAVA, "attn_implementation=sdpa"), _vision(LLAVA, "attn_implementation=flash_attention_2")
    assert llava_sdpa < 1.2 * llava_flash  # an SDPA tower keeps no score matrix
    # vramfit's own recipe trains the transformers-native stand-in (SDPA), not MiniCPM-V's code
    native = _vision(MINICPM, "attn_implementation=sdpa", "trust_remote_code=false")
    assert native < 1.2 * flash


def test_named_lora_targets_stay_on_the_llm_without_the_vision_tower():
    def counts(*items):
        s = Setup.from_args(MINICPM, "a100-80g", 8, 1, None, ["method=lora", "lora_r=8", "lora_target_modules=q_proj,k_proj", *items])
        arch = params.summary(s.model_config)
        return params.count(arch, plan_module.lora_targets(s, arch))

    both, llm_only = counts(), counts("lora_vision_tower=false")
    assert both.vision_grad_layers == 27 and llm_only.vision_grad_layers == 0
    assert llm_only.lora < both.lora


def test_eager_scores_span_one_slice_not_the_whole_image():
    """MiniCPM-V's tower runs its slices as a batch of 1024-patch sequences: the s^2 scores are per slice."""
    from vramfit.planner import training

    s = Setup.from_args(MINICPM, "a100-80g", 8, 1, None, ["images_per_sample=1", "trust_remote_code=true"])
    assert s.vision_patches == 10 * 1024  # 9 slices + the overview image, 448 px / 14 px patches each
    assert training.vision_sequence(s, params.summary(MINICPM)) == 1024
    llava = Setup.from_args(LLAVA, "a100-80g", 8, 1, None, ["images_per_sample=1"])
    assert training.vision_sequence(llava, params.summary(LLAVA)) == llava.vision_patches
