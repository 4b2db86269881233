"""PPO launches planned with their other models (vramfit/planner/ppo.py; review/mapping.py `_ppo`): OpenRLHF's non-Ray
train_ppo holds the actor, the critic, the reference and the reward model in every process; its Ray launcher puts on
the actor's GPUs what the colocation flags put there."""

from __future__ import annotations

from pathlib import Path

from vramfit.planner import params
from vramfit.review.reviewer import review

from review_support import find

CORPUS = Path(__file__).resolve().parent / "corpus/files/OpenRLHF+OpenRLHF"
ISSUE_519 = CORPUS / "issue-519/train_ppo_llama.sh"
GIB = 2**30


def test_openrlhfs_non_ray_ppo_holds_four_models_on_every_gpu():
    """OpenRLHF#519 (8 x H100, ZeRO-2, Adam offloaded): the actor and the critic trained, the reference and the reward
    model frozen and whole (stage 0 eval engines), all Llama-3-8B; the critic's update a phase of its own."""
    result = review([str(ISSUE_519)], gpu="h100", gpus=8)
    s, p = result.plan.setup, result.plan
    assert (s.trainer, s.ref_model, s.critic_update, s.seq_len) == ("ppo", "copy", "separate", 2048)
    assert s.critic_config is not None and s.reward_config is not None
    train = p.phase_breakdowns["train"]
    arch = params.summary(s.reward_config)
    value_model = (arch.total - arch.groups["lm_head"] + arch.text.hidden + 1) * 2 / GIB  # bf16, a one-output head
    assert abs(train["reward_model"] - value_model) < 0.01 and abs(train["critic"] - value_model) < 0.01  # Adam offloaded
    assert abs(train["reference_model"] - train["weights"]) < 0.01
    assert "critic_update" in p.phases
    [peak] = find(result, key="--gpu", text="predicted peak")
    assert "critic 14.0" in peak.what and "reward model 14.0" in peak.what and "reference model 15.0" in peak.what
    assert p.per_gpu_peak_gib > 26.3 + 3 * 13.9  # the actor alone was 26.3 GiB
    assert find(result, text="PPO: planned with its other models")
    assert not find(result, key="--reward_pretrain", text="own argument")


def ray_launch(folder: Path, *flags: str) -> Path:
    """OpenRLHF v0.8.5's examples/scripts/train_ppo_llama_ray.sh, cut to what the plan reads, plus `flags`."""
    words = [
        "--actor_num_nodes 1",
        "--actor_num_gpus_per_node 8",
        "--ref_num_gpus_per_node 8",
        "--critic_num_gpus_per_node 8",
        "--reward_num_gpus_per_node 8",
        "--vllm_num_engines 8",
        "--pretrain OpenRLHF/Llama-3-8b-sft-mixture",
        "--reward_pretrain OpenRLHF/Llama-3-8b-rm-mixture",
        "--micro_train_batch_size 2",
        "--prompt_max_len 1024",
        "--generate_max_len 1024",
        "--zero_stage 3",
        "--bf16",
        "--flash_attn",
        "--gradient_checkpointing",
        *flags,
    ]
    path = folder / "train_ppo_llama_ray.sh"
    path.write_text(
        'ray job submit --address="http://127.0.0.1:8265" \\\n   -- python3 -m openrlhf.cli.train_ppo_ray \\\n' + " \\\n".join(f"   {w}" for w in words) + "\n"
    )
    return path


def test_openrlhfs_ray_colocation_flags_move_the_plan(tmp_path):
    """Each model is its own Ray actor group on its own GPUs unless colocated: --colocate_actor_ref puts the reference on
    the actor's GPUs; --colocate_all_models puts every model and the vLLM engines there; alone, the critic and reward
    groups are not planned (incomplete)."""
    apart = review([str(ray_launch(tmp_path))], gpu="h100", gpus=8)
    train = apart.plan.phase_breakdowns["train"]
    assert "critic" not in train and "reward_model" not in train and "reference_model" not in train
    assert apart.exit_code == 3 and find(apart, text="on GPUs of their own")
    ref = review([str(ray_launch(tmp_path, "--colocate_actor_ref"))], gpu="h100", gpus=8)
    assert ref.plan.phase_breakdowns["train"]["reference_model"] > 1.5  # ZeRO-3: a 16-bit shard of 8
    everything = review([str(ray_launch(tmp_path, "--colocate_all_models", "--vllm_enable_sleep", "--vllm_gpu_memory_utilization 0.5"))], gpu="h100", gpus=8)
    p = everything.plan
    assert {"critic", "reward_model", "reference_model"} <= set(p.phase_breakdowns["train"]) and "critic_update" in p.phases
    assert abs(p.phase_breakdowns["generation"]["vllm"] - 0.5 * 79.19) < 0.1 and "vllm" not in p.phase_breakdowns["train"]
    assert everything.exit_code != 3


SWIFT_PPO = Path(__file__).resolve().parents[2] / "benchmarks/example_peaks/modelscope+ms-swift/examples/train/rlhf/ppo"


def test_ms_swifts_ppo_trains_its_value_model_in_the_policys_backward_with_swifts_defaults():
    """`swift rlhf --rlhf_type ppo` (examples/train/rlhf/ppo/lora.sh): the value model is --reward_model again with the
    run's LoRA (rlhf.py `prepare_model`), the reward model frozen, no reference copy for a LoRA policy, TRL's PPOTrainer's
    one backward; ms-swift's own defaults (gradient checkpointing on, bf16 from --torch_dtype bfloat16)."""
    result = review([str(SWIFT_PPO / "lora.sh")], gpu="h100", gpus=4)
    s, p = result.plan.setup, result.plan
    assert (s.trainer, s.critic_update, s.ref_model, s.gradient_checkpointing, s.precision) == ("ppo", "joint", "none", True, "bf16")
    assert s.critic_config == s.reward_config and "critic_update" not in p.phases
    assert p.phase_breakdowns["train"]["critic"] < p.phase_breakdowns["train"]["reward_model"] + 2  # LoRA: few trained states
    assert result.exit_code == 0
