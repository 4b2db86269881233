"""The five failing setups, as their users ran them, reviewed: each test asserts the finding that
names what sank the run (upstream-setups.md has the stories and figures)."""

from __future__ import annotations

from vramfit.review.reviewer import review

from review_support import find


# 1. ShareGPT4V-7B (InternLM-XComposer#118): upstream's finetune script moved to one node of 8 x A100-40G,
#    per-device 16 to keep the global batch of 128.
def test_sharegpt4v_script_read_through_srun_bash_c_and_torchrun(seed_review):
    result = seed_review("sharegpt4v")
    assert "full of Lin-Chen/ShareGPT4V-7B_Pretrained_vit-large336-l12_vicuna-7b-v1.5 (llava-1.5-7b.json)" in result.summary[0]
    assert "ZeRO-3 (" in result.summary[0] and "sharegpt4v/scripts/zero3.json" in result.summary[0]  # found in a folder above the script
    assert "1 node x 8 x a100-40g" in result.summary[1] and "16 per GPU x 1 accumulation x 8 ranks = 128" in result.summary[2]


def test_sharegpt4v_does_not_fit_40g_and_the_batch_fix_keeps_the_global_batch(seed_review):
    result = seed_review("sharegpt4v")
    assert result.exit_code == 1
    [verdict] = find(result, source="planner", key="--gpu", severity="error")
    assert "exceeds the 39.6 GiB of each a100-40g" in verdict.what and "logits" in verdict.what
    assert "--per_device_train_batch_size 8 --gradient_accumulation_steps 2" in verdict.fix and "same global batch" in verdict.fix
    assert not result.plan.fits and result.plan.setup.micro_batch == 16


def test_sharegpt4v_recipe_for_40g_cards_says_why_its_micro_batch_is_4(seed_review):
    result = seed_review("sharegpt4v")
    assert result.closest_recipe == "sharegpt4v-7b-8xa100-40g"
    [micro] = find(result, source="recipe-diff", key="--per_device_train_batch_size")
    assert micro.what.startswith("16 here, 4 in recipe sharegpt4v-7b-8xa100-40g: upstream 8: halves activations and logits")
    assert micro.fix == "--per_device_train_batch_size 4" and micro.line == 51
    [accum] = find(result, source="recipe-diff", key="--gradient_accumulation_steps")
    assert "restores the global batch of 128" in accum.what


# 2. TinyChart (mPLUG-DocOwl#88): ZeRO-3 with parameter + optimizer offload on 64 GB hosts.
def test_tinychart_host_ram_is_what_runs_out(seed_review):
    result = seed_review("tinychart")
    assert result.exit_code == 1
    [host] = find(result, source="planner", key="--host-ram-gib", severity="error")
    assert "exceeds the 64 GiB of a node" in host.what and "pinned buffers" in host.what
    assert "often reported as a CUDA OOM" in host.what
    assert "host" in host.fix
    assert result.plan.fits and not result.plan.host_ram_fits  # the GPUs are nearly idle
    [gpu] = find(result, source="planner", key="--gpu", severity="info")
    assert "of 79.2 GiB per GPU" in gpu.what


def test_tinychart_documented_fix_of_128_gib_hosts_fits():
    """DocOwl#88 was fixed by 128 GB hosts with the same script: forked dataloader workers share the rank's pages
    (copy-on-write), so they are not charged a process each (which planned 185 GiB and refused the fix)."""
    from vramfit.review.reviewer import review

    from review_support import SEED_RUNS

    paths, hw = SEED_RUNS["tinychart"]
    result = review([str(p) for p in paths], **{**hw, "host_ram_gib": 128})
    assert result.plan.host_ram_fits and 64 < result.plan.host_ram_gib < 128
    assert result.plan.host_breakdown["dataloader_workers"] < 10  # GiB: decoded batches only, not 32 workers x 2.96 GB


def test_tinychart_gpu_count_comes_from_the_flag_when_the_script_asks_nvidia_smi(seed_review):
    result = seed_review("tinychart")
    assert "1 node x 8 x a100-80g, 64 GiB host RAM per node" in result.summary[1]
    assert "ZeRO-3 + offload optimizer/param" in result.summary[0]
    assert find(result, key="", text="2 launch commands (lines 40, 84), each reviewed")
    [ram] = find(result, source="recipe-diff", key="--host-ram-gib")
    assert "64 here, 256 in recipe tinychart-3b-8xa100-80g-offload" in ram.what.replace(".0", "")


# 3. MiniCPM-V LoRA (MiniCPM-V#338): evaluation every 50 steps, eval batch 4, logits kept.
def test_minicpmv_evaluation_spike(seed_review):
    result = seed_review("minicpmv")
    assert result.exit_code == 1
    [spike] = find(result, source="planner", key="--eval_steps", severity="error")
    assert "evaluation peaks above training" in spike.what and "kept eval logits" in spike.what
    assert spike.fix.startswith("--prediction_loss_only true")
    assert result.plan.peak_phase == "evaluation"
    [verdict] = find(result, source="planner", key="--gpu")  # one fault, said once: the evaluation spike above
    assert verdict.severity == "info" and verdict.what.startswith("training fits: predicted")
    assert len(find(result, severity="error")) == 1


def test_minicpmv_recipe_reasons_for_its_evaluation_settings(seed_review):
    result = seed_review("minicpmv")
    assert result.closest_recipe == "minicpmv-lora-8xa100-80g"
    expected = {
        "--eval_steps": ("50 here, 1000", "ms-swift's default was 50"),
        "--per_device_eval_batch_size": ("4 here, 1", "evaluation forward no larger than training's"),
        "--prediction_loss_only": ("False here, True", "keep no logits"),
    }
    for key, (values, reason) in expected.items():
        [diff] = find(result, source="recipe-diff", key=key)
        assert diff.what.startswith(values) and reason in diff.what


