"""`vramfit review` on verl launches (vramfit/review/verl.py): `python3 -m verl.trainer.main_ppo key=value ...` as the
run verl makes of it (verl's published examples/tuning scripts, kept in the corpus), and launches verl would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit.review import verl
from vramfit.review.reviewer import review

from review_support import find

TUNING = Path(__file__).resolve().parent / "corpus/files/volcengine+verl/examples/tuning"
LORA_7B = TUNING / "7b/qwen2-7b_grpo-lora_1_h100_fsdp_vllm.sh"
FULL_7B = TUNING / "7b/qwen2-7b_grpo_2_h800_fsdp_vllm.sh"
FULL_72B = TUNING / "70b/qwen2-70b_grpo_32_h800_fsdp_vllm.sh"


def launch(folder: Path, *overrides: str, name: str = "run.sh") -> Path:
    """A minimal verl launch: a small table model, GRPO, vLLM colocated, on one GPU, plus `overrides`."""
    words = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "trainer.n_gpus_per_node=1",
        *overrides,
    ]
    path = folder / name
    path.write_text("set -x\n\npython3 -m verl.trainer.main_ppo \\\n" + " \\\n".join(f"    {w}" for w in words) + " $@\n")
    return path


def test_the_published_lora_launch_is_planned_as_verl_runs_it():
    """examples/tuning/7b (1 x H100): fp32 master weights with bf16 compute, FSDP over the one GPU, vLLM at 0.2 asleep
    outside generation, the offloaded weights and optimizer states off the GPU while generating, the whole logits."""
    result = review([str(LORA_7B)], gpu="h100", gpus=1)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity != "info"]
    s = result.plan.setup
    assert (s.method, s.lora_r, s.engine, s.precision, s.gradient_checkpointing) == ("grpo", 32, "fsdp", "bf16", True)
    assert (s.micro_batch, s.seq_len, s.max_completion_length, s.num_generations) == (16, 512, 1024, 5)
    assert (s.use_vllm, s.vllm_mode, s.vllm_gpu_memory_utilization, s.vllm_sleep) == (True, "colocate", 0.2, True)
    assert s.grpo_whole_logits and s.offload_outside_update == ("weights", "optimizer") and s.beta == 0.0
    assert s.expandable_segments and s.padding_free
    generation = result.plan.phases["generation"]
    assert generation < result.plan.phases["train"]  # the vLLM share, without the offloaded states
    assert not find(result, text="GRPOConfig refuses")  # TRL's rule is not verl's
    assert find(result, key="actor_rollout_ref.actor.use_kl_loss", text="CPUOffload")
    assert any("verl main_ppo on Ray" in line for line in result.summary)


def test_a_worst_case_over_the_card_is_a_warning_in_verl_s_own_keys():
    """examples/tuning/7b on 2 x H800: 16 sequences of 1024 + 1024 tokens per micro-batch do not fit at the cap, which
    padding-free batches reach only with samples that long: a warning whose edits are Hydra overrides."""
    result = review([str(FULL_7B)], gpu="h800", gpus=2)
    [warning] = find(result, key="actor_rollout_ref.model.use_remove_padding", severity="warning", text="worst case")
    assert "16 x 2,048 = 32,768 tokens" in warning.what
    assert "data.max_prompt_length=512 data.max_response_length=512" in warning.fix
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8" in warning.fix
    assert result.exit_code == 0


def test_dynamic_batches_are_planned_at_their_token_budget_over_the_nodes():
    """examples/tuning/70b: 4 nodes x 8 H800, use_dynamic_bsz with 24,000 tokens per GPU: 23 sequences of 1,024."""
    result = review([str(FULL_72B)], gpu="h800", gpus=8, nodes=4)
    s = result.plan.setup
    assert (s.world, s.micro_batch, s.seq_len + s.max_completion_length) == (32, 23, 1024)
    assert find(result, key="actor_rollout_ref.actor.ppo_max_token_len_per_gpu", text="packs up to 24,000 tokens")
    assert not any(f.severity == "error" for f in result.findings)


def test_whole_logits_and_the_offload_knobs_move_the_plan(tmp_path):
    """The planner knobs the reader sets change the plan: TRL's fused head keeps far less than verl's whole logits; the
    states verl offloads are out of the generation phase."""
    from vramfit.planner.plan import plan as plan_setup

    full = review([str(FULL_7B)], gpu="h800", gpus=2).plan
    fused = plan_setup(full.setup.replace(grpo_whole_logits=False))
    # 16 x 2,048 tokens x 152k vocabulary in bf16: 9.3 GiB of logits; the fused head holds a tile (the peak moves elsewhere)
    assert full.breakdown["logits"] > 9 and fused.breakdown.get("logits", 0) < 1.5 and full.phases["train"] > fused.phases["train"] + 1
    result = review([str(LORA_7B)], gpu="h100", gpus=1)
    s = result.plan.setup
    kept = plan_setup(s.replace(offload_outside_update=()))
    assert kept.phases["generation"] - result.plan.phases["generation"] > 20  # the fp32 weights of a 7B


def test_activation_offload_is_planned(tmp_path):
    on = review([str(launch(tmp_path, "actor_rollout_ref.model.enable_activation_offload=True"))], gpu="h100", gpus=1)
    assert on.plan.setup.activation_offloading and find(on, key="actor_rollout_ref.model.enable_activation_offload", text="host RAM")


def test_a_ppo_launch_with_a_critic_plans_the_critic(tmp_path):
    """algorithm.adv_estimator=gae: verl's CriticWorker trains critic.model.path with a value head on the same GPUs (was:
    'critic not planned', exit 3); its micro-batch and checkpointing are its own, and with critic param_offload /
    optimizer_offload its states leave the GPU outside its update."""
    critic = ("algorithm.adv_estimator=gae", "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct", "critic.ppo_micro_batch_size_per_gpu=2")
    result = review([str(launch(tmp_path, *critic))], gpu="h100", gpus=1)
    assert result.exit_code == 0, [str(f) for f in result.findings if f.severity != "info"]
    s, p = result.plan.setup, result.plan
    assert s.critic_config is not None and (s.critic_micro_batch, s.critic_gradient_checkpointing) == (2, True)
    assert "critic_update" in p.phases and p.phase_breakdowns["generation"]["critic"] > 1  # fp32 states of a 0.5B
    assert find(result, key="algorithm.adv_estimator", text="CriticWorker")
    away = review(
        [str(launch(tmp_path, *critic, "critic.model.fsdp_config.param_offload=True", "critic.model.fsdp_config.optimizer_offload=True"))], gpu="h100", gpus=1
    )
    assert away.plan.setup.critic_offload_outside_update == ("weights", "optimizer")
    assert "critic" not in away.plan.phase_breakdowns["generation"] and "critic" in away.plan.phase_breakdowns["critic_update"]


def test_megatron_is_not_reviewed(tmp_path):
    result = review([str(launch(tmp_path, "actor_rollout_ref.actor.strategy=megatron"))], gpu="h100", gpus=1)
    assert result.exit_code == 3
    assert find(result, key="actor_rollout_ref.actor.strategy", text="not reviewed")


@pytest.mark.parametrize(
    "override, key, text",
    [
        ("actor_rollout_ref.rollout.gpu_memory_utilization=1.5", "actor_rollout_ref.rollout.gpu_memory_utilization", "(0, 1]"),
        ("trainer.n_gpus_per_node=0", "trainer.n_gpus_per_node", "positive integer"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "multiple"),
        ("actor_rollout_ref.actor.strategy=deepspeed", "actor_rollout_ref.actor.strategy", "not one of"),
    ],
)
def test_numbers_verl_refuses_are_bad_input(tmp_path, override, key, text):
    result = review([str(launch(tmp_path, override))], gpu="h100", gpus=1)
    assert result.exit_code == 2
    [error] = find(result, key=key, severity="error", text=text)
    assert error.fix.startswith("write ") and "=" in error.fix


def test_an_unknown_key_is_a_note_and_an_added_one_is_read(tmp_path):
    result = review([str(launch(tmp_path, "actor_rollout_ref.actor.ppo_micro_batch_sise=4", "+trainer.my_key=1"))], gpu="h100", gpus=1)
    [note] = find(result, key="actor_rollout_ref.actor.ppo_micro_batch_sise", severity="info", text="not a key")
    assert "+key=value" in note.what
    assert not find(result, key="+trainer.my_key", text="not a key")
    assert result.exit_code == 0


def test_hydra_overrides_parse_as_hydra_reads_them():
    overrides, flags, stray = verl.parse(
        ["a.b=1e-6", "trainer.logger=[console,wandb]", "+x.y=true", "~z", "--config-name", "mine", "-cp=conf", "noise", "c=null"]
    )
    assert [(o.op, o.key, o.value) for o in overrides] == [
        ("", "a.b", 1e-6),
        ("", "trainer.logger", ["console", "wandb"]),
        ("+", "x.y", True),
        ("~", "z", None),
        ("", "c", None),
    ]
    assert flags == {"--config-name": "mine", "-cp": "conf"} and stray == ["noise"]
    config = verl.apply(verl.defaults(), overrides[:3])
    # interpolations resolve through the overrides: the ref's dynamic-batch switch follows the actor's
    verl.apply(config, verl.parse(["actor_rollout_ref.actor.use_dynamic_bsz=True"])[0])
    assert verl.get(config, "actor_rollout_ref.ref.log_prob_use_dynamic_bsz") is True
    assert verl.get(config, "critic.forward_max_token_len_per_gpu") == 32768  # ${.ppo_max_token_len_per_gpu}
    assert verl.is_known("actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space") and not verl.is_known("trainer.nnode")


def test_a_vlm_s_image_tokens_are_capped_by_the_prompt_length(tmp_path):
    """verl counts an image's tokens in the prompt and drops prompts over max_prompt_length (rl_dataset.py): the images
    are planned at most that many tokens, inside the prompt, not on top of it."""
    path = launch(tmp_path, "actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct", "data.max_prompt_length=1024")
    result = review([str(path)], gpu="h100", gpus=1)
    s = result.plan.setup
    assert (s.seq_len, s.image_tokens) == (1024, 1024)
    assert find(result, key="data.max_prompt_length", text="image tokens planned at most 1,024")


def test_a_value_left_to_the_environment_is_planned_at_verl_s_default(tmp_path):
    """verl's own gspo / sapo examples write trainer.n_gpus_per_node=$SLURM_GPUS_PER_NODE: not an error, said, and the
    GPUs the review is given decide."""
    path = launch(tmp_path, "trainer.n_gpus_per_node=$SLURM_GPUS_PER_NODE", "actor_rollout_ref.rollout.n=$N")
    result = review([str(path)], gpu="h100", gpus=2)
    assert result.exit_code == 0 and result.plan.setup.world == 2
    assert find(result, key="trainer.n_gpus_per_node", severity="info", text="set when the script runs")
    assert find(result, key="actor_rollout_ref.rollout.n", severity="info", text="verl's default (1)")


def test_overrides_in_a_bash_array_make_the_review_incomplete_not_wrong(tmp_path):
    """verl's NPU examples pass their overrides as "${ACTOR_CONFIG[@]}": what the array holds is not read, so a key it
    sets is not "missing" (no error), and the review says it is incomplete."""
    path = tmp_path / "run.sh"
    path.write_text(
        "ACTOR_CONFIG=(\n    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1\n)\n"
        "python3 -m verl.trainer.main_ppo \\\n    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\\n"
        '    actor_rollout_ref.rollout.name=vllm trainer.n_gpus_per_node=1 \\\n    "${ACTOR_CONFIG[@]}" "$@"\n'
    )
    result = review([str(path)], gpu="h100", gpus=1)
    assert result.exit_code == 3 and not any(f.severity == "error" for f in result.findings)
    assert find(result, text="bash arrays or variables")