def test_minicpmv_old_argument_names_keep_evaluation_on(seed_review):
    result = seed_review("minicpmv")
    [renamed] = find(result, key="--evaluation_strategy", severity="info")  # nothing pinned: the flag dates the script (transformers 4)
    assert "reviewed as --eval_strategy" in renamed.what and "transformers 4 accepts it" in renamed.what
    assert result.plan.setup.eval_enabled and result.plan.setup.eval_batch == 4
    assert result.plan.setup.method == "lora"


# 4. VLM-R1 GRPO (VLM-R1#81): 6 x H20, num_generations 4, per-device 4, GA 1, default max_pixels.
def test_vlm_r1_sequences_per_gpu_both_ways(seed_review):
    result = seed_review("vlm-r1")
    [both] = find(result, source="planner", key="--per_device_train_batch_size")
    assert "4 sequences per GPU per forward under TRL's semantics" in both.what
    assert "16 under the semantics of VLM-R1 / open-r1 before the TRL change" in both.what
    assert "planned with 16 sequences per GPU" in both.what and both.severity == "warning"
    assert "--per_device_train_batch_size 1" in both.fix


def test_vlm_r1_default_max_pixels_and_the_oom(seed_review):
    """Images planned at the processor's maximum (the data's size unknown): said, and the verdict at that size is a warning
    naming the assumption and the largest image size that fits, not an error."""
    result = seed_review("vlm-r1")
    [pixels] = find(result, key="--max_pixels", severity="info", text="not set")
    assert "12,845,056 px allows up to 16,384 image tokens per image" in pixels.what
    assert result.plan.setup.image_tokens == 16384 and result.plan.setup.method == "grpo"
    [verdict] = find(result, source="planner", key="--gpu", severity="warning")
    assert "does not fit if the images reach the maximum the files allow (16,384 tokens per image" in verdict.what
    assert "tokens per image it fits" in verdict.what and "--max_pixels" in verdict.fix and "--gradient_checkpointing true" in verdict.fix
    assert not find(result, severity="error")
    [diff] = find(result, source="recipe-diff", key="--max_pixels")
    assert diff.what.startswith("12845056 here, 1003520 in recipe vlm-r1-h20: 1280 image tokens")


def test_vlm_r1_removed_grpo_argument_is_reported(seed_review):
    [removed] = find(seed_review("vlm-r1"), key="--max_prompt_length", severity="info")  # nothing pinned: the flag dates the script
    assert "not a trl.GRPOConfig argument in the installed TRL" in removed.what and "nothing pins trl" in removed.what


# 5. axolotl Llama-3.2-3B (axolotl#2143): ZeRO-3, 4k x micro-batch 4, no checkpointing, no Liger.
def test_axolotl_activations_not_parameters(seed_review):
    result = seed_review("axolotl")
    assert result.exit_code == 1
    [verdict] = find(result, source="planner", key="--gpu", severity="error")
    assert "activations" in verdict.what and "logits" in verdict.what
    assert "plugins: [axolotl.integrations.liger.LigerPlugin] with liger_fused_linear_cross_entropy: true" in verdict.fix
    assert "gradient_checkpointing: true" in verdict.fix and "micro_batch_size: 2" in verdict.fix
    breakdown = result.plan.breakdown
    assert breakdown["activations"] + breakdown["logits"] > 10 * (breakdown["weights"] + breakdown["gradients"])


def test_axolotl_keys_and_the_recipe_reasons(seed_review):
    result = seed_review("axolotl")
    assert result.plan.setup.micro_batch == 4 and result.plan.setup.seq_len == 4096 and not result.plan.setup.gradient_checkpointing
    assert "axolotl/deepspeed_configs/zero3_bf16.json" in result.summary[0]
    [checkpointing] = find(result, source="recipe-diff", key="gradient_checkpointing")
    assert "the fix: off, activations at 4k x 4 are tens of GiB" in checkpointing.what
    [liger] = find(result, source="recipe-diff", key="liger_fused_linear_cross_entropy")
    assert "no 4 x 4096 x 128,256 logits" in liger.what
    assert not find(result, text="unknown key")  # axolotl's own keys are known


def test_vlm_r1_internvl_images_are_tiles_not_max_pixels(tmp_path):
    """VLM-R1's run_grpo_rec_internvl.sh: its InternVL module tiles each image up to --max_anyres_num tiles and a thumbnail
    of 256 tokens each (vlm_modules/internvl_module.py), and ignores the Qwen max_pixels the script's arguments carry: the
    prompt was planned at 12,845,056 px / 784 = 16,384 image tokens, and InternVL's 448-px tile at 1,024 (no pixel shuffle)."""
    launch = (
        'torchrun --nproc_per_node="8" src/open_r1/grpo_jsonl.py --model_name_or_path OpenGVLab/InternVL2_5-4B-MPO '
        "--max_anyres_num 6 --per_device_train_batch_size 8 --gradient_checkpointing true --bf16 --num_generations 8 "
        "--max_completion_length 2048 --max_pixels 12845056 --attn_implementation flash_attention_2"
    )
    path = tmp_path / "run_grpo_rec_internvl.sh"
    path.write_text("#!/bin/bash\n" + launch + "\n")
    result = review([str(path)], gpu="a100-80g")
    assert result.plan.setup.method == "grpo"
    assert result.plan.setup.image_tokens == 256 * 7  # 6 tiles and the thumbnail
    assert result.plan.setup.seq_len < 16384
